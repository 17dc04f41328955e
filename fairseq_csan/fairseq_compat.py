"""Fixes for two faults of fairseq-fixed 0.12.3.1 on torch >= 2.6, applied on import.

Importing ``fairseq_csan`` (``--user-dir fairseq_csan`` does) applies both. Each is the
smallest change at the place where fairseq goes wrong; the README lists them.

1. Checkpoints would not load. Since torch 2.6, ``torch.load`` defaults to
   ``weights_only=True``, which unpickles only tensors, containers and allow-listed classes.
   A fairseq checkpoint holds one other class, the ``argparse.Namespace`` of its training
   flags, so fairseq-generate, fairseq-interactive, the hub interface and resumed training
   all fail. We add ``argparse.Namespace`` to torch's allow-list. A Namespace only stores
   attributes, so the weights-only guarantee stands: nothing in a checkpoint can run code.

2. Sentences were silently dropped. fairseq-fixed's ``data_utils.batch_by_size`` discards
   the last batch when its size is not a multiple of ``--required-batch-size-multiple``
   (default 8), which fairseq 0.12.2 did not: fairseq-generate then translates, and
   scores, only part of a test set (496 of 500 sentences, say), and training skips the
   longest sentences of every epoch. We give the dropped batch back.
"""

import argparse

import numpy as np
import torch
from fairseq.data import data_utils


def allow_fairseq_checkpoints() -> bool:
    """Allow-list what fairseq checkpoints contain; False on torch without the allow-list."""
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is None:  # torch < 2.4 loads without weights_only by default
        return False
    add_safe_globals([argparse.Namespace])
    return True


def keep_every_batch(batch_by_size):
    """Wrap fairseq's ``batch_by_size`` so that no index is left out of the batches."""
    if getattr(batch_by_size, "keeps_every_batch", False):
        return batch_by_size

    def batch_by_size_keeping_all(indices, *args, **kwargs):
        if not isinstance(indices, np.ndarray):
            indices = np.fromiter(indices, dtype=np.int64, count=-1)
        batches = batch_by_size(indices, *args, **kwargs)
        kept = sum(len(b) for b in batches)
        # the batches split ``indices`` in order, so what is missing is its tail
        if kept < len(indices):
            batches = list(batches) + [indices[kept:]]
        return batches

    batch_by_size_keeping_all.keeps_every_batch = True
    batch_by_size_keeping_all.__wrapped__ = batch_by_size
    batch_by_size_keeping_all.__doc__ = batch_by_size.__doc__
    return batch_by_size_keeping_all


allow_fairseq_checkpoints()
data_utils.batch_by_size = keep_every_batch(data_utils.batch_by_size)
