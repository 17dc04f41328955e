"""Gaussian localness biases: the NEIGHBOR, LOCAL_HARD and LOCAL_SOFT baselines of the
CSAN paper's Table 1 (Yang et al., NAACL 2019).

All three add a Gaussian bias G to the energies before the softmax, in the form of
Baosong Yang, Zhaopeng Tu, Derek F. Wong, Fandong Meng, Lidia S. Chao and Tong Zhang,
"Modeling Localness for Self-Attention Networks", EMNLP 2018, section 3 (the Gaussian bias,
central position prediction and the query-specific window; cited by section because we
could not check its equation numbers against the paper's text)::

    ATT(Q, K) = softmax(energy + G)
    G_ij      = -(j - P_i)^2 / (2 sigma_i^2),   sigma_i = D_i / 2
    [p_i; z_i] = [U_p^T; U_d^T] tanh(W_p Q_i)
    [P_i; D_i] = I * sigmoid([p_i; z_i])

with Q_i the query of token i (all heads, before the split), W_p in R^{d x d}, U_p and
U_d in R^d, and I the sentence length (``--locality-hidden`` N makes W_p N x d). They differ in what is predicted:

- ``neighbor`` (Sperber et al., "Self-Attentional Acoustic Models", Interspeech 2018,
  whose Gaussian mask -(i - j)^2 / (2 sigma^2) is centred on the token): P_i = i, and the
  width D_i is predicted as the CSAN paper describes it (Sperber et al. learn one sigma per
  head instead; see docs/implementation.md);
- ``local_hard`` (Luong et al., "Effective Approaches to Attention-based Neural Machine
  Translation", EMNLP 2015, local-p, eqs. 9-10): the centre P_i is predicted, the width
  is a fixed D (``--local-window``, Luong's D = 10, so sigma = 5);
- ``local_soft`` (Yang et al. 2018, query-specific window): both, from one shared W_p.

Positions j and P_i count from 0 at the sentence's first token (whatever the padding) and
I is the sentence's real length. The bias is shared by all heads, as in Yang et al. 2018,
and computed once per layer as one (B, T, T) tensor: no loop over positions or heads.

Numerics (exact where it matters): each row's bias is shifted by its largest value over
real keys, which the softmax ignores, then kept within [-1e4, 0] so that it is finite in
every precision (a real query's real keys are <= 0 after the shift already; the ceiling only
touches padding keys, which a padding query's row may hold closer to its centre); D_i is
floored at 1e-6 so that sigma_i is never 0.
"""

from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor

from .attention_core import SelfAttention, sentence_positions
from .registry import Option, register_self_attention

_BIAS_FLOOR = -1e4
_WIDTH_FLOOR = 1e-6


def _check_hidden(hidden):
    if not isinstance(hidden, int) or hidden < 1:
        raise ValueError(f"--locality-hidden must be a positive integer; got {hidden!r}")


def _check_window(window):
    if not isinstance(window, (int, float)) or isinstance(window, bool) or not window > 0:
        raise ValueError(
            f"--local-window must be a positive number of tokens D (sigma = D / 2); got {window!r}"
        )


HIDDEN = Option(
    "locality_hidden", "NEIGHBOR / LOCAL_HARD / LOCAL_SOFT: rows of W_p, the predictor's hidden size "
    "(default: the model dimension d, as in Yang et al. 2018)",
    keyword="hidden", convert=int, check=_check_hidden, metavar="N",  # no default: d, known at build
)
WINDOW = Option(
    "local_window", "LOCAL_HARD: the fixed window D of the Gaussian, sigma = D / 2 (default: Luong et al. "
    "2015's {default:g})",
    keyword="window", convert=float, check=_check_window, default=10.0, metavar="D",  # Luong et al. 2015, local-p
)


class GaussianBiasAttention(SelfAttention):
    """Self-attention plus the Gaussian bias of Yang et al. 2018 eq. 4; subclasses say
    which of the centre and the width are predicted (eqs. 5-8)."""

    predicts_centre = True
    predicts_width = True

    OPTIONS = (HIDDEN,)

    def __init__(self, embed_dim: int, num_heads: int, hidden: Optional[int] = HIDDEN.default, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        hidden = embed_dim if hidden is None else HIDDEN.validate(hidden)
        self.predictor = nn.Linear(embed_dim, hidden, bias=False)  # W_p
        n_scalars = int(self.predicts_centre) + int(self.predicts_width)
        self.scalars = nn.Linear(hidden, n_scalars, bias=False)  # rows U_p^T and/or U_d^T
        nn.init.xavier_uniform_(self.predictor.weight)

    def centre_and_width(self, q: Tensor, positions: Tensor, lengths: Tensor):
        """P_i and D_i, each (B, T), in float32 at least."""
        B, H, T, dh = q.shape
        query = q.transpose(1, 2).reshape(B, T, H * dh)  # Q_i, (B, T, d)
        raw = self.scalars(torch.tanh(self.predictor(query)))  # (B, T, 1 or 2)
        raw = raw.to(torch.promote_types(raw.dtype, torch.float32))
        scaled = torch.sigmoid(raw) * lengths[:, None, None].to(raw.dtype)  # eqs. 6, 8
        column = iter(scaled.unbind(-1))
        centre = next(column) if self.predicts_centre else positions.to(raw.dtype)
        width = next(column) if self.predicts_width else torch.full_like(centre, float(self.window))
        return centre, width

    def score_bias(self, q: Tensor, key_padding_mask) -> Tensor:
        B, _, T, _ = q.shape
        positions, lengths = sentence_positions(key_padding_mask, B, T, q.device)
        centre, width = self.centre_and_width(q, positions, lengths)
        sigma = width.clamp(min=_WIDTH_FLOOR) / 2
        gap = positions[:, None, :].to(centre.dtype) - centre[:, :, None]  # (B, T, T): j - P_i
        bias = -gap.pow(2) / (2 * sigma.pow(2)[:, :, None])  # eq. 4
        real_keys = bias if key_padding_mask is None else bias.masked_fill(key_padding_mask[:, None, :], float("-inf"))
        bias = (bias - real_keys.amax(dim=-1, keepdim=True)).clamp(min=_BIAS_FLOOR, max=0.0)
        return bias[:, None]  # (B, 1, T, T): the same for every head


@register_self_attention("neighbor")
class NeighborAttention(GaussianBiasAttention):
    """Gaussian centred on the token itself, with a predicted width (Sperber et al. 2018)."""

    predicts_centre = False


@register_self_attention("local_hard")
class LocalHardAttention(GaussianBiasAttention):
    """Predicted centre, fixed width D (Luong et al. 2015, local-p)."""

    predicts_width = False
    OPTIONS = (WINDOW,)

    def __init__(self, embed_dim: int, num_heads: int, window: float = WINDOW.default, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        self.window = WINDOW.validate(window)

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, window={self.window}"


@register_self_attention("local_soft")
class LocalSoftAttention(GaussianBiasAttention):
    """Predicted centre and width from one shared W_p (Yang et al. 2018, query-specific)."""
