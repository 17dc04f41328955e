"""Self-attention variants (importing a module registers its variants) and context gating."""

from .registry import SELF_ATTENTION_VARIANTS, get_self_attention, register_self_attention  # noqa: F401
from .attention_core import SelfAttention  # noqa: F401
from .local_window_attention import CrossHeadWindowAttention, LocalWindowAttention  # noqa: F401
from .directional_attention import DirectionalAttention  # noqa: F401
from .relative_position_attention import RelativePositionAttention  # noqa: F401
from .gaussian_attention import LocalHardAttention, LocalSoftAttention, NeighborAttention  # noqa: F401
from .block_attention import BlockSelfAttention  # noqa: F401
from .convolution_attention import ConvolutionFrontAttention  # noqa: F401
from .context_gating import ContextGating, context_aware, record_gates  # noqa: F401
