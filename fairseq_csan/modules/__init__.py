"""Encoder self-attention variants; importing a module registers its variants."""

from .registry import SELF_ATTENTION_VARIANTS, get_self_attention, register_self_attention  # noqa: F401
from .attention_core import EncoderSelfAttention  # noqa: F401
from .local_window_attention import CrossHeadWindowAttention, LocalWindowAttention  # noqa: F401
