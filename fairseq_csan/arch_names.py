"""The plugin's architecture names, and what a name says of a model's size, known without
importing fairseq or torch: the kit's training command checks its ``--arch`` with them before it
claims a save folder, in a process that leaves fairseq to the trainer it starts (about 4 s less a
start). ``models/architectures.py`` registers exactly these names (tests/test_variants.py checks
the registry against them).
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


def is_big(arch) -> bool:
    """Whether an architecture is a big Transformer (1024-dim, 16 heads), the one rule for the
    whole package (the variants' big defaults, the recipe's hyper-parameter set, checkpoint
    loading and averaging): ours end in ``_big`` as fairseq's ``transformer_vaswani_wmt_en_de_big``
    and ``transformer_wmt_en_de_big`` do, and fairseq's ``transformer_wmt_en_de_big_t2t`` too."""
    arch = str(arch or "")
    return arch.endswith("_big") or arch.startswith("transformer_wmt_en_de_big")
