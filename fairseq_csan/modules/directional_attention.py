"""Directional self-attention: the BI_DIRECT baseline of the CSAN paper's Table 1.

Tao Shen, Tianyi Zhou, Guodong Long, Jing Jiang, Shirui Pan and Chengqi Zhang, "DiSAN:
Directional Self-Attention Network for RNN/CNN-Free Language Understanding", AAAI 2018,
section "Directional Self-Attention" (its sections are unnumbered): the positional masks
added to the energies f(h_i, h_j) of token j attending to token i::

    M^fw_ij = 0 if i < j else -inf        M^bw_ij = 0 if i > j else -inf

so the forward mask sees the past and the backward mask the future. DiSAN runs one forward
and one backward block and concatenates them; inside multi-head attention (as the CSAN paper
re-implements it, Yang et al., NAACL 2019, Table 1) the first ceil(H/2) heads take the
forward mask and the rest the backward mask, so the layer's output still concatenates both
directions.

Choice where the paper is silent (see docs/implementation.md): each token also attends to itself.
DiSAN's strict masks leave the first token's forward row and the last token's backward
row empty; keeping the diagonal gives every row at least one key. No parameter is added.
"""

import torch
from torch import Tensor

from .attention_core import SelfAttention
from .registry import register_self_attention


@register_self_attention("bidirect")
class DirectionalAttention(SelfAttention):
    """Heads 1..ceil(H/2) attend to positions j <= i, the others to positions j >= i."""

    def structure_mask(self, seq_len: int, device) -> Tensor:
        pos = torch.arange(seq_len, device=device)
        past = pos[None, :] <= pos[:, None]  # (T, T): key j at or before query i
        forward_heads = (self.num_heads + 1) // 2
        is_forward = (torch.arange(self.num_heads, device=device) < forward_heads)[:, None, None]  # (H, 1, 1)
        return torch.where(is_forward, past, past.t())  # (H, T, T)

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, forward_heads={(self.num_heads + 1) // 2}"
