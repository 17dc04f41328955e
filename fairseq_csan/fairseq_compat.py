"""Fixes for faults of fairseq-fixed 0.12.3.1 (on torch >= 2.6), applied on import.

Importing ``fairseq_csan`` (``--user-dir fairseq_csan`` does) applies all of them. Each is
the smallest change at the place where fairseq goes wrong; docs/distributed.md explains
3 to 7. fairseq-train imports the user dir while it builds its parser, before it decides how
to launch, so the launch fixes (3, 5, 6) take effect in the stock fairseq-train.

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

3. torchrun ran N separate trainings, silently. fairseq's default world size is the GPU
   count (1 without GPUs), and ``infer_init_method`` returns before it reads torchrun's
   WORLD_SIZE when the world size is 1: ``torchrun --nproc_per_node 2 fairseq-train --cpu``
   (or ``--nnodes 2`` on machines with one GPU each) ran two single-process trainings into
   one checkpoint folder and exited 0. Under torchrun the world size is now torchrun's, and
   an explicit ``--distributed-init-method`` (fairseq would then spawn processes inside each
   of torchrun's) stops with a message, as does an srun step of several tasks that fairseq
   would run as copies (world size 1, or no GPUs).

4. DDP refused CPU models. ``DistributedFairseqModel`` passes ``device_ids=[device_id]``,
   which torch accepts only for a GPU module. A CPU module now gets none.

5. No data parallelism without GPUs. Under torchrun fairseq takes the device as the rank
   modulo the GPU count (a division by zero) and calls ``torch.cuda.set_device``; its own
   spawner asserts world size <= GPU count and starts min(GPUs, world size) processes. On
   the CPU (``--cpu`` or no CUDA), torchrun's processes now join through ``env://`` with
   their torchrun rank, and ``fairseq-train --distributed-world-size N`` spawns N processes
   on 127.0.0.1. Other CPU launches that fairseq sizes by GPUs stop with a message.

6. NCCL, fairseq's default backend, needs GPUs: on the CPU it becomes gloo.

7. A data-parallel run could not resume (on GPUs too). Rank 0 reads the checkpoint and
   sends its state to the other ranks (``distributed.utils._broadcast_object_slow``), which
   unpickle it with torch.load's weights-only default and refuse fairseq's and omegaconf's
   classes. They now unpickle it in full: it is rank 0's own state, read from the file
   through the weights-only unpickler and sent within the job.
"""

import argparse

import numpy as np
import torch
from fairseq.data import data_utils
from fairseq.distributed import utils as distributed_utils
from fairseq.models import distributed_fairseq_model

from .data_parallel import DistributedDataParallelAnyDevice, broadcast_rank0_object, launch_anywhere


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
distributed_utils.call_main = launch_anywhere(distributed_utils.call_main)  # 3, 5, 6
distributed_fairseq_model.DistributedDataParallel = DistributedDataParallelAnyDevice  # 4
distributed_utils._broadcast_object_slow = broadcast_rank0_object  # 7
