"""A small real reproduction on Multi30k En-De, in one command.

Trains the Transformer baseline, 1D-CSAN, 2D-CSAN (Yang et al., NAACL 2019), the context-aware
Transformer (Yang et al., AAAI 2019) and 2D-CSAN with context gating at small dimensions (--model), each
for the same fixed number of updates and with several seeds; evaluates every run on
test_2016_flickr; and writes a results table (sacreBLEU mean and spread over seeds, and paired
bootstrap resampling against the baseline) and the analyses of fairseq_csan/recipes/analysis/ to OUT.

Runs go in parallel, --jobs at a time. A finished run is kept when the command is run again, so
seeds or systems can be added later. What OUT holds, and when a kept run is trained or evaluated
again or refused, is in examples/multi30k/README.md, "The command".
"""

import concurrent.futures
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from .analysis.common import figure, read_lines, write_table
from .command_line import Parser, items, positive
from .corpora import preset_raw
from .runner import (EVALUATION, RESULTS, Failed, Kind, Refusal, WriterLock, as_command, changed_since, forget_written,
                     listing, made_from, run_child, say, shell_words, stamped_change, stop_children, theirs, write_file)
from .score import mark

REPRODUCTION = Kind("reproduction", "settings.json")  # open: a setting an earlier version kept compares as others

TABLE = Kind("reproduction results", "results.json", {"records": "json"})  # OUT/results.json: the table's records
PYTHON = [sys.executable, "-m"]  # the recipes, called as this package's modules (no checkout needed)

# each system's name in the table -> its architecture
SYSTEMS = {"transformer": "transformer", "csan1d": "transformer_csan1d", "csan2d": "transformer_csan2d",
           "ctxaware": "transformer_ctxaware", "csan2d_ctxaware": "transformer_csan2d_ctxaware"}
BASELINE = "transformer"
CONTEXT_AWARE = ("ctxaware", "csan2d_ctxaware")
BOOTSTRAP_SEED = 12345  # sacreBLEU's default, so that one seed reproduces `sacrebleu --paired-bs`
# train.sh's options, fairseq-train's extra ones and evaluate.sh's, by --device: the CPU (train.sh --cpu-tiny)
# or one GPU in fp16 shared by the runs (the model's batches, one per update, as on the CPU)
HARDWARE = {"cpu": (["--cpu-tiny"], [], ["--cpu"]),
            "cuda": (["--gpus", "1", "--precision", "fp16"], ["--update-freq", "1"], [])}

# The models (--model). Both have 4 heads and 6 encoder layers, so that CSAN's lowest 3 of 6
# layers are as in the papers; each variant keeps its papers' settings (window 11, 2D area of
# 3 heads, deep-global + deep context) through its named architecture.
MODELS = {
    # the CPU's: the whole table in about 80 minutes on 2 cores, far from converged
    "tiny": {"model": ["--encoder-embed-dim", "64", "--encoder-ffn-embed-dim", "256", "--encoder-attention-heads", "4",
                       "--encoder-layers", "6", "--decoder-embed-dim", "64", "--decoder-ffn-embed-dim", "256",
                       "--decoder-attention-heads", "4", "--decoder-layers", "3"],
             "max_tokens": 1024, "lr": "0.002", "warmup": 300, "max_update": 1200},
    # a GPU's: the width and updates of a published tiny Transformer that reaches 41.0 BLEU on
    # test_2016_flickr, the rest our choice (examples/multi30k/README.md says why 38 or more is
    # expected here); its warm-up is at most a quarter of a shorter run
    "small": {"model": ["--encoder-embed-dim", "128", "--encoder-ffn-embed-dim", "256", "--encoder-attention-heads", "4",
                        "--encoder-layers", "6", "--decoder-embed-dim", "128", "--decoder-ffn-embed-dim", "256",
                        "--decoder-attention-heads", "4", "--decoder-layers", "4", "--dropout", "0.3"],
              "max_tokens": 4096, "lr": "0.005", "warmup": 2000, "max_update": 8000, "warmup_share": 4},
}


def training_args(max_update, size="tiny"):
    """Vaswani et al.'s schedule with the model's batches, warm-up and peak (a short warm-up and a
    higher peak for a short run); 12 checkpoints over the run, of which the last 5 are kept and averaged."""
    every = max(1, max_update // 12)
    m = MODELS[size]
    warmup = min(m["warmup"], max(1, max_update // m["warmup_share"])) if "warmup_share" in m else m["warmup"]
    return ["--max-tokens", str(m["max_tokens"]), "--lr", m["lr"], "--warmup-updates", str(warmup),
            "--save-interval-updates", str(every), "--keep-interval-updates", "5",
            "--log-interval", str(max(1, min(50, max_update // 8)))]


def cores():
    """The cores this process may use (affinity and container limits included, where known)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# ---- significance ---------------------------------------------------------------------------

def seed_pooled_bootstrap(refs, baseline_runs, system_runs, samples=1000, seed=BOOTSTRAP_SEED):
    """Paired bootstrap resampling (Koehn 2004) of the difference in mean sacreBLEU over seeds.

    ``baseline_runs`` and ``system_runs`` hold one hypothesis list per seed. Every resample draws
    test sentences with replacement, the same ones for every run; the statistic is the mean BLEU
    over the system's seeds minus the baseline's. The p-value is sacreBLEU's (the share of
    mean-centred resampled |differences| above the observed one, +1 smoothing; with one seed each
    it equals `sacrebleu --paired-bs`); "ci" is the 2.5th-97.5th percentile of the difference."""
    from sacrebleu.metrics import BLEU

    # per-sentence statistics through sacreBLEU's public API (a sentence's lengths and n-gram counts; effective
    # order changes only its own score, unused); a resample's corpus BLEU is compute_bleu of their sums, with
    # BLEU()'s defaults (13a tokenisation, exponential smoothing)
    sentence = BLEU(effective_order=True)
    orders = sentence.max_ngram_order

    def statistics_of(hypotheses):
        scores = [sentence.sentence_score(h, [r]) for h, r in zip(hypotheses, refs)]
        return np.array([[s.sys_len, s.ref_len, *s.counts, *s.totals] for s in scores], dtype="float64")

    stats_base, stats_sys = [statistics_of(h) for h in baseline_runs], [statistics_of(h) for h in system_runs]

    def mean_bleu(runs, sentences):
        totals = [stats[sentences].sum(0) for stats in runs]
        return statistics.fmean(BLEU.compute_bleu(correct=t[2:2 + orders], total=t[2 + orders:], sys_len=int(t[0]),
                                                  ref_len=int(t[1]), smooth_method="exp").score for t in totals)

    observed = mean_bleu(stats_sys, slice(None)) - mean_bleu(stats_base, slice(None))
    indices = np.random.default_rng(seed).choice(len(refs), size=(samples, len(refs)), replace=True)
    diffs = np.array([mean_bleu(stats_sys, i) - mean_bleu(stats_base, i) for i in indices])
    absolute = np.abs(diffs)
    p_value = (np.sum(absolute - absolute.mean() > abs(observed)) + 1) / (samples + 1)
    low, high = np.percentile(diffs, [2.5, 97.5])
    return {"delta": observed, "p_value": float(p_value), "ci": [float(low), float(high)], "samples": samples}


# ---- the runs -------------------------------------------------------------------------------

def kept(folder, binary, what: str) -> bool:
    """A run's or sweep point's evaluation is kept when it finished (``eval/results.json``, written
    last) and is of the task as it is now. Trained on other data than ``binary`` holds (its record's
    ``made_from``) it is refused; with a test set prepared again since, it is evaluated again (its
    training kept: train.py leaves a finished run)."""
    evaluation = folder / "eval"
    if RESULTS.read(evaluation) is None:
        return False
    record = EVALUATION.read(evaluation) or {}
    if not record.get("made_from"):
        raise Refusal(f"{what} {folder} has no record of the data it was made from ({EVALUATION.path(evaluation)}): "
                      f"delete {folder} to run it again, or give another --out")
    changed = changed_since(record["made_from"], made_from(binary))
    if changed:
        raise Refusal(f"{what} {folder} was trained on other data than {binary} holds now: {changed}; the raw "
                      f"files changed since it ran. Give another --out, or delete {folder} to train it again")
    return stamped_change(evaluation) is None


def check_kept(args, data):
    """Before anything trains: every kept run and sweep point is of the task files as they are now."""
    for run in sorted((args.out / "runs").glob("*/seed*")):
        kept(run, data / "data-bin", "the run")
    for point in sorted((args.out / "sweep").glob("csan*")):
        if point.is_dir():
            kept(point, data / "data-bin", "the sweep point")


def call(command, log_path, env):
    """One command of a run, in a thread of the pool (runner.stop_children stops it when another run fails)."""
    run_child(command, log_path, append=True, env=env, name=shell_words(command[:3]), record=True)


def main_run(args, data, system, seed, env):
    """Train and evaluate one system with one seed."""
    run = args.out / "runs" / system / f"seed{seed}"
    train, _, evaluate = HARDWARE[args.device]
    return timed(data, run, "the run", env, [
        ([*PYTHON, "fairseq_csan.recipes.train", "--data", data, "--arch", SYSTEMS[system], "--save-dir",
          run / "checkpoints", *train, *training(args, seed)], run / "train.out"),
        ([*PYTHON, "fairseq_csan.recipes.evaluate", "--data", data, "--checkpoints", run / "checkpoints",
          "--out", run / "eval", *evaluate, "--last", "5", "--name", system], run / "eval.out")])


def sweep_run(args, data, kind, value, env):
    """One point of the window/area sweep (scripts/sweep.sh), seed 1, dev set."""
    name, folder = f"csan1d_window{value}" if kind == "window" else f"csan2d_heads{value}", args.out / "sweep"
    # sweep.sh's --cpu-tiny, or the GPU's options of train.sh
    sweep_mode = ["--cpu-tiny", "--"] if args.device == "cpu" else ["--", *HARDWARE["cuda"][0]]
    return timed(data, folder / name, "the sweep point", env, [
        ([*PYTHON, "fairseq_csan.recipes.sweep", "--data", data, "--out", folder, "--windows",
          str(value) if kind == "window" else "", "--heads", str(value) if kind == "heads" else "", *sweep_mode,
          *training(args, 1)], folder / f"{name}.out")])


def training(args, seed) -> list:
    """train.sh's last options and, after its --, fairseq-train's: the model, its training and the device's."""
    return ["--max-update", str(args.max_update), "--seed", str(seed), "--", *MODELS[args.model]["model"],
            *training_args(args.max_update, args.model), *HARDWARE[args.device][1]]


def timed(data, folder, what, env, commands):
    """Run ``commands`` ((argv, log) pairs) unless ``folder`` is kept: (folder, their seconds or None)."""
    if kept(folder, data / "data-bin", what):
        return folder, None
    started = time.time()
    for command, log in commands:
        log.parent.mkdir(parents=True, exist_ok=True)
        call(command, log, env)
    return folder, time.time() - started


def finished_one(args, job, folder, seconds, shared, counts) -> None:
    """Say how a run ended; a first finish of a main run records how it shared the machine."""
    kind, system, value = job
    label = f"{system} seed {value}" if kind == "main" else f"sweep {kind} {value}"
    counts[0] += 1
    if seconds is None:
        say(f"{counts[0]}/{counts[1]} {label}: finished before; kept ({folder})")
        return
    if kind == "main":  # how it shared the machine, for the table's steps/s
        settings = REPRODUCTION.read(args.out)
        settings["trained"].setdefault(f"{system}/seed{value}", shared)
        REPRODUCTION.write(args.out, settings)
    score = RESULTS.read(folder / "eval")["sacrebleu"]
    say(f"{counts[0]}/{counts[1]} {label}: sacreBLEU {score:.2f} ({'test' if kind == 'main' else 'dev'}) "
        f"in {seconds / 60:.1f} min; {(time.time() - counts[2]) / 60:.0f} min so far")


def run_all(args, data):
    """Every run, ``--jobs`` at a time with cores/jobs threads each; a run that fails stops the others."""
    jobs = [("main", system, seed) for seed in args.seeds for system in args.systems]
    jobs += [("window", None, m) for m in args.windows] + [("heads", None, n) for n in args.heads]
    workers = max(1, min(args.jobs, len(jobs)))
    threads = max(1, cores() // workers)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    say(f"{len(jobs)} runs ({len(args.systems)} systems x {len(args.seeds)} seeds + {len(jobs) - len(args.systems) * len(args.seeds)} "
        f"sweep points), {args.max_update} updates each, {workers} at a time with {threads} thread(s) each")

    def work(job):
        kind, system, value = job
        return main_run(args, data, system, value, env) if kind == "main" else sweep_run(args, data, kind, value, env)

    counts, failures, shared = [0, len(jobs), time.time()], [], {"runs_at_a_time": workers, "threads": threads}
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = {pool.submit(work, job): job for job in jobs}
        try:
            for future in concurrent.futures.as_completed(futures):
                try:
                    if not future.cancelled():
                        finished_one(args, futures[future], *future.result(), shared, counts)
                except (Failed, KeyboardInterrupt) as error:
                    if not failures:  # the first failure: the other runs are stopped (they end as interrupted)
                        failures.append(str(error) or "interrupted")
                        say(f"{futures[future][1] or futures[future][0]} {futures[future][2]}: FAILED; the other runs "
                            "are stopped")
                        stop_children()
                        for other in futures:
                            other.cancel()
        except BaseException:  # Ctrl-C or an unexpected error: start nothing more, stop what runs
            stop_children()
            for other in futures:
                other.cancel()
            raise
        finally:
            pool.shutdown()  # every run has ended: children may start again in this process
            stop_children(False)
    if failures:
        raise Failed(failures[0])


# ---- the report -----------------------------------------------------------------------------

def load_runs(args):
    """{system: [(seed, results dict, hyp.detok lines, run folder)]}, every run finished."""
    folders = {system: [(seed, args.out / "runs" / system / f"seed{seed}") for seed in args.seeds]
               for system in args.systems}
    return {system: [(seed, RESULTS.read(run / "eval"), read_lines(run / "eval" / "hyp.detok"), run)
                     for seed, run in runs] for system, runs in folders.items()}


def results_table(args, runs, refs):
    header = ["System", "Architecture", "#Params", "Train steps/s", "sacreBLEU mean ± sd", "per seed",
              "Δ", "p (seeds pooled)", "95% CI of Δ", "p per seed", "tok. BLEU mean"]
    base = runs.get(BASELINE)
    rows, records = [], []
    for system, seeds in runs.items():
        results = [r for _, r, _, _ in seeds]
        scores, trained = [r["sacrebleu"] for r in results], [r["train"] for r in results if r.get("train")]
        mean, sd = statistics.fmean(scores), (statistics.stdev(scores) if len(scores) > 1 else 0.0)
        speeds = [t["steps_per_s"] for t in trained if t["steps_per_s"]]
        params = trained[0]["params"] if trained else None
        record = {"system": system, "arch": SYSTEMS[system], "params": params, "seeds": [s for s, *_ in seeds],
                  "sacrebleu": scores, "mean": mean, "sd": sd, "bleu_tok": [r["bleu_tok"] for r in results],
                  "steps_per_s": statistics.fmean(speeds) if speeds else None,
                  "signature": results[0]["sacrebleu_signature"]}
        tests = ["–"] * 4  # Δ, p (seeds pooled), 95% CI of Δ, p per seed
        if base and system != BASELINE:
            pooled = seed_pooled_bootstrap(refs, [h for *_, h, _ in base], [h for *_, h, _ in seeds], args.bootstrap_samples)
            singles = [seed_pooled_bootstrap(refs, [b[2]], [s[2]], args.bootstrap_samples) for b, s in zip(base, seeds)]
            record.update(bootstrap=pooled, bootstrap_per_seed=singles)
            tests = [f"{pooled['delta']:+.2f}{mark(pooled['delta'], pooled['p_value'])}", f"{pooled['p_value']:.3f}",
                     f"[{pooled['ci'][0]:+.2f}, {pooled['ci'][1]:+.2f}]",
                     " ".join(f"{s['p_value']:.3f}{mark(s['delta'], s['p_value'])}" for s in singles)]
        rows.append([system, SYSTEMS[system], f"{params / 1e6:.2f}M" if params else "?",
                     f"{record['steps_per_s']:.2f}" if record["steps_per_s"] else "?",
                     f"{mean:.2f} ± {sd:.2f}", " ".join(f"{v:.2f}" for v in scores), *tests,
                     f"{statistics.fmean(record['bleu_tok']):.2f}"])
        records.append(record)
    return header, rows, records


def plot_results(records, path):
    with figure(path, figsize=(1.6 * len(records) + 1, 3.4)) as (ax,):
        for x, record in enumerate(records):
            ax.bar(x, record["mean"], yerr=record["sd"], capsize=4, alpha=0.6,
                   color="tab:gray" if record["system"] == BASELINE else "tab:blue")
            ax.scatter([x] * len(record["sacrebleu"]), record["sacrebleu"], color="black", s=12, zorder=3)
        ax.set_xticks(range(len(records)), [r["system"] for r in records], rotation=20)
        scores = [score for r in records for score in r["sacrebleu"]]
        ax.set_ylim(max(0, min(scores) - 2), max(scores) + 1)
        ax.set_ylabel("sacreBLEU, test_2016_flickr")


ANALYSES = ("ngram_gap", "length_buckets", "gate_weights", "gate_weights_pos", "window_sweep")  # their file stems
POOLED = ("ref.tok", "src.tok", *(f"{system}.tok" for system in SYSTEMS))  # in OUT/analysis/pooled


def check_analysis_folder(out: Path) -> None:
    """A file in OUT/analysis (rewritten on every run) that the reproduction or its analyses did not
    write (the kit's records say), or one changed since, is refused before anything trains, not deleted."""
    foreign = theirs([out / "analysis"], ("multi30k", *ANALYSES[:2], "gate_weights", "window_sweep"), changed=True)
    if foreign:
        raise Refusal(f"{out / 'analysis'} holds files the reproduction did not write ({listing(foreign)}), or changed "
                      "since; every run rewrites it: move them away (nothing was changed)")


def analyses(args, data, runs):
    """The analysis commands on these runs, into OUT/analysis (rewritten each time)."""
    out, pooled = args.out / "analysis", args.out / "analysis" / "pooled"
    check_analysis_folder(args.out)
    # nothing left over from a run with other systems: every file the reproduction may write there is forgotten
    forget_written([*(pooled / name for name in POOLED),
                    *(out / f"{stem}.{ext}" for stem in ANALYSES for ext in ("csv", "md", "png"))])
    pooled.mkdir(parents=True, exist_ok=True)
    # n-gram precisions and BLEU are corpus sums, so the seeds' outputs are pooled by
    # concatenating them against the reference (and source) repeated once per seed
    sources = {"ref.tok": [data / "tok/test.de"] * len(args.seeds), "src.tok": [data / "tok/test.en"] * len(args.seeds),
               **{f"{system}.tok": [run / "eval" / "hyp.tok" for *_, run in seeds] for system, seeds in runs.items()}}
    for name, files in sources.items():
        write_file(pooled / name, "".join(f.read_text(encoding="utf-8") for f in files))
    others = [f"--system={s}={pooled / f'{s}.tok'}" for s in runs if s != BASELINE]
    commands = {}  # analysis -> its options before --out
    if BASELINE in runs and others:
        base = f"--baseline={BASELINE}={pooled / f'{BASELINE}.tok'}"
        commands["ngram_gap"] = ["--ref", pooled / "ref.tok", base, *others]
        commands["length_buckets"] = ["--src", pooled / "src.tok", "--ref", pooled / "ref.tok", base, *others,
                                      "--groups", "5"]
    first = args.seeds.index(1) if 1 in args.seeds else 0  # seed 1, else the first seed given
    gated = [f"--model={s}={runs[s][first][3] / 'eval' / 'averaged.pt'}" for s in CONTEXT_AWARE if s in runs]
    if gated:
        commands["gate_weights"] = [*gated, "--data", data, "--cpu"]
    if args.windows or args.heads:
        commands["window_sweep"] = ["--sweep", args.out / "sweep", "--metric", "sacrebleu"]
    for name, options in commands.items():
        run_child([*PYTHON, f"fairseq_csan.recipes.analysis.{name}", *options, "--out", out], name=name)
        say(f"analysis: {name} -> {out}")


def report(args, data):
    runs = load_runs(args)
    header, rows, records = results_table(args, runs, read_lines(data / "raw" / "test.de"))
    settings = REPRODUCTION.read(args.out)
    shares = {(shared["runs_at_a_time"], shared["threads"]) for key, shared in settings["trained"].items()
              if key in {f"{system}/seed{seed}" for system in args.systems for seed in args.seeds}}
    tokens = settings["training"][settings["training"].index("--max-tokens") + 1]
    sharing = "; ".join(f"{n} run(s) at a time with {t} thread(s) each" for n, t in sorted(shares, key=str)) \
        or "the runs' sharing of the machine not recorded (finished by an earlier version)"
    note = (f"sacreBLEU on test_2016_flickr ({records[0]['signature']}), mean ± sample standard deviation over "
            f"seeds {', '.join(map(str, args.seeds))}; {settings['max_update']} updates of {tokens} tokens per run. "
            f"Δ: mean over seeds minus the {BASELINE}'s. p (seeds pooled): paired bootstrap ({args.bootstrap_samples} "
            f"resamples of the test sentences) of Δ; p per seed: the same test for each seed against the "
            f"{BASELINE} with that seed (sacreBLEU's --paired-bs). ⇑/↑: better at p < 0.01/0.05, ⇓/↓: worse; "
            f"no mark: not significant. Train steps/s: mean of fairseq's ups over each run, {sharing}.")
    write_table([args.out / "results.csv", args.out / "results.md"], header, rows, note)
    TABLE.write(args.out, {"records": records})
    plot_results(records, args.out / "results.png")
    analyses(args, data, runs)


def parse(argv=None):
    p = Parser(prog="python -m fairseq_csan.recipes.multi30k", description=__doc__.split("\n\n")[0],
               epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--out", type=Path, default=Path("runs/multi30k"), help="output folder (default runs/multi30k)")
    p.add_argument("--raw-dir", type=Path, help="the raw Multi30k files (default: $MULTI30K, else data/multi30k_raw, "
                   "where the README unpacks them)")
    p.add_argument("--merges", type=positive, default=8000, help="BPE merges (default 8000)")
    p.add_argument("--seeds", type=items(int, empty=False), default=[1, 2, 3],
                   help="seeds, comma-separated (default 1,2,3)")
    p.add_argument("--model", choices=list(MODELS), default="tiny", help="the model size: tiny (default; 64-dim, "
                   "1024-token batches, for the CPU) or small (128-dim, dropout 0.3, 4096-token batches, for a GPU); "
                   "examples/multi30k/README.md")
    p.add_argument("--max-update", type=positive, help="training updates per run, the same for every system (default: "
                   "the model's, " + ", ".join(f"{m['max_update']} for {name}" for name, m in MODELS.items()) + ")")
    p.add_argument("--systems", type=items(str, allowed=tuple(SYSTEMS), empty=False), default=list(SYSTEMS),
                   help=f"comma-separated, from {', '.join(SYSTEMS)} (default: all)")
    p.add_argument("--windows", type=items(int, odd=True), default=[3, 7, 11],
                   help="1D-CSAN window sizes of the sweep (default 3,7,11; '' for none)")
    p.add_argument("--heads", type=items(int, allowed=(1, 3)), default=[1, 3],
                   help="2D-CSAN head areas of the sweep, of the models' 4 heads (default 1,3; '' for none)")
    p.add_argument("--jobs", type=positive, default=cores(), help="runs at a time (default: one per core)")
    p.add_argument("--bootstrap-samples", type=positive, default=1000)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="train on the CPU (default; tiny runs) or on one GPU in fp16, the runs sharing it")
    args, _ = p.read(argv)
    args.max_update = args.max_update or MODELS[args.model]["max_update"]
    return args


def plan(args) -> dict:
    """Everything checked before anything is written: the raw files, the device, the --out."""
    if args.model != "tiny" and args.device == "cpu":
        say(f"warning: --model {args.model} on the CPU: each run takes hours here (it is meant for --device cuda)")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise Refusal("--device cuda: no CUDA device here")
    raw, files = preset_raw("multi30k_en_de", args.raw_dir)
    missing = [name for name in files if not (raw / name).is_file()]
    if missing:
        raise Refusal(f"the raw Multi30k folder {raw} lacks {', '.join(missing)}; give --raw-dir (or $MULTI30K) a folder "
                      "with Multi30k task 1's train, val and test_2016_flickr files (.en, .de); see "
                      "examples/multi30k/README.md")
    settings = {"raw_dir": str(raw.resolve()), "max_update": args.max_update, "merges": args.merges,
                "model": MODELS[args.model]["model"], "training": training_args(args.max_update, args.model)}
    if args.device != "cpu":  # recorded only off the CPU, so that earlier CPU runs stay valid
        settings["device"] = args.device
    claim(args, settings)
    return {"raw": raw, "data": (args.out / "data").resolve()}


def claim(args, settings: dict) -> None:
    """The --out: one reproduction at a time (its lock); a folder it never wrote, or one of runs with
    other settings, refused; a file of anyone else's in OUT/analysis refused; its settings recorded."""
    lock = WriterLock(args.out, folder=True, what="the Multi30k reproduction").acquire()  # held to the end
    holds_runs = any((args.out / "runs").glob("*/seed*")) or any((args.out / "sweep").glob("*"))
    before = REPRODUCTION.read(args.out)
    lock.refuse_foreign(before is not None, "the reproduction")
    check_analysis_folder(args.out)
    trained = (before or {}).pop("trained", {})  # what each finished run shared the machine with
    if before is not None and holds_runs and before != settings:
        raise Refusal(f"{args.out} holds runs with other settings (see {REPRODUCTION.path(args.out)}); give another --out")
    REPRODUCTION.write(args.out, {**settings, "trained": trained if holds_runs else {}})


def run(args, p: dict) -> None:
    started, data = time.time(), p["data"]
    say("preparing the data (the multi30k_en_de preset of fairseq_csan.recipes.prepare, as examples/multi30k/prepare.sh)")
    run_child([*PYTHON, "fairseq_csan.recipes.prepare", "multi30k_en_de", "--out", data, "--merges", str(args.merges),
               "--no-download", *(["--raw-dir", args.raw_dir] if args.raw_dir else [])], name="prepare")
    check_kept(args, data)
    run_all(args, data)
    report(args, data)
    say(f"done in {(time.time() - started) / 60:.1f} min: {args.out / 'results.md'}, {args.out / 'results.png'}, "
        f"{args.out / 'analysis'}")


def main(argv=None):
    args = parse(argv)
    run(args, plan(args))


if __name__ == "__main__":
    as_command(main)
