"""1D and 2D convolutional self-attention against the loop reference, and their reductions."""

import pytest
import torch
from fairseq.modules import MultiheadAttention

from fairseq_csan.modules import (
    SELF_ATTENTION_VARIANTS,
    CrossHeadWindowAttention,
    SelfAttention,
    LocalWindowAttention,
)
from reference import csan_attention_reference, skip_without_cpu_kernels

D, H = 32, 4


def make(window=5, area_heads=1, heads=H, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    if area_heads == 1:
        m = LocalWindowAttention(D, heads, window=window)
    else:
        m = CrossHeadWindowAttention(D, heads, window=window, area_heads=area_heads)
    return m.to(dtype).eval()


def padded_batch(lengths, T, side="left", seed=1, dtype=torch.float64):
    """x (T, B, D) and its key padding mask (B, T), padding on ``side``."""
    torch.manual_seed(seed)
    x = torch.randn(T, len(lengths), D, dtype=dtype)
    pad = torch.ones(len(lengths), T, dtype=torch.bool)
    for b, length in enumerate(lengths):
        if side == "left":
            pad[b, T - length:] = False
        else:
            pad[b, :length] = False
    x = x.masked_fill(pad.t()[:, :, None], 0.0)
    return x, pad


CASES = [(1, 1), (3, 1), (5, 1), (11, 1), (1, 3), (3, 3), (5, 3), (11, 3)]  # (window M, area N)


@pytest.mark.parametrize("window,area", CASES)
@pytest.mark.parametrize("side", ["none", "left", "right"])
def test_matches_loop_reference(window, area, side):
    m = make(window, area)
    lengths = [9, 9, 9] if side == "none" else [9, 4, 6]
    x, pad = padded_batch(lengths, 9, side="left" if side == "none" else side)
    kpm = None if side == "none" else pad
    out, _ = m(x, x, x, key_padding_mask=kpm)
    ref = csan_attention_reference(m, x, kpm, window, area)
    real = ~pad.t()  # (T, B)
    torch.testing.assert_close(out[real], ref[real], rtol=1e-10, atol=1e-10)
    assert torch.isfinite(out).all()


def test_area_of_all_heads_matches_reference():
    """N = H: the middle head sees every head, the edge heads one fewer."""
    torch.manual_seed(0)
    m = CrossHeadWindowAttention(24, 3, window=7, area_heads=3).double().eval()
    x = torch.randn(8, 2, 24, dtype=torch.float64)
    pad = torch.zeros(2, 8, dtype=torch.bool)
    pad[1, :3] = True
    out, _ = m(x, x, x, key_padding_mask=pad)
    ref = csan_attention_reference(m, x, pad, 7, 3)
    real = ~pad.t()
    torch.testing.assert_close(out[real], ref[real], rtol=1e-10, atol=1e-10)


def test_2d_with_one_head_equals_1d():
    x, pad = padded_batch([10, 7], 10)
    one = make(window=5, area_heads=1)
    two = CrossHeadWindowAttention(D, H, window=5, area_heads=1).double().eval()
    two.load_state_dict(one.state_dict())
    a, _ = one(x, x, x, key_padding_mask=pad)
    b, _ = two(x, x, x, key_padding_mask=pad)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_2d_first_and_last_heads_are_masked_not_wrapped():
    """Head 0's area is heads {0, 1}, not {H-1, 0, 1}: wrapping would bring in head H-1."""
    m = make(window=3, area_heads=3)
    with torch.no_grad():  # identity output projection: the output is [o^1, ..., o^H]
        m.out_proj.weight.copy_(torch.eye(D))
        m.out_proj.bias.zero_()
    x, _ = padded_batch([6], 6)
    before, _ = m(x, x, x)
    dh = D // H
    with torch.no_grad():  # change only the values of the last head
        m.v_proj.weight[-dh:] += 1.0
        m.v_proj.bias[-dh:] += 1.0
    after, _ = m(x, x, x)
    torch.testing.assert_close(after[..., : (H - 2) * dh], before[..., : (H - 2) * dh])  # heads 0..H-3
    assert not torch.allclose(after[..., (H - 2) * dh:], before[..., (H - 2) * dh:])  # heads H-2, H-1


@pytest.mark.parametrize("variant", ["standard", "csan1d", "csan2d"])
def test_window_covering_sentence_equals_fairseq_attention(variant):
    """Neutral settings reduce to fairseq's MultiheadAttention with the same weights."""
    T = 8
    torch.manual_seed(0)
    stock = MultiheadAttention(D, H, self_attention=True).double().eval()
    cls = SELF_ATTENTION_VARIANTS[variant]
    opts = {"csan1d": {"window": 2 * T - 1}, "csan2d": {"window": 2 * T + 1, "area_heads": 1}}
    ours = cls(D, H, **opts.get(variant, {})).double().eval()
    ours.load_state_dict(stock.state_dict())
    x, pad = padded_batch([8, 3, 6], T)
    for kpm in (None, pad):
        expected, _ = stock(x, x, x, key_padding_mask=kpm, need_weights=False)
        got, _ = ours(x, x, x, key_padding_mask=kpm)
        real = ~pad.t() if kpm is not None else torch.ones(T, 3, dtype=torch.bool)
        torch.testing.assert_close(got[real], expected[real], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("window,area", [(3, 1), (5, 3)])
def test_padding_amount_and_side_do_not_change_real_outputs(window, area):
    m = make(window, area)
    torch.manual_seed(3)
    sent = torch.randn(5, 1, D, dtype=torch.float64)  # one sentence of 5 tokens
    alone, _ = m(sent, sent, sent)
    for side in ("left", "right"):
        for extra in (1, 4, 9):
            T = 5 + extra
            x = torch.zeros(T, 1, D, dtype=torch.float64)
            pad = torch.ones(1, T, dtype=torch.bool)
            start = extra if side == "left" else 0
            x[start:start + 5] = sent
            x[:start] = 7.0  # garbage in padding must not leak either
            x[start + 5:] = -7.0
            pad[0, start:start + 5] = False
            out, _ = m(x, x, x, key_padding_mask=pad)
            torch.testing.assert_close(out[start:start + 5], alone, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("window,area", [(3, 1), (5, 3)])
def test_low_precision_is_finite_and_close(dtype, window, area):
    """Long left padding gives padding queries windows of padding only: still no NaN/inf."""
    skip_without_cpu_kernels(dtype)
    m32 = make(window, area, dtype=torch.float32)
    m16 = make(window, area, dtype=dtype)
    x, pad = padded_batch([12, 2, 1], 12, dtype=torch.float32)
    x.requires_grad_(True)
    ref, _ = m32(x, x, x, key_padding_mask=pad)
    x16 = x.detach().to(dtype).requires_grad_(True)
    out, _ = m16(x16, x16, x16, key_padding_mask=pad)
    assert out.dtype == dtype and torch.isfinite(out).all()
    out.float().sum().backward()
    assert torch.isfinite(x16.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in m16.parameters())
    real = ~pad.t()
    torch.testing.assert_close(out[real].float(), ref[real], rtol=0.05, atol=0.05)


def test_gradients_reach_every_parameter():
    m = make(5, 3).train()
    x, pad = padded_batch([9, 4], 9)
    out, _ = m(x, x, x, key_padding_mask=pad)
    out[~pad.t()].sum().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_no_parameters_added():
    stock = MultiheadAttention(D, H, self_attention=True)
    for cls in (SelfAttention, LocalWindowAttention, CrossHeadWindowAttention):
        m = cls(D, H)
        assert [n for n, _ in m.named_parameters()] == [n for n, _ in stock.named_parameters()]
        assert sum(p.numel() for p in m.parameters()) == sum(p.numel() for p in stock.parameters())


def test_attention_dropout_is_applied_in_training_only():
    m = LocalWindowAttention(D, H, window=3, dropout=0.5).double()
    x, _ = padded_batch([6], 6)
    m.eval()
    a, _ = m(x, x, x)
    b, _ = m(x, x, x)
    torch.testing.assert_close(a, b)
    m.train()
    torch.manual_seed(0)
    c, _ = m(x, x, x)
    assert not torch.allclose(a, c)


@pytest.mark.parametrize(
    "kwargs,flag",
    [
        ({"window": 4}, "--csan-window"),
        ({"window": 0}, "--csan-window"),
        ({"window": -3}, "--csan-window"),
        ({"window": 5, "area_heads": 2}, "--csan-heads"),
        ({"window": 5, "area_heads": 0}, "--csan-heads"),
        ({"window": 5, "area_heads": 5}, "--csan-heads"),
    ],
)
def test_module_rejects_bad_settings(kwargs, flag):
    with pytest.raises(ValueError, match=flag):
        CrossHeadWindowAttention(D, H, **kwargs)


def test_rejects_what_it_cannot_do():
    m = LocalWindowAttention(D, H, window=3)
    x, _ = padded_batch([4], 4)
    with pytest.raises(NotImplementedError, match="attention weights"):
        m(x, x, x, need_weights=True)
    with pytest.raises(NotImplementedError, match="incremental"):
        m(x, x, x, incremental_state={})
    with pytest.raises(ValueError, match="self-attention"):
        m(x, x.clone(), x)
