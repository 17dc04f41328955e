"""The window/area sweep of the CSAN paper's Figure 2 (Yang et al., NAACL 2019): 1D-CSAN for
each window size M, and 2D-CSAN (window fixed, 11 by default) for each number of heads N, each
trained with the training recipe (train.py) and scored on the dev set (evaluate.py). Plot it
with ``python -m fairseq_csan.recipes.analysis.window_sweep --sweep OUT``.

``scripts/sweep.sh`` is its door; ``python -m fairseq_csan.recipes.sweep`` is the same command.
Every input is checked before any run folder is made (the training options by train.py's own
planner, as a dry run), and each run folder has one writer: a second sweep of a run is refused
at once, naming the first, while sweeps of other points may share the --out.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
from pathlib import Path
from typing import List

from .command_line import Parser
from .runner import SWEEP, Refusal, WriterLock, run_child, shell_words
from .task import is_task

class Refused(Exception):
    pass


# an option with a value: (flag, dest, metavar, default, help); a default of None is required
VALUED = (
    ("--data", "data", "DIR", None, "a folder made by examples/*/prepare.sh"),
    ("--out", "out", "DIR", None, "one folder per run: csan1d_window{M}/ and csan2d_heads{N}/, each with its "
     "checkpoints, its dev-set evaluation (eval/) and sweep.json"),
    ("--windows", "windows", '"M..."', "3 5 7 9 11 13 15", '1D window sizes, odd (default "3 5 7 9 11 13 15"; "" '
     "for none)"),
    ("--heads", "heads", '"N..."', "1 3 5 7", '2D head areas, odd, at most the model\'s heads (default "1 3 5 7"; "" '
     "for none)"),
    ("--window-2d", "window_2d", "M", "11", "the 2D runs' window (default 11, the paper's)"),
    ("--last", "last", "N", "5", "checkpoints to average for each evaluation (default 5)"),
)
MAY_BE_EMPTY = ("--windows", "--heads")  # "" leaves that half of the sweep out


def parser() -> argparse.ArgumentParser:
    """sweep.sh's options, each declared once."""
    p = Parser(prog="scripts/sweep.sh", refusal=Refused,
               usage="scripts/sweep.sh --data DIR --out DIR [options] [-- TRAIN.SH ARGS]",
               epilog="Arguments after -- go to scripts/train.sh (e.g. -- --gpus 8 --max-update 20000), and after\n"
                       "a second -- to fairseq-train. A finished run is not retrained (train.sh resumes it, fairseq\n"
                       "stops at once) and a finished evaluation is kept.")
    for flag, dest, metavar, _default, help_text in VALUED:
        p.add_argument(flag, dest=dest, metavar=metavar, help=help_text)  # None: not given (defaults below)
    p.add_argument("--cpu-tiny", dest="tiny", action="store_true",
                   help="tiny CPU runs (train.sh --cpu-tiny; evaluation on the CPU), for tests")
    p.add_argument("--dry-run", dest="dry_run", action="store_true",
                   help="print each run's training and evaluation commands, and exit")
    return p


def parse(argv: List[str]) -> dict:
    ns, extra = parser().read(argv)
    opts = dict(tiny=ns.tiny, dry_run=ns.dry_run, extra=extra, given=set())
    for flag, dest, _metavar, default, _help in VALUED:
        value = getattr(ns, dest)
        if value is not None:
            if value == "" and flag not in MAY_BE_EMPTY:
                raise Refused(f"{flag} needs a value")
            opts["given"].add(flag)
        opts[dest] = value if value is not None else (default or "")
    return opts


def plan(opts: dict) -> List[dict]:
    """The runs, in order, each with its training and evaluation commands; every input checked
    first (nothing is written here)."""
    if not opts["data"] or not opts["out"]:
        raise Refused("--data and --out are required")
    windows, heads = opts["windows"].split(), opts["heads"].split()
    for value in [*windows, *heads, opts["window_2d"]]:
        if not re.fullmatch(r"[0-9]+", value) or int(value) % 2 != 1:
            raise Refused(f"window sizes and head areas must be positive odd numbers, got '{value}'")
    for flag, values in (("--windows", windows), ("--heads", heads)):
        twice = sorted({v for v in values if values.count(v) > 1}, key=int)
        if twice:
            raise Refused(f"{flag} lists {', '.join(twice)} more than once: each is one run")
    data, out = Path(opts["data"]), Path(opts["out"])
    if not is_task(data):
        raise Refused(f"--data {data} is not a prepared task folder (no task.json or data-bin/; run "
                      "examples/*/prepare.sh)")
    if not re.fullmatch(r"[1-9][0-9]*", opts["last"]):
        raise Refused(f"--last must be a positive whole number, got '{opts['last']}'")
    if not windows and not heads:
        raise Refused('nothing to run: --windows and --heads are both empty')
    if "--window-2d" in opts["given"] and not heads:
        raise Refused('--window-2d sets the 2D runs\' window, and --heads "" leaves them out')
    # train.sh options, then (after a second --) fairseq-train arguments
    extra = opts["extra"]
    cut = extra.index("--") if "--" in extra else len(extra)
    train_args, fairseq_args = list(extra[:cut]), list(extra[cut + 1:])
    evaluate_args = []
    if opts["tiny"]:
        train_args.append("--cpu-tiny")
        evaluate_args.append("--cpu")
    check_training(data, out, train_args, fairseq_args)

    runs = [(f"csan1d_window{m}", "window", m, "transformer_csan1d", ["--csan-window", m]) for m in windows]
    runs += [(f"csan2d_heads{n}", "heads", n, "transformer_csan2d", ["--csan-window", opts["window_2d"], "--csan-heads", n])
             for n in heads]
    python = [sys.executable, "-m"]
    return [dict(name=name, kind=kind, value=value, arch=arch, flags=flags, folder=out / name,
                 train=[*python, "fairseq_csan.recipes.train", "--data", str(data), "--arch", arch, "--save-dir",
                        str(out / name / "checkpoints"), *train_args, "--", *fairseq_args, *flags],
                 evaluate=[*python, "fairseq_csan.recipes.evaluate", "--data", str(data), "--checkpoints",
                           str(out / name / "checkpoints"), "--out", str(out / name / "eval"), "--subset", "valid",
                           "--last", opts["last"], "--name", name, *evaluate_args])
            for name, kind, value, arch, flags in runs]


def check_training(data: Path, out: Path, train_args: List[str], fairseq_args: List[str]) -> None:
    """train.py's own planner, as its --dry-run: a training option it refuses is refused here,
    before any run folder is made."""
    from . import train

    shown = io.StringIO()
    try:
        with contextlib.redirect_stdout(shown), contextlib.redirect_stderr(shown):
            train.build(train.parse(["--data", str(data), "--arch", "transformer_csan1d", "--save-dir",
                                     str(out / "check"), "--dry-run", *train_args, "--", *fairseq_args]))
    except train.Refused as e:
        raise Refused(f"scripts/train.sh refuses these options: {e}") from None
    except SystemExit:  # train.py's --help (its usage went into the buffer)
        raise Refused("-h/--help is not a training option: scripts/sweep.sh --help and scripts/train.sh --help "
                      "list the options") from None


# what a run of the sweep writes in its folder: its record, the two commands' output, and the
# training's and the evaluation's folders (which those commands guard themselves)
RUN_WRITES = ("sweep.json", "sweep.env", "train.out", "eval.out", "checkpoints", "eval")


def someone_elses(folder: Path) -> List[str]:
    """The names in a run folder that a run of the sweep did not write: all of them where the
    folder holds no sweep record (a folder of the user's), else those not in RUN_WRITES."""
    if not folder.is_dir():
        return []
    names = sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))
    if names and not SWEEP.exists(folder):
        return names
    return [name for name in names if name not in RUN_WRITES]


def run_one(run: dict, lock_fds) -> None:
    folder = run["folder"]
    log(f"{run['name']}: {run['arch']} {' '.join(run['flags'])}")
    folder.mkdir(parents=True, exist_ok=True)
    SWEEP.write(folder, {"kind": run["kind"], "value": run["value"], "arch": run["arch"],
                         "flags": " ".join(run["flags"])})
    for what, command, output in (("training", run["train"], "train.out"), ("evaluating", run["evaluate"], "eval.out")):
        # it holds the sweep's locks too (a sweep killed while it runs leaves its runs locked
        # until it ends); a signal is passed on to it (train.py passes it to the trainer)
        ended = run_child(command, folder / output, keep_fds=lock_fds, name=command[2], say=log)
        if ended.signal:
            log("the same command goes on where it stopped")
            raise SystemExit(ended.code)
        if ended.code != 0:
            tail = (folder / output).read_text(encoding="utf-8", errors="replace").splitlines()[-20:]
            print("\n".join(tail), file=sys.stderr)
            raise Refused(f"{what} {run['name']} failed (log: {folder / output})")
    results = folder / "eval" / "results.md"
    if not results.is_file():
        raise Refused(f"evaluating {run['name']} wrote no {results} (log: {folder / 'eval.out'})")
    for line in results.read_text(encoding="utf-8").splitlines():
        if "tokenised BLEU" in line:
            print(line, file=sys.stderr)


def log(message: str) -> None:
    print(f"[sweep] {message}", file=sys.stderr, flush=True)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        opts = parse(argv)
        runs = plan(opts)
        if opts["dry_run"]:
            for run in runs:
                print(f"{run['name']}: {shell_words(run['train'])} && {shell_words(run['evaluate'])}")
            return
        # one writer per run folder, every lock taken before any run starts (released, and its
        # file removed, when this process ends, however it ends)
        out = Path(opts["out"])
        out.mkdir(parents=True, exist_ok=True)
        try:
            locks = [WriterLock(run["folder"], folder=False, what="sweep.sh").acquire() for run in runs]
        except Refusal as e:
            raise Refused(str(e).replace("or give another output", "or give another --out")) from None
        for run in runs:  # before any run starts: a run folder of someone else's is named, not written into
            theirs = someone_elses(run["folder"])
            if theirs:
                raise Refused(f"{run['folder']} holds what a sweep run did not write ({', '.join(theirs[:5])}); move "
                              "it away or give another --out (nothing was changed)")
        for run in runs:
            run_one(run, [lock.fd for lock in locks])
    except Refused as e:
        log(f"error: {e}")
        raise SystemExit(2)
    log(f"done; plot with: python -m fairseq_csan.recipes.analysis.window_sweep --sweep {opts['out']} --out DIR")


if __name__ == "__main__":
    from .runner import as_command

    as_command(main)
