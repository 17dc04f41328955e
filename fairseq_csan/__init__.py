"""fairseq_csan: Convolutional and Context-Aware Self-Attention Networks as a fairseq plugin.

Load it with ``--user-dir fairseq_csan`` or ``import fairseq_csan``; importing registers the
models, the named architectures and the self-attention variants.
"""

__version__ = "0.1.0"

from . import fairseq_compat, models  # noqa: F401,E402  (registers everything)
from .modules.context_gating import record_gates  # noqa: F401,E402  (gate values for analysis)
