"""Shared fixtures: tiny models built through fairseq's own argument parsing, and the corpora."""

import os
from pathlib import Path

import pytest
import torch

import fairseq_csan  # noqa: F401  (registers the architectures)
from fairseq import options
from fairseq.data import Dictionary
from fairseq.tasks.translation import TranslationTask

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CSAN_SHARED_DATA", REPO.parent / "shared" / "data"))

# the smallest dimensions at which every setting under test is legal (4 heads, 3 layers)
TINY = [
    "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
    "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
    "--encoder-layers", "3", "--decoder-layers", "2",
]


def make_dictionary(size: int = 50) -> Dictionary:
    d = Dictionary()
    for i in range(size):
        d.add_symbol(f"w{i}")
    return d


def parse_model_args(arch: str, extra=()):
    parser = options.get_training_parser()
    argv = ["/dev/null", "--task", "translation", "-s", "src", "-t", "tgt", "--arch", arch, *extra]
    return options.parse_args_and_arch(parser, argv)


def build_model(arch: str, extra=(), dictionary=None, seed: int = 0):
    """Build ``arch`` as fairseq-train would, from command-line flags."""
    args = parse_model_args(arch, extra)
    d = dictionary or make_dictionary()
    task = TranslationTask(args, d, d)
    torch.manual_seed(seed)
    return task.build_model(args), args, task


def shared_corpus(name: str) -> Path:
    """A corpus folder under the shared data, or a skip that says why."""
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(
            f"shared corpus {name!r} not found at {path}; set CSAN_SHARED_DATA to the folder "
            "holding the shared corpora"
        )
    return path
