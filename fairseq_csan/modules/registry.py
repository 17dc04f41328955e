"""The one registry of encoder self-attention variants.

A variant is a subclass of :class:`~fairseq_csan.modules.attention_core.SelfAttention`
registered under a short name. The encoder looks a name up once, when it builds the
self-attention of each layer that uses the variant; nothing else branches on the name.
"""

import argparse
from typing import Callable, Dict, Type

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


def _flag_classes():
    """Every class that defines flags, among the variants and the classes they extend, once."""
    seen = []
    for variant in SELF_ATTENTION_VARIANTS.values():
        for cls in reversed(variant.__mro__):
            if "add_args" in vars(cls) and cls not in seen:
                seen.append(cls)
    return seen


def add_self_attention_args(parser):
    """Add every variant's own flags once (a class adds only what it defines), noting on
    each class the flags it added (see :func:`check_foreign_flags`)."""
    for cls in _flag_classes():
        before = {id(a) for a in parser._actions}
        cls.add_args(parser)
        cls.own_flags = {a.dest: a.option_strings[0] for a in parser._actions if id(a) not in before}


def check_foreign_flags(variant: str, args):
    """A flag that ``variant`` does not read must be unset; otherwise it would be silently ignored."""
    chosen = get_self_attention(variant)
    for cls in _flag_classes():
        if issubclass(chosen, cls):
            continue
        for dest, flag in vars(cls).get("own_flags", {}).items():
            if getattr(args, dest, None) is not None:
                owners = [name for name, c in SELF_ATTENTION_VARIANTS.items() if issubclass(c, cls)]
                raise ValueError(
                    f"{flag} applies only to the {' / '.join(owners)} variant "
                    f"(--encoder-self-attention, set by transformer_{owners[0]}*); this model "
                    f"uses {variant!r}, which would ignore it"
                )


def flag_type(convert: Callable, check: Callable) -> Callable:
    """An argparse ``type=`` that runs a flag's one check (a function raising ``ValueError``
    with the message, also called at model build): a bad value is a usage error when the
    command line is parsed, ``argument --csan-window: --csan-window must be ...``."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = text  # the check names what is allowed
        try:
            check(value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return value

    parse.__name__ = convert.__name__
    return parse


def model_defining_flags(variant_cls) -> list:
    """The flags (argparse dests) of a variant and of the classes it extends that change what
    the model computes: all but its ``same_result_flags`` (how it is computed, e.g. --csan-impl)."""
    parser = argparse.ArgumentParser(add_help=False)
    for cls in reversed(variant_cls.__mro__):
        if "add_args" in vars(cls):
            cls.add_args(parser)
    same = getattr(variant_cls, "same_result_flags", ())
    return [a.dest for a in parser._actions if a.dest not in same]


def is_big(arch) -> bool:
    """Whether an architecture is a big Transformer (1024-dim, 16 heads), the one rule for the
    whole package (the variants' big defaults, the recipe's hyper-parameter set, checkpoint
    loading and averaging): ours end in ``_big`` as fairseq's ``transformer_vaswani_wmt_en_de_big``
    and ``transformer_wmt_en_de_big`` do, and fairseq's ``transformer_wmt_en_de_big_t2t`` too."""
    arch = str(arch or "")
    return arch.endswith("_big") or arch.startswith("transformer_wmt_en_de_big")


def variant_defaults(variant_cls, big: bool) -> dict:
    """The flag defaults a variant declares (``defaults``, and ``big_defaults`` for the big
    architectures), its own and those of the classes it extends."""
    values = {}
    for cls in reversed(variant_cls.__mro__):
        values.update(vars(cls).get("defaults", {}))
        if big:
            values.update(vars(cls).get("big_defaults", {}))
    return values
