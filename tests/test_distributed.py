"""Data parallelism through fairseq's own path (torch DDP over gloo), run on the CPU.

Two processes with --update-freq 1 reach the parameters of one process with --update-freq 2,
for four architectures, launched by torchrun or by fairseq's own spawner; two simulated
machines and a stopped-and-resumed run reach those of an uninterrupted run on one machine;
a parameter without a gradient stops the run. Then the launch fixes on their own
(fairseq_csan/data_parallel.py) and scripts/train.sh's multi-process and multi-node commands.
See docs/distributed.md.
"""

import os
import signal
import subprocess
from types import SimpleNamespace

import pytest
import torch

from conftest import (REPO, TIMEOUT, TOLERANCE, TRAIN, TRAIN_TINY as TINY, environment, free_port,
                      largest_difference, launch, parameters, succeed)
from fairseq_csan import data_parallel
from recipe_helpers import fake_task, run, train_main

@pytest.fixture(scope="module")
def single_process(data_bin, tmp_path_factory):
    """One process, --update-freq 2: the reference run of an architecture, trained once."""
    runs = {}

    def reference(arch, flags):
        key = (arch, *flags)
        if key not in runs:
            save = tmp_path_factory.mktemp(arch)
            succeed(["fairseq-train", data_bin, "--user-dir", REPO / "fairseq_csan", "--arch", arch, *flags,
                     *TINY, *TRAIN, "--update-freq", "2", "--save-dir", save])
            runs[key] = save
        return runs[key]

    return reference


# ---------------------------------------------------------------- two processes = one process, update-freq 2

@pytest.mark.slow
@pytest.mark.parametrize("arch, flags, launcher", [
    ("transformer", [], "torchrun"),
    ("transformer_csan2d", [], "torchrun"),
    ("transformer_ctxaware", ["--ctx-side", "both"], "torchrun"),
    ("transformer_relpos", [], "fairseq's spawner"),
])
def test_two_processes_reach_the_parameters_of_one_with_update_freq_2(arch, flags, launcher, data_bin,
                                                                       single_process, tmp_path):
    """fairseq gives shard r of a run with 2 processes the batches r, r + 2, r + 4, ... of the
    one-process order, so update k sees the same two batches in both runs, and the summed
    gradient, hence every parameter, agrees to fp32 rounding."""
    reference = single_process(arch, flags)
    train = ["--user-dir", REPO / "fairseq_csan", "--arch", arch, *flags, *TINY, *TRAIN, "--save-dir", tmp_path]
    if launcher == "torchrun":
        log = succeed(["torchrun", "--standalone", "--nproc_per_node", "2", "--no-python", "fairseq-train",
                       data_bin, *train])
    else:
        log = succeed(["fairseq-train", data_bin, *train, "--distributed-world-size", "2"])
    assert "training on 2 devices" in log and "distributed init (rank 1)" in log
    ours, theirs = parameters(tmp_path / "checkpoint_last.pt"), parameters(reference / "checkpoint_last.pt")
    assert largest_difference(ours, theirs) <= TOLERANCE
    # the comparison means something: the last two updates moved the parameters far more
    halfway = parameters(next(reference.glob("checkpoint_*_2.pt")))
    assert largest_difference(halfway, theirs) > 1000 * TOLERANCE


@pytest.mark.slow
def test_a_parameter_without_gradient_stops_the_run(data_bin, tmp_path):
    """find_unused_parameters stays off: DDP then waits for a gradient that never comes, and
    torch reports it at the next update on every process; the run must end, not hang."""
    plugin = tmp_path / "csan_unused_parameter"
    plugin.mkdir()
    (plugin / "__init__.py").write_text(
        "import torch\n"
        "from fairseq.models import register_model, register_model_architecture\n"
        "from fairseq.models.transformer import TransformerModel, base_architecture\n"
        "import fairseq_csan  # noqa: F401\n\n\n"
        "@register_model('transformer_with_unused')\n"
        "class TransformerWithUnused(TransformerModel):\n"
        "    def __init__(self, args, encoder, decoder):\n"
        "        super().__init__(args, encoder, decoder)\n"
        "        self.unused = torch.nn.Linear(4, 4)  # in no forward pass\n\n\n"
        "register_model_architecture('transformer_with_unused', 'transformer_with_unused')(base_architecture)\n")
    done, log = launch(["torchrun", "--standalone", "--nproc_per_node", "2", "--no-python", "fairseq-train",
                        data_bin, "--user-dir", plugin, "--arch", "transformer_with_unused", *TINY, *TRAIN,
                        "--save-dir", tmp_path / "ckpt"])
    assert done.returncode != 0
    assert "parameters that were not used in producing loss" in log


# ---------------------------------------------------------------- scripts/train.sh: resume and two machines

def train_sh(data_bin, save, *options):
    return ["bash", "scripts/train.sh", "--data", data_bin, "--arch", "transformer", "--save-dir", save,
            "--cpu-tiny", "--max-update", "4", *options,
            "--", "--max-tokens", "256", "--save-interval-updates", "2", "--keep-interval-updates", "5",
            "--log-interval", "1"]


@pytest.fixture(scope="module")
def uninterrupted(data_bin, tmp_path_factory):
    """scripts/train.sh --cpu-processes 2: four updates without a stop."""
    save = tmp_path_factory.mktemp("uninterrupted")
    log = succeed(train_sh(data_bin, save, "--cpu-processes", "2"))
    assert "torchrun --standalone --nproc_per_node 2 --no-python fairseq-train" in log
    assert "training on 2 devices" in (save / "train.log").read_text()
    return save


@pytest.mark.slow
def test_a_stopped_data_parallel_run_resumes_from_its_checkpoint(data_bin, uninterrupted, tmp_path):
    """The same run stopped after its second update (its checkpoint of that moment is all
    that is left), then started again: it continues, and ends where the uninterrupted one does."""
    stopped = next(uninterrupted.glob("checkpoint_*_2.pt"))
    (tmp_path / "checkpoint_last.pt").write_bytes(stopped.read_bytes())
    for record in ("run.json", ".written.json"):  # the run's folder, as it was
        (tmp_path / record).write_bytes((uninterrupted / record).read_bytes())
    log = succeed(train_sh(data_bin, tmp_path, "--cpu-processes", "2"))
    assert f"resuming from {tmp_path}/checkpoint_last.pt" in log
    assert "@ 2 updates)" in log and "num_updates=3," in log and "num_updates=2," not in log
    resumed = parameters(tmp_path / "checkpoint_last.pt")
    # the same processes doing the same sums: equal to far below fp32 noise (0 when measured)
    assert largest_difference(resumed, parameters(uninterrupted / "checkpoint_last.pt")) <= 1e-7
    assert largest_difference(resumed, parameters(stopped)) > 1e-4  # two Adam steps of lr 1e-3 moved it


@pytest.mark.slow
def test_two_machines_reach_the_parameters_of_two_processes_on_one(data_bin, uninterrupted, tmp_path):
    """Two simulated machines on 127.0.0.1, one process each (torchrun --nnodes 2 --node_rank r,
    through scripts/train.sh --nodes 2), form one world of 2, as two processes on one machine do."""
    port = free_port()
    # each node's output goes to a file (a pipe read only after the other node has ended could
    # fill up and stall it); each node is its own process group, killed whole if it hangs
    outputs = [tmp_path.parent / f"{tmp_path.name}.node{rank}.out" for rank in ("0", "1")]
    nodes = []
    for rank, output in zip(("0", "1"), outputs):
        with open(output, "w") as out:
            nodes.append(subprocess.Popen(
                [str(c) for c in train_sh(data_bin, tmp_path, "--cpu-processes", "1", "--nodes", "2",
                                          "--node-rank", rank, "--master-addr", "127.0.0.1", "--port", port)],
                stdout=out, stderr=subprocess.STDOUT, env=environment(), cwd=REPO, start_new_session=True))
    try:
        for node in nodes:
            node.wait(timeout=TIMEOUT)
    finally:
        for node in nodes:
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
        logs = [output.read_text() for output in outputs]
        print("\n".join(f"--- node {rank}:\n{log[-3000:]}" for rank, log in enumerate(logs)))
    for node, log in zip(nodes, logs):
        assert node.returncode == 0, log[-5000:]
    assert f"torchrun --nnodes 2 --node_rank 1 --master_addr 127.0.0.1 --master_port {port}" in logs[1]
    assert "training on 2 devices" in (tmp_path / "train.log").read_text()
    assert (tmp_path / "train.node1.log").is_file()
    two_machines = parameters(tmp_path / "checkpoint_last.pt")
    assert largest_difference(two_machines, parameters(uninterrupted / "checkpoint_last.pt")) <= TOLERANCE


# ---------------------------------------------------------------- the launch fixes on their own

def fairseq_config(world_size=1, cpu=True, **distributed):
    training = dict(distributed_world_size=world_size, distributed_init_method=None, distributed_backend="nccl",
                    distributed_rank=0, device_id=0, distributed_no_spawn=False, distributed_port=-1)
    training.update(distributed)
    return SimpleNamespace(common=SimpleNamespace(cpu=cpu, tpu=False),
                           distributed_training=SimpleNamespace(**training))


def recording_call_main(gpus=False):
    """fairseq's call_main wrapped as fairseq_compat wraps it, on a machine with or without GPUs;
    the configurations it would run, in ``seen``."""
    seen = []
    return seen, data_parallel.launch_anywhere(lambda cfg, main, **kwargs: seen.append(cfg), gpus=lambda: gpus)


TORCHRUN_RANK_1_OF_2 = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "1"}


def test_torchrun_without_gpus_joins_one_world_with_gloo(monkeypatch):
    for name, value in TORCHRUN_RANK_1_OF_2.items():
        monkeypatch.setenv(name, value)
    seen, call_main = recording_call_main()
    call_main(fairseq_config(world_size=1), main=None)
    [cfg] = seen
    dt = cfg.distributed_training
    assert (dt.distributed_world_size, dt.distributed_rank, dt.distributed_init_method) == (2, 1, "env://")
    assert dt.distributed_no_spawn and dt.device_id == 0 and dt.distributed_backend == "gloo"


def test_one_torchrun_process_trains_alone_whatever_the_world_size_flag(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK"):
        monkeypatch.setenv(name, TORCHRUN_RANK_1_OF_2[name] if name != "RANK" else "0")
    seen, call_main = recording_call_main()
    call_main(fairseq_config(world_size=2), main=None)
    assert seen[0].distributed_training.distributed_world_size == 1  # not a wait for a rank 1


def test_torchrun_world_size_wins_over_fairseq_default_on_gpus(monkeypatch):
    """One GPU per machine, torchrun --nnodes 2: fairseq's default world size is 1."""
    for name, value in TORCHRUN_RANK_1_OF_2.items():
        monkeypatch.setenv(name, value)
    seen, call_main = recording_call_main(gpus=True)
    call_main(fairseq_config(world_size=1, cpu=False), main=None)
    dt = seen[0].distributed_training
    # fairseq's own torchrun set-up (infer_init_method) then runs, as it does for world size > 1
    assert dt.distributed_world_size == 2 and dt.distributed_init_method is None and dt.distributed_backend == "nccl"


@pytest.mark.parametrize("cpu, message", [
    (True, "fairseq's SLURM set-up counts GPUs, and there are none"),
    (False, "give --distributed-world-size (nodes x GPUs per node)"),
])
def test_an_srun_step_that_would_train_copies_is_refused(cpu, message, monkeypatch):
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")
    for name in TORCHRUN_RANK_1_OF_2:
        monkeypatch.delenv(name, raising=False)
    seen, call_main = recording_call_main(gpus=not cpu)
    with pytest.raises(SystemExit, match="srun started 4 tasks, but fairseq would train them as 4 separate runs") as stop:
        call_main(fairseq_config(world_size=4 if cpu else 1, cpu=cpu), main=None)
    assert message in str(stop.value) and seen == []


def test_torchrun_with_an_init_method_of_its_own_is_refused(monkeypatch):
    """fairseq would skip torchrun's variables and spawn its own processes in each process."""
    for name, value in TORCHRUN_RANK_1_OF_2.items():
        monkeypatch.setenv(name, value)
    for cpu in (True, False):
        seen, call_main = recording_call_main(gpus=not cpu)
        with pytest.raises(SystemExit, match="under torchrun, leave out --distributed-init-method"):
            call_main(fairseq_config(cpu=cpu, distributed_init_method="tcp://127.0.0.1:1"), main=None)
        assert seen == []


def test_cpu_launch_sized_by_gpus_is_refused(monkeypatch):
    for name in TORCHRUN_RANK_1_OF_2:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("SLURM_STEP_NUM_TASKS", raising=False)
    seen, call_main = recording_call_main()
    with pytest.raises(SystemExit, match="on the CPU, launch several processes with torchrun"):
        call_main(fairseq_config(world_size=2, distributed_init_method="tcp://host:1"), main=None)
    call_main(fairseq_config(world_size=1), main=None)  # one process: fairseq's own path, untouched
    assert seen[0].distributed_training.distributed_init_method is None


def test_fairseq_reads_the_slurm_step_that_train_sh_starts(monkeypatch, tmp_path):
    """The srun step of test_dry_run_four_machines_through_slurm (4 machines x 2 GPUs, one task
    per GPU, --distributed-world-size 8 --distributed-port 29500), as fairseq's own SLURM
    detection sees it from task 5 (machine 2, second GPU); scontrol is a stand-in."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils

    scontrol = tmp_path / "scontrol"
    scontrol.write_text("#!/bin/sh\nprintf 'gpu-a\\ngpu-b\\ngpu-c\\ngpu-d\\n'\n")
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    for name in TORCHRUN_RANK_1_OF_2:
        monkeypatch.delenv(name, raising=False)
    slurm = {"SLURM_STEP_NODELIST": "gpu-[a-d]", "SLURM_NNODES": "4", "SLURM_NTASKS_PER_NODE": "2",
             "SLURM_NODEID": "2", "SLURM_PROCID": "5", "SLURM_LOCALID": "1"}
    for name, value in slurm.items():
        monkeypatch.setenv(name, value)
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "/dev/null", "--task", "translation", "-s", "en", "-t", "de", "--arch", "transformer",
        "--distributed-world-size", "8", "--distributed-port", "29500"])
    dt = convert_namespace_to_omegaconf(args).distributed_training
    # fairseq's SLURM detection itself (infer_init_method then selects GPU 1 with torch.cuda.set_device)
    assert distributed_utils._infer_slurm_init(dt, None)
    assert dt.distributed_init_method == "tcp://gpu-a:29500"
    assert (dt.distributed_world_size, dt.distributed_rank, dt.device_id, dt.distributed_no_spawn) == (8, 5, 1, True)


# ---------------------------------------------------------------- scripts/train.sh's commands

@pytest.fixture
def fake_data(tmp_path):
    return fake_task(tmp_path)


def dry_run(data, *options):
    done = train_main("--data", data, "--arch", "transformer", "--save-dir", "/ckpt", "--dry-run", *options)
    return done.stdout.strip(), done.stderr


HYPER = ("--optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 "
         "--lr-scheduler inverse_sqrt --lr 0.000699 --warmup-updates 4000 --warmup-init-lr 1e-07 "
         "--criterion label_smoothed_cross_entropy --label-smoothing 0.1 "
         "--dropout 0.1 --weight-decay 0.0 --clip-norm 0.0 --max-tokens 4096 --max-update 100000 ")
TAIL = ("--save-dir /ckpt --save-interval-updates 1000 --keep-interval-updates 20 --no-epoch-checkpoints "
        "--log-format simple --log-interval 100 --seed 1")


def test_dry_run_cpu_processes_stand_in_for_gpus(fake_data):
    command, warning = dry_run(fake_data, "--cpu-processes", "2")
    assert command == (
        "torchrun --standalone --nproc_per_node 2 --no-python fairseq-train "
        f"{fake_data}/data-bin --user-dir {REPO}/fairseq_csan --arch transformer "
        "--source-lang en --target-lang de --share-all-embeddings " + HYPER +
        "--cpu --distributed-world-size 2 --update-freq 4 --distributed-backend gloo " + TAIL)
    assert warning == ""
    command, _ = dry_run(fake_data, "--cpu-processes", "2", "--precision", "bf16")
    assert command.startswith("torchrun --standalone --nproc_per_node 2 -m fairseq_csan.train ")
    assert "--cpu --distributed-world-size 2 --update-freq 4 --bf16 --distributed-backend gloo " in command
    command, _ = dry_run(fake_data, "--cpu-processes", "2", "--cpu-tiny")
    assert "--max-update 16 --cpu --num-workers 0 --distributed-world-size 2 --distributed-backend gloo " in command


def test_dry_run_two_machines_through_torchrun(fake_data):
    command, warning = dry_run(fake_data, "--nodes", "2", "--gpus", "4", "--node-rank", "1",
                               "--master-addr", "node0", "--port", "12345")
    assert command == (
        "torchrun --nnodes 2 --node_rank 1 --master_addr node0 --master_port 12345 --nproc_per_node 4 "
        f"--no-python fairseq-train {fake_data}/data-bin --user-dir {REPO}/fairseq_csan --arch transformer "
        "--source-lang en --target-lang de --share-all-embeddings " + HYPER +
        "--distributed-world-size 8 --update-freq 1 --fp16 " + TAIL)
    assert warning == ""


def test_dry_run_four_machines_through_slurm(fake_data):
    command, warning = dry_run(fake_data, "--nodes", "4", "--gpus", "2", "--launcher", "slurm")
    assert command == (
        "srun --nodes 4 --ntasks-per-node 2 --gpus-per-node 2 "
        f"fairseq-train {fake_data}/data-bin --user-dir {REPO}/fairseq_csan --arch transformer "
        "--source-lang en --target-lang de --share-all-embeddings " + HYPER +
        "--distributed-world-size 8 --update-freq 1 --fp16 --distributed-port 29500 " + TAIL)
    assert warning == ""


def test_update_freq_keeps_8_x_4096_tokens_per_update(fake_data):
    """8 batches of 4096 tokens per update on any number of machines up to 8 GPUs in all;
    beyond, a warning says which --max-tokens keeps the papers' update."""
    for nodes, gpus, update_freq in ((1, 1, 8), (2, 1, 4), (2, 2, 2), (4, 2, 1)):
        command, warning = dry_run(fake_data, "--nodes", str(nodes), "--gpus", str(gpus), "--launcher", "slurm")
        assert f"--distributed-world-size {nodes * gpus} --update-freq {update_freq} " in command
        assert warning == ""
    command, warning = dry_run(fake_data, "--nodes", "2", "--launcher", "slurm")  # 8 GPUs each
    assert "--distributed-world-size 16 --update-freq 1 " in command
    assert "16 batches per update, not the papers' 8; --max-tokens 2048 keeps 8 x 4096 tokens per update" in warning


@pytest.mark.parametrize("options, message", [
    (["--cpu-processes", "0"], "--cpu-processes must be a whole number of 1 or more"),
    (["--cpu-processes", "2", "--gpus", "2"], "--cpu-processes and --gpus exclude each other"),
    (["--cpu-processes", "2", "--precision", "fp16"], "--precision fp16 needs a GPU; --cpu-processes takes"),
    (["--cpu-processes", "2", "--launcher", "slurm"], "--launcher slurm counts GPUs"),
    (["--nodes", "0"], "--nodes must be a whole number of 1 or more"),
    (["--nodes", "two"], "--nodes must be a whole number"),
    (["--launcher", "mpirun"], "--launcher must be torchrun or slurm, got 'mpirun'"),
    (["--nodes", "2"], "--nodes 2 with torchrun needs --node-rank (0 to 1) and --master-addr"),
    (["--nodes", "2", "--node-rank", "2", "--master-addr", "h"], "--node-rank must be 0 to 1, got 2"),
    (["--node-rank", "0"], "--node-rank and --master-addr are for torchrun on --nodes K > 1 machines"),
    (["--cpu-tiny", "--nodes", "2", "--node-rank", "0", "--master-addr", "h"], "--cpu-tiny alone is one CPU process"),
    (["--cpu-tiny", "--launcher", "slurm"], "--cpu-tiny alone is one CPU process"),
])
def test_bad_data_parallel_options(fake_data, options, message):
    done = train_main("--data", fake_data, "--arch", "transformer", "--save-dir", "/ckpt", "--dry-run", *options,
                    check=False)
    assert done.returncode == 2 and message in done.stderr


def test_slurm_launch_outside_an_allocation_is_refused(fake_data, tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    done = run(["bash", "scripts/train.sh", "--data", fake_data, "--arch", "transformer", "--save-dir",
                tmp_path / "ckpt", "--gpus", "1", "--launcher", "slurm"], check=False)
    assert done.returncode == 2 and "--launcher slurm runs inside a SLURM allocation" in done.stderr
    assert not (tmp_path / "ckpt").exists()
