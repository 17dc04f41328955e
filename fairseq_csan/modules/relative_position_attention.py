"""Relative position representations: the REL_POS baseline of the CSAN paper's Table 1.

Peter Shaw, Jakob Uszkoreit and Ashish Vaswani, "Self-Attention with Relative Position
Representations", NAACL 2018, eqs. 3-4 (how they enter the attention) and 5-6 (clipping)::

    e_ij = q_i . (k_j + a^K_ij) / sqrt(d_h)                                   (4)
    z_i  = sum_j alpha_ij (v_j + a^V_ij),  alpha_ij = softmax_j(e_ij)          (3)
    a^K_ij = w^K_clip(j - i, k),  a^V_ij = w^V_clip(j - i, k),
    clip(x, k) = max(-k, min(k, x))                                           (5, 6)

with 2k + 1 learned vectors w^K and w^V of size d_h per layer, shared by the heads (as the
paper's section 3.3 does). The key term is an additive bias on the energies,
q_i . w^K_r gathered from the (T, 2k + 1) products; the value term sums each row's
attention weights per clipped distance (a scatter-add) and multiplies by w^V. Both are
batched tensor operations, no loop over positions. The value term needs the attention
weights, so this variant computes the softmax itself instead of calling the fused kernel.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .attention_core import SelfAttention
from .registry import register_self_attention


def _check_clip(clip):
    if not isinstance(clip, int) or clip < 1:
        raise ValueError(f"--relpos-clip must be a positive integer (Shaw et al.: 16); got {clip!r}")


@register_self_attention("relpos")
class RelativePositionAttention(SelfAttention):
    """Self-attention with clipped relative position representations on keys and values."""

    def __init__(self, embed_dim: int, num_heads: int, clip: int = 16, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        _check_clip(clip)
        self.clip = clip
        self.rel_keys = nn.Parameter(torch.empty(2 * clip + 1, self.head_dim))  # w^K_{-k..k}
        self.rel_values = nn.Parameter(torch.empty(2 * clip + 1, self.head_dim))  # w^V_{-k..k}
        nn.init.xavier_uniform_(self.rel_keys)
        nn.init.xavier_uniform_(self.rel_values)

    @staticmethod
    def add_args(parser):
        parser.add_argument(
            "--relpos-clip", type=int, metavar="K",
            help="REL_POS: relative distances are clipped to [-K, K] (Shaw et al. 2018: 16)",
        )

    @classmethod
    def check_args(cls, args):
        _check_clip(getattr(args, "relpos_clip", None))

    @classmethod
    def options(cls, args) -> dict:
        return {"clip": args.relpos_clip}

    def _distance_index(self, seq_len: int, device) -> Tensor:
        """(T, T): clip(j - i, k) + k, the row of w^K / w^V for query i and key j."""
        pos = torch.arange(seq_len, device=device)
        return (pos[None, :] - pos[:, None]).clamp(-self.clip, self.clip) + self.clip

    def score_bias(self, q: Tensor, key_padding_mask) -> Tensor:
        """Eq. 4's second term, q_i . a^K_ij / sqrt(d_h): (B, H, T, T)."""
        B, H, T, dh = q.shape
        by_distance = q @ self.rel_keys.to(q.dtype).t() / math.sqrt(dh)  # (B, H, T, 2k+1)
        index = self._distance_index(T, q.device).expand(B, H, T, T)
        return by_distance.gather(-1, index)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout_p: float) -> Tensor:
        """Eq. 3: the softmax of eq. 4's energies, then values plus a^V."""
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))  # (B, H, T, T)
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask
        alpha = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(q.dtype)
        alpha = F.dropout(alpha, p=dropout_p, training=dropout_p > 0)
        B, H, T, S = alpha.shape
        index = self._distance_index(T, q.device).expand(B, H, T, S)
        by_distance = alpha.new_zeros(B, H, T, 2 * self.clip + 1).scatter_add_(-1, index, alpha)
        return alpha @ v + by_distance @ self.rel_values.to(q.dtype)

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, clip={self.clip}"
