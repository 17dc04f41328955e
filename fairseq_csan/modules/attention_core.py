"""The shared self-attention core that every self-attention variant refines.

Multi-head scaled dot-product self-attention (Vaswani et al., NeurIPS 2017; written as
eqs. 1-3 in Yang et al., "Convolutional Self-Attention Networks", NAACL 2019,
arXiv:1904.03107):

    Q, K, V = X W_Q, X W_K, X W_V            split into H heads of d_h = d / H   (1)
    o_i^h   = sum_j softmax_j(q_i^h . k_j^h / sqrt(d_h)) v_j^h                   (2)
    O       = [O^1, ..., O^H] W_O                                                (3)

The parameters are fairseq's own (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` of
:class:`fairseq.modules.MultiheadAttention`), so every variant has the parameter count,
the initialisation and the state-dict keys of the standard layer.

A variant refines exactly one of these steps and nothing else:

- :meth:`SelfAttention.project`: how Q, K and V are made from X (context-aware gating);
- :meth:`SelfAttention.gather_keys`: which keys and values each head sees
  (2D-CSAN's cross-head area);
- :meth:`SelfAttention.structure_mask`: which (query, key) pairs may attend,
  independent of the batch (local windows, directions, blocks);
- :meth:`SelfAttention.score_bias`: an additive bias on the energies of eq. 2
  (Gaussian localness, relative positions on keys);
- :meth:`SelfAttention.attend`: eq. 2 itself, for a variant that changes what is summed
  (relative positions on values).

Variants that also change the layer around the attention extend
:meth:`SelfAttention.attend_heads` (a second attention over block summaries, before the
output projection) or :meth:`SelfAttention.forward` (convolutions in front of the
attention), and call the core for the attention itself.

Padding, the causal mask and the key cache of incremental decoding (decoder side), the
fused softmax kernel (``F.scaled_dot_product_attention``), attention dropout and the
output projection live here once.
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from .registry import declared_options, register_self_attention


def _attention_by_matmul(q: Tensor, k: Tensor, v: Tensor, attn_mask: Optional[Tensor] = None,
                         dropout_p: float = 0.0) -> Tensor:
    """Eq. 2 as torch < 2.0 can compute it: softmax(q k^T / sqrt(d_h) + mask) v, with the
    semantics of ``F.scaled_dot_product_attention`` (a bool mask is True where a query may
    attend; a float mask is added to the energies)."""
    energies = torch.matmul(q, k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            energies = energies.masked_fill(~attn_mask, float("-inf"))
        else:
            energies = energies + attn_mask
    weights = torch.softmax(energies, dim=-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return torch.matmul(weights, v)


# PyTorch's fused kernel where it exists (torch >= 2.0), else the same computation by matmul
scaled_dot_product_attention = getattr(F, "scaled_dot_product_attention", _attention_by_matmul)


@register_self_attention("standard")
class SelfAttention(MultiheadAttention):
    """Standard multi-head self-attention on PyTorch's fused kernel.

    Registered as ``standard``: with it every layer computes exactly what fairseq's
    :class:`~fairseq.modules.MultiheadAttention` computes as a self-attention, in the
    encoder or (with the causal mask and incremental decoding) in the decoder.
    """

    supports_context = True  # whether context gating (a refined ``project``) may be put over it

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, **kwargs):
        super().__init__(embed_dim, num_heads, dropout=dropout, self_attention=True, **kwargs)

    # ---- configuration: flags, checks and construction ---------------------------------
    # A variant declares each of its settings once, as a registry.Option in ``OPTIONS`` (its own,
    # not those of the class it extends); the flags, defaults, checks, constructor keywords and
    # the settings kept in checkpoints all come from there.
    OPTIONS: tuple = ()

    @classmethod
    def check_args(cls, args):
        """Raise ``ValueError`` naming the flag and the allowed values for a bad setting (each
        option's own check; a variant extends this for a rule between settings)."""
        for option in declared_options(cls):
            option.validate(getattr(args, option.dest, None))

    @classmethod
    def options(cls, args) -> dict:
        """Constructor keyword arguments taken from the parsed flags."""
        return {option.keyword: getattr(args, option.dest, None) for option in declared_options(cls)}

    @classmethod
    def build(cls, embed_dim: int, num_heads: int, cfg, args, **extra):
        """Build from fairseq's TransformerConfig ``cfg`` and the parsed flags ``args``;
        ``extra`` are constructor arguments that do not come from flags (a mixin's)."""
        return cls(
            embed_dim,
            num_heads,
            dropout=cfg.attention_dropout,
            q_noise=cfg.quant_noise.pq,
            qn_block_size=cfg.quant_noise.pq_block_size,
            **cls.options(args),
            **extra,
        )

    # ---- a Transformer's weights, converted (fairseq_csan/recipes/convert.py) -----------
    def start_as_standard(self):
        """Called once this module holds a standard Transformer self-attention's weights (its
        q/k/v/out projections): set the variant's own parameters so that it starts as close to
        that attention as its form allows, and say how in a few words; None where it has no
        parameters of its own or keeps their usual initial values (the converter says so)."""
        return None

    # ---- the three steps a variant may refine ------------------------------------------
    def project(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Eq. 1: (T, B, d) -> Q, K, V, each (T, B, d), before the head split and the scaling."""
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)

    def gather_keys(self, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
        """The keys and values each head attends over: (B, H, T, d_h) -> (B, H, S, d_h).

        S must be a whole number c of copies of the sequence, laid out as c blocks of
        positions 0..T-1, so that key slot s lies at position s % T (this is how the
        core applies the padding mask).
        """
        return k, v

    def structure_mask(self, seq_len: int, device) -> Optional[Tensor]:
        """Which (query i, key slot s) pairs may attend, ignoring padding.

        A bool tensor broadcastable to (H, T, S), True where attention is allowed, or
        None for no restriction. Every query must be allowed its own position.
        """
        return None

    def score_bias(self, q: Tensor, key_padding_mask: Optional[Tensor]) -> Optional[Tensor]:
        """An additive bias on the energies q_i . k_j / sqrt(d_h), or None.

        ``q`` is (B, H, T, d_h) before scaling; the result broadcasts to (B, H, T, S) and
        must be finite. Positions that depend on where a sentence starts come from
        :func:`sentence_positions`, so left and right padding give the same bias.
        """
        return None

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], dropout_p: float) -> Tensor:
        """Eq. 2 for every head: (B, H, T, d_h) from queries, keys and values, with
        ``mask`` (bool, True = may attend, or additive float) broadcastable to (B, H, T, S)."""
        return scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)

    # ---- the shared path ----------------------------------------------------------------
    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor] = None,
        value: Optional[Tensor] = None,
        key_padding_mask: Optional[Tensor] = None,
        incremental_state=None,
        need_weights: bool = False,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, None]:
        """Self-attention over ``query`` (T, B, d) with fairseq's calling convention.

        ``key`` and ``value`` must be ``query`` itself or None. ``key_padding_mask`` is
        (B, T), True at padding. ``attn_mask`` is an additive float mask of shape (T, T),
        as fairseq's decoder passes its causal mask. With ``incremental_state`` (decoding
        one step at a time) keys and values of earlier steps come from the cache, in
        fairseq's layout, so :meth:`reorder_incremental_state` reorders them for beam search.
        Returns (output (T, B, d), None).
        """
        if static_kv or before_softmax:
            raise NotImplementedError(f"{type(self).__name__} has no static keys or pre-softmax output")
        if need_weights or need_head_weights:
            raise NotImplementedError(
                f"{type(self).__name__} runs on the fused attention kernel and does not "
                "return attention weights"
            )
        if (key is not None and key is not query) or (value is not None and value is not query):
            raise ValueError(f"{type(self).__name__} is a self-attention: key and value must be the query")
        if incremental_state is not None and self._restricts_keys():
            raise NotImplementedError(f"{type(self).__name__} is an encoder-side variant: no incremental decoding")

        return self.out_proj(self.attend_heads(query, key_padding_mask, attn_mask, incremental_state)), None

    def attend_heads(self, query: Tensor, key_padding_mask=None, attn_mask=None, incremental_state=None) -> Tensor:
        """Eqs. 1-2 with every refinement, before the output projection: (T, B, d), the
        heads' outputs concatenated."""
        T, B, d = query.shape
        H, dh = self.num_heads, self.head_dim
        q, k, v = (t.reshape(-1, B, H, dh).permute(1, 2, 0, 3) for t in self.project(query))  # (B, H, T, d_h)
        if incremental_state is not None:
            k, v, key_padding_mask = self._extend_cache(incremental_state, k, v, key_padding_mask)
        k, v = self.gather_keys(k, v)  # (B, H, S, d_h)
        mask = self.attention_mask(T, k.size(2), key_padding_mask, attn_mask, query.device)
        bias = self.score_bias(q, key_padding_mask)
        if bias is not None:
            bias = bias.to(q.dtype)
            if mask is None:
                mask = bias
            elif mask.dtype == torch.bool:
                mask = bias.masked_fill(~mask, float("-inf"))
            else:
                mask = mask + bias
        dropout_p = self.dropout_module.p if (self.training or self.dropout_module.apply_during_inference) else 0.0
        out = self.attend(q, k, v, mask, dropout_p)  # (B, H, T, d_h)
        return out.permute(2, 0, 1, 3).reshape(T, B, d)  # (T, B, d)

    _ENCODER_ONLY_STEPS = ("gather_keys", "structure_mask", "score_bias", "attend", "attend_heads", "forward")

    def _restricts_keys(self) -> bool:
        """Whether a step that only the encoder side supports is refined."""
        return any(getattr(type(self), step) is not getattr(SelfAttention, step) for step in self._ENCODER_ONLY_STEPS)

    def _extend_cache(self, incremental_state, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor]):
        """Prepend the cached keys and values of earlier steps and cache the result."""
        saved = self._get_input_buffer(incremental_state)
        if "prev_key" in saved:
            k = torch.cat([saved["prev_key"], k], dim=2)
            v = torch.cat([saved["prev_value"], v], dim=2)
        key_padding_mask = self._append_prev_key_padding_mask(
            key_padding_mask, saved.get("prev_key_padding_mask"), k.size(0), k.size(2), False
        )
        saved["prev_key"], saved["prev_value"] = k, v
        saved["prev_key_padding_mask"] = key_padding_mask
        self._set_input_buffer(incremental_state, saved)
        return k, v, key_padding_mask

    def attention_mask(
        self,
        num_queries: int,
        key_slots: int,
        key_padding_mask: Optional[Tensor],
        attn_mask: Optional[Tensor],
        device,
    ) -> Optional[Tensor]:
        """Structure, padding and ``attn_mask`` in one mask broadcastable to (B, H, T, S).

        Bool (True = may attend), or additive float when ``attn_mask`` is given. The
        queries are the last T of the key positions (all of them, except when decoding
        step by step). A real query never attends to a padding key. A padding query may
        attend to every key its structure allows, padding included: its row then is never
        empty, so no softmax row is all -inf (no NaN in any precision), and padding
        outputs never reach a real position because padding keys are masked in every layer.
        """
        allowed = self.structure_mask(num_queries, device)  # (H|1, T, S) or (T, S) or None
        if key_padding_mask is not None:
            pad = key_padding_mask.to(device=device, dtype=torch.bool)  # (B, positions)
            copies = key_slots // pad.size(1)
            key_pad = pad.repeat(1, copies) if copies > 1 else pad  # (B, S)
            query_pad = pad[:, pad.size(1) - num_queries:]  # (B, T)
            visible = ~key_pad[:, None, None, :] | query_pad[:, None, :, None]  # (B, 1, T, S)
            allowed = visible if allowed is None else visible & allowed
        if attn_mask is None:
            return allowed
        if allowed is None:
            return attn_mask
        return attn_mask.masked_fill(~allowed, float("-inf"))


def sentence_positions(key_padding_mask: Optional[Tensor], batch: int, seq_len: int, device):
    """Each slot's position counted from its sentence's first token, and sentence lengths.

    Returns (positions (B, T) long, lengths (B,) long). Works for left padding (fairseq's
    default) and right padding alike, since a sentence is one unbroken run of tokens;
    padding slots get positions outside 0..length-1.
    """
    slots = torch.arange(seq_len, device=device)
    if key_padding_mask is None:
        return slots.expand(batch, seq_len), torch.full((batch,), seq_len, device=device)
    real = ~key_padding_mask.to(device=device, dtype=torch.bool)
    first = real.long().argmax(dim=1)  # (B,) the first real slot
    return slots[None, :] - first[:, None], real.sum(dim=1)
