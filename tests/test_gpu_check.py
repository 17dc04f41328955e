"""fairseq_csan/recipes/gpu_check.py (scripts/gpu_check.sh), anywhere: its steps, its refusals,
that it needs nothing prepared and says "no GPU" first, and its rehearsal on the CPU, which
runs every step for real at toy size and goes on where it stopped when killed and started again."""

import json
import os
import re
import subprocess
import sys
import time

import pytest
import torch

from conftest import REPO, shared_corpus
from recipe_helpers import lines, refusal_of, walk_options, write

M30K = shared_corpus("multi30k_en_de")


def environment(**extra):
    return {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}", **extra}


def gpu_check(*options, cwd=REPO, timeout=120):
    return subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), *map(str, options)], capture_output=True,
                          text=True, env=environment(), cwd=cwd, timeout=timeout)


def planned(*options, cwd=REPO):
    """scripts/gpu_check.sh OPTIONS for what ends before any step runs (--dry-run, the refusals),
    in this process: its main, without a Python start and a fairseq import. The door itself runs
    from another folder, at a machine without a GPU, and in the rehearsal below."""
    from recipe_helpers import in_process

    from fairseq_csan.recipes import gpu_check as checker

    return in_process(checker.main, options, check=False, cwd=cwd)


def listing(done):
    return dict(line.split(": ", 1) for line in done.stdout.splitlines())


def test_gpu_check_lists_a_command_for_every_step():
    done = planned("--dry-run", "--out", "/o", "--multi30k-updates", "500", "--multi30k-jobs", "3",
                   "--lengths-from", "/d/newstest2014", "--raw-dir", "/r")
    assert done.returncode == 0, done.stderr
    steps = listing(done)
    benchmark = [f"benchmark-{mode}-{precision}" for precision in ("fp32", "fp16", "bf16")
                 for mode in ("train", "decode", "crossover")]
    assert list(steps) == ["tests", *benchmark, "multi30k-seed1", "multi30k-seed2", "multi30k-seed3"]
    assert all(command.startswith("python -m ") for command in steps.values()), steps  # nothing "not run"
    assert steps["tests"] == f"python -m pytest -rs -v {REPO}/tests/test_gpu.py"
    for precision in ("fp32", "fp16", "bf16"):
        for mode in ("train", "decode"):
            assert steps[f"benchmark-{mode}-{precision}"] == (
                f"python -m fairseq_csan.recipes.benchmark --mode {mode} --device cuda --precision {precision} --all "
                f"--lengths-from /d/newstest2014 --out /o/benchmark_{mode}_{precision}.md --force")
        assert steps[f"benchmark-crossover-{precision}"] == (
            f"python -m fairseq_csan.recipes.benchmark --mode crossover --device cuda --precision {precision} "
            f"--out /o/benchmark_crossover_{precision}.md --force")
    for k, seeds in ((1, "1"), (2, "1,2"), (3, "1,2,3")):  # pieces: a finished run is kept by the next
        assert steps[f"multi30k-seed{k}"] == ("python -m fairseq_csan.recipes.multi30k --device cuda --jobs 3 "
                                              f"--model small --max-update 500 --seeds {seeds} --raw-dir /r --out /o/multi30k")
    done = planned("--dry-run", "--only", "tests")
    assert done.stdout.splitlines() == [f"tests: python -m pytest -rs -v {REPO}/tests/test_gpu.py"]
    done = planned("--dry-run", "--only", "benchmark", "--precisions", "fp16")
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == [
        "benchmark-train-fp16", "benchmark-decode-fp16", "benchmark-crossover-fp16"]
    assert "--lengths-from" not in done.stdout  # the benchmark's own: the shipped newstest2014 lengths


def test_the_rehearsal_is_the_same_steps_on_the_cpu_at_toy_size():
    gpu = listing(planned("--dry-run", "--out", "/o", "--raw-dir", "/r"))
    cpu = listing(planned("--dry-run", "--out", "/o", "--raw-dir", "/r", "--rehearse"))
    assert list(cpu) == list(gpu) and cpu["tests"] == gpu["tests"]
    for name in gpu:
        if name != "tests":
            assert "--device cuda" in gpu[name] and "--device cpu" in cpu[name] and cpu[name] != gpu[name]
    assert "--max-update 12 " in cpu["multi30k-seed1"] and "--encoder-embed-dim 32" in cpu["benchmark-train-fp16"]
    assert "--model small " in gpu["multi30k-seed1"] and "--max-update" not in gpu["multi30k-seed1"]  # its 8000
    assert "--model tiny " in cpu["multi30k-seed1"]
    two = listing(planned("--dry-run", "--raw-dir", "/r", "--only", "multi30k", "--multi30k-seeds", "2"))
    assert list(two) == ["multi30k-seed1", "multi30k-seed2"] and "--seeds 1,2 " in two["multi30k-seed2"]


@pytest.mark.parametrize("only", ["tests,benchmark,multi30k", "tests", "benchmark", "multi30k"])
def test_every_option_of_gpu_check_changes_its_steps_or_is_refused(only, capsys):
    """No option of gpu_check.sh is accepted and ignored: with each choice of steps, each
    option changes the list of commands or what the dry run says, or is refused with one line."""
    from fairseq_csan.recipes import gpu_check as checker

    def plan(extra):  # in this process: the dry run imports neither torch nor fairseq's tools
        refusal = refusal_of(checker.main, ["--only", only, "--dry-run", *extra], capsys)
        captured = capsys.readouterr()
        return captured.out + captured.err, refusal

    walk_options(plan, [["--out", "/o"], ["--only", "tests,benchmark"], ["--precisions", "fp16"],
                        ["--lengths-from", "/d/newstest2014"], ["--raw-dir", "/r"], ["--multi30k-updates", "500"], ["--multi30k-model", "tiny"],
                        ["--multi30k-jobs", "3"], ["--multi30k-jobs", "0"], ["--multi30k-seeds", "2"],
                        ["--multi30k-systems", "transformer,csan2d"], ["--multi30k-systems", "lstm"],
                        ["--multi30k-systems", "csan2d,csan2d"], ["--only", "tests,tests"],
                        ["--only", "tests,gpu"],
                        ["--budget-minutes", "10"], ["--rehearse"]])


def test_gpu_check_reads_relative_paths_from_where_it_is_called(tmp_path):
    done = gpu_check("--dry-run", "--only", "benchmark", "--precisions", "fp16", "--out", "o", "--lengths-from",
                     "d/test", cwd=tmp_path)  # the door, from another folder
    assert done.returncode == 0, done.stderr
    assert f"--lengths-from {tmp_path}/d/test --out {tmp_path}/o/benchmark_train_fp16.md" in done.stdout


def test_gpu_check_commands_run_as_listed():
    """Each listed benchmark command is one the benchmark accepts: on a machine without CUDA it
    gets as far as the device check, which names the flag. The first runs as listed, in a shell;
    the others as their words, in this process (the same parser, without a Python start each)."""
    import shlex

    from recipe_helpers import in_process, module_main

    done = planned("--dry-run", "--only", "benchmark", "--lengths-from", shared_corpus("wmt14_en_de") / "newstest2014")
    for i, (name, command) in enumerate(listing(done).items()):
        if torch.cuda.is_available():
            break
        if i == 0:
            ran = subprocess.run(command, shell=True, capture_output=True, text=True, env=environment(), cwd=REPO,
                                 timeout=120)
        else:
            python, m, module, *argv = shlex.split(command)
            assert (python, m) == ("python", "-m"), command
            ran = in_process(module_main(module), argv, check=False)
        assert ran.returncode == 2 and ran.stderr.strip().splitlines()[-1] == (
            "[benchmark] error: --device cuda: no CUDA device here (torch.cuda.is_available() is False); "
            "use --device cpu"), (name, ran.stderr[-2000:])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal is for machines without")
def test_gpu_check_says_no_gpu_first_and_its_dry_run_names_a_missing_input(tmp_path):
    """Nothing need be prepared (the lengths are shipped, Multi30k is found where the README
    unpacks it); a missing input given is named by the dry run, and on a machine without a GPU
    a run says that first."""
    missing = ["--lengths-from", tmp_path / "none", "--raw-dir", tmp_path / "no_m30k"]
    done = gpu_check("--out", tmp_path / "o", *missing)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "[gpu_check] error: no CUDA device here: these checks need a GPU (--dry-run lists them, --rehearse runs "
        "them at toy size on the CPU; the CPU-side checks are the normal test suite)"]
    done = planned("--dry-run", "--out", tmp_path / "o", *missing)
    assert done.returncode == 0 and ("a run would stop before any GPU work: --lengths-from: no length source at "
                                     f"{tmp_path}/none.en") in done.stderr
    done = planned("--dry-run", "--out", tmp_path / "o", "--raw-dir", tmp_path / "no_m30k")
    assert f"--raw-dir: no Multi30k file {tmp_path}/no_m30k/train.en" in done.stderr
    done = planned("--rehearse", "--out", tmp_path / "o", "--raw-dir", tmp_path / "no_m30k")
    assert done.returncode == 2 and f"error: --raw-dir: no Multi30k file {tmp_path}/no_m30k/train.en" in done.stderr
    done = planned("--dry-run", "--out", tmp_path / "o", "--raw-dir", M30K)
    assert done.returncode == 0 and "would stop" not in done.stderr  # the shipped lengths, the shared Multi30k
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("options, message", [
    (["--only", "tests,gpu"], "--only: each item must be one of tests, benchmark, multi30k, got 'gpu'"),
    (["--precisions", "fp16,fp8"], "--precisions: each item must be one of fp32, fp16, bf16, got 'fp8'"),
    (["--multi30k-jobs", "0"], "--multi30k-jobs must be a whole number of 1 or more, got '0'"),
    (["--multi30k-updates", "many"], "--multi30k-updates must be a whole number of 1 or more"),
    (["--budget-minutes", "0"], "--budget-minutes must be a whole number of 1 or more, got '0'"),
    (["--only", "tests", "--raw-dir", "/r"], "--raw-dir sets the multi30k step, which --only tests leaves out"),
    (["--fast"], "unknown argument '--fast'"),
])
def test_gpu_check_bad_options(options, message):
    from recipe_helpers import in_process

    from fairseq_csan.recipes import gpu_check as checker

    done = in_process(checker.main, ["--dry-run", *options], check=False)  # scripts/gpu_check.sh's main
    assert done.returncode == 2 and message in done.stderr


# ------------------------------------------------------------------------- the rehearsal

def small_multi30k(folder):
    for name, n in (("train", 200), ("val", 12), ("test_2016_flickr", 12)):
        for lang in ("en", "de"):
            write(folder / f"{name}.{lang}", lines(M30K / f"{name}.{lang}")[:n])
    return folder


def steps_of(summary: str):
    """The summary's step lines, without their times (pytest's own among them)."""
    return [re.sub(r" in [\d.]+ ?(s|min)\b( \(\d+:\d\d:\d\d\))?", "", row)
            for row in summary.splitlines() if row.startswith("  ")]


@pytest.mark.slow
def test_the_rehearsal_runs_every_step_and_goes_on_where_it_stopped(tmp_path):
    """--rehearse at toy size on the CPU, in pieces: stopped by its budget before the Multi30k
    step, then killed in the middle of it (every process of the job, as a time limit kills them),
    then started again. Every step passes, in order, as a run straight through lists them; the
    finished ones are kept (unless their record is damaged, from another machine, or their table
    is gone or edited since) and the runs resume; the summary and paste.md hold the tables."""
    raw = small_multi30k(tmp_path / "m30k")
    # two of the systems (the table's first and last), and the sweep's two points: 4 runs, not 7
    common = ["--rehearse", "--precisions", "fp32", "--multi30k-seeds", "1", "--multi30k-systems",
              "transformer,csan2d_ctxaware", "--raw-dir", raw]
    names = ["tests", "benchmark-train-fp32", "benchmark-decode-fp32", "benchmark-crossover-fp32", "multi30k-seed1"]
    out = tmp_path / "pieces"
    # the Multi30k step took 10 minutes the last time it passed here (a record whose outputs are
    # gone: it runs again, expected to take that long), so a 5-minute budget stops before it
    # however fast this machine runs the steps before it
    from fairseq_csan.recipes.gpu_check import STEP_RECORD

    STEP_RECORD.write(out / ".steps", {"command": "an earlier one", "machine": "this one", "status": "passed",
                                       "seconds": 600.0, "finished": "2026-01-01 00:00",
                                       "outputs": {"multi30k/results.md": "0" * 64}},
                      "multi30k-seed1.json")  # as the kit writes a step's record
    first = gpu_check(*common, "--out", out, "--budget-minutes", "5", timeout=600)
    assert first.returncode == 3, first.stderr[-2000:]
    assert "1/5 tests: expected about 30 s (an estimate)" in first.stderr
    assert ("--budget-minutes 5: stopping before multi30k-seed1, expected to take about 10 min (as the last time "
            "it ran)") in first.stderr
    assert "1 step(s) to go: run the same command again to go on" in first.stderr
    assert sorted(p.stem for p in (out / ".steps").glob("[!.]*.json")) == sorted(names)  # multi30k's: the old one
    tests_log = (out / "tests.log").read_text()
    assert "SKIPPED" in tests_log and "no CUDA device" in tests_log  # the CUDA-only checks, named
    started = subprocess.Popen(["bash", str(REPO / "scripts" / "gpu_check.sh"), *map(str, common), "--out", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(),
                               cwd=REPO, start_new_session=True)
    deadline = time.time() + 300
    while not list((out / "multi30k" / "runs").glob("*/seed1/checkpoints/checkpoint_1_*.pt")) and time.time() < deadline:
        time.sleep(0.5)
    assert list((out / "multi30k" / "runs").glob("*/seed1/checkpoints/checkpoint_1_*.pt")), "no run began to train"
    # in the middle of the Multi30k step, every process of the job, as a scheduler's time limit kills them
    subprocess.run(["pkill", "-KILL", "-s", str(started.pid)])
    started.communicate()
    assert json.loads((out / ".steps" / "multi30k-seed1.json").read_text())["command"] == "an earlier one"
    # a record cut short by a kill, one made on another machine, a table since deleted: each step runs again
    (out / ".steps" / "tests.json").write_text('{"command": "python -m pyt')
    other = STEP_RECORD.read(out / ".steps", "benchmark-train-fp32.json")
    STEP_RECORD.write(out / ".steps", {**other, "machine": "1 GPU(s): another"}, "benchmark-train-fp32.json")
    (out / "benchmark_decode_fp32.md").unlink()
    last = gpu_check(*common, "--out", out, timeout=1200)
    assert last.returncode == 0, last.stderr[-3000:]
    assert last.stderr.count("finished before") == 1 and "benchmark-crossover-fp32: finished before" in last.stderr
    assert "multi30k-seed1: passed" in last.stderr
    resumed = [run for run in (out / "multi30k" / "runs").glob("*/seed1/checkpoints/train.log")
               if "Loaded checkpoint" in run.read_text()]
    assert resumed, "no run resumed from the checkpoint it had when it was killed"

    # what a run straight through gives: every step passed, in order, then the tests' own line
    summary = (out / "summary.md").read_text()
    assert summary.startswith("GPU check summary (rehearsal on the CPU, torch ")
    rows = steps_of(summary)
    assert rows[:-1] == [f"  {name}: passed, log {out / name}.log" for name in names], rows
    assert re.fullmatch(r"  tests: [= ]*\d+ (passed|skipped)\b.*", rows[-1]) and "failed" not in rows[-1], rows[-1]
    tests_log = (out / "tests.log").read_text()
    assert "SKIPPED" in tests_log and "no CUDA device" in tests_log
    for table in ("benchmark_train_fp32.md", "benchmark_decode_fp32.md", "benchmark_crossover_fp32.md",
                  "multi30k/results.md"):
        assert (out / table).is_file(), table
    assert "| csan2d_ctxaware | transformer_csan2d_ctxaware |" in summary  # the reproduction's table, printed
    paste = (out / "paste.md").read_text()  # the tables as the docs lay them out
    assert "a REHEARSAL at toy size on the CPU, not figures to publish" in paste and "| + 2D-CSAN |" in paste
    # a table edited by hand since its step passed: the step is not kept (its figures are not shown as measured),
    # and the benchmark, run again, refuses to replace the user's file
    crossover = out / "benchmark_crossover_fp32.md"
    crossover.write_text(crossover.read_text() + "| 64 | a figure of my own |\n")
    edited = gpu_check(*common, "--out", out, timeout=600)
    assert edited.returncode == 1 and "benchmark-crossover-fp32: finished before" not in edited.stderr, edited.stderr
    assert "benchmark-crossover-fp32: FAILED" in edited.stderr and edited.stderr.count("finished before") == 4
    assert f"{crossover}" in (out / "benchmark-crossover-fp32.log").read_text()


def test_the_summary_is_ready_to_paste_into_the_docs(tmp_path):
    """paste.md holds the measured tables as the docs lay them out: the README's Results at a
    glance with its paper columns kept and our speed filled in from the fp32 training table, the
    benchmark tables for docs/speed.md, the Multi30k table; each headed by the device and date."""
    from fairseq_csan.recipes import gpu_check as checker

    args = checker.parse(["--out", str(tmp_path), "--precisions", "fp32,fp16", "--raw-dir", "/r"])
    header = "| architecture | parameters | target tokens/s (median) | ratio to baseline (median) | ratio range |\n|---|---|---|---|---|\n"
    ratios = {"transformer": "1.000", "transformer_csan1d": "1.013", "transformer_csan2d": "0.962",
              "transformer_ctxaware": "0.906", "transformer_block": "0.700"}
    (tmp_path / "benchmark_train_fp32.md").write_text(
        "Training throughput ...\n\n" + header + "".join(f"| {a} | 60.52M | 999 | {r} | {r}-{r} |\n" for a, r in ratios.items()))
    (tmp_path / "benchmark_decode_fp16.md").write_text("Beam-search decoding ...\n\n" + header + "| transformer | 1 | 2 | 1.000 | 1.000-1.000 |\n")
    (tmp_path / "multi30k").mkdir()
    (tmp_path / "multi30k" / "results.md").write_text("| System | Architecture |\n|---|---|\n| transformer | transformer |\n")
    machine = "1 GPU(s): NVIDIA H100 80GB HBM3, torch 2.13.0+cu128, CUDA 12.8"
    passed = {tmp_path / "benchmark_train_fp32.md", tmp_path / "benchmark_decode_fp16.md", tmp_path / "multi30k/results.md"}
    (tmp_path / "benchmark_decode_fp32.md").write_text("a table a failed step left\n")  # not in passed: left out
    ready = checker.paste_ready(args, machine, "2026-11-26", passed)
    assert "a failed step left" not in ready
    blocks = ready.split("\n\n")
    assert blocks[0] == "README.md, Results at a glance (training speed, ratio to the Transformer):"
    ours = blocks[1].splitlines()
    readme = (REPO / "README.md").read_text()
    glance = readme[readme.index("| model | paper BLEU | paper speed |"):].split("\n\n")[0].splitlines()
    assert ours[0] == glance[0] + f" our speed ({machine}, 2026-11-26, fp32, [docs/speed.md](docs/speed.md)) |"
    assert len(ours) == len(glance) == 6 and ours[1] == glance[1] + "---:|"
    for mine, theirs in zip(ours[2:], glance[2:]):
        assert mine.startswith(theirs)  # the README's columns as they are, the CPU's speed included
    assert [row.split("|")[-2].strip() for row in ours[2:]] == ["1.00x", "1.01x", "0.96x", "0.91x"]
    assert f"docs/speed.md, On a GPU (measured with scripts/gpu_check.sh on {machine}, 2026-11-26):" in ready
    assert "Training throughput ..." in ready and "Beam-search decoding ..." in ready
    assert ("examples/multi30k/README.md, Results (--model small, scripts/gpu_check.sh on " + machine) in ready
    assert ready.rstrip().endswith("| transformer | transformer |")
    rehearsal = checker.paste_ready(checker.parse(["--out", str(tmp_path), "--rehearse", "--raw-dir", "/r"]),
                                    "rehearsal on the CPU, torch 2.13.0", "2026-11-26", passed)
    assert "a REHEARSAL at toy size on the CPU, not figures to publish" in rehearsal.splitlines()[2]
    some = checker.paste_ready(checker.parse(["--out", str(tmp_path), "--raw-dir", "/r", "--multi30k-systems",
                                              "transformer,csan2d"]), machine, "2026-11-26", passed)
    assert "examples/multi30k/README.md, Results (--model small, systems transformer,csan2d only, " in some
    passed.remove(tmp_path / "benchmark_train_fp32.md")  # its step failed this time: no glance from it
    assert not checker.paste_ready(args, machine, "2026-11-26", passed).startswith("README.md")


def test_an_installed_package_without_the_clone_names_the_tests_step(tmp_path, monkeypatch):
    """Installed from a wheel, the package has no tests/test_gpu.py beside it: the tests step is
    named before anything runs, and the other steps need no clone."""
    from fairseq_csan.recipes import gpu_check as checker

    monkeypatch.setattr(checker, "ROOT", tmp_path)
    args = checker.parse(["--out", str(tmp_path / "o"), "--only", "tests,benchmark"])
    assert checker.missing_input(args).startswith("--only tests runs the clone's tests/test_gpu.py, and this package "
                                                  "is installed without one")
    assert checker.missing_input(checker.parse(["--out", str(tmp_path / "o"), "--only", "benchmark"])) == ""
