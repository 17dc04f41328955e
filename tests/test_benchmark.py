"""fairseq_csan.recipes.benchmark's devices, precisions and crossover, on the CPU: what it times
(synchronised), in which precision, what it refuses, and how it reads a crossover. Its GPU run is
in tests/test_gpu.py; and a smoke run of its CPU tables (slow)."""

import re
import subprocess
import sys

import pytest
import torch

from conftest import REPO, shared_corpus
from fairseq_csan.modules.local_window_attention import BANDED_FROM
from fairseq_csan.recipes import benchmark, benchmark_runs

TINY_FLAGS = ("--encoder-embed-dim 32 --decoder-embed-dim 32 --encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 "
              "--encoder-attention-heads 4 --decoder-attention-heads 4 --encoder-layers 3 --decoder-layers 1")


def run(*options, timeout=300):
    return subprocess.run([sys.executable, "-m", "fairseq_csan.recipes.benchmark", *map(str, options)],
                          capture_output=True, text=True, cwd=REPO, timeout=timeout)


def refused(*options):
    """The benchmark's main in this process, for a refusal that comes before its re-exec with
    malloc tuning (the argument checks, the device and the lengths' source); without a Python
    start and a fairseq import each. A refusal after the re-exec runs as a process (run)."""
    from recipe_helpers import in_process, module_main

    return in_process(module_main("fairseq_csan.recipes.benchmark"), options, check=False)


def last_line(stderr):
    return stderr.strip().splitlines()[-1]


# ---------------------------------------------------------------- timing and crossover

def test_the_shipped_lengths_are_newstest2014_s():
    """The default sentence lengths need nothing prepared: the word counts of newstest2014, read
    as --lengths-from reads the text itself."""
    text = shared_corpus("wmt14_en_de") / "newstest2014"
    assert benchmark_runs.length_pairs(None, 128) == benchmark_runs.length_pairs(text, 128)
    assert len(benchmark_runs.length_pairs(None, 10_000)) == 3003


def test_a_gpu_call_is_timed_between_two_synchronisations():
    events = []
    seconds = benchmark_runs.timed(lambda: events.append("step"), lambda: events.append("sync"))
    assert events == ["sync", "step", "sync"] and seconds >= 0
    assert benchmark_runs.synchronizer("cuda") is torch.cuda.synchronize
    assert benchmark_runs.synchronizer(torch.device("cuda", 0)) is torch.cuda.synchronize


def test_a_cpu_call_is_timed_without_cuda():
    sync = benchmark_runs.synchronizer("cpu")
    assert sync is not torch.cuda.synchronize and sync() is None  # (it would fail without a GPU)
    assert benchmark_runs.timed(lambda: None, sync) >= 0


@pytest.mark.parametrize("speedups, expected", [
    ({64: 0.5, 128: 0.9, 256: 1.2, 512: 1.8}, 256),
    ({64: 1.1, 128: 0.9, 256: 1.2, 512: 1.8}, 256),    # faster once below, slower after: not yet crossed
    ({64: 1.1, 128: 1.3}, 64),                         # faster from the shortest measured
    ({64: 0.5, 128: 1.3, 256: 0.99}, None),            # slower at the longest: no crossover
    ({64: 0.5, 128: 1.0}, None),                       # as fast is not faster
    ({64: 0.5, 128: 1.2, 256: None}, 128),             # dense too big to run at 256: banded wins there
])
def test_crossover_is_where_banded_stays_faster(speedups, expected):
    assert benchmark_runs.crossover(speedups) == expected


def test_the_crossover_compares_with_the_plugins_own_keys():
    assert set(benchmark_runs.ATTENTION) == set(BANDED_FROM)


# ---------------------------------------------------------------- precision, in process

@pytest.mark.parametrize("precision, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
@pytest.mark.parametrize("mode", ["train", "decode"])
def test_the_models_run_in_the_chosen_precision(mode, precision, dtype, monkeypatch, tmp_path, capsys):
    seen = []
    step = "train_step" if mode == "train" else "decode_step"
    monkeypatch.setattr(benchmark_runs, step, lambda model, batch, *rest: seen.append(
        (type(model).__name__, next(model.parameters()).dtype, batch[0].device.type)))
    out = tmp_path / "table.md"
    argv = [
        "benchmark", "--mode", mode, "--precision", precision, "--no-malloc-tuning", "--archs", "transformer_csan2d",
        "--lengths-from", shared_corpus("wmt14_en_de") / "newstest2014", "--model-flags", TINY_FLAGS,
        "--vocab", "100", "--max-tokens", "200", "--batch-size", "4", "--rounds", "2", "--warmup", "0",
        "--out", out]
    monkeypatch.setattr(sys, "argv", [str(a) for a in argv])
    benchmark.main()
    # two rounds, each model twice a round (A B B A)
    assert sorted(set(seen)) == [("TransformerModel", dtype, "cpu"), ("VariantTransformerModel", dtype, "cpu")]
    assert len(seen) == 2 * 2 * 2
    table = out.read_text()
    assert f"Precision: {precision} (the model cast to" in table
    assert re.search(r"^\| transformer_csan2d \| 0\.\d\dM \|", table, re.M)
    assert "Command: python -m fairseq_csan.recipes.benchmark --mode" in capsys.readouterr().out


@pytest.mark.parametrize("untimed_first, ratio", [(True, "1.000"), (False, "0.333")])
def test_on_a_gpu_each_model_meets_the_batch_before_it_is_timed(untimed_first, ratio, monkeypatch, tmp_path):
    """A first call on a new shape that costs more (a GPU's choice of kernels) is left out of the
    time where the benchmark meets each batch untimed first (on a GPU), and counted where not."""
    assert benchmark_runs.meets_shapes_untimed("cuda") and not benchmark_runs.meets_shapes_untimed("cpu")
    met = set()

    def step(model, batch):  # the seconds a call takes: 5 (the variant) or 1 on a first meeting, then 1
        first = (type(model).__name__, id(batch)) not in met
        met.add((type(model).__name__, id(batch)))
        return 5.0 if first and type(model).__name__ == "VariantTransformerModel" else 1.0

    monkeypatch.setattr(benchmark_runs, "train_step", step)
    monkeypatch.setattr(benchmark_runs, "timed", lambda call, device: call())
    monkeypatch.setattr(benchmark_runs, "meets_shapes_untimed", lambda device: untimed_first)
    out = tmp_path / "table.md"
    argv = ["benchmark", "--no-malloc-tuning", "--archs", "transformer_csan2d", "--lengths-from",
            shared_corpus("wmt14_en_de") / "newstest2014", "--model-flags", TINY_FLAGS, "--vocab", "100",
            "--max-tokens", "200", "--rounds", "2", "--warmup", "0", "--out", out]
    monkeypatch.setattr(sys, "argv", [str(a) for a in argv])
    benchmark.main()
    table = out.read_text()
    assert re.search(rf"^\| transformer_csan2d \| 0\.\d\dM \| [\d.]+ \| {ratio} \|", table, re.M), table
    assert ("each model runs each round's batch once, untimed, before it is timed." in table) == untimed_first


# ---------------------------------------------------------------- refusals, one line naming the flag

@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal is for machines without")
@pytest.mark.parametrize("mode", ["train", "decode", "long", "crossover"])
def test_cuda_without_cuda_is_refused_in_one_line(mode, tmp_path):
    done = (run if mode == "train" else refused)("--mode", mode, "--device", "cuda", "--out", tmp_path / "t.md")
    assert done.returncode == 2, done.stderr[-2000:]
    assert last_line(done.stderr) == ("[benchmark] error: --device cuda: no CUDA device here "
                                      "(torch.cuda.is_available() is False); use --device cpu")
    assert "Traceback" not in done.stderr and not (tmp_path / "t.md").exists()


@pytest.mark.parametrize("options, message", [
    (["--lengths-from", "/no/such/prefix"], "[benchmark] error: --lengths-from: no length source at /no/such/prefix.en"),
    (["--rounds", "0"], "--rounds must be a whole number of 1 or more, got '0'"),
    (["--precision", "fp8"], "--precision must be fp32, fp16 or bf16, got 'fp8'"),
    (["--device", "tpu"], "--device must be cpu or cuda, got 'tpu'"),
    (["--table1", "--all"], "--all: not allowed with argument --table1"),
])
def test_bad_options_are_refused_before_any_work(options, message):
    done = refused(*options)
    assert done.returncode == 2 and message in last_line(done.stderr), done.stderr[-2000:]


def test_too_few_batches_for_the_rounds_are_refused():
    """Fewer batches than rounds would print a table that claims rounds it did not run. (A
    process: this refusal comes after the benchmark re-executes itself.)"""
    done = run("--lengths-from", shared_corpus("wmt14_en_de") / "newstest2014", "--model-flags", TINY_FLAGS,
               "--vocab", "100", "--max-tokens", "4096", "--rounds", "5000")
    assert done.returncode == 2
    assert re.fullmatch(r"\[benchmark\] error: --rounds/--warmup: 5001 batches needed, .* gives \d+",
                        last_line(done.stderr)), done.stderr[-2000:]


# ---------------------------------------------------------------- the crossover mode, end to end

@pytest.mark.slow
def test_crossover_mode_reports_each_csan_beside_the_plugins_choice(tmp_path):
    out = tmp_path / "crossover.md"
    done = run("--mode", "crossover", "--lengths", "16", "32", "--tokens", "64", "--rounds", "1", "--warmup", "0",
               "--out", out)
    assert done.returncode == 0, done.stderr[-3000:]
    table = out.read_text()
    for T in (16, 32):
        for variant in ("1D", "2D"):
            assert re.search(rf"^\| {T} \| {64 // T} \| {variant} \| \d+\.\d \| \d+\.\d \| \d+\.\d\dx ", table, re.M)
    for variant in ("1D", "2D"):
        assert re.search(rf"^\| {variant} \| (from 32 tokens|from 16 tokens \(the shortest measured: it may lie below\)|not reached .*) \| from {BANDED_FROM[variant]} tokens \|$",
                         table, re.M), table
    assert "Precision: fp32 (float32 weights and activations)" in table
    # its own table again: refused without --force, replaced with it (one length this time)
    assert "(an earlier output of benchmark): pass --force to replace it" in last_line(refused(
        "--mode", "crossover", "--lengths", "16", "--tokens", "16", "--rounds", "1", "--warmup", "0", "--out", out).stderr)
    assert out.read_text() == table
    done = run("--mode", "crossover", "--lengths", "16", "--tokens", "16", "--rounds", "1", "--warmup", "0",
               "--out", out, "--force")
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"^\| 16 \| 1 \| 1D \|", out.read_text(), re.M) and "| 32 |" not in out.read_text()


def test_the_cpu_memory_probe_runs_in_the_chosen_precision(monkeypatch):
    """--mode long measures memory in a child process: it must get the precision too."""
    command = benchmark_runs.probe_command("2D", "banded", 64, 2, "bf16")
    assert command[-7:] == ["--probe-memory", "2D", "banded", "64", "2", "--precision", "bf16"]
    seen = []
    monkeypatch.setattr(benchmark_runs, "attention_step", lambda module, x: seen.append(
        (x.dtype, next(module.parameters()).dtype, module.impl)))
    benchmark_runs.probe_memory("2D", "banded", 32, 2, torch.bfloat16)
    assert seen == [(torch.bfloat16, torch.bfloat16, "banded")]


@pytest.mark.slow
@pytest.mark.parametrize("selection,archs", [
    ([], ["transformer_csan1d", "transformer_csan2d", "transformer_ctxaware"]),
    (["--table1"], ["transformer_bidirect", "transformer_relpos", "transformer_neighbor", "transformer_local_hard",
                    "transformer_local_soft", "transformer_block", "transformer_cnn", "transformer_csan1d",
                    "transformer_csan2d"]),
])
def test_benchmark_script_runs(selection, archs, tmp_path):
    """The benchmark is no test of speed; this only keeps the script working (at tiny size: the
    base models' build and steps took most of a minute for Table 1 here, and their sizes are
    checked in tests/test_models.py; one warm-up round keeps the first model's cold start out of
    the ratios, whose one digit before the point the table's check reads)."""
    lengths = shared_corpus("wmt14_en_de") / "newstest2014"
    out = tmp_path / "bench.md"
    done = subprocess.run(
        [sys.executable, "-m", "fairseq_csan.recipes.benchmark", "--lengths-from", str(lengths), "--max-tokens", "300", "--rounds", "1",
         "--warmup", "1", "--vocab", "200", "--out", str(out), *selection, "--model-flags", TINY_FLAGS],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    table = out.read_text()
    for arch in ["transformer"] + archs:
        assert re.search(rf"^\| {arch} \| \d+\.\d\dM \| \d+ \| \d\.\d{{3}} \|", table, re.M), table
    assert re.search(r"^\| transformer \| .* \| 1\.000 \|", table, re.M)
    assert len(re.findall(r"^\| transformer", table, re.M)) == 1 + len(archs)
