"""fairseq's data-parallel training, made to run on CPUs too and never silently as copies.

``fairseq_compat`` applies these on import; its docstring says what each one fixes in
fairseq-fixed 0.12.3.1 and why. Three replacements, each for what fairseq calls at run time:

- ``launch_anywhere(call_main)``: what fairseq-train does with its processes. Under torchrun
  the world size is torchrun's; without GPUs, torchrun's processes and fairseq's own spawner
  are set up without CUDA device ids, and the process group uses gloo; a SLURM step that
  fairseq would run as copies is refused.
- ``DistributedDataParallelAnyDevice``: torch DDP without CUDA device ids for a CPU module.
- ``broadcast_rank0_object``: what rank 0 sends to the others (the state of a resumed
  checkpoint) is unpickled in full, as torch did before 2.6.
"""

import io
import logging
import os
import socket

import torch
from torch.nn.parallel import DistributedDataParallel

logger = logging.getLogger(__name__)

TORCHRUN_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


def torchrun_world_size():
    """The number of processes torchrun started, or None outside torchrun."""
    if all(name in os.environ for name in TORCHRUN_VARIABLES):
        return int(os.environ["WORLD_SIZE"])
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_anywhere(call_main, gpus=torch.cuda.is_available):
    """Wrap fairseq's ``distributed.utils.call_main`` (see the module docstring); ``gpus`` tells
    whether this machine has GPUs (a parameter for the tests, which decide it)."""
    if getattr(call_main, "launches_anywhere", False):
        return call_main

    def call_main_anywhere(cfg, main, **kwargs):
        from fairseq.distributed import utils as distributed_utils

        dt = cfg.distributed_training
        on_cpu = cfg.common.cpu or not gpus()
        launched = torchrun_world_size()
        if launched is not None:
            if launched > 1 and dt.distributed_init_method is not None:
                raise SystemExit(
                    "fairseq_csan: under torchrun, leave out --distributed-init-method: the "
                    "processes join through torchrun's rendezvous (with it, fairseq would skip "
                    "torchrun's variables and start processes of its own in each one)")
            # fairseq returns before reading torchrun's variables when the world size is 1,
            # which is its default without GPUs: every process would train alone. (And a
            # world size above torchrun's would wait for processes that never come.)
            dt.distributed_world_size = launched
        step_tasks = int(os.environ.get("SLURM_STEP_NUM_TASKS", "1"))
        if launched is None and step_tasks > 1 and (on_cpu or dt.distributed_world_size == 1):
            raise SystemExit(
                f"fairseq_csan: srun started {step_tasks} tasks, but fairseq would train them as "
                f"{step_tasks} separate runs: " + (
                    "fairseq's SLURM set-up counts GPUs, and there are none; on CPUs, run "
                    "torchrun under srun (one task per node)" if on_cpu else
                    "give --distributed-world-size (nodes x GPUs per node)"))
        if not on_cpu or dt.distributed_world_size <= 1 or cfg.common.tpu:
            return call_main(cfg, main, **kwargs)

        if dt.distributed_backend == "nccl":
            logger.info("NCCL needs GPUs: using --distributed-backend gloo on the CPU")
            dt.distributed_backend = "gloo"
        if launched is not None:
            # torchrun without GPUs: fairseq's own set-up takes the rank modulo the GPU count
            dt.distributed_init_method = "env://"
            dt.distributed_rank = int(os.environ["RANK"])
            dt.device_id = 0
            dt.distributed_no_spawn = True
            return call_main(cfg, main, **kwargs)
        if dt.distributed_init_method is not None or dt.distributed_no_spawn:
            raise SystemExit(
                "fairseq_csan: on the CPU, launch several processes with torchrun (or "
                "fairseq-train --distributed-world-size N alone on one machine); "
                "--distributed-init-method and --distributed-no-spawn count GPUs")
        # fairseq's own spawner on one machine: one process per rank, as it does per GPU
        port = dt.distributed_port if dt.distributed_port > 0 else free_port()
        dt.distributed_init_method = f"tcp://127.0.0.1:{port}"
        start_rank, dt.distributed_rank = dt.distributed_rank, None
        torch.multiprocessing.spawn(
            fn=distributed_utils.distributed_main,
            args=(main, cfg, {**kwargs, "start_rank": start_rank}),
            nprocs=dt.distributed_world_size,
            join=True,
        )

    call_main_anywhere.launches_anywhere = True
    call_main_anywhere.__wrapped__ = call_main
    return call_main_anywhere


class DistributedDataParallelAnyDevice(DistributedDataParallel):
    """torch DDP as fairseq builds it, but a CPU module gets no CUDA ``device_ids``
    (torch refuses them for a module whose parameters are on the CPU)."""

    def __init__(self, module, device_ids=None, output_device=None, **kwargs):
        if next(module.parameters()).device.type == "cpu":
            device_ids = output_device = None
        super().__init__(module, device_ids=device_ids, output_device=output_device, **kwargs)


def broadcast_rank0_object(obj, src_rank, group, dist_device):
    """Replaces fairseq's ``_broadcast_object_slow``: pickle ``obj`` on ``src_rank`` and
    unpickle it on every other rank. fairseq unpickles with torch.load's default, which since
    torch 2.6 is ``weights_only=True`` and refuses the fairseq and omegaconf classes in a
    resumed trainer state. What arrives here is what rank 0 built from a checkpoint it read
    through the weights-only unpickler, sent within the job, so it is unpickled in full."""
    from fairseq.distributed import utils as distributed_utils

    size = torch.zeros(1, dtype=torch.long, device=dist_device)
    if distributed_utils.get_rank(group) == src_rank:
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        payload = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8).to(dist_device)
        size[0] = payload.numel()
        distributed_utils.broadcast(size, src=src_rank, group=group)
        distributed_utils.broadcast(payload, src=src_rank, group=group)
        return obj
    distributed_utils.broadcast(size, src=src_rank, group=group)
    payload = torch.empty(int(size.item()), dtype=torch.uint8, device=dist_device)
    distributed_utils.broadcast(payload, src=src_rank, group=group)
    return torch.load(io.BytesIO(payload.cpu().numpy().tobytes()), map_location="cpu", weights_only=False)
