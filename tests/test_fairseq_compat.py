"""The two fixes to fairseq-fixed that importing fairseq_csan applies."""

import argparse
import pickle

import numpy as np
import pytest
import torch
from fairseq.data import data_utils

from fairseq_csan.fairseq_compat import allow_fairseq_checkpoints


def test_checkpoints_need_exactly_the_namespace_allow_list(tmp_path):
    """Without the allow-list torch >= 2.6 refuses a fairseq checkpoint; with it, torch
    still refuses a class that could run code."""
    path = tmp_path / "state.pt"
    torch.save({"args": argparse.Namespace(arch="transformer_csan2d"), "w": torch.ones(2)}, path)
    try:
        torch.serialization.clear_safe_globals()
        with pytest.raises(pickle.UnpicklingError, match="argparse.Namespace"):
            torch.load(path)
    finally:
        assert allow_fairseq_checkpoints()
    assert torch.load(path)["args"].arch == "transformer_csan2d"
    torch.save({"f": print}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path)


@pytest.mark.parametrize("n,mult,max_tokens,max_sentences", [
    (500, 8, 8000, None), (500, 8, None, 64), (37, 8, 200, None), (16, 8, 1000, None), (3, 8, 100, None),
    (500, 1, 8000, None),
])
def test_batches_cover_every_sentence(n, mult, max_tokens, max_sentences):
    """fairseq-generate must translate the whole test set: no index is left out."""
    sizes = np.sort(np.random.RandomState(n).randint(3, 20, n)).astype(np.int64)
    indices = np.arange(n, dtype=np.int64)
    batches = data_utils.batch_by_size(
        indices, lambda i: sizes[i], max_tokens=max_tokens, max_sentences=max_sentences,
        required_batch_size_multiple=mult,
    )
    assert np.array_equal(np.concatenate(batches), indices)
    for b in batches[:-1]:  # the batching rules stand for every full batch
        assert len(b) % mult == 0
        assert max_tokens is None or len(b) * sizes[b].max() <= max_tokens
        assert max_sentences is None or len(b) <= max_sentences
    # the fix only appends what fairseq left out: every batch fairseq made is unchanged
    original = data_utils.batch_by_size.__wrapped__(
        indices, lambda i: sizes[i], max_tokens=max_tokens, max_sentences=max_sentences,
        required_batch_size_multiple=mult,
    )
    for ours, theirs in zip(batches, original):
        assert np.array_equal(ours, theirs)
