"""The fairseq Transformer with registered self-attention variants, and context gating.

Vaswani et al., "Attention Is All You Need", NeurIPS 2017, with two changes that combine:

- Yang et al., "Convolutional Self-Attention Networks", NAACL 2019 (arXiv:1904.03107),
  section 5: a variant (``--encoder-self-attention``) replaces the self-attention of the
  lowest ``--csan-layers`` K encoder layers;
- Yang et al., "Context-Aware Self-Attention Networks", AAAI 2019:
  with ``--ctx-type``, every self-attention of the encoder, the decoder or both
  (``--ctx-side``) gates its queries and/or keys (``--ctx-gate``) with context.

Everything else is fairseq's stock Transformer.
"""

import json
import logging
import os
from functools import partial

import torch

from torch import nn

from fairseq import checkpoint_utils
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model
from fairseq.models.transformer import TransformerConfig, TransformerDecoder, TransformerEncoder, TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from fairseq.modules.checkpoint_activations import checkpoint_wrapper

from ..modules import SELF_ATTENTION_VARIANTS, SelfAttention, get_self_attention
from ..modules.context_gating import (CONTEXT_DEFAULTS, CONTEXT_GATES, CONTEXT_SIDES, CONTEXT_TYPES, ContextHistory,
                                      context_aware)
from ..arch_names import is_big
from ..modules.registry import (add_self_attention_args, check_foreign_flags, flag_type, model_defining_flags,
                                variant_defaults)


# fairseq 0.12.2 (that release only: not 0.12.1, 0.12.3, GitHub main or fairseq-fixed) gives its
# encoder layer a fused inference path. Loading a state dict (a checkpoint in fairseq-generate, the
# hub, a resumed training) runs the layer's ``_load_from_state_dict`` hook, which copies the weights
# into eight extra parameters (below) and sets ``load_to_BT``; from then on a post-norm layer in
# eval mode runs ``torch._transformer_encoder_layer_fwd`` (plain multi-head attention) instead of
# ``self.self_attn``, and the encoder switches the stack to batch-first nested tensors when its
# first layer allows it. Our attention would be skipped: silently wrong encoder outputs. Both
# paths need ``can_use_fastpath``; our layers keep it false, do not run the hook, and drop the
# copies, which would otherwise count as parameters (wrong parameter counts, larger checkpoints).
_FUSED_PATH_COPIES = ("in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias",
                      "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias")


def _has_fused_path(layer) -> bool:
    """Whether the running fairseq gave ``layer`` the fused path (detected by its flag)."""
    return hasattr(layer, "can_use_fastpath")


class VariantEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer whose self-attention is built by ``build_attention`` (fairseq's
    own when None), never on a fused path that skips ``self.self_attn`` (see above)."""

    def __init__(self, cfg, build_attention=None, return_fc=False):
        self._build_attention = build_attention  # read inside super().__init__()
        super().__init__(cfg, return_fc=return_fc)
        del self._build_attention
        if _has_fused_path(self):
            self.can_use_fastpath = False
            for name in _FUSED_PATH_COPIES:
                self._parameters.pop(name, None)

    def build_self_attention(self, embed_dim, cfg):
        if self._build_attention is None:
            return super().build_self_attention(embed_dim, cfg)
        return self._build_attention(embed_dim)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if not _has_fused_path(self):
            return super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        for name in _FUSED_PATH_COPIES:  # saved by a layer of fairseq 0.12.2's own: copies only
            state_dict.pop(prefix + name, None)
        # torch's own loading, without fairseq 0.12.2's hook that would arm the fused path
        return nn.Module._load_from_state_dict(self, state_dict, prefix, *args, **kwargs)


class VariantDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer whose self-attention is built by ``build_attention``."""

    def __init__(self, cfg, build_attention, no_encoder_attn=False):
        self._build_attention = build_attention  # read inside super().__init__()
        super().__init__(cfg, no_encoder_attn=no_encoder_attn)
        del self._build_attention

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return self._build_attention(embed_dim)


def _wrap_layer(layer, cfg):
    """Wrapped exactly as fairseq wraps its own layers."""
    if cfg.checkpoint_activations:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params_to_wrap = cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0
    return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


def _context_on(args, side: str) -> bool:
    return args.ctx_type is not None and args.ctx_side in (side, "both")


class VariantTransformerEncoder(TransformerEncoder):
    """fairseq's encoder; layers 1..K take the variant's self-attention, and with context
    gating on the encoder side every layer's self-attention is context-aware."""

    def __init__(self, args, dictionary, embed_tokens, return_fc=False):
        self._variant = get_self_attention(args.encoder_self_attention)
        self._variant_layers = args.csan_layers
        self.context_history = ContextHistory(causal=False) if _context_on(args, "encoder") else None
        self._layers_built = 0  # build_encoder_layer is called once per layer, bottom up
        super().__init__(args, dictionary, embed_tokens, return_fc=return_fc)

    def build_encoder_layer(self, args):
        index = self._layers_built
        self._layers_built += 1
        attention = self._variant if index < self._variant_layers else SelfAttention
        extra = {}
        if self.context_history is not None:
            attention = context_aware(attention)
            extra = dict(history=self.context_history, layer=index + 1, ctx_type=args.ctx_type, ctx_gate=args.ctx_gate)
        cfg = TransformerConfig.from_namespace(args)
        build = None  # fairseq's own self-attention, in a layer of ours (never on the fused path)
        if attention is not SelfAttention or extra:
            build = partial(attention.build, num_heads=cfg.encoder.attention_heads, cfg=cfg, args=args, **extra)
        return _wrap_layer(VariantEncoderLayer(cfg, build, return_fc=self.return_fc), cfg)

    def forward_scriptable(self, src_tokens, src_lengths=None, return_all_hiddens: bool = False, token_embeddings=None):
        if self.context_history is None:
            return super().forward_scriptable(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        pad = src_tokens.eq(self.padding_idx)
        with self.context_history.recording(pad if pad.any() else None):
            return super().forward_scriptable(src_tokens, src_lengths, return_all_hiddens, token_embeddings)


class ContextTransformerDecoder(TransformerDecoder):
    """fairseq's decoder with context-aware self-attention in every layer; the context
    of step t is made of steps 1..t only, in training and in incremental decoding alike."""

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self.context_history = ContextHistory(causal=True)
        self._layers_built = 0
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)

    def build_decoder_layer(self, args, no_encoder_attn=False):
        index = self._layers_built
        self._layers_built += 1
        cfg = TransformerConfig.from_namespace(args)
        build = partial(
            context_aware(SelfAttention).build, num_heads=cfg.decoder.attention_heads, cfg=cfg, args=args,
            history=self.context_history, layer=index + 1, ctx_type=args.ctx_type, ctx_gate=args.ctx_gate,
        )
        return _wrap_layer(VariantDecoderLayer(cfg, build, no_encoder_attn=no_encoder_attn), cfg)

    def extract_features_scriptable(self, prev_output_tokens, encoder_out, incremental_state=None, *args, **kwargs):
        step_tokens = prev_output_tokens[:, -1:] if incremental_state is not None else prev_output_tokens
        pad = step_tokens.eq(self.padding_idx)
        with self.context_history.recording(pad if pad.any() else None, incremental_state):
            return super().extract_features_scriptable(prev_output_tokens, encoder_out, incremental_state, *args, **kwargs)


def apply_variant_defaults(args, big: bool):
    """Fill in the settings of ``args.encoder_self_attention`` that no flag gave (the papers'
    values: the ``default`` and ``big_default`` of each
    ``registry.Option`` in the variant's ``OPTIONS``); a variant goes in the lowest 3 encoder layers
    unless --csan-layers says otherwise."""
    variant = args.encoder_self_attention
    if getattr(args, "csan_layers", None) is None:
        args.csan_layers = 0 if variant == "standard" else 3
    if variant not in SELF_ATTENTION_VARIANTS:
        return  # check_variant_args names the allowed ones
    # each setting's default is declared once, with its option (registry.Option)
    for name, value in variant_defaults(get_self_attention(variant), big).items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def check_variant_args(args):
    """Fail at model build, naming the flag and what is allowed."""
    check_foreign_flags(args.encoder_self_attention, args)
    get_self_attention(args.encoder_self_attention).check_args(args)
    check_context_args(args)
    layers = getattr(args, "csan_layers", None)
    _check_layer_count(layers)
    if layers > args.encoder_layers:
        raise ValueError(
            f"--csan-layers must be an integer from 0 to the number of encoder layers "
            f"(--encoder-layers {args.encoder_layers}); got {layers!r}"
        )
    if layers > 0 and args.encoder_self_attention == "standard":
        raise ValueError(
            f"--csan-layers {layers} needs a self-attention variant (a transformer_csan* or baseline "
            "architecture, or --encoder-self-attention); this model's encoder uses 'standard', "
            "which would ignore it"
        )


def _check_layer_count(layers):
    if not isinstance(layers, int) or layers < 0:
        raise ValueError(f"--csan-layers must be an integer from 0 to the number of encoder layers; got {layers!r}")


def check_context_args(args):
    ctx_type, side, gate = (getattr(args, f, None) for f in ("ctx_type", "ctx_side", "ctx_gate"))
    if ctx_type is None:
        if side is not None or gate is not None:
            flag = "--ctx-side" if side is not None else "--ctx-gate"
            raise ValueError(f"{flag} needs context gating: set --ctx-type ({', '.join(CONTEXT_TYPES)}) "
                             "or use a *_ctxaware architecture")
        return
    for flag, value, allowed in (("--ctx-type", ctx_type, CONTEXT_TYPES), ("--ctx-side", side, CONTEXT_SIDES),
                                 ("--ctx-gate", gate, CONTEXT_GATES)):
        if value not in allowed:
            raise ValueError(f"{flag} must be one of {', '.join(allowed)}; got {value!r}")
    variant = get_self_attention(args.encoder_self_attention)
    if side in ("encoder", "both") and args.csan_layers > 0 and not variant.supports_context:
        raise ValueError(
            f"--ctx-type on the encoder cannot be combined with the {args.encoder_self_attention!r} "
            "variant, which changes the layer around its attention; use --ctx-side decoder or "
            "another variant"
        )
    if args.checkpoint_activations:
        raise ValueError(
            "--checkpoint-activations cannot be used with --ctx-type: a layer's context holds the "
            "inputs of the layers below, which recomputation would detach from the graph"
        )
    if side in ("decoder", "both") and args.cross_self_attention:
        raise ValueError("--ctx-side decoder/both needs the standard decoder self-attention: "
                         "it cannot be combined with --cross-self-attention")


def model_settings(args) -> dict:
    """What defines the model beyond its parameter shapes, which a csan1d and a csan2d model,
    say, share: the variant and its settings, K, context gating."""
    flags = ["encoder_self_attention", "csan_layers", "ctx_type", "ctx_side", "ctx_gate",
             *model_defining_flags(get_self_attention(args.encoder_self_attention))]
    return {flag: getattr(args, flag, None) for flag in flags}


def _completed(saved: dict, ours: dict) -> dict:
    """A checkpoint's settings with each flag it predates (one this build keeps, the checkpoint
    does not) at the value its variant declares as default: a flag is added with the default
    that computes what the model computed before it existed, so an older checkpoint is the
    model it was."""
    settings = dict(saved["settings"])
    variant = settings.get("encoder_self_attention")
    if variant in SELF_ATTENTION_VARIANTS:
        declared = variant_defaults(get_self_attention(variant), big=is_big(saved.get("arch")))
        for flag in ours:
            if flag not in settings and flag in declared:
                settings[flag] = declared[flag]
    return settings


def _encode(settings: dict, arch) -> torch.Tensor:
    text = json.dumps({"arch": arch, "settings": settings}, sort_keys=True)
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)


logger = logging.getLogger(__name__)

# The checkpoint that fairseq-train's --finetune-from-model is loading, while it loads it (a
# warm start: fairseq resets the optimizer and takes the weights); a resume is not one. Marked
# in python -m fairseq_csan.train (patches.apply_for_training); stock fairseq-train marks none, and
# a checkpoint of other settings is then refused as on a resume.
_WARM_STARTS = []


def marking_warm_starts(load_checkpoint):
    """fairseq's ``checkpoint_utils.load_checkpoint``, marking a warm start while it loads."""
    def wrapped(cfg, trainer, *args, **kwargs):
        last = os.path.join(cfg.save_dir, f"checkpoint_last{trainer.checkpoint_suffix or ''}.pt")
        warm = (getattr(cfg, "finetune_from_model", None) is not None and cfg.restore_file == "checkpoint_last.pt"
                and not os.path.exists(last))  # fairseq's own condition for a warm start
        if warm:
            _WARM_STARTS.append(cfg.finetune_from_model)
        model = trainer.get_model() if hasattr(trainer, "get_model") else None
        foreign = warm and model is not None and not isinstance(model, VariantTransformerModel)
        if foreign:  # into fairseq's own model, which has no hook of ours: its reader does the same
            reader = checkpoint_utils.load_checkpoint_to_cpu
            arch = getattr(trainer.cfg.model, "arch", None) or getattr(trainer.cfg.model, "_name", "?")
            checkpoint_utils.load_checkpoint_to_cpu = _only_the_weights_of(reader, model, cfg.finetune_from_model, arch)
        try:
            return load_checkpoint(cfg, trainer, *args, **kwargs)
        finally:
            if foreign:
                checkpoint_utils.load_checkpoint_to_cpu = reader
            if warm:
                _WARM_STARTS.pop()

    wrapped.__wrapped__ = load_checkpoint
    return wrapped


def _only_the_weights_of(read, model, source, arch):
    """``read`` (fairseq's checkpoint reader) for a warm start into ``model``, one of fairseq's
    own: of a checkpoint of our models, the weights that the model does not have (our settings, a
    variant's own parameters) are left out, and the log says which; a weight the checkpoint lacks stays an
    error of fairseq's strict load, naming it."""
    def wrapped(*args, **kwargs):
        state = read(*args, **kwargs)
        if not any(k.endswith(VariantTransformerModel.SETTINGS_KEY) for k in state["model"]):
            return state  # not a checkpoint of ours: fairseq's own upgrades and checks, as always
        own = set(model.state_dict())
        dropped = sorted(k for k in state["model"] if k not in own)
        for k in dropped:
            del state["model"][k]
        logger.warning(
            f"fairseq_csan: warm start from {source} into fairseq's own --arch {arch}: the shared weights are loaded"
            + (f"; {len(dropped)} of the checkpoint are not used ({', '.join(dropped[:4])}"
               f"{' ...' if len(dropped) > 4 else ''})" if dropped else ""))
        return state

    return wrapped


def _decode(tensor: torch.Tensor) -> dict:
    return json.loads(bytes(tensor.tolist()).decode("utf-8"))


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


@register_model("transformer_variant")
class VariantTransformerModel(TransformerModel):
    """The Transformer whose lowest ``--csan-layers`` encoder layers use a registered
    self-attention variant (``--encoder-self-attention``); named architectures such as
    ``transformer_csan2d`` fill in the variant and its settings."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument(
            "--encoder-self-attention", choices=sorted(SELF_ATTENTION_VARIANTS), metavar="VARIANT",
            help="self-attention of the lowest --csan-layers encoder layers, set by --arch: "
                 + ", ".join(sorted(SELF_ATTENTION_VARIANTS)),
        )
        parser.add_argument(
            "--csan-layers", type=flag_type(int, _check_layer_count), metavar="K",
            help="number of lowest encoder layers that use the variant (papers: 3 of 6)",
        )
        add_self_attention_args(parser)
        parser.add_argument(
            "--ctx-type", choices=CONTEXT_TYPES, metavar="TYPE",
            help="context-aware self-attention (Yang et al., AAAI 2019): the context that gates "
                 f"queries and keys, one of {', '.join(CONTEXT_TYPES)}; off unless set "
                 "(*_ctxaware architectures: deep-global+deep)",
        )
        parser.add_argument(
            "--ctx-side", choices=CONTEXT_SIDES, metavar="SIDE",
            help=f"where context gating applies, one of {', '.join(CONTEXT_SIDES)} "
                 f"(default: {CONTEXT_DEFAULTS['ctx_side']})",
        )
        parser.add_argument(
            "--ctx-gate", choices=CONTEXT_GATES, metavar="GATE",
            help=f"which projections are gated, one of {', '.join(CONTEXT_GATES)} "
                 f"(default: {CONTEXT_DEFAULTS['ctx_gate']})",
        )

    # A checkpoint carries the model's settings in its state dict (a buffer: tensors are what
    # every loader, averaging included, handles), so that a checkpoint loaded into a model
    # built with other settings is refused, naming them, instead of training or decoding as
    # another model: fairseq-train resuming a transformer_csan2d folder with --arch
    # transformer_csan1d loads the same parameter shapes without a word (the Trainer reads only
    # the weights). fairseq-generate builds the model from the checkpoint's own settings; an
    # override of how it is computed (--csan-impl) is no difference.
    SETTINGS_KEY = "csan_model_settings"

    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        self.register_buffer(self.SETTINGS_KEY, _encode(model_settings(args), getattr(args, "arch", None)))

    def upgrade_state_dict_named(self, state_dict, name):
        super().upgrade_state_dict_named(state_dict, name)
        key = f"{name}.{self.SETTINGS_KEY}" if name else self.SETTINGS_KEY
        ours = _decode(getattr(self, self.SETTINGS_KEY))
        theirs = _decode(state_dict[key]) if key in state_dict else None
        if theirs is not None:
            theirs["settings"] = _completed(theirs, ours["settings"])
        differ = [] if theirs is None else [
            f for f in sorted(set(ours["settings"]) | set(theirs["settings"]))
            if ours["settings"].get(f) != theirs["settings"].get(f)]
        if _WARM_STARTS:  # --finetune-from-model (python -m fairseq_csan.train): another model's weights, on purpose
            self._take_shared_weights(state_dict, name, theirs, differ)
            return
        if theirs is None:  # a checkpoint from before the settings were kept, or fairseq's own model
            state_dict[key] = getattr(self, self.SETTINGS_KEY).clone()
            return
        if differ:
            raise ValueError(
                f"fairseq_csan: the checkpoint holds a model of --arch {theirs['arch']}, this command builds "
                f"--arch {ours['arch']}, and they differ in "
                + "; ".join(f"{_flag(f)} {theirs['settings'].get(f)} (checkpoint) vs {ours['settings'].get(f)} "
                            "(this command)" for f in differ)
                + ". Resume with the checkpoint's settings, or train into a new --save-dir (to start from "
                "its weights on purpose: python -m fairseq_csan.train ... --finetune-from-model CHECKPOINT)."
            )
        # the same model: its settings as this build writes them (a flag it predates, filled in)
        state_dict[key] = getattr(self, self.SETTINGS_KEY).clone()

    def _take_shared_weights(self, state_dict, name, theirs, differ):
        """A warm start: the parameters both models have are taken from the checkpoint; this
        model's own (a variant's new parameters) keep their initial values, the checkpoint's
        others are left out, and the log says which."""
        prefix = f"{name}." if name else ""
        own = {prefix + k: v for k, v in self.state_dict().items()}
        added = sorted(k for k in own if k not in state_dict)
        dropped = sorted(k for k in state_dict if k.startswith(prefix) and k not in own)
        for k in added:
            state_dict[k] = own[k].clone()
        for k in dropped:
            del state_dict[k]
        state_dict[prefix + self.SETTINGS_KEY] = getattr(self, self.SETTINGS_KEY).clone()  # this model's own
        was = f"--arch {theirs['arch']}" if theirs else "a model without our settings (fairseq's own)"
        logger.warning(
            f"fairseq_csan: warm start from {_WARM_STARTS[-1]} ({was}) into --arch "
            f"{_decode(getattr(self, self.SETTINGS_KEY))['arch']}: the shared weights are loaded"
            + (f"; settings that differ: {', '.join(_flag(f) for f in differ)}" if differ else "")
            + (f"; {len(added)} parameters of this model keep their initial values ({', '.join(added[:4])}"
               f"{' ...' if len(added) > 4 else ''})" if added else "")
            + (f"; {len(dropped)} of the checkpoint are not used ({', '.join(dropped[:4])}"
               f"{' ...' if len(dropped) > 4 else ''})" if dropped else ""))

    @classmethod
    def build_model(cls, args, task):
        args.encoder_self_attention = getattr(args, "encoder_self_attention", "standard")
        apply_variant_defaults(args, big=is_big(getattr(args, "arch", "")))
        for flag in ("ctx_type", "ctx_side", "ctx_gate"):
            setattr(args, flag, getattr(args, flag, None))
        if args.ctx_type is not None:
            for flag, value in CONTEXT_DEFAULTS.items():
                setattr(args, flag, getattr(args, flag) or value)
        base_architecture(args)  # the Transformer's defaults, so the checks see final values
        check_variant_args(args)
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return VariantTransformerEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        if not _context_on(args, "decoder"):
            return super().build_decoder(args, tgt_dict, embed_tokens)
        return ContextTransformerDecoder(args, tgt_dict, embed_tokens, no_encoder_attn=args.no_cross_attention)
