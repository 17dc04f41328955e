"""The checks that need a GPU (scripts/gpu_check.sh runs them): every architecture's forward
and backward in fp16 and bf16 against fp32, incremental decoding against the full pass, a
fairseq-train --fp16 smoke run per family, two-GPU data parallelism, and the benchmark's GPU
mode at toy size in each precision. Without CUDA each of them skips and says so; see
docs/distributed.md and docs/speed.md for what has been measured where. gpu_check itself:
tests/test_gpu_check.py."""

import re

import subprocess
import sys

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from conftest import (BASE_ARCHS, REPO, TINY, TOLERANCE, TRAIN, TRAIN_TINY, build_model, environment,
                      largest_difference, make_dictionary, parameters, shared_corpus, small_window, succeed)

NO_CUDA = "no CUDA device: the GPU checks run on a machine with a GPU (bash scripts/gpu_check.sh)"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)

# the largest |difference| allowed against fp32: log-probabilities of a 32-dim model, about -4
# (one unit in the last place there is 0.004 in fp16, 0.03 in bf16; a broken path, a wrong mask
# or an overflow, is off by far more); and the least cosine between the whole gradients
LOGPROB_TOLERANCE = {torch.float16: 5e-2, torch.bfloat16: 2.5e-1}
GRADIENT_COSINE = {torch.float16: 0.999, torch.bfloat16: 0.99}
# one architecture of each family: the Transformer, CSAN, context-aware, each baseline
FAMILIES = ["transformer", "transformer_csan1d", "transformer_csan2d", "transformer_ctxaware",
            "transformer_csan2d_ctxaware"] + [a for a in BASE_ARCHS if "csan" not in a and "ctxaware" not in a
                                               and a != "transformer"]


def forward_backward(model, src, lengths, prev, target):
    """Log-probabilities, and the gradient of the summed negative log-likelihood of ``target``."""
    model.zero_grad()
    out, _ = model(src, lengths, prev)
    lprobs = torch.log_softmax(out.float(), -1)  # (B, T, V)
    (-lprobs.gather(-1, target[..., None])).sum().backward()
    grad = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
    return lprobs.detach(), grad


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("arch", BASE_ARCHS)
def test_low_precision_matches_fp32_on_the_gpu(arch, dtype):
    model, _, task = build_model(arch, TINY + small_window(arch))
    model = model.cuda().eval()  # no dropout: the same function in both precisions
    torch.manual_seed(1)
    src = torch.randint(4, 50, (4, 12), device="cuda")
    src[1, :5] = task.source_dictionary.pad()
    lengths = src.ne(task.source_dictionary.pad()).sum(1)
    prev = torch.randint(4, 50, (4, 7), device="cuda")
    target = torch.randint(4, 50, (4, 7), device="cuda")
    lprobs, grad = forward_backward(model, src, lengths, prev, target)
    low_lprobs, low_grad = forward_backward(model.to(dtype), src, lengths, prev, target)
    assert torch.isfinite(low_lprobs).all() and torch.isfinite(low_grad).all()
    assert (low_lprobs - lprobs).abs().max().item() <= LOGPROB_TOLERANCE[dtype]
    assert torch.nn.functional.cosine_similarity(low_grad, grad, dim=0).item() >= GRADIENT_COSINE[dtype]


@needs_cuda
@pytest.mark.parametrize("arch, flags", [("transformer", []), ("transformer_csan2d", []),
                                         ("transformer_ctxaware", ["--ctx-side", "both"])])
def test_beam_search_equals_the_full_pass_on_the_gpu(arch, flags):
    """Incremental decoding (with beam reordering) scores each hypothesis as the teacher-forced pass."""
    d = make_dictionary(40)
    model, _, _ = build_model(arch, TINY + flags, dictionary=d)
    model = model.cuda().eval()
    torch.manual_seed(3)
    src = torch.randint(4, 40, (3, 6), device="cuda")
    src[1, :2] = d.pad()
    lengths = src.ne(d.pad()).sum(1)
    generator = SequenceGenerator([model], d, beam_size=4, max_len_a=0, max_len_b=8, normalize_scores=False)
    hypos = generator.forward({"net_input": {"src_tokens": src, "src_lengths": lengths}})
    for b, beam in enumerate(hypos):
        for hyp in beam:
            tokens = hyp["tokens"][None]
            prev = torch.cat([torch.full((1, 1), d.eos(), device="cuda"), tokens[:, :-1]], dim=1)
            with torch.no_grad():
                logits, _ = model(src[b:b + 1], lengths[b:b + 1], prev)
            lprobs = torch.log_softmax(logits.float(), -1)[0].gather(-1, tokens[0, :, None])[:, 0]
            torch.testing.assert_close(hyp["positional_scores"], lprobs, rtol=1e-4, atol=1e-4)


@needs_cuda
@pytest.mark.slow
@pytest.mark.parametrize("arch", FAMILIES)
def test_fairseq_train_fp16_smoke_run(arch, data_bin, tmp_path):  # noqa: F811
    log = succeed(["fairseq-train", data_bin, "--user-dir", REPO / "fairseq_csan", "--arch", arch, *TRAIN_TINY,
                   "--fp16", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "512", "--max-update", "6",
                   "--disable-validation", "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "1",
                   "--distributed-world-size", "1", "--save-dir", tmp_path])
    assert "num_updates=6," in log and (tmp_path / "checkpoint_last.pt").is_file()


@needs_cuda
@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="fewer than two GPUs: two-GPU data parallelism not checked")
def test_two_gpus_reach_the_parameters_of_one_with_update_freq_2(data_bin, tmp_path):  # noqa: F811
    """As the CPU test in test_distributed.py, through NCCL (fp32; atomics in the GPU's
    backward make sums order-dependent, so the tolerance is 10 times the CPU one)."""
    train = ["--user-dir", REPO / "fairseq_csan", "--arch", "transformer_csan2d", *TRAIN_TINY,
             *[t for t in TRAIN if t != "--cpu"]]
    one = tmp_path / "one"
    succeed(["fairseq-train", data_bin, *train, "--distributed-world-size", "1", "--update-freq", "2",
             "--save-dir", one])
    done = subprocess.run(["torchrun", "--standalone", "--nproc_per_node", "2", "--no-python", "fairseq-train",
                           str(data_bin), *map(str, train), "--save-dir", str(tmp_path / "two")],
                          capture_output=True, text=True, env=environment(), cwd=REPO, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    assert "training on 2 devices" in done.stdout + done.stderr
    two = parameters(tmp_path / "two" / "checkpoint_last.pt")
    assert largest_difference(two, parameters(one / "checkpoint_last.pt")) <= 10 * TOLERANCE


@needs_cuda
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_benchmark_times_on_the_gpu(precision, tmp_path):
    """The benchmark's three GPU tables at toy size: the models and batches on the GPU, every row."""
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip(f"{torch.cuda.get_device_name()} has no bfloat16")
    tiny = ("--encoder-embed-dim 32 --decoder-embed-dim 32 --encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 "
            "--encoder-attention-heads 4 --decoder-attention-heads 4 --encoder-layers 3 --decoder-layers 1")
    common = ["--device", "cuda", "--precision", precision, "--rounds", "1", "--warmup", "1"]
    sentences = ["--all", "--lengths-from", shared_corpus("wmt14_en_de") / "newstest2014", "--model-flags", tiny,
                 "--vocab", "100", "--max-tokens", "300", "--batch-size", "8"]
    for mode, extra in [("train", sentences), ("decode", sentences),
                        ("crossover", ["--lengths", "32", "64", "--tokens", "256"])]:
        out = tmp_path / f"{mode}.md"
        done = subprocess.run([sys.executable, "-m", "fairseq_csan.recipes.benchmark", "--mode", mode, *map(str, common),
                               *map(str, extra), "--out", str(out)], capture_output=True, text=True, cwd=REPO,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        table = out.read_text()
        assert torch.cuda.get_device_name() in table and f"Precision: {precision} (" in table
        if mode == "crossover":
            assert len(re.findall(r"^\| (1D|2D) \| (from \d+ tokens|not reached)", table, re.M)) == 2, table
        else:
            rows = re.findall(r"^\| (transformer\w*) \| \d+\.\d\dM \| [\d.]+ \| \d+\.\d{3} \|", table, re.M)
            assert len(rows) == 12, table  # the Transformer and the eleven of docs/speed.md


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal is for machines without")
def test_multi30k_on_cuda_without_cuda_is_refused(tmp_path):
    done = subprocess.run([sys.executable, "-m", "fairseq_csan.recipes.multi30k", "--device", "cuda", "--out",
                           str(tmp_path / "m")], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2 and "--device cuda: no CUDA device here" in done.stderr
    assert not (tmp_path / "m").exists()
