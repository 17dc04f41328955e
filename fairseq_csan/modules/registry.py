"""The one registry of encoder self-attention variants.

A variant is a subclass of :class:`~fairseq_csan.modules.attention_core.SelfAttention`
registered under a short name. The encoder looks a name up once, when it builds the
self-attention of each layer that uses the variant; nothing else branches on the name.
"""

import argparse
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple, Type

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
    """Every class that declares options, among the variants and the classes they extend, once."""
    seen = []
    for variant in SELF_ATTENTION_VARIANTS.values():
        for cls in reversed(variant.__mro__):
            if "OPTIONS" in vars(cls) and cls not in seen:
                seen.append(cls)
    return seen


def add_self_attention_args(parser):
    """Add every variant's own flags once (a class adds only what it declares), noting on
    each class the flags it added (see :func:`check_foreign_flags`)."""
    for cls in _flag_classes():
        for option in cls.OPTIONS:
            option.add_to(parser)
        cls.own_flags = {option.dest: option.flag for option in cls.OPTIONS}


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


def declared_options(variant_cls) -> list:
    """The options of a variant and of the classes it extends, the base class's first."""
    return [option for cls in reversed(variant_cls.__mro__) for option in vars(cls).get("OPTIONS", ())]


def model_defining_flags(variant_cls) -> list:
    """The flags (argparse dests) of a variant and of the classes it extends that change what
    the model computes: all but those marked ``same_result`` (how it is computed, e.g. --csan-impl)."""
    return [option.dest for option in declared_options(variant_cls) if not option.same_result]


def variant_defaults(variant_cls, big: bool) -> dict:
    """The flag defaults a variant declares (each option's ``default``, or its ``big_default``
    for the big architectures), its own and those of the classes it extends; an option without
    a default (the variant works its value out, e.g. from the model dimension) is left out."""
    values = {}
    for option in declared_options(variant_cls):
        value = option.default_for(big)
        if value is not None:
            values[option.dest] = value
    return values


_SAME = object()  # big_default: the same as default


@dataclass(frozen=True)
class Option:
    """One setting of a variant, declared once. From it come the flag (``--`` and ``dest``
    with dashes) with its type, choices and help; the defaults for base and big architectures;
    the check, run by argparse when the command line is parsed and again at model build, where
    values from a checkpoint or a script arrive; the constructor keyword; and whether the
    setting is kept in checkpoints as part of what defines the model.

    ``help`` may name ``{default}`` and ``{big_default}``. ``check`` raises ``ValueError``
    naming the flag and what is allowed; with ``choices`` the check is membership. An option
    whose ``default`` is None is checked only when given (the variant works out its value).
    """

    dest: str
    help: str
    keyword: Optional[str] = None  # the constructor's name for it; the dest if None
    default: Any = None
    big_default: Any = _SAME
    convert: Optional[Callable] = None
    check: Optional[Callable] = None
    choices: Optional[Tuple[str, ...]] = None
    metavar: Optional[str] = None
    same_result: bool = False  # how the model is computed, not what (not kept as a model setting)

    def __post_init__(self):
        if self.keyword is None:
            object.__setattr__(self, "keyword", self.dest)

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")

    def default_for(self, big: bool):
        return self.default if not big or self.big_default is _SAME else self.big_default

    def validate(self, value):
        """``value`` if allowed, else ``ValueError`` naming the flag and what is allowed."""
        if value is None and self.default is None:
            return value
        if self.choices is not None:
            if value not in self.choices:
                raise ValueError(f"{self.flag} must be one of {', '.join(self.choices)}; got {value!r}")
        else:
            self.check(value)
        return value

    def add_to(self, parser):
        big = self.default_for(True)
        settings = dict(metavar=self.metavar, help=self.help.format(default=self.default, big_default=big))
        if self.choices is not None:
            settings["choices"] = self.choices
        else:
            settings["type"] = flag_type(self.convert, self.check)
        parser.add_argument(self.flag, **settings)
