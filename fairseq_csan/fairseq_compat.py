"""Fixes for faults of fairseq (and of torch >= 2.6 under it), each applied on import only where
the running fairseq and torch have the fault.

Importing ``fairseq_csan`` (``--user-dir fairseq_csan`` does) checks for each fault, by its
behaviour or by the presence of the faulty code, never by a version number, and fixes the ones
found (``APPLIED`` says which): ``patches.apply`` calls :func:`apply_fixes` on the running
fairseq (patches.py lists every change the plugin makes, these among them). Where a check cannot tell (a fairseq unlike any we know), the
plugin warns and leaves that part of fairseq as it is. Each fix is the smallest change at the
place where fairseq goes wrong; docs/distributed.md explains 3 to 7. fairseq-train imports the
user dir while it builds its parser, before it decides how to launch, so the launch fixes
(3, 5, 6) take effect in the stock fairseq-train. Where each fault is found, as checked here
(see each check's docstring): fairseq-fixed 0.12.3.1 on torch 2.13 has all seven; fairseq
0.12.2 (torch 1.13 or 2.4) has 4, 5 and 6 only (it reads torchrun's world size itself; the
launch wrapper, which does 3, 5 and 6 together, is applied whole where either fault is found).

1. Checkpoints would not load. Since torch 2.6, ``torch.load`` defaults to
   ``weights_only=True``, which unpickles only tensors, containers and allow-listed classes.
   A fairseq checkpoint holds one other class, the ``argparse.Namespace`` of its training
   flags, so fairseq-generate, fairseq-interactive, the hub interface and resumed training
   all fail (fairseq's own loader passes ``weights_only=False`` on GitHub main only; our
   tools load checkpoints too). Where torch refuses a Namespace, we add
   ``argparse.Namespace`` to torch's allow-list. A Namespace only stores
   attributes, so the weights-only guarantee stands: nothing in a checkpoint can run code.

2. Sentences were silently dropped. fairseq-fixed's ``data_utils.batch_by_size`` discards
   the last batch when its size is not a multiple of ``--required-batch-size-multiple``
   (default 8), which fairseq 0.12.2 did not: fairseq-generate then translates, and
   scores, only part of a test set (496 of 500 sentences, say), and training skips the
   longest sentences of every epoch. We give the dropped batch back.

3. torchrun ran N separate trainings, silently. fairseq's default world size is the GPU
   count (1 without GPUs), and ``infer_init_method`` returns before it reads torchrun's
   WORLD_SIZE when the world size is 1 (fairseq-fixed, GitHub main): ``torchrun --nproc_per_node 2 fairseq-train --cpu``
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

8. Importing fairseq configured the caller's logging. A module of fairseq that translation
   never uses (``models/wav2vec/wav2vec2_classification.py``: ``logging.basicConfig(level=
   logging.DEBUG)``; ``tasks/text_to_speech.py`` too) configures the root logger when fairseq
   is imported, so every INFO line of fairseq, the whole configuration dictionary of each
   model load among them, went to standard error in any program that imports the plugin
   (the hub's one-liner printed 13 KB before its translation). Where this package's own import
   of fairseq configures a root logger that had no handler before, the root logger is put
   back as it was (:func:`logging_as_it_was`). A process that configured logging before, and
   one that imported fairseq before the plugin (fairseq-train, fairseq-generate, which set up
   their own logging), are left as they are.
"""

import argparse
import contextlib
import fractions
import inspect
import io
import logging
import os
import sys
import pickle
import warnings

import numpy as np
import torch

from .data_parallel import DistributedDataParallelAnyDevice, broadcast_rank0_object, launch_anywhere

APPLIED = {}  # fix name -> whether the running fairseq / torch had the fault (and got the fix)


def _source(function) -> str:
    return inspect.getsource(function)


def _torch_load_refuses(obj) -> bool:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    with warnings.catch_warnings():  # torch 2.4-2.5 warn that weights_only will become the default
        warnings.simplefilter("ignore", FutureWarning)
        try:
            torch.load(buffer, map_location="cpu")
        except pickle.UnpicklingError:
            return True
    return False


def torch_load_refuses_namespaces() -> bool:
    """Fault of 1: torch.load's default (weights-only since torch 2.6) refuses the
    ``argparse.Namespace`` that every fairseq checkpoint holds."""
    return _torch_load_refuses({"args": argparse.Namespace(arch="probe")})


def torch_load_is_weights_only() -> bool:
    """Whether torch.load unpickles weights only by default (a class no allow-list names)."""
    return _torch_load_refuses({"probe": fractions.Fraction(1, 3)})


def allow_fairseq_checkpoints() -> bool:
    """Allow-list what fairseq checkpoints contain; False on torch without the allow-list."""
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is None:  # torch < 2.4 loads without weights_only by default
        return False
    add_safe_globals([argparse.Namespace])
    return True


def drops_batches(batch_by_size) -> bool:
    """Fault of 2: ``batch_by_size`` leaves out a last batch smaller than the required multiple."""
    sizes = np.full(3, 5, dtype=np.int64)
    batches = batch_by_size(np.arange(3, dtype=np.int64), lambda i: sizes[i], max_tokens=100,
                            max_sentences=None, required_batch_size_multiple=8)
    return sum(len(b) for b in batches) < 3


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


def ignores_torchrun_world_size(infer_init_method) -> bool:
    """Fault of 3: at world size 1 (fairseq's default without GPUs) ``infer_init_method``
    returns before it reads torchrun's WORLD_SIZE (fairseq-fixed, GitHub main; 0.12.2 reads it)."""
    probe = argparse.Namespace(distributed_init_method=None, tpu=False, pipeline_model_parallel=False,
                               distributed_world_size=1, distributed_port=-1, distributed_no_spawn=False,
                               distributed_rank=0, device_id=0)
    torchrun = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "WORLD_SIZE": "2", "RANK": "0"}
    saved = {name: os.environ.get(name) for name in torchrun}
    os.environ.update(torchrun)
    try:
        infer_init_method(probe)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return probe.distributed_world_size == 1


def sizes_processes_by_gpus(call_main) -> bool:
    """Faults of 5 and 6: fairseq's launcher counts GPUs (``torch.cuda.device_count()``) to
    start its processes, so that nothing runs data-parallel without GPUs."""
    return "device_count()" in _source(call_main)


def passes_cuda_device_ids(distributed_model) -> bool:
    """Fault of 4: fairseq hands torch DDP ``device_ids=[...]``, which torch refuses for a CPU module."""
    return "device_ids=[" in _source(distributed_model)


def unpickles_weights_only(broadcast_object_slow) -> bool:
    """Fault of 7: the ranks unpickle rank 0's state with torch.load's default, and that
    default refuses fairseq's classes."""
    return "weights_only=False" not in _source(broadcast_object_slow) and torch_load_is_weights_only()


@contextlib.contextmanager
def logging_as_it_was():
    """Fix 8, around this package's import of fairseq: a root logger without handlers before it
    that has some after it (fairseq's import called ``logging.basicConfig``) is put back, its
    handlers and level as they were. ``APPLIED["8 logging"]`` says whether fairseq's import did so
    (False where fairseq was imported already, or the root logger had a handler: nothing is
    changed then)."""
    root = logging.getLogger()
    unconfigured = not root.handlers and "fairseq" not in sys.modules
    level = root.level
    try:
        yield
    finally:
        configured = unconfigured and bool(root.handlers)
        if configured:
            for handler in list(root.handlers):
                root.removeHandler(handler)
            root.setLevel(level)
        APPLIED["8 logging"] = configured


def apply_fixes(data_utils, distributed_utils, distributed_fairseq_model) -> dict:
    """Check for each fault in the given fairseq modules and fix those found; returns
    {fix: whether applied}. A check that fails (a fairseq we do not know) warns."""
    def checkpoints():
        if not torch_load_refuses_namespaces():
            return False
        if not allow_fairseq_checkpoints():
            raise RuntimeError("torch.load refuses argparse.Namespace and has no add_safe_globals")
        return True

    def batches():
        if drops_batches(data_utils.batch_by_size):
            data_utils.batch_by_size = keep_every_batch(data_utils.batch_by_size)
            return True
        return False

    def launch():
        call_main = distributed_utils.call_main
        if ignores_torchrun_world_size(distributed_utils.infer_init_method) or sizes_processes_by_gpus(call_main):
            distributed_utils.call_main = launch_anywhere(call_main)
            return True
        return False

    def ddp():
        if passes_cuda_device_ids(distributed_fairseq_model.DistributedFairseqModel):
            distributed_fairseq_model.DistributedDataParallel = DistributedDataParallelAnyDevice
            return True
        return False

    def broadcast():
        if unpickles_weights_only(distributed_utils._broadcast_object_slow):
            distributed_utils._broadcast_object_slow = broadcast_rank0_object
            return True
        return False

    applied = {}
    for name, fix in (("1 checkpoints", checkpoints), ("2 batches", batches), ("3,5,6 launch", launch),
                      ("4 ddp", ddp), ("7 broadcast", broadcast)):
        try:
            applied[name] = fix()
        except Exception as error:  # a fairseq we do not know: say so, change nothing
            warnings.warn(f"fairseq_csan: cannot tell whether this fairseq needs fix {name} of "
                          f"fairseq_csan/fairseq_compat.py ({type(error).__name__}: {error}); left as it is")
            applied[name] = False
    return applied

