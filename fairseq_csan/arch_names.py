"""The plugin's architecture names, and what a name says of a model (its size, its encoder
self-attention variant), known without importing fairseq or torch: the kit's training command
checks its ``--arch`` with them before it claims a save folder, in a process that leaves fairseq
to the trainer it starts (about 4 s less a start); ``python -m fairseq_csan variant`` answers the
quick start from them. ``models/architectures.py`` registers exactly these names, with these
variants (tests/test_variants.py checks the registry against them).
"""

# the CSAN paper's models (NAACL 2019), and the locality baselines of its Table 1
CSAN = ("csan1d", "csan2d")
BASELINES = ("bidirect", "relpos", "neighbor", "local_hard", "local_soft", "block", "cnn")
# Transformer base dimensions; each has a twin named NAME_big with Transformer big dimensions
BASE = tuple(f"transformer_{name}" for name in (*CSAN, "ctxaware", "csan2d_ctxaware", *BASELINES))
ARCHITECTURES = BASE + tuple(f"{name}_big" for name in BASE)

# fairseq's own Transformer architectures that every fairseq this plugin supports registers
# (0.12.2 and main): a training of one of them is checked without importing fairseq either
FAIRSEQ_TRANSFORMERS = ("transformer", "transformer_iwslt_de_en", "transformer_wmt_en_de",
                        "transformer_vaswani_wmt_en_de_big", "transformer_vaswani_wmt_en_fr_big",
                        "transformer_wmt_en_de_big", "transformer_wmt_en_de_big_t2t")


def variant_of(arch: str):
    """The encoder self-attention variant an architecture of these lists sets (what
    ``python -m fairseq_csan variant`` prints): the variant a name carries (transformer_csan2d:
    csan2d, the context-aware one with 2D-CSAN: csan2d), 'standard' for transformer_ctxaware,
    'none' for fairseq's; None for any other name (fairseq's registry answers for it)."""
    if arch in FAIRSEQ_TRANSFORMERS:
        return "none"
    if arch not in ARCHITECTURES:
        return None
    name = arch[len("transformer_"):]
    name = name[:-len("_big")] if name.endswith("_big") else name
    name = name[:-len("_ctxaware")] if name.endswith("_ctxaware") else name
    return "standard" if name == "ctxaware" else name


def is_big(arch) -> bool:
    """Whether an architecture is a big Transformer (1024-dim, 16 heads), the one rule for the
    whole package (the variants' big defaults, the recipe's hyper-parameter set, checkpoint
    loading and averaging): ours end in ``_big`` as fairseq's ``transformer_vaswani_wmt_en_de_big``
    and ``transformer_wmt_en_de_big`` do, and fairseq's ``transformer_wmt_en_de_big_t2t`` too."""
    arch = str(arch or "")
    return arch.endswith("_big") or arch.startswith("transformer_wmt_en_de_big")
