"""Exact banded attention for 1D- and 2D-CSAN: time and memory O(T·N·M), not O(T·N·T).

Baosong Yang, Longyue Wang, Derek F. Wong, Lidia S. Chao and Zhaopeng Tu,
"Convolutional Self-Attention Networks", NAACL 2019 (arXiv:1904.03107), eqs. 4-9
(arXiv:1810.13320, eqs. 4-8): query i of head h sees the keys of heads s = h-n..h+n at
positions |i - j| <= m, with one softmax over that N x M area::

    alpha_ij^{hs} = exp(e_ij^{hs}) / sum_{k=h-n..h+n} sum_{t=i-m..i+m} exp(e_it^{hk})
    y_i^h         = sum_{s=h-n..h+n} sum_{j=i-m..i+m} alpha_ij^{hs} v_j^s

The paper calls the model "theoretically O(MI)"; the masked dense path still scores all
T x N·T pairs. Here the queries are cut into blocks of ``block`` (b) consecutive positions.
The b queries of block c can only see positions c·b - m .. c·b + b - 1 + m, a slice of
W = b + 2m keys per head, N·W for the area. One call of the attention kernel (the core's
``attend``, PyTorch's fused ``scaled_dot_product_attention``) then runs over queries
(B, H, T/b, b, d_h) against keys and values (B, H, T/b, N·W, d_h), with a mask that allows
exactly what the dense path allows:

- the band |i - j| <= m inside the slice;
- heads outside 1..H and positions outside the sequence are absent;
- a real query never sees a padding key; a padding query sees every key of its window
  that exists, padding included (as in the core, so that no softmax row is empty);
- the slots that round T up to a whole number of blocks see their window unrestricted and
  are cut off at the end.

So the result, its gradients and attention dropout are those of the dense path, and the
scores take B·H·T·N·(b + 2m) entries instead of B·H·T·N·T.
"""

from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

BLOCK = 16  # queries per block; measured fastest of 8, 16, 32, 64 at M = 11 (docs/long_inputs.md)


def banded_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    half_window: int,
    half_heads: int = 0,
    key_padding_mask: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    attend: Optional[Callable] = None,
    block: int = BLOCK,
) -> Tensor:
    """CSAN attention of ``q``, ``k``, ``v`` (B, H, T, d_h) -> (B, H, T, d_h).

    ``half_window`` is m, ``half_heads`` is n (0 for 1D-CSAN), ``key_padding_mask`` is
    (B, T), True at padding. ``attend(q, k, v, mask, dropout_p)`` is eq. 2 over the blocks
    (mask bool, True = may attend); the default is PyTorch's fused kernel (by matmul on
    torch < 2.0).
    """
    if attend is None:
        from .attention_core import scaled_dot_product_attention as attend
    B, H, T, dh = q.shape
    m, n, b = half_window, half_heads, block
    blocks = -(-T // b)  # ceil(T / b)
    L = blocks * b  # T rounded up to whole blocks
    q = F.pad(q, (0, 0, 0, L - T)).view(B, H, blocks, b, dh)  # (B, H, T/b, b, d_h)
    k = _area_slices(k, m, n, b, L)  # (B, H, T/b, N*W, d_h)
    v = _area_slices(v, m, n, b, L)
    mask = _area_mask(H, T, L, m, n, b, key_padding_mask, q.device)  # (B|1, H, T/b, b, N*W)
    out = attend(q, k, v, mask, dropout_p)  # (B, H, T/b, b, d_h)
    return out.reshape(B, H, L, dh)[:, :, :T]  # (B, H, T, d_h)


def _area_slices(x: Tensor, m: int, n: int, b: int, L: int) -> Tensor:
    """(B, H, T, d_h) -> (B, H, L/b, N*W, d_h): for head h and block c, heads h-n..h+n
    (zeros where absent) at positions c·b-m .. c·b+b-1+m (zeros outside the sequence)."""
    B, H, T, dh = x.shape
    N, W = 2 * n + 1, b + 2 * m
    x = F.pad(x, (0, 0, m, L - T + m, n, n))  # (B, H + 2n, L + 2m, d_h)
    x = x.unfold(1, N, 1).unfold(2, W, b)  # (B, H, L/b, d_h, N, W)
    return x.permute(0, 1, 2, 4, 5, 3).reshape(B, H, L // b, N * W, dh)


def _slices(x: Tensor, m: int, b: int, L: int, fill: bool) -> Tensor:
    """(..., T) -> (..., L/b, W): the key slice of each block, ``fill`` outside the sequence."""
    return F.pad(x, (m, L - x.size(-1) + m), value=fill).unfold(-1, b + 2 * m, b)


def _area_mask(H, T, L, m, n, b, key_padding_mask, device) -> Tensor:
    """True where query r of block c may attend to slot (s, w) of its area: (B|1, H, L/b, b, N*W)."""
    N, W = 2 * n + 1, b + 2 * m
    r, w = torch.arange(b, device=device), torch.arange(W, device=device)
    band = ((w[None, :] - r[:, None]) >= 0) & ((w[None, :] - r[:, None]) <= 2 * m)  # (b, W): |i - j| <= m
    source = torch.arange(H, device=device)[:, None] + torch.arange(N, device=device) - n  # (H, N)
    present = (source >= 0) & (source < H)  # (H, N): absent heads masked, not wrapped
    exists = _slices(torch.ones(T, dtype=torch.bool, device=device), m, b, L, False)  # (L/b, W)
    beyond = (torch.arange(L, device=device) >= T).view(-1, b)  # (L/b, b): slots past the end
    if key_padding_mask is None:
        keys = exists[None, :, None, :] | beyond[None, :, :, None]  # (1, L/b, b, W)
    else:
        pad = key_padding_mask.to(device=device, dtype=torch.bool)  # (B, T)
        real_key = _slices(~pad, m, b, L, False)  # (B, L/b, W)
        pad_query = F.pad(pad, (0, L - T), value=True).view(-1, L // b, b)  # (B, L/b, b)
        # a real query sees real keys; a padding query every key that exists; a slot past the end all
        keys = (real_key[:, :, None, :] | (pad_query[:, :, :, None] & exists[None, :, None, :])
                | beyond[None, :, :, None])  # (B, L/b, b, W)
    allowed = (keys[:, None, :, :, None, :] & band[:, None, :]
               & present[:, None, None, :, None])  # (B|1, H, L/b, b, N, W)
    return allowed.flatten(-2)  # (B|1, H, L/b, b, N*W)
