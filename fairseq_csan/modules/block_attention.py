"""Bi-directional block self-attention: the BLOCK baseline of the CSAN paper's Table 1.

Tao Shen, Tianyi Zhou, Guodong Long, Jing Jiang and Chengqi Zhang, "Bi-Directional Block
Self-Attention for Fast and Memory-Efficient Sequence Modeling" (Bi-BloSAN), ICLR 2018,
section 3.1 (masked block self-attention: intra-block SAN, block summaries, inter-block SAN,
gate and context fusion; cited by section because we could not check its equation numbers),
in the multi-head framework of the Transformer.
With x_i the layer's input, the sentence cut into blocks of r tokens from its first token,
and b(i) the block of token i:

    h_i   = intra-block SAN: multi-head attention over the tokens of b(i) only, half the heads
            with DiSAN's forward mask and half with its backward mask (as ``bidirect``)
    v_b   = sum_{i in b} softmax_i(W_s2 elu(W_s1 h_i + b_s1) + b_s2) * h_i
            (multi-dimensional source2token attention: one softmax per feature)
    o     = inter-block SAN over v_1..v_n, directional like the intra-block one,
            with its own projections
    e_b   = G_b * o_b + (1 - G_b) * v_b,      G_b = sigmoid(W_g [o_b; v_b] + b_g)
    u_i   = e_b(i)                             (each block's result, back to its tokens)
    y_i   = F_i * elu(W_n [x_i; h_i; u_i] + b_n) + (1 - F_i) * x_i,
            F_i = sigmoid(W_f [x_i; h_i; u_i] + b_f)            (context fusion)

and the layer's output projection W_O applied to y, as for every variant. The intra-block
attention is computed block by block (the blocks become the batch), so it costs
O(T r) rather than O(T^2). New parameters per layer: 14 d^2 + 9 d (source2token 2 d^2,
inter-block SAN 4 d^2, block gate 2 d^2, fusion 6 d^2).

Choices where the paper is silent (see docs/implementation.md): blocks start at each sentence's first
token, whatever the padding; a block of padding only is left out of the inter-block SAN;
the directional masks keep the diagonal (as ``bidirect``); r defaults to 4, near Bi-BloSAN's
memory-optimal r = (2n)^(1/3) for WMT sentence lengths n of about 30.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .attention_core import sentence_positions
from .directional_attention import DirectionalAttention
from .registry import Option, register_self_attention


def _check_block_size(size):
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"--block-size must be a positive integer number of tokens r; got {size!r}")


BLOCK_SIZE = Option(
    "block_size", "BLOCK: tokens per block r (default {default}, near Bi-BloSAN's (2n)^(1/3) for n ~ 30)",
    convert=int, check=_check_block_size, default=4, metavar="R",  # see the module docstring
)


@register_self_attention("block")
class BlockSelfAttention(DirectionalAttention):
    """Intra-block directional attention, an inter-block attention over block summaries,
    and Bi-BloSAN's gates."""

    supports_context = False
    OPTIONS = (BLOCK_SIZE,)

    def __init__(self, embed_dim: int, num_heads: int, block_size: int = BLOCK_SIZE.default, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        self.block_size = BLOCK_SIZE.validate(block_size)
        d = embed_dim
        self.summary_hidden = nn.Linear(d, d)  # W_s1, b_s1
        self.summary_score = nn.Linear(d, d)  # W_s2, b_s2
        self.inter_block = DirectionalAttention(d, num_heads, dropout=self.dropout_module.p)
        self.block_gate = nn.Linear(2 * d, d)  # W_g, b_g
        self.fusion_gate = nn.Linear(3 * d, d)  # W_f, b_f
        self.fusion_value = nn.Linear(3 * d, d)  # W_n, b_n

    def attend_heads(self, query: Tensor, key_padding_mask=None, attn_mask=None, incremental_state=None) -> Tensor:
        T, B, d = query.shape
        r = self.block_size
        n = math.ceil(T / r)
        L = n * r
        pad = key_padding_mask
        if pad is None:
            pad = torch.zeros(B, T, dtype=torch.bool, device=query.device)
        pad = pad.to(torch.bool)
        # align every sentence to slot 0 (left padding moves to the end), so blocks start at its first token
        positions, _ = sentence_positions(pad, B, T, query.device)  # (B, T); slot t holds position t - first
        back = positions % T  # slot t sits at aligned slot back[b, t]
        take = (torch.arange(T, device=query.device) - positions[:, :1]) % T  # aligned slot a holds slot take[b, a]
        x = query.gather(0, take.t()[:, :, None].expand(T, B, d))
        pad = F.pad(pad.gather(1, take), (0, L - T), value=True)  # (B, L)
        x = F.pad(x, (0, 0, 0, 0, 0, L - T))  # (L, B, d)

        # intra-block SAN: the blocks become the batch
        blocks = x.view(n, r, B, d).permute(1, 2, 0, 3).reshape(r, B * n, d)
        block_pad = pad.view(B * n, r)
        h = super().attend_heads(blocks, block_pad)  # (r, B*n, d)

        # source2token summary of each block, one softmax per feature
        empty = block_pad.all(dim=1)  # (B*n,) blocks of padding only
        scores = self.summary_score(F.elu(self.summary_hidden(h)))
        scores = scores.masked_fill((block_pad & ~empty[:, None]).t()[:, :, None], float("-inf"))
        weights = torch.softmax(scores, dim=0, dtype=torch.promote_types(scores.dtype, torch.float32)).to(h.dtype)
        v = (weights * h).sum(dim=0).view(B, n, d).transpose(0, 1)  # (n, B, d)

        # inter-block SAN and the block gate
        empty = empty.view(B, n)
        o, _ = self.inter_block(v, v, v, key_padding_mask=empty)
        g = torch.sigmoid(self.block_gate(torch.cat([o, v], dim=-1)))
        e = g * o + (1 - g) * v  # (n, B, d)

        # context fusion, token by token
        u = e.repeat_interleave(r, dim=0)  # (L, B, d)
        h = h.view(r, B, n, d).permute(2, 0, 1, 3).reshape(L, B, d)
        both = torch.cat([x, h, u], dim=-1)
        f = torch.sigmoid(self.fusion_gate(both))
        y = f * F.elu(self.fusion_value(both)) + (1 - f) * x  # (L, B, d)

        return y[:T].gather(0, back.t()[:, :, None].expand(T, B, d))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, block_size={self.block_size}"
