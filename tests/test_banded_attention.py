"""The banded path of 1D and 2D CSAN (banded_attention.py) against the dense path and the loop
reference: outputs and gradients, every length around the block size, padding, low precision,
dropout, the --csan-impl flag and the automatic choice, and a whole model through either path."""

import pytest
import torch
import torch.nn.functional as F

from conftest import TINY, build_model
from fairseq_csan.modules import CrossHeadWindowAttention, LocalWindowAttention
from fairseq_csan.modules.banded_attention import BLOCK, banded_attention
from fairseq_csan.modules.local_window_attention import BANDED_FROM
from reference import assert_refused, csan_attention_reference, skip_without_cpu_kernels

D, H = 24, 4
TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors gain nothing from threads, and on a busy 2-core machine a second
    thread makes each small op wait for it: one thread keeps these tests fast."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pair(window, area, heads=H, dtype=torch.float32, seed=0):
    """The same weights on the dense and on the banded path."""
    cls = LocalWindowAttention if area == 1 else CrossHeadWindowAttention
    opts = {"window": window} if area == 1 else {"window": window, "area_heads": area}
    torch.manual_seed(seed)
    dense = cls(D, heads, impl="dense", **opts).to(dtype).eval()
    banded = cls(D, heads, impl="banded", **opts).to(dtype).eval()
    banded.load_state_dict(dense.state_dict())
    return dense, banded


def batch(T, side, dtype=torch.float32, seed=1):
    """x (T, 3, D) and its padding mask (B, T) or None; the second sentence is 2 tokens long,
    so with a short window its padding queries see only padding."""
    torch.manual_seed(seed)
    x = torch.randn(T, 3, D, dtype=dtype)
    if side == "none":
        return x, None
    lengths = [T, min(T, 2), max(1, (2 * T) // 3)]
    pad = torch.ones(3, T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        if side == "left":
            pad[b, T - n:] = False
        else:
            pad[b, :n] = False
    return x.masked_fill(pad.t()[:, :, None], 0.0), pad


def run(module, x, pad, weights):
    """Output and the gradients of a weighted sum of every output (padding rows included)."""
    module.zero_grad()
    x = x.detach().clone().requires_grad_(True)
    out, _ = module(x, x, x, key_padding_mask=pad)
    (out * weights).sum().backward()
    grads = [x.grad] + [p.grad for p in module.parameters()]
    return out.detach(), grads


def assert_same(dense, banded, T, side, dtype=torch.float32, **tol):
    x, pad = batch(T, side, dtype)
    weights = torch.randn(T, 3, D, dtype=dtype)
    out_d, grads_d = run(dense, x, pad, weights)
    out_b, grads_b = run(banded, x, pad, weights)
    assert torch.isfinite(out_b).all() and all(torch.isfinite(g).all() for g in grads_b)
    torch.testing.assert_close(out_b, out_d, **(tol or TOL))
    for gb, gd in zip(grads_b, grads_d):
        torch.testing.assert_close(gb, gd, **(tol or TOL))
    return x, pad, out_b


# ---- equality with the dense path, outputs and gradients ----------------------------------------
@pytest.mark.parametrize("window,area,heads", [(1, 1, H), (3, 1, H), (11, 1, H), (3, 3, H), (11, 3, H), (5, 3, 3)])
@pytest.mark.parametrize("side", ["none", "left", "right"])
def test_banded_equals_dense_at_every_length(window, area, heads, side):
    """T = 1 .. 3 blocks + 3: shorter than the window, one block, not a multiple of the block;
    N in {1, 3, H}."""
    dense, banded = pair(window, area, heads=heads)
    for T in range(1, 3 * BLOCK + 4):
        assert_same(dense, banded, T, side)


@pytest.mark.parametrize("area", [1, 3])
@pytest.mark.parametrize("side", ["none", "left", "right"])
def test_window_longer_than_the_sentence(area, side):
    """M > T: every query sees the whole sentence (and the window spans many blocks)."""
    dense, banded = pair(2 * 3 * BLOCK + 1, area)
    for T in (1, 5, BLOCK, 2 * BLOCK + 7):
        assert_same(dense, banded, T, side)


@pytest.mark.parametrize("block", [1, 2, 3, 8])
@pytest.mark.parametrize("n", [0, 1, 2])
def test_any_block_size_gives_the_dense_result(block, n):
    """The kernel on its own, with small blocks, so that windows cross several block edges."""
    torch.manual_seed(0)
    B, heads, T, dh, m = 2, 6, 13, 4, 2
    q, k, v = (torch.randn(B, heads, T, dh) for _ in range(3))
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[1, :4] = True  # left padding; query 0's window (positions 0..2) is padding only
    dense, banded = pair(2 * m + 1, 2 * n + 1, heads=heads)
    k2, v2 = dense.gather_keys(k, v)
    mask = dense.attention_mask(T, k2.size(2), pad, None, "cpu")
    expected = dense.attend(q, k2, v2, mask, 0.0)  # the core's eq. 2, as the dense path runs it
    got = banded_attention(q, k, v, m, n, pad, block=block)
    torch.testing.assert_close(got, expected, **TOL)


# ---- the loop reference ----------------------------------------------------------------------------
@pytest.mark.parametrize("window,area,heads", [(1, 1, H), (3, 1, H), (11, 1, H), (41, 1, H), (1, 3, H), (3, 3, H),
                                               (11, 3, H), (3, 3, 3)])
@pytest.mark.parametrize("side", ["none", "left", "right"])
def test_banded_matches_loop_reference(window, area, heads, side):
    _, banded = pair(window, area, heads=heads, dtype=torch.float64)
    T = BLOCK + 5  # two blocks, the second partial
    x, pad = batch(T, side, torch.float64)
    out, _ = banded(x, x, x, key_padding_mask=pad)
    ref = csan_attention_reference(banded, x, pad, window, area)
    real = ~pad.t() if pad is not None else torch.ones(T, 3, dtype=torch.bool)
    torch.testing.assert_close(out[real], ref[real], rtol=1e-10, atol=1e-10)


def test_gradients_match_loop_reference():
    _, banded = pair(5, 3, dtype=torch.float64)
    x, pad = batch(BLOCK + 3, "left", torch.float64)
    real = ~pad.t()
    weights = torch.randn(BLOCK + 3, 3, D, dtype=torch.float64)

    def grads(fn):
        banded.zero_grad()
        xi = x.clone().requires_grad_(True)
        (fn(xi)[real] * weights[real]).sum().backward()
        return [xi.grad] + [p.grad.clone() for p in banded.parameters()]

    ours = grads(lambda xi: banded(xi, xi, xi, key_padding_mask=pad)[0])
    ref = grads(lambda xi: csan_attention_reference(banded, xi, pad, 5, 3))
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


# ---- precision, dropout ------------------------------------------------------------------------------
# The bound on the error against float32, in units of the dtype's machine epsilon (float16
# 2^-10, bfloat16 2^-7: bfloat16 keeps 3 fewer mantissa bits, so each rounding is 8 times
# coarser). Each compared tensor (the output, the gradient of the input and of each weight)
# comes through about a dozen roundings to the working precision (inputs and weights, the
# projections, the energies, the softmax, the weighted sum, the output projection, and as many
# backwards), each off by at most eps/2. Measured, banded and dense paths alike, in both dtypes:
# 1 to 6 eps, depending on the torch version's kernels (torch 2.4.1: bfloat16 banded 5.8 eps =
# 0.045, float16 4.9 eps; torch 2.13: 2.3 and 2.1 eps). The same 10 eps for both dtypes (the old
# bounds, 0.01 and 0.04, held bfloat16 to 5 eps, half of float16's). How the banded path
# compares with the dense one is the second, tighter check.
LOW_PRECISION_BOUND_EPS = 10


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("window,area", [(3, 1), (11, 3)])
def test_low_precision_is_finite_and_close(dtype, window, area):
    """Outputs and gradients in half precision against float32, with long left padding
    (padding queries whose window is padding only): finite, close, and no further from
    float32 than the dense path in the same precision."""
    skip_without_cpu_kernels(dtype)
    tol = LOW_PRECISION_BOUND_EPS * torch.finfo(dtype).eps
    dense32, _ = pair(window, area)
    dense, banded = pair(window, area, dtype=dtype)
    T = 2 * BLOCK + 5
    x, pad = batch(T, "left")
    real = ~pad.t()
    weights = torch.randn(T, 3, D) * real[:, :, None]  # the loss of the real positions

    def outputs(module, dtype):
        out, grads = run(module, x.to(dtype), pad, weights.to(dtype))
        assert out.dtype == dtype
        return [t.float() for t in [out[real]] + grads]

    expected = outputs(dense32, torch.float32)
    for got, same_precision, exact in zip(outputs(banded, dtype), outputs(dense, dtype), expected):
        assert torch.isfinite(got).all()
        error = (got - exact).norm()
        assert error < tol * max(exact.norm(), 1.0), (error, exact.norm())
        assert error <= 1.5 * (same_precision - exact).norm() + 1e-3, (error, (same_precision - exact).norm())


@pytest.mark.parametrize("area", [1, 3])
def test_attention_dropout_in_training_only_and_unbiased(area):
    """Dropout acts on the attention weights: training outputs vary, and their mean over many
    passes is the eval output (dropout keeps the expectation)."""
    _, banded = pair(5, area)
    banded.dropout_module.p = 0.3
    x, pad = batch(BLOCK + 3, "left")
    real = ~pad.t()
    with torch.no_grad():
        expected = banded(x, x, x, key_padding_mask=pad)[0][real]
        assert torch.equal(banded(x, x, x, key_padding_mask=pad)[0][real], expected)
        banded.train()
        torch.manual_seed(0)
        samples = torch.stack([banded(x, x, x, key_padding_mask=pad)[0][real] for _ in range(400)])
    assert not torch.allclose(samples[0], expected)
    assert torch.isfinite(samples).all()
    error = (samples.mean(0) - expected).abs().max()
    spread = (samples[0] - expected).abs().max()
    assert error < spread / 5, (error, spread)  # the mean of 400 passes is far closer than one pass


# ---- choosing the path -----------------------------------------------------------------------------
@pytest.mark.parametrize("area,crossover", [(1, BANDED_FROM["1D"]), (3, BANDED_FROM["2D"])])
def test_auto_takes_the_banded_path_from_the_crossover(area, crossover, monkeypatch):
    dense, auto = pair(3, area)
    auto.impl = "auto"
    calls = []
    monkeypatch.setattr("fairseq_csan.modules.local_window_attention.banded_attention",
                        lambda *a, **k: calls.append(a[0].size(2)) or banded_attention(*a, **k))
    for T in (crossover - 1, crossover):
        x = torch.randn(T, 1, D)
        torch.testing.assert_close(auto(x, x, x)[0], dense(x, x, x)[0], **TOL)
    assert calls == [crossover]
    assert not auto.uses_banded(crossover - 1) and auto.uses_banded(crossover)
    assert LocalWindowAttention(D, H, impl="banded").uses_banded(1)
    assert not LocalWindowAttention(D, H, impl="dense").uses_banded(10 ** 6)
    one_head = CrossHeadWindowAttention(D, H, area_heads=1)  # N = 1 is 1D-CSAN: it crosses where 1D does
    assert not one_head.uses_banded(BANDED_FROM["1D"] - 1) and one_head.uses_banded(BANDED_FROM["1D"])


@pytest.mark.parametrize("arch", ["transformer_csan1d", "transformer_csan2d"])
@pytest.mark.parametrize("bad", ["fast", "Dense", ""])
def test_bad_impl_is_refused(arch, bad, capsys):
    assert assert_refused(arch, ["--csan-impl", bad], "--csan-impl must be one of auto, dense, banded; got",
                          capsys) == "parse"


def test_impl_flag_refused_on_a_model_without_csan():
    with pytest.raises(ValueError, match="--csan-impl applies only to the csan1d / csan2d variant"):
        build_model("transformer_relpos", [*TINY, "--csan-impl", "banded"])


@pytest.mark.parametrize("arch", ["transformer_csan1d", "transformer_csan2d", "transformer_csan2d_ctxaware"])
def test_whole_model_gives_the_same_loss_and_gradients_on_either_path(arch):
    """Built from flags as fairseq-train builds it; left-padded sources across two blocks."""
    flags = [*TINY, "--csan-window", "5"]
    losses, grads = {}, {}
    for impl in ("dense", "banded"):
        model, args, task = build_model(arch, [*flags, "--csan-impl", impl], seed=3)
        model.eval()  # no dropout: the two paths draw their dropout masks differently
        layers = model.encoder.layers[: args.csan_layers]
        assert all(layer.self_attn.impl == impl for layer in layers)
        gen = torch.Generator().manual_seed(0)
        lengths = torch.tensor([2 * BLOCK + 3, BLOCK, 3])
        src = torch.full((3, int(lengths.max())), 1)
        for b, n in enumerate(lengths):
            src[b, -n:] = torch.randint(4, 50, (int(n),), generator=gen)
        prev = torch.randint(4, 50, (3, 7), generator=gen)
        logits, _ = model(src, lengths, prev)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), prev.view(-1))
        loss.backward()
        losses[impl] = loss.item()
        grads[impl] = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert abs(losses["dense"] - losses["banded"]) < 1e-5
    assert grads["dense"].keys() == grads["banded"].keys()
    for name in grads["dense"]:
        torch.testing.assert_close(grads["banded"][name], grads["dense"][name], **TOL)
