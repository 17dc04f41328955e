"""Start from a trained Transformer, measured on Multi30k En-De (examples/multi30k/convert.sh).

The Transformer's model folder is trained on for N updates, and the same folder converted to
1D-CSAN, 2D-CSAN and context-aware (the papers' settings: a window of 11, 3 heads, the lowest 3
encoder layers; deep-global + deep context) and fine-tuned the same N updates, each with every
seed. Every model is scored on test_2016_flickr, before fine-tuning too, each fine-tuned one with
the paired bootstrap against the Transformer of its seed, and the scores of this command's models
are collected into one table per metric. The commands are docs/recipes.md's (Start from a trained
Transformer), printed ("+ ...") before each runs; ``--dry-run`` prints them and runs none. Each
command keeps what it finds done, so a rerun goes on where one stopped: prepare skips its current
steps, convert keeps a folder it would write the same (and refuses one converted from another
--model), train resumes, evaluate skips its current steps.
"""

import argparse
import sys
from pathlib import Path
from typing import List

from .command_line import Parser, at_least, items
from .corpora import TASKS, preset_raw
from .runner import Refusal, as_command, run_child, say, shell_words

PYTHON = [sys.executable, "-m"]  # the kit's commands, as this package's modules (scripts/*.sh run the same)
CONVERSIONS = ("transformer_csan1d", "transformer_csan2d", "transformer_ctxaware")


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="bash examples/multi30k/convert.sh", description=__doc__.split("\n\n")[1])
    p.add_argument("--model", type=Path, required=True, metavar="FOLDER",
                   help="the Transformer's model folder: the quick start's (WORK/model_transformer of "
                        "ARCH=transformer bash examples/quickstart.sh, on Multi30k) or any en-de one")
    p.add_argument("--raw-dir", type=Path, default=Path(TASKS["multi30k_en_de"].default_raw), metavar="DIR",
                   help="Multi30k's raw files, train/val/test_2016_flickr.{en,de} (default: %(default)s)")
    p.add_argument("--work", type=Path, default=Path("runs/convert"), metavar="DIR",
                   help="where everything goes (default: %(default)s); a rerun skips what is done")
    p.add_argument("--updates", type=at_least(16, int), default=200, metavar="N",
                   help="fine-tuning updates of each run (default: 200; at least 16: each run saves 8 checkpoints and "
                        "evaluate averages the last 5)")
    p.add_argument("--seeds", type=items(int), default=[1, 2, 3], metavar='"1 2 3"', help='the seeds (default: "1 2 3")')
    p.add_argument("--archs", type=items(), default=list(CONVERSIONS), metavar='"ARCH ..."',
                   help=f"the conversions (default: \"{' '.join(CONVERSIONS)}\"); the Transformer itself is always "
                        "trained on too, as every bootstrap's baseline")
    p.add_argument("--cpu", action="store_true",
                   help="train and decode on the CPU (train.sh --cpu-tiny, which keeps the folder's sizes); without "
                        "it, train.sh's GPU runs (all visible GPUs, the papers' batch)")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    return p


def plan(o) -> List[List[str]]:
    """The commands, in order."""
    task, raw = o.work / "task", o.raw_dir
    archs = ["transformer", *o.archs]
    folder = {"transformer": o.model, **{arch: o.work / "models" / arch for arch in o.archs}}
    # on the CPU, train.sh --cpu-tiny saves 8 checkpoints a run; on GPUs every N/8 updates too (its
    # own default, every 1000, would leave a short fine-tuning nothing to average)
    train, evaluate = (["--cpu-tiny"], ["--cpu"]) if o.cpu else (["--", "--save-interval-updates", str(o.updates // 8)], [])
    commands = [["prepare", "files", "--src", "en", "--tgt", "de", "--train", raw / "train", "--valid", raw / "val",
                 "--test", raw / "test_2016_flickr", "--out", task, "--like", o.model]]
    commands += [["convert", "--model", o.model, "--arch", arch, "--out", folder[arch]] for arch in o.archs]
    evaluations = [o.work / "eval" / "before" / arch for arch in archs]  # each model as it is, before fine-tuning
    commands += [["evaluate", "--data", task, "--model", folder[arch], "--out", out, "--name", f"{arch}, before",
                  *evaluate] for arch, out in zip(archs, evaluations)]
    for seed in o.seeds:  # the Transformer of the seed is the baseline of its bootstrap
        for arch in archs:
            save, out = o.work / "checkpoints" / f"{arch}.seed{seed}", o.work / "eval" / f"{arch}.seed{seed}"
            baseline = [] if arch == "transformer" else ["--baseline", o.work / "eval" / f"transformer.seed{seed}"]
            commands += [["train", "--data", task, "--arch", arch, "--finetune-from", folder[arch], "--save-dir", save,
                          "--max-update", o.updates, "--seed", seed, *train],
                         ["evaluate", "--data", task, "--checkpoints", save, "--out", out, "--name", f"{arch}, seed {seed}",
                          *baseline, *evaluate]]
            evaluations.append(out)
    commands += [["collect_results", *evaluations, "--metric", metric, "--output", o.work / f"{metric}.md", "--force"]
                 for metric in ("sacrebleu", "chrf")]
    return [[*PYTHON, f"fairseq_csan.recipes.{name}", *map(str, words)] for name, *words in commands]


def main(argv=None) -> None:
    o, _ = parser().read(argv)
    empty = [flag for flag, given in (("--seeds", o.seeds), ("--archs", o.archs)) if not given]
    if empty:
        raise Refusal(f"{empty[0]} names nothing")
    if "transformer" in o.archs:
        raise Refusal("--archs: the Transformer is always trained on (every bootstrap's baseline); name the conversions "
                      "only")
    if not (o.model / "model.pt").is_file():
        raise Refusal(f"--model {o.model}: no model folder there (no model.pt)")
    missing = [p for p in (o.raw_dir / name for name in preset_raw("multi30k_en_de", o.raw_dir)[1]) if not p.is_file()]
    if missing:
        raise Refusal(f"--raw-dir: no {missing[0]} (Multi30k's raw files, as the README unpacks them)")
    for command in plan(o):
        print(f"+ {shell_words(command)}", file=sys.stderr, flush=True)
        if not o.dry_run:  # a failure: the commands above it are done, and a rerun goes on from it
            run_child(command, name=command[2])
    if not o.dry_run:
        say(f"tables: {o.work / 'sacrebleu.md'} {o.work / 'chrf.md'}")


if __name__ == "__main__":
    as_command(main)
