"""Self-attention variants (importing a module registers its variants) and context gating."""

from .registry import SELF_ATTENTION_VARIANTS, get_self_attention, register_self_attention  # noqa: F401
from .attention_core import SelfAttention  # noqa: F401
from .local_window_attention import CrossHeadWindowAttention, LocalWindowAttention  # noqa: F401
from .context_gating import ContextGating, context_aware, record_gates  # noqa: F401
