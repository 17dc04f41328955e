"""Convolutions in front of the self-attention: the CNNs baseline of the CSAN paper's Table 1.

Adams Wei Yu, David Dohan, Minh-Thang Luong, Rui Zhao, Kai Chen, Mohammad Norouzi and
Quoc V. Le, "QANet: Combining Local Convolution with Global Self-Attention for Reading
Comprehension", ICLR 2018, section 2.2 (the encoder block, its Figure 1): a stack of
convolution sublayers, each inside a residual block with layer normalisation, feeds the
self-attention sublayer::

    x^0 = x,   x^c = x^{c-1} + relu(conv_c(layernorm(x^{c-1})))   for c = 1..C
    the self-attention sublayer then runs on x^C (its residual is around x^C)

with QANet's depthwise separable convolutions (a kernel-w convolution per channel, then a
d x d pointwise one) of kernel w = 7 and C = 4 (its embedding encoder block). fairseq's
layer adds the self-attention's output to the layer input x; this module returns
SAN(x^C) + (x^C - x), so the sum is x^C + SAN(x^C), QANet's residual around the attention.
The layer's dropout then applies to the convolutions' residual branches too. (That algebra
is the post-norm layer's, fairseq's default and the papers'; with --encoder-normalize-before
the module receives LN(x), and the layer computes x + dropout(SAN(x^C) + x^C - LN(x)).)

Padding slots are zeroed before each convolution, so a sentence sees zeros beyond its
edges whatever the padding side. ``--cnn-conv full`` uses ordinary d x d x w convolutions
instead (see docs/architectures.md on the paper's +42.6M).
"""

import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import LayerNorm
from torch import Tensor

from .attention_core import SelfAttention
from .registry import Option, register_self_attention

CONV_KINDS = ("separable", "full")


def _check_layers(layers):
    if not isinstance(layers, int) or layers < 1:
        raise ValueError(f"--cnn-layers must be a positive integer (QANet: {LAYERS.default}); got {layers!r}")


def _check_kernel(kernel):
    if not isinstance(kernel, int) or kernel < 1 or kernel % 2 == 0:
        raise ValueError(f"--cnn-kernel must be a positive odd integer, centred on the token "
                         f"(QANet: {KERNEL.default}); got {kernel!r}")


# QANet's (Yu et al. 2018) encoder block: 4 depthwise-separable convolutions of width 7
LAYERS = Option("cnn_layers", "CNNs: convolution sublayers in front of the self-attention (default: QANet's {default})",
                keyword="conv_layers", convert=int, check=_check_layers, default=4, metavar="C")
KERNEL = Option("cnn_kernel", "CNNs: convolution kernel width, odd (default: QANet's {default})",
                keyword="kernel", convert=int, check=_check_kernel, default=7, metavar="W")
CONV = Option("cnn_conv", f"CNNs: {' or '.join(CONV_KINDS)} convolutions (default: QANet's {{default}})",
              keyword="conv", choices=CONV_KINDS, default="separable", metavar="KIND")


class ConvSublayer(nn.Module):
    """x + relu(conv(layernorm(x))), on (B, d, T) with padding slots zeroed first."""

    def __init__(self, dim: int, kernel: int, kind: str):
        super().__init__()
        self.norm = LayerNorm(dim)
        if kind == "separable":
            self.conv = nn.Sequential(
                nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim, bias=False),  # depthwise
                nn.Conv1d(dim, dim, 1),  # pointwise
            )
        else:
            self.conv = nn.Conv1d(dim, dim, kernel, padding=kernel // 2)

    def forward(self, x: Tensor, keep: Tensor) -> Tensor:
        """x: (T, B, d); keep: (T, B, 1), 0 at padding."""
        y = self.norm(x) * keep
        y = self.conv(y.permute(1, 2, 0)).permute(2, 0, 1)  # (T, B, d)
        return x + F.relu(y)


@register_self_attention("cnn")
class ConvolutionFrontAttention(SelfAttention):
    """C convolution sublayers (QANet) in front of standard self-attention."""

    supports_context = False
    OPTIONS = (LAYERS, KERNEL, CONV)

    def __init__(self, embed_dim: int, num_heads: int, conv_layers: int = LAYERS.default,
                 kernel: int = KERNEL.default, conv: str = CONV.default, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        LAYERS.validate(conv_layers)
        self.kernel, self.conv_kind = KERNEL.validate(kernel), CONV.validate(conv)
        self.convolutions = nn.ModuleList(ConvSublayer(embed_dim, kernel, conv) for _ in range(conv_layers))

    def forward(self, query: Tensor, key=None, value=None, key_padding_mask=None, incremental_state=None, **kwargs):
        if (key is not None and key is not query) or (value is not None and value is not query):
            raise ValueError(f"{type(self).__name__} is a self-attention: key and value must be the query")
        if incremental_state is not None:
            raise NotImplementedError(f"{type(self).__name__} is an encoder-side variant: no incremental decoding")
        keep = 1.0 if key_padding_mask is None else (~key_padding_mask.bool()).t()[:, :, None].to(query.dtype)
        x = query
        for sublayer in self.convolutions:
            x = sublayer(x, keep)
        out, _ = super().forward(x, key_padding_mask=key_padding_mask, **kwargs)
        return out + (x - query), None

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, conv_layers={len(self.convolutions)}, kernel={self.kernel}, conv={self.conv_kind}"
