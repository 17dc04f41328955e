"""Every check that needs a GPU, in one offline command that may be stopped and started again.

usage: python -m fairseq_csan.recipes.gpu_check [--out DIR] [--only tests,benchmark,multi30k]
           [--precisions fp32,fp16,bf16] [--lengths-from PREFIX] [--raw-dir DIR]
           [--multi30k-model tiny|small] [--multi30k-updates N] [--multi30k-seeds N] [--multi30k-jobs N]
           [--multi30k-systems LIST]
           [--budget-minutes N]
           [--rehearse] [--dry-run]
(scripts/gpu_check.sh is this command.)

The steps, each one command with its log in OUT/NAME.log (docs/distributed.md):
  tests                        tests/test_gpu.py: fp16/bf16 against fp32 for every architecture,
                               incremental decoding, a fairseq-train --fp16 smoke run per family,
                               two-GPU data parallelism where there are two GPUs
  benchmark-MODE-PRECISION     the benchmark of docs/speed.md (train, decode, the dense/banded
                               crossover) in each precision: OUT/benchmark_MODE_PRECISION.md
  multi30k-seedK               the Multi30k reproduction (multi30k.py) in pieces: the runs of seeds
                               1..K (the first piece also the window sweep), the table of all of
                               them so far in OUT/multi30k/results.md

Nothing need be prepared: the benchmark's sentence lengths are shipped with the package, and
Multi30k is read where the README unpacks it (--raw-dir). On a machine without a GPU that is the
first thing said; with one, a missing input stops it before any GPU work.

Stopped at any moment (a job's time limit, Ctrl-C, a kill) and started again with the same
arguments, it goes on where it stopped: a finished step is kept and says so (OUT/.steps/NAME.json
holds its command, the machine and software it ran on, its outputs and its time: another
machine, torch or device, or a missing table, runs it again), and a Multi30k run resumes from
its last checkpoint. A SIGTERM, SIGINT or SIGHUP reaches every process of the running step. Each step's
expected duration is printed before it starts (from the last run of that step on this machine,
or an estimate). --budget-minutes N starts no step that would end after N minutes: it stops
between steps with exit status 3, so that each job of a queue with a time limit makes progress.

--rehearse runs every step for real at toy size on the CPU (tiny models and batches, a few
updates, one thread each): the same commands, logs, tables and summary as on a GPU, where the
checks that need CUDA are skipped and named by pytest. It proves the plumbing before the first
GPU hour is spent.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List

from .command_line import Parser, items, positive
from .runner import (Damaged, Failed, Kind, Refusal, WriterLock, check_owned, forget_written, listing, run_child, say,
                     write_file)

ROOT = Path(__file__).resolve().parents[2]  # a clone's root (tests/test_gpu.py); an installed package has none
STEPS = ("tests", "benchmark", "multi30k")
PRECISIONS = ("fp32", "fp16", "bf16")
UNFINISHED = 3  # the exit status of a run stopped by its budget
# toy size, for --rehearse: models, batches and runs small enough for a 2-core CPU
TOY_MODEL = ("--encoder-embed-dim 32 --decoder-embed-dim 32 --encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 "
             "--encoder-attention-heads 4 --decoder-attention-heads 4 --encoder-layers 3 --decoder-layers 2")
TOY_BENCHMARK = ["--model-flags", TOY_MODEL, "--rounds", "1", "--warmup", "0", "--max-tokens", "512",
                 "--batch-size", "8", "--vocab", "200", "--threads", "1"]
TOY_CROSSOVER = ["--lengths", "32", "64", "--tokens", "512", "--rounds", "1", "--warmup", "0", "--threads", "1"]
TOY_MULTI30K = ["--windows", "3", "--heads", "1", "--bootstrap-samples", "100"]
# seconds a step is expected to take when it has not run here before (GPU: a benchmark step took 34 to
# 50 s and a crossover 16 to 24 s on an NVIDIA H200 on 2026-11-27, docs/speed.md; the tests there took
# 139 s in 8 processes, this one runs them in one; Multi30k is a guess. CPU: the rehearsal on the
# project's 2-core machine)
ESTIMATE = {False: {"tests": 600, "benchmark": 90, "crossover": 45, "multi30k": 900},
            True: {"tests": 30, "benchmark": 15, "crossover": 15, "multi30k": 120}}


@dataclass
class Step:
    name: str
    argv: List[str]  # after "python -m"
    kind: str

    @property
    def outputs(self) -> List[Path]:
        """The tables it writes: its --out file (the Multi30k reproduction: its results.md)."""
        if "--out" not in self.argv:
            return []
        out = Path(self.argv[self.argv.index("--out") + 1])
        return [out / "results.md"] if self.kind == "multi30k" else [out]

    @property
    def shown(self) -> str:
        return "python -m " + " ".join(shlex.quote(str(w)) for w in self.argv)


def listed(allowed):
    """A comma-separated list of ``allowed`` names, at least one, none twice."""
    parse = items(str, allowed=allowed)

    def parse_some(text):
        found = parse(text)
        if not found:
            raise argparse.ArgumentTypeError(f"needs at least one of {', '.join(allowed)}")
        return found
    return parse_some


def parse(argv=None):
    p = Parser(prog="scripts/gpu_check.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="logs, tables, the Multi30k runs and what each finished step was (default runs/gpu_check, "
                        "runs/gpu_rehearsal with --rehearse; relative to where it is called)")
    p.add_argument("--only", type=listed(STEPS), default=list(STEPS), metavar="LIST",
                   help="the steps to run, comma-separated (default: tests,benchmark,multi30k)")
    p.add_argument("--precisions", type=listed(PRECISIONS), metavar="LIST",
                   help="the benchmark's precisions, comma-separated (default fp32,fp16,bf16)")
    p.add_argument("--lengths-from", type=Path, metavar="PREFIX",
                   help="the benchmark's sentence lengths from an .en/.de pair (default: newstest2014's, shipped)")
    p.add_argument("--raw-dir", type=Path, metavar="DIR",
                   help="Multi30k's raw files (default $MULTI30K, else data/multi30k_raw, where the README unpacks them)")
    p.add_argument("--multi30k-model", choices=("tiny", "small"),
                   help="the Multi30k model (multi30k.py --model; default small, the size expected to reach 38 BLEU "
                        "or more; tiny with --rehearse)")
    p.add_argument("--multi30k-updates", type=positive, metavar="N",
                   help="training updates per Multi30k run (default: the model's, 8000 for small; 12 with --rehearse)")
    p.add_argument("--multi30k-seeds", type=positive, metavar="N",
                   help="seeds 1..N of each system, one piece (step) each (default 3)")
    p.add_argument("--multi30k-jobs", type=positive, metavar="N",
                   help="Multi30k runs sharing the device at once (default 4; 2 with --rehearse)")
    p.add_argument("--multi30k-systems", metavar="LIST",
                   help="the Multi30k systems, comma-separated (multi30k.py --systems; default: all of them)")
    p.add_argument("--budget-minutes", type=positive, metavar="N",
                   help="start no step that would end after N minutes: stop between steps (exit status 3); run the "
                        "same command again to go on")
    p.add_argument("--rehearse", action="store_true",
                   help="every step for real at toy size on the CPU (the checks that need CUDA are skipped and named)")
    p.add_argument("--dry-run", action="store_true",
                   help="list the steps, and the input a run would stop at, and exit (works without a GPU)")
    args, _ = p.read(argv)
    steps_of = {"--precisions": "benchmark", "--lengths-from": "benchmark", "--raw-dir": "multi30k",
                "--multi30k-model": "multi30k", "--multi30k-updates": "multi30k", "--multi30k-seeds": "multi30k",
                "--multi30k-jobs": "multi30k", "--multi30k-systems": "multi30k"}
    for flag, step in steps_of.items():
        if getattr(args, flag[2:].replace("-", "_")) is not None and step not in args.only:
            raise Refusal(f"{flag} sets the {step} step, which --only {','.join(args.only)} leaves out")
    args.precisions = args.precisions or list(PRECISIONS)
    args.out = (args.out or Path("runs/gpu_rehearsal" if args.rehearse else "runs/gpu_check")).resolve()
    if args.lengths_from is not None:
        args.lengths_from = args.lengths_from.absolute()
    args.raw_dir = Path(args.raw_dir or os.environ.get("MULTI30K") or "data/multi30k_raw").absolute()
    args.multi30k_model = args.multi30k_model or ("tiny" if args.rehearse else "small")
    args.multi30k_updates = args.multi30k_updates or (12 if args.rehearse else None)  # None: the model's
    args.multi30k_jobs = args.multi30k_jobs or (2 if args.rehearse else 4)
    args.multi30k_seeds = args.multi30k_seeds or 3
    if args.multi30k_systems is not None:
        from .multi30k import SYSTEMS

        try:
            args.multi30k_systems = listed(tuple(SYSTEMS))(args.multi30k_systems)
        except argparse.ArgumentTypeError as e:
            raise Refusal(f"--multi30k-systems: {e}") from None
    return args


def plan(args) -> List[Step]:
    device = "cpu" if args.rehearse else "cuda"
    steps = []
    if "tests" in args.only:
        steps.append(Step("tests", ["pytest", "-rs", "-v", str(ROOT / "tests" / "test_gpu.py")], "tests"))
    if "benchmark" in args.only:  # --force: a step redone replaces the table its benchmark wrote before
        lengths = ["--lengths-from", str(args.lengths_from)] if args.lengths_from else []
        for precision in args.precisions:
            for mode in ("train", "decode"):
                steps.append(Step(f"benchmark-{mode}-{precision}", [
                    "fairseq_csan.recipes.benchmark", "--mode", mode, "--device", device, "--precision", precision,
                    "--all", *lengths, *(TOY_BENCHMARK if args.rehearse else []),
                    "--out", str(args.out / f"benchmark_{mode}_{precision}.md"), "--force"], "benchmark"))
            steps.append(Step(f"benchmark-crossover-{precision}", [
                "fairseq_csan.recipes.benchmark", "--mode", "crossover", "--device", device, "--precision", precision,
                *(TOY_CROSSOVER if args.rehearse else []),
                "--out", str(args.out / f"benchmark_crossover_{precision}.md"), "--force"], "crossover"))
    if "multi30k" in args.only:
        for k in range(1, args.multi30k_seeds + 1):  # pieces: seeds 1..k; finished runs are kept, the table has all
            steps.append(Step(f"multi30k-seed{k}", [
                "fairseq_csan.recipes.multi30k", "--device", device, "--jobs", str(args.multi30k_jobs),
                "--model", args.multi30k_model,
                *(["--max-update", str(args.multi30k_updates)] if args.multi30k_updates else []),
                "--seeds", ",".join(map(str, range(1, k + 1))),
                *(["--systems", ",".join(args.multi30k_systems)] if args.multi30k_systems else []),
                *(TOY_MULTI30K if args.rehearse else []), "--raw-dir", str(args.raw_dir),
                "--out", str(args.out / "multi30k")], "multi30k"))
    return steps


def missing_input(args) -> str:
    """The first input a run lacks, or ''."""
    if "tests" in args.only and not (ROOT / "tests" / "test_gpu.py").is_file():
        return (f"--only tests runs the clone's tests/test_gpu.py, and this package is installed without one "
                f"({ROOT / 'tests'}): run gpu_check from a clone, or leave the tests out (--only benchmark,multi30k)")
    if "benchmark" in args.only and args.lengths_from:
        for lang in ("en", "de"):
            if not Path(f"{args.lengths_from}.{lang}").is_file():
                return (f"--lengths-from: no length source at {args.lengths_from}.{lang} (give an .en/.de pair, "
                        "e.g. newstest2014, or leave it out for the shipped one)")
    if "multi30k" in args.only:
        for split in ("train", "val", "test_2016_flickr"):
            for lang in ("en", "de"):
                if not (args.raw_dir / f"{split}.{lang}").is_file() or not (args.raw_dir / f"{split}.{lang}").stat().st_size:
                    return (f"--raw-dir: no Multi30k file {args.raw_dir}/{split}.{lang} (unpack Multi30k as the README "
                            "shows, or give --raw-dir DIR)")
    return ""


# one step's record, OUT/.steps/NAME.json: its command, machine, status, time and outputs
STEP_RECORD = Kind("gpu-check step", "STEP.json", {"command": "text", "machine": "text", "status": "text",
                                                   "seconds": "float", "finished": "text", "outputs": "list"})


def run_step(step: Step, log: Path, env: dict) -> int:
    """Run a step from the checkout (pytest runs there: its rootdir and conftest.py; the other
    steps take absolute paths and run where gpu_check was started, as an installed package has no
    clone to go to); a SIGTERM, SIGINT or SIGHUP to this command (a job's time limit, Ctrl-C)
    goes to the step's whole process group (the trainings it starts included), which gets 20
    seconds before it is killed; then this command ends. Its exit status."""
    try:
        run_child([sys.executable, "-m", *step.argv], log, env=env, cwd=ROOT if step.kind == "tests" else None,
                  group=True, kill_after=20, name=step.name, record=True)
    except Failed as error:
        return error.code
    return 0


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def device_text(args) -> str:
    import torch

    if args.rehearse:
        return f"rehearsal on the CPU, torch {torch.__version__}"
    name = torch.cuda.get_device_name(0)
    return f"{torch.cuda.device_count()} GPU(s): {name}, torch {torch.__version__}, CUDA {torch.version.cuda}"


# the README's "Results at a glance" rows, by the architecture whose speed fills their last column
GLANCE = {"Transformer-base": "transformer", "+ 1D-CSAN": "transformer_csan1d", "+ 2D-CSAN": "transformer_csan2d",
          "+ context-aware SANs": "transformer_ctxaware"}


def table_rows(text: str) -> List[List[str]]:
    """The cells of a Markdown table's body rows."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|")]
    return rows[2:]


def paste_ready(args, machine: str, day: str, passed) -> str:
    """The measured tables as the docs' own (README's Results at a glance, docs/speed.md's On a
    GPU, examples/multi30k/README.md's Results), each headed by the device, its software and the
    date. Only the tables in ``passed`` (the outputs of this plan's steps that passed on this
    machine) are taken: a table left by a failed step or by another machine is not."""
    where = f"{machine}, {day}"
    if args.rehearse:
        where += "; a REHEARSAL at toy size on the CPU, not figures to publish"
    blocks = []
    precision = "fp32" if "fp32" in args.precisions else args.precisions[0]
    train = args.out / f"benchmark_train_{precision}.md"
    readme = ROOT / "README.md"
    if train in passed and readme.is_file():
        ratio = {row[0]: row[3] for row in table_rows(train.read_text(encoding="utf-8")) if len(row) >= 4}
        text = readme.read_text(encoding="utf-8")
        start = text.find("| model | paper BLEU | paper speed |")
        glance = text[start:text.find("\n\n", start)].splitlines() if start >= 0 else []
        if len(glance) > 2 and all(arch in ratio for arch in GLANCE.values()):
            # one more column beside the CPU's
            head = glance[0].rstrip() + f" our speed ({where}, {precision}, [docs/speed.md](docs/speed.md)) |"
            body = []
            for row in glance[2:]:
                arch = GLANCE.get(row.strip().strip("|").split("|")[0].strip())
                body.append(row.rstrip() + (f" {float(ratio[arch]):.2f}x |" if arch else " |"))
            blocks.append("README.md, Results at a glance (training speed, ratio to the Transformer):\n\n"
                          + "\n".join([head, glance[1].rstrip() + "---:|", *body]))
    speed = [args.out / f"benchmark_{mode}_{p}.md" for p in args.precisions for mode in ("train", "decode", "crossover")]
    speed = [path for path in speed if path in passed]
    if speed:
        blocks.append(f"docs/speed.md, On a GPU (measured with scripts/gpu_check.sh on {where}):\n\n"
                      + "\n\n".join(path.read_text(encoding="utf-8").rstrip() for path in speed))
    results = args.out / "multi30k" / "results.md"
    if results in passed:
        some = f", systems {','.join(args.multi30k_systems)} only" if args.multi30k_systems else ""
        blocks.append(f"examples/multi30k/README.md, Results (--model {args.multi30k_model}{some}, scripts/gpu_check.sh "
                      f"on {where}):\n\n" + results.read_text(encoding="utf-8").rstrip())
    return "\n\n".join(blocks)


def dry_run(args, steps: List[Step]) -> None:
    say(f"{'a rehearsal at toy size on the CPU: ' if args.rehearse else ''}the logs and tables would go to {args.out}")
    for step in steps:
        print(f"{step.name}: {step.shown}")
    if args.budget_minutes:
        say(f"--budget-minutes {args.budget_minutes}: a run starts no step that would end after {args.budget_minutes} "
            f"minutes, and stops between steps (exit status {UNFINISHED})")
    if missing_input(args):
        say(f"a run would stop before any GPU work: {missing_input(args)}")


def claim(args) -> None:
    """Before any work: a GPU (or a rehearsal), the inputs, and an --out of gpu_check's own, locked."""
    import torch

    if not args.rehearse and not torch.cuda.is_available():
        raise Refusal("no CUDA device here: these checks need a GPU (--dry-run lists them, --rehearse runs them at toy "
                      "size on the CPU; the CPU-side checks are the normal test suite)")
    if missing_input(args):
        raise Refusal(missing_input(args))
    if not args.rehearse and "benchmark" in args.only and "bf16" in args.precisions and not torch.cuda.is_bf16_supported():
        raise Refusal("--precisions: this GPU has no bfloat16 support; give --precisions fp32,fp16")
    if args.out.exists() and not args.out.is_dir():
        raise Refusal(f"--out {args.out} is a file: give a folder")
    theirs = sorted(p for p in args.out.iterdir() if p.name != ".lock") if args.out.is_dir() else []
    if theirs and not (args.out / ".steps").is_dir():  # a folder gpu_check never wrote: its summary.md, ... are someone's
        raise Refusal(f"--out {args.out} holds files gpu_check did not write ({listing(theirs)}); give a new or empty "
                      "folder (nothing was changed)")
    WriterLock(args.out, folder=True, what="gpu_check").acquire()  # held to the end


def kept(step: Step, record: dict, machine: str) -> bool:
    """A step finished before: the same command, on the same machine and software, passed, its outputs there."""
    return (record.get("command"), record.get("machine"), record.get("status")) == (step.shown, machine, "passed") \
        and all(Path(path).exists() for path in record.get("outputs", []))


def run_steps(args, steps: List[Step], machine: str) -> list:
    """Each step, or kept; none started that would end after the budget (exit status 3)."""
    stamps, env = args.out / ".steps", dict(os.environ)
    if args.rehearse:  # one thread a process, and no GPU even where there is one: the CPU rehearses
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    started, results, ran = time.time(), [], 0
    for number, step in enumerate(steps, 1):
        try:  # none, or a damaged one (cut short, changed by hand): the step runs again
            record = STEP_RECORD.read(stamps, f"{step.name}.json") or {}
        except Damaged:
            record = {}
        log = args.out / f"{step.name}.log"
        if kept(step, record, machine):
            say(f"{number}/{len(steps)} {step.name}: finished before ({record['finished']}, {minutes(record['seconds'])}); kept")
            results.append((step.name, "passed", record["seconds"], log))
            continue
        last = record.get("seconds") if record.get("status") == "passed" else None  # its last success here
        expected, source = last or ESTIMATE[args.rehearse][step.kind], "as the last time it ran" if last else "an estimate"
        spent = time.time() - started
        # the first step of a start always runs (a budget below one step would otherwise never progress)
        if args.budget_minutes and ran and spent + expected > args.budget_minutes * 60:
            say(f"--budget-minutes {args.budget_minutes}: stopping before {step.name}, expected to take about "
                f"{minutes(expected)} ({source}) with {minutes(max(0, args.budget_minutes * 60 - spent))} left; "
                f"{len(steps) - number + 1} step(s) to go: run the same command again to go on")
            raise SystemExit(UNFINISHED)
        say(f"{number}/{len(steps)} {step.name}: expected about {minutes(expected)} ({source}): {step.shown}")
        begun, status, ran = time.time(), run_step(step, log, env), ran + 1
        seconds, outcome = time.time() - begun, "passed" if status == 0 else f"FAILED (exit {status})"
        STEP_RECORD.write(stamps, {"command": step.shown, "machine": machine, "status": outcome.split(" ")[0].lower(),
                                   "seconds": round(seconds, 1), "finished": time.strftime("%Y-%m-%d %H:%M"),
                                   "outputs": [str(path) for path in step.outputs]}, f"{step.name}.json")
        say(f"{number}/{len(steps)} {step.name}: {outcome} in {minutes(seconds)}")
        results.append((step.name, outcome, seconds, log))
    return results


def report(args, steps: List[Step], results: list, machine: str) -> None:
    """The summary (OUT/summary.md) and the tables as the docs lay them out (OUT/paste.md); exit 1
    where a step failed."""
    day = time.strftime('%Y-%m-%d', time.gmtime())
    summary = [f"GPU check summary ({device_text(args)}, {day})"]
    summary += [f"  {name}: {outcome} in {minutes(seconds)}, log {log}" for name, outcome, seconds, log in results]
    tests_log = args.out / "tests.log"
    if "tests" in args.only and tests_log.is_file():
        last = [row for row in tests_log.read_text(encoding="utf-8", errors="replace").splitlines() if row.strip()]
        summary.append(f"  tests: {last[-1] if last else '(empty log)'}")
    for table in dict.fromkeys(path for step in steps for path in step.outputs):  # this plan's tables only
        if table.is_file():
            summary += ["", f"{table}:", table.read_text(encoding="utf-8").rstrip()]
    print("\n" + "\n".join(summary))
    write_file(args.out / "summary.md", "\n".join(summary) + "\n")
    outcome = {name: result for name, result, _, _ in results}
    passed = {path for step in steps if outcome.get(step.name) == "passed" for path in step.outputs}
    ready = paste_ready(args, machine, day, passed)
    if ready:  # the same tables, as the docs lay them out
        write_file(args.out / "paste.md", ready + "\n")
        say(f"the tables as the docs lay them out, ready to paste: {args.out / 'paste.md'}")
    elif (args.out / "paste.md").exists():  # an earlier run's, no longer what this one measured (never the user's)
        check_owned([args.out / "paste.md"], None, None, "--out")
        forget_written([args.out / "paste.md"])
    if any(outcome != "passed" for _, outcome, _, _ in results):
        raise Failed(f"a step failed: {', '.join(name for name, result, _, _ in results if result != 'passed')} (their "
                     f"logs are in {args.out})")


def main(argv=None) -> None:
    args = parse(argv)
    steps = plan(args)
    if args.dry_run:
        dry_run(args, steps)
        return
    claim(args)
    machine = device_text(args)
    say(f"{machine}; {len(steps)} steps, logs in {args.out}")
    report(args, steps, run_steps(args, steps, machine), machine)


if __name__ == "__main__":
    from .runner import as_command

    as_command(main)
