"""Registered models and named architectures; importing this package registers them."""

from .variant_transformer import VariantTransformerModel  # noqa: F401
from . import architectures  # noqa: F401
