"""The fairseq Transformer with a registered self-attention variant in its lowest encoder layers.

Vaswani et al., "Attention Is All You Need", NeurIPS 2017, with the change of Yang et al.,
"Convolutional Self-Attention Networks", NAACL 2019 (arXiv:1904.03107), section 5: the
variant replaces the self-attention of the lowest ``--csan-layers`` K encoder layers; the
other encoder layers and the whole decoder are fairseq's stock Transformer.
"""

from functools import partial

from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model
from fairseq.models.transformer import TransformerConfig, TransformerEncoder, TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from fairseq.modules.checkpoint_activations import checkpoint_wrapper

from ..modules import SELF_ATTENTION_VARIANTS, get_self_attention
from ..modules.registry import add_self_attention_args


class VariantEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer whose self-attention is built by ``build_attention``."""

    def __init__(self, cfg, build_attention, return_fc=False):
        self._build_attention = build_attention  # read inside super().__init__()
        super().__init__(cfg, return_fc=return_fc)
        del self._build_attention

    def build_self_attention(self, embed_dim, cfg):
        return self._build_attention(embed_dim, cfg)


class VariantTransformerEncoder(TransformerEncoder):
    """fairseq's encoder; layers 1..K take the variant's self-attention."""

    def __init__(self, args, dictionary, embed_tokens, return_fc=False):
        self._variant = get_self_attention(args.encoder_self_attention)
        self._variant_layers = args.csan_layers
        self._layers_built = 0  # build_encoder_layer is called once per layer, bottom up
        super().__init__(args, dictionary, embed_tokens, return_fc=return_fc)

    def build_encoder_layer(self, args):
        index = self._layers_built
        self._layers_built += 1
        if index >= self._variant_layers:
            return super().build_encoder_layer(args)
        cfg = TransformerConfig.from_namespace(args)
        layer = VariantEncoderLayer(cfg, partial(self._variant.build, args=args), return_fc=self.return_fc)
        # wrapped exactly as fairseq wraps its own encoder layers
        if cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        min_params_to_wrap = cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0
        return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


def check_variant_args(args):
    """Fail at model build, naming the flag and what is allowed."""
    get_self_attention(args.encoder_self_attention).check_args(args)
    layers = getattr(args, "csan_layers", None)
    if not isinstance(layers, int) or not 0 <= layers <= args.encoder_layers:
        raise ValueError(
            f"--csan-layers must be an integer from 0 to the number of encoder layers "
            f"(--encoder-layers {args.encoder_layers}); got {layers!r}"
        )


@register_model("transformer_variant")
class VariantTransformerModel(TransformerModel):
    """The Transformer whose lowest ``--csan-layers`` encoder layers use a registered
    self-attention variant (``--encoder-self-attention``); named architectures such as
    ``transformer_csan2d`` fill in the variant and its settings."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument(
            "--encoder-self-attention", choices=sorted(SELF_ATTENTION_VARIANTS), metavar="VARIANT",
            help="self-attention of the lowest --csan-layers encoder layers, set by --arch: "
                 + ", ".join(sorted(SELF_ATTENTION_VARIANTS)),
        )
        parser.add_argument(
            "--csan-layers", type=int, metavar="K",
            help="number of lowest encoder layers that use the variant (papers: 3 of 6)",
        )
        add_self_attention_args(parser)

    @classmethod
    def build_model(cls, args, task):
        args.encoder_self_attention = getattr(args, "encoder_self_attention", "standard")
        args.csan_layers = getattr(args, "csan_layers", 0)
        base_architecture(args)  # the Transformer's defaults, so the checks see final values
        check_variant_args(args)
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return VariantTransformerEncoder(args, src_dict, embed_tokens)
