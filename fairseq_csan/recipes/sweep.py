"""The window/area sweep of the CSAN paper's Figure 2 (Yang et al., NAACL 2019): 1D-CSAN for
each window size M, and 2D-CSAN (window fixed, 11 by default) for each number of heads N, each
trained with the training recipe (train.py) and scored on the dev set (evaluate.py). Plot it
with ``python -m fairseq_csan.recipes.analysis.window_sweep --sweep OUT``.

``scripts/sweep.sh`` is its door. Each run folder has one writer (docs/recipes.md, "One writer per
output"), so that sweeps of other points may share the --out.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path
from typing import List

from .command_line import Parser, items, positive
from .runner import Kind, Refusal, WriterLock, as_command, check_owned, run_child, say, shell_words
from .task import is_task

SWEEP = Kind("sweep", "sweep.json", {"kind": "text", "value": "int", "arch": "text", "flags": "text"},
             earlier=("sweep.env",))


def parser() -> Parser:
    """sweep.sh's options, each declared once."""
    p = Parser(prog="scripts/sweep.sh", usage="scripts/sweep.sh --data DIR --out DIR [options] [-- TRAIN.SH ARGS]",
               epilog="Arguments after -- go to scripts/train.sh (e.g. -- --gpus 8 --max-update 20000), and after\n"
                      "a second -- to fairseq-train. A finished run is not retrained (train.sh resumes it, fairseq\n"
                      "stops at once) and a finished evaluation is kept.")
    p.add_argument("--data", metavar="DIR", required=True, type=Path, help="a folder made by examples/*/prepare.sh")
    p.add_argument("--out", metavar="DIR", required=True, type=Path, help="one folder per run: csan1d_window{M}/ and "
                   "csan2d_heads{N}/, each with its checkpoints, its dev-set evaluation (eval/) and sweep.json")
    p.add_argument("--windows", metavar='"M..."', type=items(int, odd=True), default=[3, 5, 7, 9, 11, 13, 15],
                   help='1D window sizes, odd (default "3 5 7 9 11 13 15"; "" for none)')
    p.add_argument("--heads", metavar='"N..."', type=items(int, odd=True), default=[1, 3, 5, 7],
                   help='2D head areas, odd, at most the model\'s heads (default "1 3 5 7"; "" for none)')
    p.add_argument("--window-2d", metavar="M", type=items(int, odd=True), help="the 2D runs' window (default 11, the "
                   "paper's)")
    p.add_argument("--last", metavar="N", type=positive, default=5, help="checkpoints to average for each evaluation "
                   "(default 5)")
    p.add_argument("--cpu-tiny", dest="tiny", action="store_true",
                   help="tiny CPU runs (train.sh --cpu-tiny; evaluation on the CPU), for tests")
    p.add_argument("--dry-run", action="store_true", help="print each run's training and evaluation commands, and exit")
    return p


def plan(argv) -> List[dict]:
    """The runs, in order, each with its training and evaluation commands; every input checked
    first (nothing is written here)."""
    o, extra = parser().read(argv)
    if not o.windows and not o.heads:
        raise Refusal("nothing to run: --windows and --heads are both empty")
    if o.window_2d is not None and not o.heads:
        raise Refusal('--window-2d sets the 2D runs\' window, and --heads "" leaves them out')
    if o.window_2d is not None and len(o.window_2d) != 1:
        raise Refusal("--window-2d takes one window size")
    if not is_task(o.data):
        raise Refusal(f"--data {o.data} is not a prepared task folder (no task.json or data-bin/; run "
                      "examples/*/prepare.sh)")
    cut = extra.index("--") if "--" in extra else len(extra)  # train.sh options, then fairseq-train arguments
    train_args, fairseq_args = [*extra[:cut], *["--cpu-tiny"] * o.tiny], list(extra[cut + 1:])
    check_training(o.data, o.out, train_args, fairseq_args)
    window = str((o.window_2d or [11])[0])
    runs = [(f"csan1d_window{m}", "window", m, "transformer_csan1d", ["--csan-window", str(m)]) for m in o.windows]
    runs += [(f"csan2d_heads{n}", "heads", n, "transformer_csan2d", ["--csan-window", window, "--csan-heads", str(n)])
             for n in o.heads]
    python = [sys.executable, "-m"]
    return [dict(name=name, kind=kind, value=value, arch=arch, flags=flags, folder=o.out / name, dry_run=o.dry_run,
                 train=[*python, "fairseq_csan.recipes.train", "--data", str(o.data), "--arch", arch, "--save-dir",
                        str(o.out / name / "checkpoints"), *train_args, "--", *fairseq_args, *flags],
                 evaluate=[*python, "fairseq_csan.recipes.evaluate", "--data", str(o.data), "--checkpoints",
                           str(o.out / name / "checkpoints"), "--out", str(o.out / name / "eval"), "--subset", "valid",
                           "--last", str(o.last), "--name", name, *["--cpu"] * o.tiny])
            for name, kind, value, arch, flags in runs]


def check_training(data: Path, out: Path, train_args: List[str], fairseq_args: List[str]) -> None:
    """train.py's own planner, as its --dry-run: a training option it refuses is refused here,
    before any run folder is made."""
    from . import train

    if any(w in ("-h", "--help") for w in train_args):
        raise Refusal("-h/--help is not a training option: scripts/sweep.sh --help and scripts/train.sh --help list "
                      "the options")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            train.build(train.parse(["--data", str(data), "--arch", "transformer_csan1d", "--save-dir",
                                     str(out / "check"), "--dry-run", *train_args, "--", *fairseq_args]))
        except Refusal as e:
            raise Refusal(f"scripts/train.sh refuses these options: {e}") from None


def run_one(run: dict, locks) -> None:
    """One point: its record, its training, its evaluation (each a child holding the sweep's locks;
    a signal is passed on to it), its score said."""
    folder = run["folder"]
    say(f"{run['name']}: {run['arch']} {' '.join(run['flags'])}")
    SWEEP.write(folder, {"kind": run["kind"], "value": run["value"], "arch": run["arch"], "flags": " ".join(run["flags"])})
    run_child(run["train"], folder / "train.out", hold=locks, name="training " + run["name"], record=True)
    run_child(run["evaluate"], folder / "eval.out", hold=locks, name="evaluating " + run["name"], record=True)
    results = folder / "eval" / "results.md"
    if not results.is_file():
        raise Refusal(f"evaluating {run['name']} wrote no {results} (log: {folder / 'eval.out'})")
    for line in results.read_text(encoding="utf-8").splitlines():
        if "tokenised BLEU" in line:
            say(line)


def main(argv=None) -> None:
    runs = plan(argv)
    if runs[0]["dry_run"]:
        for run in runs:
            print(f"{run['name']}: {shell_words(run['train'])} && {shell_words(run['evaluate'])}")
        return
    # one writer per run folder, every lock taken before any run starts; and before any run starts,
    # a run folder holding a file of someone else's is named, not written into
    locks = [WriterLock(run["folder"], folder=False, what="sweep.sh").acquire() for run in runs]
    for run in runs:
        if run["folder"].is_dir():
            top = [p for p in run["folder"].iterdir() if p.name not in ("checkpoints", "eval")]
            check_owned(top, "sweep", None, "--out", redo=True)
    for run in runs:
        run_one(run, locks)
    say(f"done; plot with: python -m fairseq_csan.recipes.analysis.window_sweep --sweep {runs[0]['folder'].parent} "
        "--out DIR")


if __name__ == "__main__":
    as_command(main)
