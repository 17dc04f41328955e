"""Evaluate a trained model as the papers do (scripts/evaluate.sh runs this; docs/recipes.md).

docs/recipes.md, "Evaluation: scripts/evaluate.sh", says what each step does, and "What each
command owns, reuses and redoes" when each is redone and which --out is refused.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from . import decoding, score
from .average_checkpoints import average, newest_checkpoints
from .command_line import UNCHECKED, Parser, positive
from .runner import (EVALUATION, RESULTS, RUN, Failed, Progress, Refusal, Step, WriterLock, as_command, check_owned,
                     refuse_overlaps, run_child, save_torch, say, shell_words)
from .runner.records import forget_written, stamped_change
from .task import PreparedTask
from .. import user_dir

PLUGIN = Path(user_dir())  # the fairseq_csan package, for --user-dir
OUTPUTS = ("averaged.pt", "generate.txt", "generate.log", "hyp.tok", "hyp.detok", "results.json", "results.md")


def parse(argv=None):
    p = Parser(prog="scripts/evaluate.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, metavar="DIR", help="the folder made by examples/*/prepare.sh")
    p.add_argument("--checkpoints", type=Path, metavar="DIR", help="the --save-dir of scripts/train.sh")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help=f"where the outputs go ({', '.join([EVALUATION.file, *OUTPUTS])}); a rerun keeps the average "
                        "and the decoding while what they were made from is unchanged, and scores again")
    p.add_argument("--last", type=positive, metavar="N",
                   help="average the N newest interval checkpoints (default 5 for base runs, 20 for big ones)")
    p.add_argument("--checkpoint", type=Path, metavar="FILE",
                   help="evaluate this checkpoint instead of an average (not with --checkpoints or --last)")
    p.add_argument("--model", type=Path, metavar="FOLDER",
                   help="evaluate a model folder as it is (export's or recipes.convert's, on a task prepared with "
                        "its dictionaries: prepare files --like FOLDER); not with --checkpoints or --checkpoint")
    p.add_argument(UNCHECKED[0], action="store_true", help=UNCHECKED[1])
    p.add_argument("--subset", default="test", metavar="SPLIT",
                   help="the split to translate: test (default), valid, or test1, test2, ... where the task was "
                        "prepared with more than one --test")
    decoding.add_options(p)
    p.add_argument("--baseline", type=Path, metavar="DIR",
                   help="the --out of the baseline's evaluation: adds paired bootstrap resampling")
    p.add_argument("--bootstrap-samples", type=positive, metavar="N",
                   help="resamples for the bootstrap, with --baseline (default 1000)")
    p.add_argument("--name", help="the system's name in tables (default: its architecture)")
    p.add_argument("--progress-every", type=positive, default=30, metavar="S",
                   help="while decoding, report the sentences done every S seconds (default 30)")
    p.add_argument("--force", action="store_true",
                   help="redo the evaluation in an --out that holds one of other checkpoints or settings")
    args, _ = p.read(argv)
    chosen = [flag for flag, value in (("--model", args.model), ("--checkpoints", args.checkpoints),
                                       ("--checkpoint", args.checkpoint)) if value is not None]
    if len(chosen) != 1:
        raise Refusal("give one of --checkpoints DIR (an average of its last checkpoints), --checkpoint FILE or --model "
                      f"FOLDER{' (not ' + ' and '.join(chosen) + ' together)' if chosen else ''}")
    if args.last is not None and args.checkpoints is None:
        raise Refusal(f"--last N chooses the checkpoints of --checkpoints DIR to average; {chosen[0]} evaluates one")
    if args.cpu and args.fp16:
        raise Refusal("--fp16 decodes on a GPU; leave out --cpu, or --fp16")
    if args.bootstrap_samples is not None and args.baseline is None:
        raise Refusal("--bootstrap-samples sets the paired bootstrap against --baseline DIR; give --baseline too, or "
                      "leave it out")
    return args


def model_settings(checkpoint: Path, task: PreparedTask, unchecked: bool) -> dict:
    """The checkpoint's own model settings (arch, max_source_positions, ...), read with fairseq's
    loader; a file it cannot read, or a model of other data than the task's, is refused."""
    from .export import check_dictionaries, load_state

    state = load_state(checkpoint, {"source_lang": task.src, "target_lang": task.tgt})  # (its own pair is checked)
    check_dictionaries(state, task, checkpoint, unchecked)  # fairseq-generate would stop with a size mismatch deep in its log
    cfg = state["cfg"]["model"]
    return dict(cfg.items()) if hasattr(cfg, "items") else dict(vars(cfg))


def check_inputs(args, task: PreparedTask) -> dict:
    """What the scoring reads, and the baseline, checked before any slow work; the references."""
    if args.subset not in ("valid", *task.test_sets):
        raise Refusal(f"--subset {args.subset}: {args.data} has {', '.join(['valid', *task.test_sets])}")
    refs = {"tokenised reference": task.tok(args.subset, task.tgt), "raw reference": task.raw(args.subset, task.tgt),
            "tokenised source": task.tok(args.subset, task.src)}
    for what, path in refs.items():
        if not path.is_file():
            raise Refusal(f"no {what} {path}: prepare {args.data} again (the command that made it)")
    changed = stamped_change(task.root, [*refs.values(), task.root / "bpe" / f"{args.subset}.{task.src}"])
    if changed:  # scored only against the task as prepare made it
        raise Refusal(f"{changed}: prepare {args.data} again with the command that made it (it redoes what changed)")
    if args.baseline:
        score.check_baseline(args.baseline, args.subset, task.test_name(args.subset))
    score.sacrebleu_tokenize(task.tgt)  # what scoring the target needs (ja: MeCab for sacreBLEU)
    return refs


def choose_checkpoints(args, task: PreparedTask) -> dict:
    """The checkpoints evaluated (one, or the last N to average), their run's record, and the
    model they hold (its settings, read by fairseq: of the task's data, its lines not too long)."""
    if args.model is not None:
        from .export import fits_task, folder_model

        model = folder_model(args.model, args.unchecked)
        fits_task(model, f"--model {args.model}", task.src, task.tgt, task.data_bin, task.root)
        args.checkpoint = model["checkpoint"]
    folder = args.checkpoints or args.checkpoint.parent
    run = RUN.read(folder) if RUN.path(folder).is_file() else {}
    last = args.last or (20 if run.get("size") == "big" else 5)
    if args.checkpoint and not args.checkpoint.is_file():
        raise Refusal(f"--checkpoint {args.checkpoint}: no such file")
    try:
        inputs = [args.checkpoint] if args.checkpoint else newest_checkpoints(args.checkpoints, last)
    except Refusal as error:
        raise Refusal(f"cannot choose the last {last} checkpoints of {args.checkpoints} ({error}); --last N averages "
                      "fewer, --checkpoint FILE takes one") from None
    cfg = model_settings(inputs[-1], task, args.unchecked)
    arch = cfg.get("arch") or cfg.get("_name")
    if run.get("arch") and arch and run["arch"] != arch:
        if args.checkpoints:
            raise Refusal(f"{inputs[-1]} is a {arch} checkpoint, but {folder}'s run record says the run trained "
                          f"{run['arch']}: it does not belong to this run")
        run = {}  # a checkpoint copied into another run's folder: that run's log is not its own
    long_lines = too_long_lines(task.root / "bpe" / f"{args.subset}.{task.src}", cfg.get("max_source_positions"))
    if long_lines:
        shown = ", ".join(map(str, long_lines[:10])) + (" ..." if len(long_lines) > 10 else "")
        raise Refusal(f"{len(long_lines)} {args.subset} sentence(s) of {task.root / 'bpe'}/{args.subset}.{task.src} are "
                      f"longer than the model's {cfg.get('max_source_positions')} source positions (subword tokens + 1): "
                      f"line(s) {shown}. Remove or split them in {task.raw(args.subset, task.src)} and its reference, "
                      "and prepare again")
    return {"inputs": inputs, "last": last, "arch": arch, "train_log": folder / "train.log" if run else None}


def too_long_lines(bpe_file: Path, limit):
    """Line numbers of ``bpe_file`` (where it is) longer than ``limit`` source positions."""
    if not limit or not bpe_file.is_file():
        return []
    with open(bpe_file, "rb") as f:  # each line gets an end-of-sentence token
        return [n for n, line in enumerate(f, 1) if len(line.split()) + 1 > limit]


def lineage(checkpoint) -> Optional[dict]:
    """What the record beside ``checkpoint`` says it was made from (run.json's or evaluation.json's
    ``made_from``), or None where no record of the kit's speaks for it."""
    for kind in (RUN, EVALUATION):
        if kind.path(Path(checkpoint).parent).is_file():
            return (kind.read(Path(checkpoint).parent) or {}).get("made_from")
    return None


def claim(args, chosen: dict) -> None:
    """The --out: its lock, its record of what this evaluation is of (another one is refused unless
    --force, which removes its outputs), and no file of the user's where evaluate writes."""
    out = args.out
    refuse_overlaps({"--out": out}, {"--data": args.data, "--checkpoints": args.checkpoints, "--checkpoint": args.checkpoint,
                                     "--model": args.model, "--baseline": args.baseline})
    WriterLock(out, folder=True, what="evaluate.sh").acquire()  # held to the end
    check_owned([out / name for name in (*OUTPUTS, EVALUATION.file)], "evaluate", None, "--out", redo=True)
    decoding_how = " ".join(["--cpu"] * args.cpu + ["--fp16"] * args.fp16) or "gpu fp32"
    identity = EVALUATION.typed(dict(
        checkpoints=[str(p.resolve()) for p in chosen["inputs"]], averaged=not args.checkpoint, subset=args.subset,
        beam=args.beam, lenpen=args.lenpen, batch_size=args.batch_size, decoding=decoding_how,
        made_from=lineage(chosen["inputs"][-1])))
    try:
        held = EVALUATION.read(out)
    except Refusal:  # damaged, or an earlier version's evaluation.env
        if not args.force:
            raise
        held = {}
    if held is not None and held != identity:
        if not args.force:
            raise Refusal(f"{out} holds an evaluation of other checkpoints or settings (see {EVALUATION.path(out)}); use "
                          "--force to redo it, or another --out")
        forget_written([out / name for name in OUTPUTS])
    EVALUATION.write(out, identity)
    # results.json, written last, says an evaluation finished (the Multi30k reproduction keeps only those)
    forget_written([RESULTS.path(out), out / "results.md"])  # so a failed one leaves no scores of an earlier one


def decode(command, gen: Path, log: Path, total: int, every: int, threads=None) -> None:
    """Run fairseq-generate (``command``) as ``command > gen 2> log`` would (runner.run_child): the
    hypotheses to ``gen``, its log, warnings and errors to ``log``, so no log line can land among the
    hypotheses; the sentences done said every ``every`` seconds, with the speed and the time left."""
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    say(f"  $ {'OMP_NUM_THREADS=%d ' % threads if threads else ''}{shell_words(command)} > {gen} 2> {log}")
    done = [0]

    def counted(line: bytes):
        done[0] += line.startswith(b"H-")
        return done[0] if line.startswith(b"H-") else None

    progress = Progress("  decoded", "sentences", total, every=every, count_of=counted)
    progress.at(0)
    try:
        run_child(command, gen, errors=log, progress=progress, env=env, name="fairseq-generate")
    except Failed as error:  # its log is a temporary of the step, removed with it: its end, shown here
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-20:] if log.is_file() else []
        print("\n".join(tail), file=sys.stderr, flush=True)
        raise Failed(f"{str(error).split(' (its log: ')[0]} (the end of its log is above)") from None
    say(f"    decoded {done[0]} of {total} sentences")


def run(args, task: PreparedTask, refs: dict, chosen: dict) -> None:
    out, inputs, last = args.out, chosen["inputs"], chosen["last"]
    if args.checkpoint:
        model = args.checkpoint
        say(f"1/3 evaluating {model} (no averaging)")
    else:
        model = out / "averaged.pt"
        Step(out, "average", inputs, [model], {"last": last}).make(
            lambda temps: save_torch(average(inputs), temps[0]), force=args.force,
            what=f"1/3 averaging the last {last} checkpoints of {args.checkpoints}", short=f"1/3 {model} (the same checkpoints)")
    total = sum(1 for _ in open(refs["tokenised source"], "rb"))
    settings = decoding.generate_args(beam=args.beam, lenpen=args.lenpen)
    hw = ["--cpu"] * args.cpu + ["--fp16"] * args.fp16
    command = ["fairseq-generate", str(task.data_bin), "--user-dir", str(PLUGIN), "--path", str(model), "--source-lang",
               task.src, "--target-lang", task.tgt, "--gen-subset", args.subset, *settings, "--remove-bpe", "--batch-size",
               str(args.batch_size), "--num-workers", "0", *hw]  # no data-loader process to outlive a kill
    test_files = sorted(task.data_bin.glob(f"{args.subset}.{task.src}-{task.tgt}.*")) + sorted(task.data_bin.glob("dict.*.txt"))
    gen, log = out / "generate.txt", out / "generate.log"
    threads = decoding.cpu_threads(min(args.batch_size, total), args.threads)
    Step(out, "decode", [model, *test_files], [gen, log],
         {"subset": args.subset, "command": " ".join(settings + hw), "batch_size": args.batch_size}).make(
        lambda temps: decode(command, temps[0], temps[1], total, args.progress_every, threads), force=args.force,
        what=f"2/3 decoding {args.subset} ({total} sentences): beam {args.beam}, length penalty {args.lenpen:g}, output "
             f"length <= source + {decoding.MAX_LEN_B}", short=f"2/3 {gen} (the same model and settings)")
    say("3/3 scoring")  # every time: it is quick, and reads the references as they are now
    score.score(out, gen, log, refs["tokenised reference"], refs["raw reference"], task.tgt,
                name=args.name or chosen["arch"] or out.name, arch=chosen["arch"], task=task.task, subset=args.subset,
                test_name=task.test_name(args.subset), pretokenized=bool(task.pretokenized), train_log=chosen["train_log"],
                baseline=args.baseline, samples=args.bootstrap_samples or 1000)


def main(argv=None) -> None:
    args = parse(argv)
    task = PreparedTask.open(args.data)
    refs = check_inputs(args, task)
    chosen = choose_checkpoints(args, task)
    claim(args, chosen)
    run(args, task, refs, chosen)


if __name__ == "__main__":
    as_command(main)
