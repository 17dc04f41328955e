"""fairseq_csan: Convolutional and Context-Aware Self-Attention Networks for fairseq.

Supported: Python 3.8-3.13, torch 1.13-2.13, and one fairseq of: fairseq 0.12.2 (PyPI),
fairseq from GitHub main, fairseq-fixed 0.12.3.1 (docs/troubleshooting.md).

fairseq itself is not listed below, on purpose. fairseq 0.12.2 and fairseq-fixed are two
distributions of one module, ``fairseq``: naming either here would make pip install it over the
other (their files overwrite each other) in an environment that already has one, and fairseq
0.12.2 does not import on Python >= 3.11. scripts/install.sh keeps an installed fairseq, or
installs fairseq-fixed where there is none (with ``--no-deps``: it declares torchaudio, which
would replace torch). The requirements below are what the plugin needs beside it; hydra-core
and omegaconf take the range that both fairseq 0.12.2's pins (hydra-core 1.0.x, omegaconf
2.0.x) and fairseq-fixed's (1.3.2, 2.3.0) fall in, so an installed fairseq keeps its own.
"""

from setuptools import find_packages, setup

# the recipes' tokenisers: Moses for every European language, jieba for Chinese, MeCab (fugashi
# with UniDic-lite) for Japanese; sacreBLEU's ja-mecab tokeniser (scores of a Japanese target)
# needs mecab-python3 and ipadic
MOSES = ["sacremoses>=0.1"]
ZH = ["jieba>=0.42"]
JA = ["fugashi>=1.3", "unidic-lite>=1.0.8", "mecab-python3>=1.0.5", "ipadic>=1.0"]
RECIPES = [*MOSES, *ZH, *JA]
ANALYSIS = ["matplotlib>=3.5"]
LOGGING = ["tensorboard>=2.10", "tensorboardX"]
# pytest-xdist runs the suite on every core (README: Tests); 3.8 (whose --no-loadscope-reorder the
# README's command gives) needs Python 3.9: on 3.8 the last release for it, whose scheduler keeps
# the collection order anyway (tests/conftest.py accepts the flag there; docs/environments.md).
# Each range is checked against the releases' Requires-Python by tests/test_install.py.
PYTEST = ["pytest>=7", 'pytest-xdist>=3.8; python_version >= "3.9"', 'pytest-xdist>=3.5,<3.7; python_version < "3.9"']

setup(
    name="fairseq_csan",
    version="0.1.0",
    description="Convolutional and Context-Aware Self-Attention Networks as a fairseq plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.8",
    packages=find_packages(include=["fairseq_csan", "fairseq_csan.*"]),
    # the training recipe's hyper-parameters (fairseq_csan/recipes/train.py reads them), and the
    # benchmark's sentence lengths (newstest2014's word counts: numbers only)
    package_data={"fairseq_csan.recipes": ["hparams.json", "newstest2014_lengths.tsv"]},
    install_requires=[
        "torch>=1.13",
        "sacrebleu>=2.0",
        "subword-nmt>=0.3.8",
        # fairseq's own requirements (of 0.12.2 and of fairseq-fixed 0.12.3.1, where install.sh
        # installs it with --no-deps), less torchaudio (translation never imports it)
        "hydra-core>=1.0.7,<1.4",
        "omegaconf>=2.0.6,<2.4",
        "numpy>=1.21.3",
        "regex",
        "tqdm>=4.66",  # TQDM_DISABLE: no progress bars in the recipes' logs (prepare.py)
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
        # fairseq-train --tensorboard-logdir (scripts/train.sh --tensorboard DIR); tensorboardX
        # only quiets fairseq's "Please install tensorboardX" at every start (fairseq logs through
        # torch.utils.tensorboard); installed by scripts/install.sh. W&B (--wandb-project) needs
        # `pip install wandb` besides.
        "logging": LOGGING,
        # one language's tokeniser alone (the recipes extra has all three)
        "zh": ZH,
        "ja": JA,
        # what scripts/gpu_check.sh runs on a GPU node: tests/test_gpu.py, the benchmark and the
        # Multi30k reproduction with its plots (the default of install.sh --make-wheelhouse)
        "gpu-check": ["pytest>=7", *MOSES, *ANALYSIS],
        # the test suite: every tokeniser and the plots
        "test": [*PYTEST, *RECIPES, *ANALYSIS],
    },
)
