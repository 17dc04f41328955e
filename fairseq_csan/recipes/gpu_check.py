"""Every check that needs a GPU, in one offline command that may be stopped and started again.

scripts/gpu_check.sh is this command. docs/distributed.md, "Checking a GPU machine in one command", says what
each step checks and writes, how a stopped run goes on where it stopped (OUT/.steps/NAME.json), and what
--budget-minutes and --rehearse do.
"""

import itertools
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

from ..model_folder import sha256
from .command_line import Parser, items, positive
from .corpora import preset_raw
from .multi30k import SYSTEMS
from .runner import (Damaged, Failed, Kind, Refusal, WriterLock, as_command, check_owned, forget_written, run_child,
                     say, shell_words, write_file)

ROOT = Path(__file__).resolve().parents[2]  # a clone's root (tests/test_gpu.py); an installed package has none
STEPS = ("tests", "benchmark", "multi30k")
PRECISIONS = ("fp32", "fp16", "bf16")
UNFINISHED = 3  # the exit status of a run stopped by its budget
# toy size, for --rehearse, by the step's kind: models, batches and runs small enough for a 2-core CPU
TOY_MODEL = ("--encoder-embed-dim 32 --decoder-embed-dim 32 --encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 "
             "--encoder-attention-heads 4 --decoder-attention-heads 4 --encoder-layers 3 --decoder-layers 2")
TOY = {"benchmark": ["--model-flags", TOY_MODEL, "--rounds", "1", "--warmup", "0", "--max-tokens", "512",
                     "--batch-size", "8", "--vocab", "200", "--threads", "1"],
       "crossover": ["--lengths", "32", "64", "--tokens", "512", "--rounds", "1", "--warmup", "0", "--threads", "1"],
       "multi30k": ["--windows", "3", "--heads", "1", "--bootstrap-samples", "100"]}
# seconds a step is expected to take when it has not run here before (GPU: a benchmark step took 34 to 50 s and a
# crossover 16 to 24 s on an NVIDIA H200 on 2026-11-27, docs/speed.md; the tests there took 139 s in 8 processes,
# this one runs them in one; Multi30k is a guess. CPU: the rehearsal on the project's 2-core machine)
ESTIMATE = {False: {"tests": 600, "benchmark": 90, "crossover": 45, "multi30k": 900},
            True: {"tests": 30, "benchmark": 15, "crossover": 15, "multi30k": 120}}


@dataclass
class Step:
    name: str
    argv: List[str]  # after "python -m"
    kind: str
    outputs: List[Path] = field(default_factory=list)  # the tables it writes

    @property
    def shown(self) -> str:
        return "python -m " + shell_words(self.argv)


def parse(argv=None):
    p = Parser(prog="scripts/gpu_check.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="logs, tables, the Multi30k runs and what each finished step was (default runs/gpu_check, "
                        "runs/gpu_rehearsal with --rehearse; relative to where it is called)")
    p.add_argument("--only", type=items(str, allowed=STEPS, empty=False), default=list(STEPS), metavar="LIST",
                   help="the steps to run, comma-separated (default: tests,benchmark,multi30k)")
    p.add_argument("--precisions", type=items(str, allowed=PRECISIONS, empty=False), metavar="LIST",
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
    p.add_argument("--multi30k-systems", type=items(str, allowed=tuple(SYSTEMS), empty=False), metavar="LIST",
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
                **{f"--multi30k-{o}": "multi30k" for o in ("model", "updates", "seeds", "jobs", "systems")}}
    for flag, step in steps_of.items():  # a step's options, refused where --only leaves it out
        if getattr(args, flag[2:].replace("-", "_")) is not None and step not in args.only:
            raise Refusal(f"{flag} sets the {step} step, which --only {','.join(args.only)} leaves out")
    args.precisions = args.precisions or list(PRECISIONS)
    args.out = (args.out or Path("runs/gpu_rehearsal" if args.rehearse else "runs/gpu_check")).resolve()
    args.lengths_from = args.lengths_from and args.lengths_from.absolute()
    args.raw_dir = preset_raw("multi30k_en_de", args.raw_dir)[0].absolute()
    args.multi30k_model = args.multi30k_model or ("tiny" if args.rehearse else "small")
    args.multi30k_updates = args.multi30k_updates or (12 if args.rehearse else None)  # None: the model's
    args.multi30k_jobs = args.multi30k_jobs or (2 if args.rehearse else 4)
    args.multi30k_seeds = args.multi30k_seeds or 3
    return args


def plan(args) -> List[Step]:
    device, toy = ("cpu", TOY) if args.rehearse else ("cuda", dict.fromkeys(TOY, []))
    steps = []
    if "tests" in args.only:
        steps.append(Step("tests", ["pytest", "-rs", "-v", str(ROOT / "tests" / "test_gpu.py")], "tests"))
    if "benchmark" in args.only:  # --force: a step redone replaces the table its benchmark wrote before
        lengths = ["--lengths-from", str(args.lengths_from)] if args.lengths_from else []
        for precision, mode in itertools.product(args.precisions, ("train", "decode", "crossover")):
            kind = "crossover" if mode == "crossover" else "benchmark"
            out = args.out / f"benchmark_{mode}_{precision}.md"
            steps.append(Step(f"benchmark-{mode}-{precision}", [
                "fairseq_csan.recipes.benchmark", "--mode", mode, "--device", device, "--precision", precision,
                *(["--all", *lengths] if kind == "benchmark" else []), *toy[kind], "--out", str(out), "--force"],
                kind, [out]))
    if "multi30k" in args.only:
        for k in range(1, args.multi30k_seeds + 1):  # pieces: seeds 1..k; finished runs are kept, the table has all
            steps.append(Step(f"multi30k-seed{k}", [
                "fairseq_csan.recipes.multi30k", "--device", device, "--jobs", str(args.multi30k_jobs),
                "--model", args.multi30k_model,
                *(["--max-update", str(args.multi30k_updates)] if args.multi30k_updates else []),
                "--seeds", ",".join(map(str, range(1, k + 1))),
                *(["--systems", ",".join(args.multi30k_systems)] if args.multi30k_systems else []),
                *toy["multi30k"], "--raw-dir", str(args.raw_dir), "--out", str(args.out / "multi30k")],
                "multi30k", [args.out / "multi30k" / "results.md"]))
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
        for raw in (args.raw_dir / name for name in preset_raw("multi30k_en_de", args.raw_dir)[1]):
            if not raw.is_file() or not raw.stat().st_size:
                return f"--raw-dir: no Multi30k file {raw} (unpack Multi30k as the README shows, or give --raw-dir DIR)"
    return ""


# one step's record, OUT/.steps/NAME.json: its command, machine, status, time and outputs
STEP_RECORD = Kind("gpu-check step", "STEP.json", {"command": "text", "machine": "text", "status": "text",
                                                   "seconds": "float", "finished": "text", "outputs": "json"})


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def device_text(args) -> str:
    import torch

    if args.rehearse:
        return f"rehearsal on the CPU, torch {torch.__version__}"
    return (f"{torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}")


# the README's "Results at a glance" rows, by the architecture whose speed fills their last column
GLANCE = {"Transformer-base": "transformer", "+ 1D-CSAN": "transformer_csan1d", "+ 2D-CSAN": "transformer_csan2d",
          "+ context-aware SANs": "transformer_ctxaware"}


def paste_ready(args, machine: str, day: str, passed) -> str:
    """The measured tables laid out as the docs that await them, each headed by the device, its
    software and the date; only those in ``passed`` (this plan's steps' that passed on this machine)."""
    where = f"{machine}, {day}"
    if args.rehearse:
        where += "; a REHEARSAL at toy size on the CPU, not figures to publish"
    blocks = []
    precision = "fp32" if "fp32" in args.precisions else args.precisions[0]
    train = args.out / f"benchmark_train_{precision}.md"
    readme = ROOT / "README.md"
    if train in passed and readme.is_file():
        rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
                for line in train.read_text(encoding="utf-8").splitlines() if line.startswith("|")]
        ratio = {row[0]: row[3] for row in rows[2:] if len(row) >= 4}  # the table's body: architecture -> ratio
        text = readme.read_text(encoding="utf-8")
        start = text.find("| model | paper BLEU | paper speed |")
        glance = text[start:text.find("\n\n", start)].splitlines() if start >= 0 else []
        if len(glance) > 2 and all(arch in ratio for arch in GLANCE.values()):
            # one more column beside the CPU's
            head = glance[0].rstrip() + f" our speed ({where}, {precision}, [docs/speed.md](docs/speed.md)) |"
            archs = [GLANCE.get(row.strip().strip("|").split("|")[0].strip()) for row in glance[2:]]  # by model name
            body = [row.rstrip() + (f" {float(ratio[a]):.2f}x |" if a else " |") for row, a in zip(glance[2:], archs)]
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
    lock = WriterLock(args.out, folder=True, what="gpu_check").acquire()  # held to the end
    lock.refuse_foreign((args.out / ".steps").is_dir(), "gpu_check")  # no .steps/: its summary.md, ... are someone's


def outputs_of(step: Step, out: Path) -> dict:
    """The tables a step wrote, by their names in ``out``, each with its SHA-256 (None: missing)."""
    return {str(path.relative_to(out)): sha256(path) if path.is_file() else None for path in step.outputs}


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
        # kept: it finished before with the same command, on the same machine and software, passed, and its outputs
        # are there as it wrote them (their SHA-256: a table edited since is measured again, never shown as measured)
        if (record.get("command"), record.get("machine"), record.get("status"), record.get("outputs")) == \
                (step.shown, machine, "passed", outputs_of(step, args.out)):
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
        begun, status, ran = time.time(), 0, ran + 1
        # pytest runs in the checkout (its rootdir and conftest.py), the other steps where gpu_check was started (an
        # installed package has no clone); a SIGTERM, SIGINT or SIGHUP to this command (a job's time limit, Ctrl-C)
        # goes to the step's whole process group (its trainings included), which gets 20 s before it is killed
        try:
            run_child([sys.executable, "-m", *step.argv], log, env=env, cwd=ROOT if step.kind == "tests" else None,
                      group=True, kill_after=20, name=step.name, record=True)
        except Failed as error:
            status = error.code
        seconds, outcome = time.time() - begun, "passed" if status == 0 else f"FAILED (exit {status})"
        STEP_RECORD.write(stamps, {"command": step.shown, "machine": machine, "status": outcome.split(" ")[0].lower(),
                                   "seconds": round(seconds, 1), "finished": time.strftime("%Y-%m-%d %H:%M"),
                                   "outputs": outputs_of(step, args.out)}, f"{step.name}.json")
        say(f"{number}/{len(steps)} {step.name}: {outcome} in {minutes(seconds)}")
        results.append((step.name, outcome, seconds, log))
    return results


def report(args, steps: List[Step], results: list, machine: str) -> None:
    """The summary (OUT/summary.md) and the tables as the docs lay them out (OUT/paste.md); exit 1
    where a step failed."""
    day = time.strftime('%Y-%m-%d', time.gmtime())
    summary = [f"GPU check summary ({machine}, {day})"]
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
    as_command(main)
