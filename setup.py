"""fairseq_csan: Convolutional and Context-Aware Self-Attention Networks for fairseq.

fairseq itself is installed by scripts/install.sh, not listed below: the only fairseq release
that imports on Python 3.11 (fairseq-fixed 0.12.3.1) declares torchaudio, and pip would then
replace torch 2.13 with the older torch that the newest torchaudio pins. See docs/troubleshooting.md.
"""

from setuptools import find_packages, setup

RECIPES = ["sacremoses>=0.1", "jieba>=0.42", "fugashi>=1.3", "unidic-lite>=1.0.8"]
ANALYSIS = ["matplotlib>=3.5"]
LOGGING = ["tensorboard>=2.10"]

setup(
    name="fairseq_csan",
    version="0.1.0",
    description="Convolutional and Context-Aware Self-Attention Networks as a fairseq plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.8",
    packages=find_packages(include=["fairseq_csan", "fairseq_csan.*"]),
    install_requires=[
        "torch>=1.13",
        "sacrebleu>=2.0",
        "subword-nmt>=0.3.8",
        # fairseq-fixed 0.12.3.1's own requirements, less torchaudio (translation never imports it)
        "hydra-core==1.3.2",
        "omegaconf==2.3.0",
        "numpy>=1.21.3",
        "regex",
        "tqdm",
        "bitarray",
        "scikit-learn",
        "packaging",
        "cffi",
        "cython",
    ],
    extras_require={
        # the task recipes (examples/wmt14_en_de, wmt17_zh_en, wat17_ja_en): Moses tokenisation,
        # Chinese segmentation (jieba) and Japanese segmentation (MeCab through fugashi, with
        # the UniDic-lite dictionary, all from PyPI and usable offline)
        "recipes": RECIPES,
        # the analysis commands' plots (fairseq_csan/recipes/analysis/)
        "analysis": ANALYSIS,
        # fairseq-train --tensorboard-logdir (scripts/train.sh --tensorboard DIR); installed by
        # scripts/install.sh. W&B (--wandb-project) needs `pip install wandb` besides.
        "logging": LOGGING,
        "test": ["pytest>=7", *RECIPES, *ANALYSIS],
    },
)
