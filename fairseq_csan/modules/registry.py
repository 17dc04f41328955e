"""The one registry of encoder self-attention variants.

A variant is a subclass of :class:`~fairseq_csan.modules.attention_core.SelfAttention`
registered under a short name. The encoder looks a name up once, when it builds the
self-attention of each layer that uses the variant; nothing else branches on the name.
"""

from typing import Dict, Type

SELF_ATTENTION_VARIANTS: Dict[str, Type] = {}


def register_self_attention(name: str):
    """Class decorator: make a self-attention variant available under ``name``."""

    def register(cls):
        if name in SELF_ATTENTION_VARIANTS:
            raise ValueError(f"self-attention variant {name!r} is registered twice")
        SELF_ATTENTION_VARIANTS[name] = cls
        cls.variant_name = name
        return cls

    return register


def get_self_attention(name: str):
    """The variant class registered under ``name``; a clear error for an unknown name."""
    try:
        return SELF_ATTENTION_VARIANTS[name]
    except KeyError:
        allowed = ", ".join(sorted(SELF_ATTENTION_VARIANTS))
        raise ValueError(
            f"--encoder-self-attention: unknown variant {name!r}; allowed: {allowed}"
        ) from None


def add_self_attention_args(parser):
    """Add every registered variant's own flags once (a subclass adds only what it defines)."""
    for cls in SELF_ATTENTION_VARIANTS.values():
        if "add_args" in vars(cls):
            cls.add_args(parser)
