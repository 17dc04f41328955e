"""Evaluate a trained model as the papers do (scripts/evaluate.sh runs this; docs/recipes.md).

Three steps: average the last N checkpoints (5 for base runs, 20 for big ones, as Vaswani et
al. 2017), decode the test set with the papers' settings (decoding.py) through
fairseq-generate, and score: tokenised BLEU (and compound-split BLEU for En-De), sacreBLEU and
chrF with their signatures, decoding speed, and with --baseline the paired bootstrap.

The average and the decoding are steps (the runner's step stamps): each records the content hashes of what it
was made from (the checkpoints, the prepared test set and dictionaries) and is redone, saying
why, when any of it changed. The scores are computed on every run. An --out that holds the
evaluation of other checkpoint files or other settings is refused unless --force.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

from . import decoding
from .average_checkpoints import average, newest_checkpoints
from .runner import EVALUATION, RUN, Damaged, Refusal, Step, WriterLock, lineage, listing, make, refuse_overlaps
from .runner import save_torch, shell_words
from .task import NotATask, PreparedTask
from .. import user_dir

PLUGIN = Path(user_dir())  # the fairseq_csan package, for --user-dir
OUTPUTS = ("averaged.pt", "generate.txt", "generate.log", "hyp.tok", "hyp.detok", "results.json", "results.md")


def log(message: str, stream=None) -> None:
    print(f"[evaluate] {message}", file=stream or sys.stderr, flush=True)


def die(message: str) -> None:
    log(f"error: {message}")
    raise SystemExit(2)


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return int(text)


def parse(argv=None):
    p = argparse.ArgumentParser(prog="scripts/evaluate.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, metavar="DIR", help="the folder made by examples/*/prepare.sh")
    p.add_argument("--checkpoints", type=Path, metavar="DIR", help="the --save-dir of scripts/train.sh")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="where the outputs go (evaluation.json, averaged.pt, generate.txt, generate.log, hyp.tok, "
                        "hyp.detok, results.json, results.md); a rerun keeps the average and the decoding while "
                        "what they were made from is unchanged, and scores again")
    p.add_argument("--last", type=positive, metavar="N",
                   help="average the N newest interval checkpoints (default 5 for base runs, 20 for big ones)")
    p.add_argument("--checkpoint", type=Path, metavar="FILE",
                   help="evaluate this checkpoint instead of an average (not with --checkpoints or --last)")
    p.add_argument("--model", type=Path, metavar="FOLDER",
                   help="evaluate a model folder as it is (export's or recipes.convert's, on a task prepared with "
                        "its dictionaries: prepare files --like FOLDER); not with --checkpoints or --checkpoint")
    p.add_argument("--subset", default="test", metavar="SPLIT",
                   help="the split to translate: test (default), valid, or test1, test2, ... where the task was "
                        "prepared with more than one --test")
    p.add_argument("--beam", type=positive, default=decoding.BEAM, metavar="N",
                   help=f"beam size (default {decoding.BEAM})")
    p.add_argument("--lenpen", type=float, default=decoding.LENPEN, metavar="X",
                   help=f"length penalty (default {decoding.LENPEN})")
    p.add_argument("--batch-size", type=positive, default=128, metavar="N", help="sentences per batch (default 128)")
    p.add_argument("--baseline", type=Path, metavar="DIR",
                   help="the --out of the baseline's evaluation: adds paired bootstrap resampling")
    p.add_argument("--bootstrap-samples", type=positive, metavar="N",
                   help="resamples for the bootstrap, with --baseline (default 1000)")
    p.add_argument("--name", help="the system's name in tables (default: its architecture)")
    p.add_argument("--cpu", action="store_true", help="decode on the CPU")
    p.add_argument("--fp16", action="store_true", help="decode in fp16 (GPU)")
    p.add_argument("--threads", type=positive, metavar="N",
                   help="CPU threads of fairseq-generate (default: 1 with --batch-size 1, else all cores; "
                        "OMP_NUM_THREADS where set): docs/speed.md, Threads on the CPU")
    p.add_argument("--progress-every", type=positive, default=30, metavar="S",
                   help="while decoding, report the sentences done every S seconds (default 30)")
    p.add_argument("--force", action="store_true",
                   help="redo the evaluation in an --out that holds one of other checkpoints or settings")
    args = p.parse_args(argv)
    if args.model is not None and (args.checkpoints is not None or args.checkpoint is not None or args.last is not None):
        p.error("--model FOLDER evaluates that folder's model.pt; --checkpoints DIR, --last N and --checkpoint FILE "
                "choose checkpoints: give one or the other")
    if args.checkpoints is None and args.checkpoint is None and args.model is None:
        p.error("--checkpoints DIR (or --checkpoint FILE, or --model FOLDER) is required")
    if args.checkpoint is not None and (args.checkpoints is not None or args.last is not None):
        p.error("--checkpoint FILE evaluates one checkpoint; --checkpoints DIR and --last N choose an average: "
                "give one or the other")
    if args.cpu and args.fp16:
        p.error("--fp16 decodes on a GPU; leave out --cpu, or --fp16")
    if args.bootstrap_samples is not None and args.baseline is None:
        p.error("--bootstrap-samples sets the paired bootstrap against --baseline DIR; give --baseline too, "
                "or leave it out")
    return args


def run_identity(folder: Path) -> dict:
    """arch and size from train.sh's run record in a checkpoint folder (empty when absent)."""
    try:
        return RUN.read(folder) or {}
    except Damaged as e:
        die(str(e))


def model_settings(checkpoint: Path, task: PreparedTask) -> dict:
    """The checkpoint's own model settings (arch, max_source_positions, ...), read with
    fairseq's loader; a file it cannot read, or a model of other dictionaries than the task's,
    is named."""
    from .. import register

    register()  # our architectures and the fixes that let checkpoints load
    from fairseq import checkpoint_utils

    from .export import ExportError, check_dictionaries

    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))
    except Exception as error:  # a damaged or foreign file: name it, whatever torch raised
        die(f"cannot read the checkpoint {checkpoint} (damaged or not a fairseq checkpoint: "
            f"{(str(error).strip().splitlines() or [type(error).__name__])[0]})")
    try:  # fairseq-generate would stop with a size mismatch deep in its log
        check_dictionaries(state, task, checkpoint)
    except ExportError as error:
        die(str(error))
    cfg = state["cfg"]["model"]
    return dict(cfg) if isinstance(cfg, dict) else dict(vars(cfg)) if not hasattr(cfg, "items") else dict(cfg.items())


def too_long_lines(bpe_file: Path, limit):
    """Line numbers of ``bpe_file`` longer than ``limit`` source positions."""
    if not limit:
        return []
    with open(bpe_file, "rb") as f:  # each line gets an end-of-sentence token
        return [n for n, line in enumerate(f, 1) if len(line.split()) + 1 > limit]


def decode(command, gen_tmp: Path, log_tmp: Path, total: int, every: int, threads=None) -> None:
    """Run fairseq-generate (``command``) as ``command > gen_tmp 2> log_tmp`` would: the
    hypotheses to gen_tmp, its log, warnings and errors to log_tmp, so no log line can land among
    the hypotheses. It runs as every child of the kit's does (runner.run_child: a process group
    of its own, killed with this process, a signal to this one passed on to it). The sentences
    done are reported meanwhile every ``every`` seconds, with the speed and the time left."""
    from .runner import Progress, run_child

    env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    log(f"  $ {'OMP_NUM_THREADS=%d ' % threads if threads else ''}{shell_words(command)} > {gen_tmp} 2> {log_tmp}")

    def count():
        try:
            with open(gen_tmp, "rb") as f:
                return sum(1 for line in f if line.startswith(b"H-"))
        except OSError:
            return 0

    progress = Progress("evaluate", "  decoded", "sentences", total, every=0)  # (the watcher keeps the time)
    progress.at(0, time.time())  # the speed from the start
    done = threading.Event()

    def watch():
        while not done.wait(every):
            print(progress.at(count(), time.time()), file=sys.stderr, flush=True)

    watcher = threading.Thread(target=watch, daemon=True)
    failure = None
    try:
        with open(log_tmp, "wb") as err:
            def to_log(line: bytes) -> None:
                err.write(line + b"\n")

            watcher.start()
            ended = run_child(command, gen_tmp, errors_to_out=False, errors=to_log, with_parent=True,
                              name="fairseq-generate", say=log, env=env)
        if ended.signal is not None:
            raise SystemExit(ended.code)
        if ended.code != 0:
            failure = f"exit status {ended.code}"
    except OSError as error:  # writing the files (a full disk)
        failure = str(error)
    finally:
        done.set()
    if failure is not None:
        try:
            lines = log_tmp.read_text(encoding="utf-8", errors="replace").splitlines(True)
        except OSError:
            lines = []
        sys.stderr.write("".join(lines[-20:]))
        if not "".join(lines).strip():  # the log itself could not be written: most often a full disk
            import shutil

            free = shutil.disk_usage(log_tmp.parent).free
            die(f"fairseq-generate failed ({failure}) and wrote no log ({log_tmp} is empty); "
                f"{free / 2**20:.0f} MiB are free on the disk of {log_tmp.parent}")
        last = next((line.strip() for line in reversed(lines) if line.strip()), "")
        die(f"fairseq-generate failed ({failure}: {last}; its log: {log_tmp})")
    log(f"    decoded {count()} of {total} sentences")


def of_model_folder(folder: Path, task: PreparedTask) -> Path:
    """--model FOLDER: its model.pt, once the folder is intact (its seal) and translates the
    task's languages with the task's dictionaries."""
    from .export import ExportError, fits_task, folder_model

    try:
        model = folder_model(folder)
    except ExportError as e:
        die(f"--model: {e}")
    try:
        fits_task(model, f"--model {folder}", task.src, task.tgt, task.data_bin, task.root)
    except ExportError as e:
        die(str(e))
    return model["checkpoint"]


def main(argv=None) -> None:
    args = parse(argv)
    try:
        task = PreparedTask.open(args.data)
    except NotATask as e:
        die(str(e))
    src, tgt = task.src, task.tgt
    if args.subset not in ("valid", *task.test_sets):
        die(f"--subset {args.subset}: {args.data} has {', '.join(['valid', *task.test_sets])}")
    # everything the scoring reads, checked before any slow work
    refs = {"tokenised reference": task.tok(args.subset, tgt), "raw reference": task.raw(args.subset, tgt),
            "tokenised source": task.tok(args.subset, src)}
    for what, path in refs.items():
        if not path.is_file():
            die(f"no {what} {path}: prepare {args.data} again (the command that made it)")
    if args.baseline and not (args.baseline / "hyp.tok").is_file():
        die(f"--baseline {args.baseline} has no hyp.tok: evaluate the baseline first, with the same --subset")
    if args.baseline and (args.baseline / "results.json").is_file():
        base = json.loads((args.baseline / "results.json").read_text(encoding="utf-8"))
        theirs = base.get("subset")
        if base.get("test_set") and base["test_set"] != task.test_name(args.subset) and theirs == args.subset:
            die(f"--baseline {args.baseline} is an evaluation of {base['test_set']}, and {args.data}'s {args.subset} "
                f"is now {task.test_name(args.subset)}: evaluate the baseline on it too")
        if theirs and theirs != args.subset:
            die(f"--baseline {args.baseline} is an evaluation of {theirs}; evaluate the baseline on --subset "
                f"{args.subset} too")
    from .score import sacrebleu_tokenize

    try:  # what scoring the target needs (ja: MeCab for sacreBLEU), before any slow work
        sacrebleu_tokenize(tgt)
    except SystemExit as e:
        die(str(e).replace("score: ", ""))
    out = args.out
    if args.model is not None:
        args.checkpoint = of_model_folder(args.model, task)
    try:  # nothing this command reads may lie where it writes
        refuse_overlaps({"--out": out}, {"--data": args.data, "--checkpoints": args.checkpoints,
                                         "--checkpoint": args.checkpoint, "--model": args.model,
                                         "--baseline": args.baseline})
    except Refusal as e:
        die(str(e))
    # the run the checkpoints come from: their save folder's run record (and train.log)
    run_folder = args.checkpoints or (args.checkpoint.parent if args.checkpoint else None)
    run = run_identity(run_folder) if run_folder else {}
    size = run.get("size", "base")
    last = args.last or (20 if size == "big" else 5)

    if args.checkpoint:
        if not args.checkpoint.is_file():
            die(f"no checkpoint {args.checkpoint}")
        inputs = [args.checkpoint]
    else:
        try:
            inputs = newest_checkpoints(args.checkpoints, last)
        except SystemExit as e:
            die(f"cannot choose the last {last} checkpoints of {args.checkpoints} ({e}); "
                "--last N averages fewer, --checkpoint FILE takes one")
    model_cfg = model_settings(inputs[-1], task)
    arch = model_cfg.get("arch") or model_cfg.get("_name")
    if run.get("arch") and arch and run["arch"] != arch:
        if args.checkpoints:
            die(f"{inputs[-1]} is a {arch} checkpoint, but {run_folder}'s run record says the run trained "
                f"{run['arch']}: it does not belong to this run")
        run = {}  # a checkpoint copied into another run's folder: that run's log is not its own
    bpe_source = task.root / "bpe" / f"{args.subset}.{src}"
    if bpe_source.is_file():  # a line the model cannot take would stop fairseq-generate midway
        limit = model_cfg.get("max_source_positions")
        long_lines = too_long_lines(bpe_source, limit)
        if long_lines:
            shown = ", ".join(map(str, long_lines[:10])) + (" ..." if len(long_lines) > 10 else "")
            die(f"{len(long_lines)} {args.subset} sentence(s) of {bpe_source} are longer than the model's "
                f"{limit} source positions (subword tokens + 1): line(s) {shown}. Remove or split them in "
                f"{task.raw(args.subset, src)} and its reference, and prepare again")
    if not EVALUATION.exists(out):  # not an evaluation folder (yet): nothing of another's may be replaced
        theirs = [out / name for name in OUTPUTS if (out / name).exists()]
        if theirs:
            die(f"{out} holds files that evaluate did not write ({listing(theirs)}): they would be replaced; "
                "give another --out (nothing was changed)")
    try:
        lock = WriterLock(out, folder=True, what="evaluate.sh").acquire()  # noqa: F841  (held to the end)
    except Refusal as e:
        die(str(e))
    hw = (["--cpu"] if args.cpu else []) + (["--fp16"] if args.fp16 else [])
    # what this evaluation is of: the checkpoint files and the settings (their content is the
    # steps' business: a changed checkpoint or test set redoes the steps after it)
    try:
        held = EVALUATION.read(out)
    except Damaged as e:  # an earlier version's evaluation.env too
        if not args.force:
            die(f"{e}; use --force to redo the evaluation, or another --out")
        held = {}  # redone, as an evaluation of other settings
    # what the checkpoints were made from, as their record says (model_settings refused a task
    # prepared again since): the average written here carries it on, to export and translate.py
    found = lineage(inputs[-1])
    identity = EVALUATION.typed(dict(
        checkpoints=[str(p.resolve()) for p in inputs], averaged=not args.checkpoint, subset=args.subset,
        beam=args.beam, lenpen=args.lenpen, batch_size=args.batch_size, decoding=" ".join(hw) or "gpu fp32",
        made_from=found[1] if found else None))
    if held is not None and held != identity:
        if not args.force:
            die(f"{out} holds an evaluation of other checkpoints or settings (see {EVALUATION.path(out)}); use --force "
                "to redo it, or another --out")
        for name in OUTPUTS:
            (out / name).unlink(missing_ok=True)
    EVALUATION.write(out, identity)
    # results.json is written last (step 3): while it is there, this evaluation finished, and a
    # command that keeps finished evaluations (the Multi30k reproduction) never keeps one cut short
    (out / "results.json").unlink(missing_ok=True)
    stamps = out / ".steps"

    # 1 the weights: one checkpoint, or the average of the last N
    if args.checkpoint:
        model = args.checkpoint
        log(f"1/3 evaluating {model} (no averaging)")
    else:
        model = out / "averaged.pt"
        make(Step(stamps, "average", inputs, [model], {"last": last}),
             lambda temps: save_torch(average(inputs), temps[0]), force=args.force,
             prefix="evaluate", what=f"1/3 averaging the last {last} checkpoints of {args.checkpoints}",
             short=f"1/3 {model} (the same checkpoints)")

    # 2 decode
    total = sum(1 for _ in open(refs["tokenised source"], "rb"))
    settings = decoding.generate_args(beam=args.beam, lenpen=args.lenpen)
    command = ["fairseq-generate", str(task.data_bin), "--user-dir", str(PLUGIN), "--path", str(model),
               "--source-lang", src, "--target-lang", tgt, "--gen-subset", args.subset, *settings,
               "--remove-bpe", "--batch-size", str(args.batch_size), "--num-workers", "0", *hw]
    # --num-workers 0: no data-loader process, which would outlive a killed evaluation by seconds
    test_files = sorted(task.data_bin.glob(f"{args.subset}.{src}-{tgt}.*")) + sorted(task.data_bin.glob("dict.*.txt"))
    gen = out / "generate.txt"
    make(Step(stamps, "decode", [model, *test_files], [gen, out / "generate.log"],
              {"subset": args.subset, "command": " ".join(settings + hw), "batch_size": args.batch_size}),
         lambda temps: decode(command, temps[0], temps[1], total, args.progress_every,
                              decoding.cpu_threads(min(args.batch_size, total), args.threads)), force=args.force,
         prefix="evaluate", what=f"2/3 decoding {args.subset} ({total} sentences): beam {args.beam}, length penalty "
         f"{args.lenpen:g}, output length <= source + {decoding.MAX_LEN_B}", short=f"2/3 {gen} (the same model and settings)")

    # 3 score (every time: it is quick, and reads the references as they are now)
    log("3/3 scoring")
    from . import score

    score_args = ["score", "--generate-log", str(gen), "--decode-log", str(out / "generate.log"),
                  "--ref-tok", str(refs["tokenised reference"]), "--ref-raw", str(refs["raw reference"]),
                  "--lang", tgt, "--out", str(out), "--name", args.name or arch or out.name,
                  "--task", task.task, "--subset", args.subset, "--test-name", task.test_name(args.subset),
                  *(["--pretokenized"] if task.pretokenized else [])]
    if arch:  # what the checkpoint itself says
        score_args += ["--arch", arch]
    if tgt.split("_")[0] == "de":  # de, de_AT
        score_args.append("--compound-split")
    if run and (run_folder / "train.log").is_file():  # the training of the checkpoints evaluated
        score_args += ["--train-log", str(run_folder / "train.log")]
    if args.baseline:
        score_args += ["--baseline", str(args.baseline), "--bootstrap-samples", str(args.bootstrap_samples or 1000)]
    score.main(score_args)


if __name__ == "__main__":
    from .runner import as_command

    as_command(main)
