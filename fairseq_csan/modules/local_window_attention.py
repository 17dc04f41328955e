"""Convolutional self-attention: 1D local windows and the 2D cross-head area.

Baosong Yang, Longyue Wang, Derek F. Wong, Lidia S. Chao and Zhaopeng Tu,
"Convolutional Self-Attention Networks", NAACL 2019 (arXiv:1904.03107), eqs. 4-9;
the earlier arXiv version (arXiv:1810.13320) writes the same softmax out as eqs. 4-8.

1D-CSAN (``csan1d``): query i attends only to positions |i - j| <= m, m = (M - 1) / 2,
with one softmax over the window (NAACL eqs. 4-6; arXiv eqs. 4-5)::

    alpha_ij^h = exp(e_ij^h) / sum_{t=i-m..i+m} exp(e_it^h)
    y_i^h      = sum_{j=i-m..i+m} alpha_ij^h v_j^h

2D-CSAN (``csan2d``): the window grows along the head axis to N x M, n = (N - 1) / 2,
with one softmax over the whole area (NAACL eqs. 7-9; arXiv eqs. 6-8)::

    e_ij^{hs}     = q_i^h . k_j^s / sqrt(d_h)
    alpha_ij^{hs} = exp(e_ij^{hs}) / sum_{k=h-n..h+n} sum_{t=i-m..i+m} exp(e_it^{hk})
    y_i^h         = sum_{s=h-n..h+n} sum_{j=i-m..i+m} alpha_ij^{hs} v_j^s

Choices where the papers are silent (see docs/implementation.md):

- At the sentence edges the window is clipped (out-of-range keys are absent), never shifted.
- Heads outside 1..H are absent too: the area of the first and last heads is masked, not
  wrapped around. (The authors' TensorFlow code wraps the keys circularly but clamps the
  values, which is not the paper's formula.)

Neither variant adds a parameter: both only restrict which keys the shared core attends to.

Two exact paths compute the same attention (``--csan-impl``): ``dense``, the core's masked
kernel over all T x N·T pairs, and ``banded`` (:mod:`.banded_attention`), which scores only
the keys near each block of queries, O(T·N·M). ``auto`` (the default) takes the banded path
from ``BANDED_FROM`` tokens on, the crossover measured in docs/long_inputs.md.
"""

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention_core import SelfAttention
from .banded_attention import banded_attention
from .registry import Option, register_self_attention

IMPLEMENTATIONS = ("auto", "dense", "banded")
# From how many tokens ``auto`` takes the banded path: the crossover measured on our 2-core CPU
# (docs/long_inputs.md). 2D's dense path scores N times the keys of 1D's, so it crosses earlier.
BANDED_FROM = {"1D": 256, "2D": 128}


def _check_area_heads(area_heads, num_heads: int):
    HEADS.validate(area_heads)
    if area_heads > num_heads:
        raise ValueError(
            f"--csan-heads must be at most the number of attention heads "
            f"(--encoder-attention-heads {num_heads}); got {area_heads}"
        )


def _check_window(window):
    _positive_odd(window, "--csan-window", "window")


def _check_heads(area_heads):
    _positive_odd(area_heads, "--csan-heads", "head area")


def _positive_odd(value, flag: str, meaning: str):
    if not isinstance(value, int) or value < 1 or value % 2 == 0:
        raise ValueError(
            f"{flag} must be a positive odd integer (1, 3, 5, ...): the {meaning} is centred "
            f"on the query; got {value!r}"
        )


WINDOW = Option(
    "csan_window", "CSAN window size M in tokens, odd, centred on the query (default: the papers' best, {default})",
    keyword="window", convert=int, check=_check_window, default=11, metavar="M",  # the papers' best M = 11
)
IMPL = Option(
    "csan_impl", "how CSAN attention is computed, exactly alike: dense (masked T x T kernel), banded "
    f"(O(T*M) blocks, for long inputs) or auto (the default: banded from {BANDED_FROM['1D']} "
    f"tokens, 2D-CSAN from {BANDED_FROM['2D']})",
    keyword="impl", choices=IMPLEMENTATIONS, default="auto", metavar="IMPL",
    same_result=True,  # dense or banded: the same attention
)
HEADS = Option(
    "csan_heads", "2D-CSAN area height N in heads, odd, at most the number of heads (default: the papers' "
    "best, {default}); heads beyond the first and last are masked",
    keyword="area_heads", convert=int, check=_check_heads, default=3, metavar="N",  # the papers' best N = 3
)


@register_self_attention("csan1d")
class LocalWindowAttention(SelfAttention):
    """1D-CSAN: attention restricted to a window of ``window`` tokens centred on the query."""

    half_heads = 0  # n: 1D-CSAN's area is its own head
    OPTIONS = (WINDOW, IMPL)

    def __init__(self, embed_dim: int, num_heads: int, window: int = WINDOW.default, impl: str = IMPL.default,
                 **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        self.window = WINDOW.validate(window)
        self.half_window = (window - 1) // 2  # m
        self.impl = IMPL.validate(impl)

    def uses_banded(self, seq_len: int) -> bool:
        """Whether a sequence of ``seq_len`` slots takes the banded path."""
        crossover = BANDED_FROM["2D" if self.half_heads else "1D"]
        return self.impl == "banded" or (self.impl == "auto" and seq_len >= crossover)

    def attend_heads(self, query: Tensor, key_padding_mask=None, attn_mask=None, incremental_state=None) -> Tensor:
        """The core's eqs. 1-2 on the dense or the banded path (same result)."""
        T, B, d = query.shape
        if attn_mask is not None or incremental_state is not None or not self.uses_banded(T):
            return super().attend_heads(query, key_padding_mask, attn_mask, incremental_state)
        q, k, v = (t.reshape(T, B, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
                   for t in self.project(query))  # (B, H, T, d_h)
        dropout_p = self.dropout_module.p if (self.training or self.dropout_module.apply_during_inference) else 0.0
        out = banded_attention(q, k, v, self.half_window, self.half_heads, key_padding_mask, dropout_p,
                               attend=self.attend)  # (B, H, T, d_h)
        return out.permute(2, 0, 1, 3).reshape(T, B, d)  # (T, B, d)

    def structure_mask(self, seq_len: int, device) -> Tensor:
        pos = torch.arange(seq_len, device=device)
        return (pos[:, None] - pos[None, :]).abs() <= self.half_window  # (T, T)

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, window={self.window}, impl={self.impl}"


@register_self_attention("csan2d")
class CrossHeadWindowAttention(LocalWindowAttention):
    """2D-CSAN: one softmax over ``area_heads`` adjacent heads x ``window`` tokens."""

    OPTIONS = (HEADS,)

    def __init__(self, embed_dim: int, num_heads: int, window: int = WINDOW.default, area_heads: int = HEADS.default,
                 **kwargs):
        super().__init__(embed_dim, num_heads, window=window, **kwargs)  # impl among kwargs
        _check_area_heads(area_heads, num_heads)
        self.area_heads = area_heads  # N
        self.half_heads = (area_heads - 1) // 2  # n

    @classmethod
    def check_args(cls, args):
        super().check_args(args)
        _check_area_heads(getattr(args, "csan_heads", None), args.encoder_attention_heads)

    def gather_keys(self, k: Tensor, v: Tensor):
        """Stack heads h-n..h+n for each head h: (B, H, T, d_h) -> (B, H, N*T, d_h)."""
        if self.area_heads == 1:
            return k, v
        return self._head_area(k), self._head_area(v)

    def _head_area(self, x: Tensor) -> Tensor:
        B, H, T, d = x.shape
        n, N = self.half_heads, self.area_heads
        x = F.pad(x, (0, 0, 0, 0, n, n))  # (B, H + 2n, T, d_h); absent heads are zeros, masked below
        x = x.unfold(1, N, 1)  # (B, H, T, d_h, N): block s of head h holds head h + s - n
        return x.permute(0, 1, 4, 2, 3).reshape(B, H, N * T, d)  # (B, H, N*T, d_h)

    def structure_mask(self, seq_len: int, device) -> Tensor:
        band = super().structure_mask(seq_len, device)  # (T, T)
        if self.area_heads == 1:
            return band
        H, N, n = self.num_heads, self.area_heads, self.half_heads
        source = torch.arange(H, device=device)[:, None] + torch.arange(N, device=device) - n  # (H, N)
        present = (source >= 0) & (source < H)  # (H, N): masked, not wrapped
        area = present[:, None, :, None] & band[None, :, None, :]  # (H, T, N, T)
        return area.reshape(H, seq_len, N * seq_len)  # (H, T, N*T)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, area_heads={self.area_heads}"
