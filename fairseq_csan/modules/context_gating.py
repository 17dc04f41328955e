"""Context-aware self-attention: queries and keys gated with global and deep context.

Baosong Yang, Jian Li, Derek F. Wong, Lidia S. Chao, Xing Wang and Zhaopeng Tu,
"Context-Aware Self-Attention Networks", AAAI 2019, eqs. 5-10.

With Q and K the usual projections of the layer input H^l (eq. 1, before the head split
and the scaling) and C the context of layer l::

    Q^  = (1 - lQ) Q + lQ (C U_Q)                 K^ likewise with U_K, vK     (5)
    lQ  = sigmoid(Q vQ_H + (C U_Q) vQ_C)           one scalar per token          (6)
    O   = ATT(Q^, K^) V                            the core, unchanged           (7)

The context types (``--ctx-type``):

    global            C = mean(H^l) over the real tokens, one vector        (8)
    deep              C = [H^1, ..., H^{l-1}] per token; layer 1 has none   (9)
    deep-global       C = [mean H^1, ..., mean H^l], one vector             (10)
    deep-global+deep  the last two concatenated, [deep-global, deep]

On the decoder side (footnote 2) the mean at step t is over the tokens 1..t (the causal
prefix mean). Since C U is linear in C, a context made of per-sentence means is projected
once per sentence (encoder) and broadcast to its tokens; only the deep part is per token.

Choices where the paper is silent, made here once (see docs/implementation.md):

- H^l is the input that layer l's self-attention receives: the layer input in the papers'
  post-norm Transformer, and in a pre-norm one (``--encoder-normalize-before``) the
  normalised input.
- One gate per token, shared by every head (the paper's eq. 6); no bias in eq. 6.
- U_Q and U_K are initialised like fairseq's projections (Xavier uniform); the gate vectors
  start at zero, so every gate starts at 0.5.
- Means are accumulated in float32 at least, whatever the model's precision.
"""

from contextlib import contextmanager
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

CONTEXT_TYPES = ("global", "deep", "deep-global", "deep-global+deep")
CONTEXT_SIDES = ("encoder", "decoder", "both")
CONTEXT_GATES = ("query", "key", "both")
# Where gating applies and what it gates when --ctx-type is given alone; the *_ctxaware
# architectures also set --ctx-type: the AAAI paper's best, deep-global+deep (Table 1 row 5).
CONTEXT_DEFAULTS = {"ctx_side": "encoder", "ctx_gate": "both"}
CTXAWARE_TYPE = "deep-global+deep"


def context_layers(ctx_type: str, layer: int) -> Tuple[List[int], List[int]]:
    """The layers (1-based) whose mean, and whose per-token input, make up C of ``layer``."""
    if ctx_type not in CONTEXT_TYPES:
        raise ValueError(f"--ctx-type must be one of {', '.join(CONTEXT_TYPES)}; got {ctx_type!r}")
    means = {"global": [layer], "deep": []}.get(ctx_type, list(range(1, layer + 1)))
    states = list(range(1, layer)) if ctx_type in ("deep", "deep-global+deep") else []
    return means, states


class ContextHistory:
    """What the layers of one encoder or decoder pass have seen so far: each layer's input
    H^l and its mean. The encoder or decoder opens it around a pass with :meth:`recording`;
    the layers' self-attentions fill and read it, bottom up."""

    def __init__(self, causal: bool):
        self.causal = causal  # decoder side: prefix means
        self._clear()

    def _clear(self):
        self.active = False
        self.padding_mask: Optional[Tensor] = None
        self.incremental_state = None
        self.states: Dict[int, Tensor] = {}
        self.means: Dict[int, Tensor] = {}

    @contextmanager
    def recording(self, padding_mask: Optional[Tensor], incremental_state=None):
        """``padding_mask``: (B, T) bool, True at padding, for the positions of this pass."""
        self._clear()
        self.active = True
        self.padding_mask, self.incremental_state = padding_mask, incremental_state
        try:
            yield self
        finally:
            self._clear()


class ContextGating:
    """Mixin: makes any registered self-attention context-aware by refining ``project``.

    Use :func:`context_aware` to combine it with a class; the result is an ordinary
    subclass of that class, so its structure (2D-CSAN's area, say) is kept as it is.
    """

    def __init__(self, embed_dim: int, num_heads: int, *, history: ContextHistory, layer: int,
                 ctx_type: str, ctx_gate: str = "both", **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        if ctx_gate not in CONTEXT_GATES:
            raise ValueError(f"--ctx-gate must be one of {', '.join(CONTEXT_GATES)}; got {ctx_gate!r}")
        self.history, self.layer, self.ctx_type, self.ctx_gate = history, layer, ctx_type, ctx_gate
        self.mean_layers, self.state_layers = context_layers(ctx_type, layer)
        self.keeps_mean = ctx_type != "deep"  # some layer at or above this one needs our mean
        self.keeps_state = ctx_type in ("deep", "deep-global+deep")
        gated = {"query": ("q",), "key": ("k",), "both": ("q", "k")}[ctx_gate]
        self.gated = gated if (self.mean_layers or self.state_layers) else ()
        n_out = len(self.gated) * embed_dim  # U_Q and U_K side by side
        # C U = (means) U_mean + (states) U_state: the rows of U split by the kind of context
        self.u_mean = nn.Linear(len(self.mean_layers) * embed_dim, n_out, bias=False) if self.gated and self.mean_layers else None
        self.u_state = nn.Linear(len(self.state_layers) * embed_dim, n_out, bias=False) if self.gated and self.state_layers else None
        for u in (self.u_mean, self.u_state):
            if u is not None:
                nn.init.xavier_uniform_(u.weight)
        # the gate vectors v^H (on Q or K) and v^C (on C U), one row per gated projection
        self.v_state = nn.Parameter(torch.zeros(len(self.gated), embed_dim)) if self.gated else None
        self.v_context = nn.Parameter(torch.zeros(len(self.gated), embed_dim)) if self.gated else None
        self.gate_sink: Optional[list] = None  # set by record_gates() to collect the gates

    def start_as_standard(self):
        """U_Q and U_K zero and the gated projections doubled: with the gate vectors at their
        zero start every gate is sigmoid(0) = 1/2, so Q^ = (1 - 1/2) 2Q + 1/2 (C 0) = Q (and K^
        likewise), the attention its weights came from, exactly, until training moves them."""
        own = super().start_as_standard()
        if not self.gated:
            return own
        with torch.no_grad():
            for u in (self.u_mean, self.u_state):
                if u is not None:
                    u.weight.zero_()
            self.v_state.zero_()
            self.v_context.zero_()
            for name in self.gated:
                projection = getattr(self, f"{name}_proj")
                projection.weight.mul_(2)
                if projection.bias is not None:
                    projection.bias.mul_(2)
        gated = " and ".join(f"{n.upper()}" for n in self.gated)
        mine = f"U zero, v zero, {gated} projections doubled (each gate 1/2, so the gated {gated} equal the source's)"
        return mine if own is None else f"{own}; {mine}"

    def project(self, x: Tensor):
        q, k, v = super().project(x)
        h = self.history
        if not h.active:
            raise RuntimeError(
                f"{type(self).__name__} (layer {self.layer}) must run inside a context-aware encoder or "
                "decoder, which records the inputs of the layers below; it was called on its own"
            )
        if self.keeps_mean:
            h.means[self.layer] = self._mean(x)
        if self.keeps_state:
            h.states[self.layer] = x
        if not self.gated:
            return q, k, v
        cu = None  # C U, (T or 1, B, n_gated * d)
        if self.u_mean is not None:
            means = torch.cat([h.means[j] for j in self.mean_layers], dim=-1).to(x.dtype)
            cu = self.u_mean(means)
        if self.u_state is not None:
            deep = self.u_state(torch.cat([h.states[j] for j in self.state_layers], dim=-1))
            cu = deep if cu is None else deep + cu
        out = {"q": q, "k": k}
        gates = {}
        for i, (name, cu_i) in enumerate(zip(self.gated, cu.chunk(len(self.gated), dim=-1))):
            lam = torch.sigmoid(out[name] @ self.v_state[i] + cu_i @ self.v_context[i]).unsqueeze(-1)  # (T, B, 1)
            out[name] = torch.lerp(out[name], cu_i, lam)  # (1 - lam) Q + lam (C U)
            gates[name] = lam
        if self.gate_sink is not None:
            self.gate_sink.append({"layer": self.layer, "padding_mask": h.padding_mask,
                                   **{f"lambda_{n}": g.squeeze(-1).t().detach() for n, g in gates.items()}})
        return out["q"], out["k"], v

    def _mean(self, x: Tensor) -> Tensor:
        """Mean of x (T, B, d) over real tokens: (1, B, d), or (T, B, d) prefix means (causal)."""
        pad = self.history.padding_mask
        real = None if pad is None else (~pad).t().unsqueeze(-1).to(x.dtype)  # (T, B, 1)
        xr = x if real is None else x * real
        T, B, _ = x.shape
        acc = torch.promote_types(x.dtype, torch.float32)  # float32 at least
        if not self.history.causal:
            total = xr.sum(0, keepdim=True, dtype=acc)
            count = torch.full((1, B, 1), T, dtype=acc, device=x.device) if real is None else real.sum(0, keepdim=True, dtype=acc)
            return total / count.clamp(min=1)
        total = xr.cumsum(0, dtype=acc)
        if real is None:
            count = torch.arange(1, T + 1, dtype=acc, device=x.device).view(T, 1, 1).expand(T, B, 1)
        else:
            count = real.cumsum(0, dtype=acc)
        state = self.history.incremental_state
        if state is not None:  # carry the sums of the earlier steps; beam search reorders them
            saved = self._get_input_buffer(state)
            if "context_sum" in saved:
                total = total + saved["context_sum"].unsqueeze(0)
                count = count + saved["context_count"].unsqueeze(0)
            saved["context_sum"], saved["context_count"] = total[-1], count[-1]  # (B, d), (B, 1)
            self._set_input_buffer(state, saved)
        return total / count.clamp(min=1)

    def extra_repr(self) -> str:
        gated = "+".join(self.gated) or "none"
        own = f"layer={self.layer}, ctx_type={self.ctx_type}, gated={gated}"
        return ", ".join(r for r in (super().extra_repr(), own) if r)


_CONTEXT_AWARE = {}


def context_aware(cls):
    """The context-aware form of a self-attention class: ``ContextGating`` over ``cls``."""
    if cls not in _CONTEXT_AWARE:
        _CONTEXT_AWARE[cls] = type(f"ContextAware{cls.__name__}", (ContextGating, cls), {"__module__": __name__})
    return _CONTEXT_AWARE[cls]


@contextmanager
def record_gates(model):
    """Collect the gate values of every context-aware self-attention of ``model``.

    Inside the block, each forward pass appends one record per contextualised layer to the
    list it yields: ``{"side": "encoder"|"decoder", "layer": l (1-based), "lambda_q": (B, T),
    "lambda_k": (B, T), "padding_mask": (B, T) or None}`` (only the gated projections have a
    ``lambda_``). Outside the block nothing is recorded and training pays nothing::

        with record_gates(model) as gates:
            model(**sample["net_input"])
    """
    records: List[dict] = []
    modules = []
    for module in model.modules():
        if isinstance(module, ContextGating) and module.gated:
            side = "decoder" if module.history.causal else "encoder"
            module.gate_sink = _SideSink(records, side)
            modules.append(module)
    try:
        yield records
    finally:
        for module in modules:
            module.gate_sink = None


class _SideSink:
    def __init__(self, records: list, side: str):
        self.records, self.side = records, side

    def append(self, record: dict):
        self.records.append({"side": self.side, **record})
