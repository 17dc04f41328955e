"""Named architectures of Convolutional Self-Attention Networks (Yang et al., NAACL 2019).

Base and big dimensions are those of Vaswani et al. 2017 (fairseq's ``transformer`` and
``transformer_vaswani_wmt_en_de_big``); the papers' setting is M = 11 tokens, N = 3 heads,
in the lowest K = 3 of the 6 encoder layers. Every value is a default that a flag overrides.
"""

from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import (
    base_architecture,
    transformer_vaswani_wmt_en_de_big,
)


def _csan_defaults(args, variant):
    args.encoder_self_attention = getattr(args, "encoder_self_attention", variant)
    args.csan_layers = getattr(args, "csan_layers", 3)
    args.csan_window = getattr(args, "csan_window", 11)
    if args.encoder_self_attention == "csan2d":
        args.csan_heads = getattr(args, "csan_heads", 3)


@register_model_architecture("transformer_variant", "transformer_csan1d")
def transformer_csan1d(args):
    _csan_defaults(args, "csan1d")
    base_architecture(args)


@register_model_architecture("transformer_variant", "transformer_csan2d")
def transformer_csan2d(args):
    _csan_defaults(args, "csan2d")
    base_architecture(args)


@register_model_architecture("transformer_variant", "transformer_csan1d_big")
def transformer_csan1d_big(args):
    _csan_defaults(args, "csan1d")
    transformer_vaswani_wmt_en_de_big(args)


@register_model_architecture("transformer_variant", "transformer_csan2d_big")
def transformer_csan2d_big(args):
    _csan_defaults(args, "csan2d")
    transformer_vaswani_wmt_en_de_big(args)
