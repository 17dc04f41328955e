"""Named architectures: Convolutional (NAACL 2019) and Context-Aware (AAAI 2019) Self-Attention
Networks, and the locality baselines of the CSAN paper's Table 1.

Base and big dimensions are those of Vaswani et al. 2017 (fairseq's ``transformer`` and
``transformer_vaswani_wmt_en_de_big``); the papers' setting is M = 11 tokens, N = 3 heads,
in the lowest K = 3 of the 6 encoder layers. Every value is a default that a flag overrides.
"""

from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import (
    base_architecture,
    transformer_vaswani_wmt_en_de_big,
)

from ..arch_names import BASELINES
from ..modules.context_gating import CONTEXT_DEFAULTS, CTXAWARE_TYPE
from .variant_transformer import apply_variant_defaults


def _variant_defaults(args, variant, big=False):
    args.encoder_self_attention = getattr(args, "encoder_self_attention", variant)
    apply_variant_defaults(args, big)


@register_model_architecture("transformer_variant", "transformer_csan1d")
def transformer_csan1d(args):
    _variant_defaults(args, "csan1d")
    base_architecture(args)


@register_model_architecture("transformer_variant", "transformer_csan2d")
def transformer_csan2d(args):
    _variant_defaults(args, "csan2d")
    base_architecture(args)


@register_model_architecture("transformer_variant", "transformer_csan1d_big")
def transformer_csan1d_big(args):
    _variant_defaults(args, "csan1d", big=True)
    transformer_vaswani_wmt_en_de_big(args)


@register_model_architecture("transformer_variant", "transformer_csan2d_big")
def transformer_csan2d_big(args):
    _variant_defaults(args, "csan2d", big=True)
    transformer_vaswani_wmt_en_de_big(args)


# ---- Context-Aware Self-Attention Networks (Yang et al., AAAI 2019) --------------------------
# The paper's best: deep-global + deep context (Table 1 row 5), on the encoder side, gating
# both queries and keys (Table 3).


def _ctxaware_defaults(args):
    for flag, value in {"ctx_type": CTXAWARE_TYPE, **CONTEXT_DEFAULTS}.items():
        setattr(args, flag, getattr(args, flag, None) or value)


@register_model_architecture("transformer_variant", "transformer_ctxaware")
def transformer_ctxaware(args):
    _ctxaware_defaults(args)
    base_architecture(args)


@register_model_architecture("transformer_variant", "transformer_ctxaware_big")
def transformer_ctxaware_big(args):
    _ctxaware_defaults(args)
    transformer_vaswani_wmt_en_de_big(args)


# ---- both: 2D-CSAN in the lowest encoder layers, context gating as above (no paper has it) ----


@register_model_architecture("transformer_variant", "transformer_csan2d_ctxaware")
def transformer_csan2d_ctxaware(args):
    transformer_csan2d(args)
    transformer_ctxaware(args)


@register_model_architecture("transformer_variant", "transformer_csan2d_ctxaware_big")
def transformer_csan2d_ctxaware_big(args):
    transformer_csan2d_big(args)
    transformer_ctxaware_big(args)


# ---- the locality baselines of the CSAN paper's Table 1 -----------------------------------
# "re-implemented under the same framework": each replaces the self-attention of the same
# lowest K = 3 encoder layers as CSAN (--csan-layers). Their settings are their source papers'
# (each option's ``default`` and ``big_default``, see registry.Option); the big twins differ only where a
# source paper gives a big setting (their names: arch_names.BASELINES).


def _baseline_architectures(variant):
    def base(args):
        _variant_defaults(args, variant)
        base_architecture(args)

    def big(args):
        _variant_defaults(args, variant, big=True)
        transformer_vaswani_wmt_en_de_big(args)

    register_model_architecture("transformer_variant", f"transformer_{variant}")(base)
    register_model_architecture("transformer_variant", f"transformer_{variant}_big")(big)


for _variant in BASELINES:
    _baseline_architectures(_variant)
