"""Relative position representations: the REL_POS baseline of the CSAN paper's Table 1.

Peter Shaw, Jakob Uszkoreit and Ashish Vaswani, "Self-Attention with Relative Position
Representations", NAACL 2018: eqs. 3-4 (section 3.1) and the clipping of section 3.2::

    z_i  = sum_j alpha_ij (v_j + a^V_ij),  alpha_ij = softmax_j(e_ij)          (3)
    e_ij = q_i . (k_j + a^K_ij) / sqrt(d_h)                                   (4)
    a^K_ij = w^K_clip(j - i, k),  a^V_ij = w^V_clip(j - i, k),
    clip(x, k) = max(-k, min(k, x))                                           (section 3.2)

with 2k + 1 learned vectors w^K and w^V of size d_h in each layer. Section 4.1: the base
model uses k = 16 with separate representations per layer and head, the big model k = 8
with one set per layer, shared by the heads (``--relpos-tables per-head | shared``).

The key term is an additive bias on the energies, q_i . w^K_r gathered from the (T, 2k + 1)
products (section 3.3's split); the value term sums each row's attention weights per clipped
distance (a scatter-add) and multiplies by w^V. Both are batched tensor operations, no loop
over positions or heads. The value term needs the attention weights, so this variant computes
the softmax itself instead of calling the fused kernel.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .attention_core import SelfAttention
from .registry import Option, register_self_attention

TABLE_KINDS = ("per-head", "shared")


def _check_clip(clip):
    if not isinstance(clip, int) or clip < 1:
        raise ValueError(f"--relpos-clip must be a positive integer; got {clip!r}")


# Shaw et al. 2018, section 4.1: k = 16 and a table per head for base, k = 8 shared for big
CLIP = Option("relpos_clip", "REL_POS: relative distances are clipped to [-K, K] (default: Shaw et al.'s "
              "{default} base, {big_default} big)",
              keyword="clip", convert=int, check=_check_clip, default=16, big_default=8, metavar="K")
TABLES = Option("relpos_tables", "REL_POS: one table per head or one shared by the heads, per layer "
                "(default: Shaw et al.'s {default} base, {big_default} big)",
                keyword="tables", choices=TABLE_KINDS, default="per-head", big_default="shared",
                metavar="KIND")


@register_self_attention("relpos")
class RelativePositionAttention(SelfAttention):
    """Self-attention with clipped relative position representations on keys and values."""

    OPTIONS = (CLIP, TABLES)

    def __init__(self, embed_dim: int, num_heads: int, clip: int = CLIP.default, tables: str = TABLES.default,
                 **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        self.clip, self.tables = CLIP.validate(clip), TABLES.validate(tables)
        n_tables = num_heads if tables == "per-head" else 1
        self.rel_keys = nn.Parameter(torch.empty(n_tables, 2 * clip + 1, self.head_dim))  # w^K_{-k..k}
        self.rel_values = nn.Parameter(torch.empty(n_tables, 2 * clip + 1, self.head_dim))  # w^V_{-k..k}
        for table in (self.rel_keys, self.rel_values):
            for head in table:
                nn.init.xavier_uniform_(head)

    def start_as_standard(self):
        """Zero tables: every a^K_ij and a^V_ij is 0, so eqs. 3-4 are the standard attention
        until training moves them."""
        with torch.no_grad():
            self.rel_keys.zero_()
            self.rel_values.zero_()
        return "w^K and w^V zero (eqs. 3-4 are then the standard attention)"

    def _distance_index(self, seq_len: int, device) -> Tensor:
        """(T, T): clip(j - i, k) + k, the row of w^K / w^V for query i and key j."""
        pos = torch.arange(seq_len, device=device)
        return (pos[None, :] - pos[:, None]).clamp(-self.clip, self.clip) + self.clip

    def score_bias(self, q: Tensor, key_padding_mask) -> Tensor:
        """Eq. 4's second term, q_i . a^K_ij / sqrt(d_h): (B, H, T, T)."""
        B, H, T, dh = q.shape
        by_distance = q @ self.rel_keys.to(q.dtype).transpose(1, 2) / math.sqrt(dh)  # (B, H, T, 2k+1)
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
        return f"heads={self.num_heads}, clip={self.clip}, tables={self.tables}"
