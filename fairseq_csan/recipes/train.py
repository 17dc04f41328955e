"""Train any architecture with the papers' setup (scripts/train.sh runs this; docs/recipes.md).

Parse the options (:func:`parser`), plan the command (:func:`build`; ``--dry-run`` prints it), then
run it in the save folder: docs/recipes.md, 'Training: scripts/train.sh', says what that does, in
order (the lock, the run record, the mended checkpoints, the trainer with its log, progress line
and signals).
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from .after_dashes import check_after_dashes, flag_value, with_overrides
from ..model_folder import sha256
from .save_folder import check_same_run, claim, finished, repair_checkpoints
from .command_line import UNCHECKED, Parser, can_import, positive, whole
from .runner import RUN, Failed, Kind, Progress, Refusal, as_command, run_child, say, shell_words
from .task import TASK, PreparedTask
from .. import user_dir
from ..arch_names import ARCHITECTURES, FAIRSEQ_TRANSFORMERS, is_big

PLUGIN = Path(user_dir())  # the fairseq_csan package, for --user-dir
HPARAMS = Path(__file__).with_name("hparams.json")
# hparams.json: the sizes and schedules (any fields); an input the user may edit
HYPER_PARAMETERS = Kind("hyper-parameters", "hparams.json", written=False)


# ---------------------------------------------------------------------------- the options

def parser() -> Parser:
    """train.sh's options, each declared once: its help, default and type."""
    p = Parser(prog="scripts/train.sh", unknown_hint=" (fairseq-train arguments go after --)",
               usage="scripts/train.sh --data DIR --arch ARCH --save-dir DIR [options] [-- FAIRSEQ-TRAIN ARGS]",
               epilog="Arguments after -- go to fairseq-train and override the ones above, read by its parser: what\n"
                      "the run's lock and record follow (--arch, --seed, where it saves, logs and starts from) is\n"
                      "refused there. A value that starts with '-' is given as --option=VALUE.")
    p.add_argument("--data", metavar="DIR", help="a folder made by examples/*/prepare.sh (its data-bin/ is used), or a "
                   "fairseq data-bin folder")
    p.add_argument("--arch", metavar="ARCH", help="any registered architecture: transformer, transformer_csan2d, "
                   "transformer_ctxaware_big, ...")
    p.add_argument("--save-dir", dest="save", metavar="DIR", help="checkpoints and train.log; a run that stopped "
                   "resumes from DIR/checkpoint_last.pt when started again with the same arguments (a checkpoint_last.pt "
                   "cut short by a kill is replaced by the newest intact checkpoint); one training at a time per folder "
                   "(DIR/.lock)")
    p.add_argument("--size", choices=("base", "big"), help="hyper-parameter set (default: big for *_big architectures, "
                   "else base; not with --cpu-tiny)")
    p.add_argument("--hparams", metavar="FILE", default=str(HPARAMS), help="the hyper-parameters (default: the kit's "
                   "hparams.json, the papers' setup)")
    p.add_argument("--gpus", type=whole, metavar="N", help="GPUs on each machine (default: all visible). --update-freq "
                   "is 8/(K x N) on K machines, so every update sees 8 x 4096 tokens, as on the papers' 8 GPUs")
    p.add_argument("--cpu-processes", dest="cpu_procs", type=positive, metavar="N", help="data parallelism on the CPU: N "
                   "processes through torchrun and gloo (they stand in for N GPUs), to check a multi-GPU set-up without GPUs")
    p.add_argument("--nodes", type=positive, metavar="K", default=1, help="machines (default 1), K x --gpus processes in "
                   "all; see docs/distributed.md")
    p.add_argument("--launcher", choices=("torchrun", "slurm"), help="torchrun (the default with --nodes K > 1 or "
                   "--cpu-processes: run this script on every machine, each with its --node-rank) or slurm (run it once "
                   "inside an sbatch or salloc allocation: srun starts one task per GPU and fairseq reads SLURM's variables)")
    p.add_argument("--node-rank", type=whole, metavar="R", help="this machine's rank, 0 to K-1 (torchrun, K > 1)")
    p.add_argument("--master-addr", metavar="H", help="the rank-0 machine's address (torchrun, K > 1)")
    p.add_argument("--port", type=positive, metavar="P", help="the rank-0 machine's rendezvous port (default 29500; only "
                   "with --nodes K > 1 or --launcher slurm)")
    p.add_argument("--precision", choices=("fp16", "bf16", "fp32"), help="fp16 (default), bf16 or fp32")
    p.add_argument("--share", choices=("auto", "all", "decoder", "none"), default="auto", help="embedding sharing: auto "
                   "(default: all with one joined dictionary, as Vaswani et al.; decoder input/output with two), all, "
                   "decoder or none")
    p.add_argument("--max-tokens", type=positive, metavar="N", help="tokens per GPU per step (default: hparams.json's, "
                   "4096; with --cpu-tiny its cpu_tiny value, 1024)")
    p.add_argument("--max-update", type=positive, metavar="N", help="training updates (default: 100000 base, 300000 big)")
    p.add_argument("--seed", type=whole, metavar="N", default=1, help="random seed (default 1)")
    p.add_argument("--tensorboard", metavar="DIR", help="TensorBoard event files in DIR (fairseq's --tensorboard-logdir; "
                   "needs the logging extra, which scripts/install.sh installs)")
    p.add_argument("--wandb", metavar="PROJECT", help="log to Weights & Biases (fairseq's --wandb-project; pip install "
                   "wandb first)")
    p.add_argument("--finetune-from", dest="finetune", metavar="FOLDER", help="start from the weights of a model folder "
                   "(recipes.convert's or export's) of --arch: its sizes and variant settings are taken from it (a flag "
                   "after -- that contradicts them is refused), the task must have its dictionaries (prepare files --like "
                   "FOLDER), and the optimizer and schedule start fresh at hparams.json's finetune learning rate and "
                   "warm-up (fairseq's --finetune-from-model)")
    p.add_argument(UNCHECKED[0], action="store_true", help=UNCHECKED[1])
    p.add_argument("--dry-run", action="store_true", help="print the exact command (for 8 GPUs unless --gpus is given) "
                   "and exit")
    p.add_argument("--force", action="store_true", help="start the run in --save-dir again from nothing: the files a "
                   "training of the kit wrote there (checkpoints, logs, run.json) are removed first; a folder holding "
                   "any other file is refused, and so is one in use")
    p.add_argument("--cpu-tiny", dest="tiny", action="store_true", help="smoke run on the CPU: a tiny model (64-dim, "
                   "3+2 layers) for a few updates (default 16), a checkpoint every max-update/8 updates, at least 2 (8 "
                   "checkpoints when max-update >= 16, enough for evaluate.sh's default average of 5), fp32 (or "
                   "--precision bf16); for tests and first tries")
    return p


def parse(argv) -> object:
    """The options, typed; the words after ``--`` are ``extra``, for fairseq-train."""
    opts, opts.extra = parser().read(argv)
    opts.start_from = None  # --finetune-from's model, once read (build)
    for flag, value in (("--data", opts.data), ("--save-dir", opts.save), ("--arch", opts.arch)):
        if value == "":
            raise Refusal(f"{flag} needs a value")
    return opts


def read_hparams(path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise Refusal(f"--hparams {path}: no such file")
    hp = HYPER_PARAMETERS.read(path.parent, path.name)
    for key in ("sizes", "all_sizes", "cpu_tiny"):
        if key not in hp:
            raise Refusal(f"--hparams {path} has no {key!r} part (see {HPARAMS} for the layout)")
    return hp


def check_arch(arch: str) -> None:
    """The architecture must be registered (with our plugin imported, as this package is). Ours
    and fairseq's Transformers are known by name (arch_names); fairseq is imported for any other."""
    if arch in ARCHITECTURES or arch in FAIRSEQ_TRANSFORMERS:
        return
    from .. import register

    register()  # this command starts without fairseq: our architectures, for the nearest names
    from fairseq.models import ARCH_MODEL_REGISTRY

    if arch not in ARCH_MODEL_REGISTRY:
        close = difflib.get_close_matches(arch, ARCH_MODEL_REGISTRY, n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise Refusal(f"--arch {arch} is not a registered architecture{hint}")


@dataclass(frozen=True)
class Data:
    binary: Path  # the prepared task's data-bin/, or the data-bin folder given
    src: str
    tgt: str
    joined: bool  # one dictionary for both languages


def read_data(data: str) -> Data:
    root = Path(data)
    binary = root / "data-bin" if (root / "data-bin").is_dir() else root
    if not binary.is_dir():
        raise Refusal(f"no data folder {data} (make one with examples/*/prepare.sh)")
    binary = Path(os.path.abspath(binary))
    if len(list(binary.glob("dict.*.txt"))) != 2:
        raise Refusal(f"{binary} must hold exactly two dict.LANG.txt files (a fairseq-preprocess output)")
    if TASK.exists(root):
        task = PreparedTask.open(root)
        src, tgt = task.src, task.tgt
    else:
        pairs = sorted(binary.glob("train.*-*.*.bin"))
        if not pairs:
            raise Refusal(f"no train.*.bin in {binary}")
        src, tgt = pairs[0].name.split(".")[1].split("-", 1)
    for lang in (src, tgt):
        if not (binary / f"dict.{lang}.txt").is_file():
            raise Refusal(f"{binary} has no dict.{lang}.txt")
    joined = (binary / f"dict.{src}.txt").read_bytes() == (binary / f"dict.{tgt}.txt").read_bytes()
    return Data(binary, src, tgt, joined)


# ------------------------------------------------- options -> process layout -> fairseq arguments
# Pure functions: the options (and, for the layout, how many GPUs this machine has) in, a
# value or a Refusal naming the option out; build() reads the files and puts them together.

def check_options(o) -> None:
    """What the options alone must satisfy: the required ones, and those that exclude each other."""
    for flag, dest in (("--data", "data"), ("--arch", "arch"), ("--save-dir", "save")):
        if not getattr(o, dest):
            raise Refusal(f"{flag} is required")
    if o.cpu_procs and o.gpus is not None:
        raise Refusal("--cpu-processes and --gpus exclude each other: CPU processes stand in for GPUs")
    if o.tiny and o.gpus is not None:
        raise Refusal("--gpus is for GPU runs; --cpu-tiny runs on the CPU (--cpu-processes N for several processes)")
    if o.tiny and o.size:
        raise Refusal("--size picks the base or big model; --cpu-tiny trains its own tiny one (hparams.json's "
                      "cpu_tiny): leave out one of them")
    if o.unchecked and not o.finetune:
        raise Refusal("--unchecked takes a --finetune-from folder without export.json; give --finetune-from FOLDER too, "
                      "or leave it out")


@dataclass(frozen=True)
class Layout:
    launcher: str  # "" (one process), "torchrun" or "slurm"
    nodes: int  # machines
    procs: Optional[int]  # processes on each machine (GPUs, or CPU processes); None: one
    world: int  # processes in all
    update_freq: int  # batches per update, so that an update sees the papers' batch
    precision: str  # fp16, bf16 or fp32
    node_rank: Optional[int]
    master_addr: str
    port: int


def process_layout(o, papers_gpus: int, visible_gpus: Optional[int]) -> Layout:
    """The launcher, machines, processes and precision of the options; ``papers_gpus`` is the
    papers' GPU count (each update sees that many batches), ``visible_gpus`` this machine's
    (None: not asked, under --dry-run the papers' count stands in)."""
    nodes, cpu_procs, node_rank, master_addr = o.nodes, o.cpu_procs, o.node_rank, o.master_addr or ""
    launcher = o.launcher or ""
    if not launcher and (cpu_procs or nodes > 1):
        launcher = "torchrun"
    if launcher == "torchrun" and nodes > 1:
        if node_rank is None or not master_addr:
            raise Refusal(f"--nodes {nodes} with torchrun needs --node-rank (0 to {nodes - 1}) and "
                          "--master-addr (the rank-0 machine)")
        if node_rank >= nodes:
            raise Refusal(f"--node-rank must be 0 to {nodes - 1}, got {node_rank}")
    elif node_rank is not None or master_addr:
        raise Refusal("--node-rank and --master-addr are for torchrun on --nodes K > 1 machines")
    if launcher == "slurm" and cpu_procs:
        raise Refusal("--launcher slurm counts GPUs; with --cpu-processes use --launcher torchrun "
                      "(run it under srun, one task per machine, if you must)")
    if o.tiny and not cpu_procs and launcher:
        raise Refusal("--cpu-tiny alone is one CPU process; add --cpu-processes N for several (--nodes, --launcher)")
    if o.port is not None and not (launcher == "slurm" or (launcher == "torchrun" and nodes > 1)):
        raise Refusal("--port is the rendezvous port of several machines (--nodes K > 1 with torchrun, or "
                      "--launcher slurm); one machine needs none")
    on_cpu = "--cpu-processes" if cpu_procs else "--cpu-tiny" if o.tiny else None
    if on_cpu and o.precision == "fp16":
        raise Refusal(f"--precision fp16 needs a GPU; {on_cpu} takes fp32 (default) or bf16")
    precision = o.precision or ("fp32" if on_cpu else "fp16")  # bf16 works on the CPU, fp16 does not
    port = o.port if o.port is not None else 29500
    procs = cpu_procs if o.tiny else cpu_procs or o.gpus  # CPU processes stand in for GPUs; --cpu-tiny alone: one
    if procs is None and not o.tiny:
        procs = papers_gpus if visible_gpus is None else visible_gpus
    if not o.tiny and procs < 1:
        raise Refusal("no GPU found: train on GPUs, or use --cpu-tiny for a smoke run or --dry-run to see the command")
    world = nodes * procs if procs else 1
    update_freq = 1 if o.tiny else -(-papers_gpus // world)
    return Layout(launcher, nodes, procs, world, update_freq, precision, node_rank, master_addr, port)


def batch_warning(layout: Layout, papers_gpus: int, max_tokens: int) -> List[str]:
    batches = layout.update_freq * layout.world
    if batches == papers_gpus:
        return []
    return [f"warning: {layout.world} GPUs x update-freq {layout.update_freq} = {batches} batches per "
            f"update, not the papers' {papers_gpus}; --max-tokens {papers_gpus * max_tokens // batches} "
            f"keeps {papers_gpus} x {max_tokens} tokens per update"]


def model_size(o) -> str:
    return o.size or ("big" if is_big(o.arch) else "base")


def share_mode(o, data: Data) -> str:
    """One dictionary for both sides (joint BPE): share every embedding, as Vaswani et al. do;
    two dictionaries: share the decoder's input and output embeddings only. A model folder to
    start from (--finetune-from) shares as its model does."""
    mode = o.share
    if o.start_from is not None:
        shape = o.start_from["shape"]
        theirs = "all" if shape.get("share_all_embeddings") else (
            "decoder" if shape.get("share_decoder_input_output_embed") else "none")
        if mode not in ("auto", theirs):
            raise Refusal(f"--share {mode}: the model of --finetune-from {o.finetune} shares {theirs}")
        return theirs
    if mode == "auto":
        mode = "all" if data.joined else "decoder"
    if mode == "all" and not data.joined:
        raise Refusal(f"--share all needs one joined dictionary; {data.binary} has two different ones")
    return mode


def hardware(o, layout: Layout) -> tuple:
    """The runner of the command and its hardware arguments: fairseq-train, or for bf16 and warm starts
    this package's entry point (fairseq_csan/train.py: fairseq-train without fairseq 0.12's --bf16
    implying --tpu, and with warm starts from a checkpoint of other settings); under torchrun or srun
    (docs/distributed.md) for several processes."""
    warm = o.start_from is not None or any(w.split("=", 1)[0] == "--finetune-from-model" for w in o.extra)
    runner = ["python", "-m", "fairseq_csan.train"] if layout.precision == "bf16" or warm else ["fairseq-train"]
    precision = {"fp16": ["--fp16"], "bf16": ["--bf16"], "fp32": []}[layout.precision]
    if o.tiny:
        hw = ["--cpu", "--num-workers", "0", *precision]  # fp32 or bf16
        hw += ["--distributed-world-size", str(layout.world)] if layout.procs else []
    else:
        hw = ["--cpu"] * bool(o.cpu_procs) + ["--distributed-world-size", str(layout.world), "--update-freq",
                                              str(layout.update_freq), *precision]
    hw += ["--distributed-backend", "gloo"] if o.cpu_procs else []
    if layout.launcher == "slurm":
        runner = ["srun", "--nodes", str(layout.nodes), "--ntasks-per-node", str(layout.procs),
                  "--gpus-per-node", str(layout.procs)] + runner
        hw += ["--distributed-port", str(layout.port)]
    elif layout.launcher == "torchrun":
        rendezvous = ["--standalone"]
        if layout.nodes > 1:
            rendezvous = ["--nnodes", str(layout.nodes), "--node_rank", str(layout.node_rank), "--master_addr",
                          layout.master_addr, "--master_port", str(layout.port)]
        start = runner[1:] if runner[0] == "python" else ["--no-python"] + runner
        runner = ["torchrun", *rendezvous, "--nproc_per_node", str(layout.procs), *start]
    return runner, hw


def schedule(o, hp: dict) -> dict:
    """The model flags (--cpu-tiny's, or a fine-tuned folder's shape), batch, updates, learning
    rate, warm-up and the intervals of the checkpoints and the log."""
    sized, common, small = hp["sizes"][model_size(o)], hp["all_sizes"], hp["cpu_tiny"]
    if o.tiny:
        max_update = o.max_update or small["max_update"]
        s = dict(model=[w for k, v in small["model"].items() for w in (f"--{k.replace('_', '-')}", str(v))],
                 max_tokens=o.max_tokens or small["max_tokens"], warmup=small["warmup_updates"], lr=small["lr"],
                 log_every=small["log_interval"],
                 # never 1: a rerun of a finished run takes one more update, which must not add a checkpoint
                 save_every=max(max_update // small["checkpoints"], 2), max_update=max_update)
    else:
        warmup = sized["warmup_updates"]
        # eq. 3's peak learning rate, d_model^-0.5 * warmup^-0.5, reached at the end of the warm-up
        s = dict(model=[], max_tokens=o.max_tokens or common["max_tokens"], warmup=warmup,
                 lr=f"{sized['d_model'] ** -0.5 * warmup ** -0.5:.3g}", log_every=common["log_interval"],
                 save_every=common["save_interval_updates"], max_update=o.max_update or sized["max_update"])
    if o.start_from is not None:  # the folder's shape, its weights, and a fine-tuning's learning rate and warm-up
        from .export import shape_arguments

        tune = hp.get("finetune") or HYPER_PARAMETERS.read(HPARAMS.parent)["finetune"]
        s.update(model=shape_arguments(o.start_from["shape"]), lr=f"{float(s['lr']) * tune['lr_factor']:.3g}",
                 warmup=max(1, int(s["warmup"] * tune["warmup_factor"])))
    return s


def fairseq_arguments(o, layout: Layout, data: Data, hp: dict) -> List[str]:
    """The command that trains: the runner and its arguments, the words after ``--`` last and each
    flag once."""
    sized, common, s = hp["sizes"][model_size(o)], hp["all_sizes"], schedule(o, hp)
    runner, hw = hardware(o, layout)
    share = {"all": ["--share-all-embeddings"], "decoder": ["--share-decoder-input-output-embed"],
             "none": []}[share_mode(o, data)]
    hw += ["--finetune-from-model", str(o.start_from["checkpoint"])] if o.start_from is not None else []
    logging = ["--tensorboard-logdir", o.tensorboard] * bool(o.tensorboard) + ["--wandb-project", o.wandb] * bool(o.wandb)
    return [*runner, str(data.binary), *with_overrides(["--user-dir", str(PLUGIN), "--arch", o.arch, *s["model"],
            "--source-lang", data.src, "--target-lang", data.tgt, *share,
            "--optimizer", common["optimizer"], "--adam-betas", common["adam_betas"], "--adam-eps", common["adam_eps"],
            "--lr-scheduler", common["lr_scheduler"], "--lr", str(s["lr"]), "--warmup-updates", str(s["warmup"]),
            "--warmup-init-lr", common["warmup_init_lr"],
            "--criterion", common["criterion"], "--label-smoothing", common["label_smoothing"],
            "--dropout", sized["dropout"], "--weight-decay", common["weight_decay"], "--clip-norm", common["clip_norm"],
            "--max-tokens", str(s["max_tokens"]), "--max-update", str(s["max_update"]), *hw,
            "--save-dir", o.save, "--save-interval-updates", str(s["save_every"]),
            "--keep-interval-updates", str(common["keep_interval_updates"]), "--no-epoch-checkpoints",
            "--log-format", "simple", "--log-interval", str(s["log_every"]), "--seed", str(o.seed), *logging], o.extra)]


def build(o) -> dict:
    """Check the options and build the command: a plan with cmd, identity, log and lock paths."""
    check_options(o)
    data = read_data(o.data)
    o.start_from = start_from(o, data) if o.finetune else None
    hp = read_hparams(o.hparams)
    papers = hp["all_sizes"]["gpus"]
    visible = None
    if not (o.tiny or o.cpu_procs or o.gpus is not None or o.dry_run):
        import torch

        visible = torch.cuda.device_count()
    layout = process_layout(o, papers, visible)
    cmd = fairseq_arguments(o, layout, data, hp)
    read = check_after_dashes(cmd[cmd.index(str(data.binary)):], o.arch, o.extra) if o.extra else None
    warnings = [] if o.tiny else batch_warning(layout, papers, o.max_tokens or hp["all_sizes"]["max_tokens"])
    check_arch(o.arch)
    # machines other than rank 0 (torchrun, --nodes K) log beside it, not into its log
    part = f"node{o.node_rank}" if o.node_rank else None
    save = Path(o.save)
    identity = RUN.typed(dict(arch=o.arch, data=str(data.binary), size=model_size(o), seed=o.seed,
                              share=share_mode(o, data), tiny=o.tiny, **warm_start(o, read)))
    return dict(cmd=cmd, warnings=warnings, launcher=layout.launcher, save=save, save_given=o.save, force=o.force,
                identity=identity, rank0=not o.node_rank, one_machine=layout.nodes == 1, part=part,
                log=save / (f"train.{part}.log" if part else "train.log"))


def warm_start(o, read) -> dict:
    """What the run record says a run starts from: --finetune-from's folder and model, or a
    checkpoint given as --finetune-from-model after -- (``read``: fairseq's arguments), with its SHA-256."""
    if o.start_from:
        return {"finetuned_from": {"folder": str(Path(o.finetune).resolve()), "model.pt": o.start_from["sha256"]}}
    warm = getattr(read, "finetune_from_model", None)
    if not warm:
        return {}
    if not Path(warm).is_file():
        raise Refusal(f"--finetune-from-model {warm} after --: no such file")
    return {"finetuned_from": {"checkpoint": str(Path(warm).resolve()), "sha256": sha256(warm)}}


def start_from(o, data: Data) -> dict:
    """--finetune-from FOLDER: the folder's model (export.folder_model), checked against the
    options and the task (docs/recipes.md, 'Start from a trained Transformer')."""
    from .export import contradictions, fits_task, folder_model

    if o.size:
        raise Refusal(f"--size sets a model's dimensions; --finetune-from {o.finetune} takes them from its model")
    if any(w.split("=", 1)[0] == "--finetune-from-model" for w in o.extra):
        raise Refusal(f"--finetune-from-model after -- starts from another checkpoint than --finetune-from {o.finetune}: "
                      "give one of them")
    try:
        start = folder_model(Path(o.finetune), o.unchecked)
    except Refusal as e:
        raise Refusal(f"--finetune-from: {e}") from None
    if start["arch"] != o.arch:
        raise Refusal(f"--finetune-from {o.finetune} holds a model of --arch {start['arch']}, not {o.arch}: give "
                      f"--arch {start['arch']}, or convert it to {o.arch} first (python -m fairseq_csan.recipes.convert)")
    fits_task(start, f"--finetune-from {o.finetune}", data.src, data.tgt, data.binary, o.data)
    found = contradictions(start["shape"], o.extra)
    if found:
        raise Refusal(f"{found[0]} after --: the model's shape comes from --finetune-from {o.finetune}; leave it out")
    return start


def check_tools(opts, plan: dict) -> None:
    """What a real run needs beyond the options (not checked by --dry-run)."""
    if opts.tensorboard and not can_import("torch.utils.tensorboard"):
        raise Refusal("--tensorboard needs TensorBoard: pip install 'tensorboard>=2.10' tensorboardX (the "
                      "logging extra; scripts/install.sh installs it)")
    if opts.wandb and not can_import("wandb"):
        raise Refusal("--wandb needs the wandb package: pip install wandb")
    if plan["launcher"] == "slurm":
        if not os.environ.get("SLURM_JOB_ID"):
            raise Refusal("--launcher slurm runs inside a SLURM allocation: sbatch (or salloc) a script that calls train.sh once")
        if not shutil.which("srun"):
            raise Refusal("--launcher slurm needs srun on PATH")
    if plan["launcher"] == "torchrun" and not shutil.which("torchrun"):
        raise Refusal("torchrun not found: it comes with torch; activate the environment")


# fairseq-train's train_inner and train lines, --log-format simple or json: "num_updates=250",
# "num_updates 250" or "num_updates": "250"; and their epoch ("epoch 003:", "epoch 003 |", "epoch": 3)
UPDATES = re.compile(rb"\| train(?:_inner)? \| .*?\bnum_updates\W+(\d+)")
EPOCH = re.compile(rb"\bepoch\W+(\d+)")


def progress_of(cmd: List[str]) -> Progress:
    """The kit's progress line (runner.Progress) from the lines of fairseq-train's log, as
    docs/recipes.md ('Training') shows it."""
    def number(flag):
        value = flag_value(cmd, flag) or ""
        return int(value) if value.isdigit() else 0

    max_update, max_epoch = number("--max-update"), number("--max-epoch")

    def count(line: bytes) -> Optional[int]:
        found = UPDATES.search(line)
        return int(found.group(1)) if found else None

    def note(line: bytes) -> str:
        epoch = EPOCH.search(line)
        return f"epoch {int(epoch.group(1))} of {max_epoch}" if epoch and max_epoch and not max_update else ""

    return Progress("update", "updates", max_update or None, count_of=count, note=note)


# ---------------------------------------------------------------------------- running it

def resumed(plan: dict) -> bool:
    """Rank 0 (which reads the checkpoint and sends it to the others) mends checkpoint_last.pt and
    checkpoint_best.pt; True where the run has finished already (nothing to train)."""
    last, limit = plan["save"] / "checkpoint_last.pt", flag_value(plan["cmd"], "--max-update")
    if not plan["rank0"]:
        return False
    for message in repair_checkpoints(plan["save"]):
        say(message)
    if not last.is_file():
        return False
    check_same_run(last, plan["identity"])
    done = finished(last, limit) if plan["one_machine"] else None
    if done is not None:
        say(f"{plan['save_given']}/checkpoint_last.pt is at update {done}, and --max-update is {limit}: this run has "
            "finished, nothing to train (a larger --max-update trains on)")
        return True
    say(f"resuming from {plan['save_given']}/checkpoint_last.pt")
    return False


def run(plan: dict) -> None:
    """Train (docs/recipes.md, 'Training'): the trainer appends to the log itself (it goes on if this
    process is killed) and holds the lock too; torchrun and srun get a signal once, and stop their
    workers themselves."""
    save, cmd = plan["save"], plan["cmd"]
    lock = claim(plan)
    if resumed(plan):
        return
    with open(save / "train_command.sh", "a", encoding="utf-8") as f:
        f.write(shell_words(cmd) + "\n")
    say(shell_words(cmd))
    say(f"log: {plan['log']} (the 'ups' column is training steps/s, the papers' Speed)")
    try:
        run_child(cmd, plan["log"], append=True, show=True, progress=progress_of(cmd), hold=lock, orphan=True,
                  resend=not plan["launcher"], name="the trainer")
    except Failed as error:
        raise Failed(f"{error}; put that right and run train.sh again (it resumes from the newest intact checkpoint, "
                     "if one was saved)") from None
    finally:
        say(summary(plan["log"]))


def summary(train_log: Path) -> str:
    from .score import train_speed

    speed = train_speed(train_log)
    if not speed or speed["steps_per_s"] is None:
        return f"no train_inner lines with ups in {train_log}"
    return (f"{speed['steps_per_s']:.3f} training steps/s, mean over {speed['logged_intervals']} logged intervals of "
            f"{train_log}")


def main(argv=None) -> None:
    opts = parse(argv)
    plan = build(opts)
    for warning in plan["warnings"]:
        say(warning)
    if opts.dry_run:
        print(shell_words(plan["cmd"]))
        return
    check_tools(opts, plan)
    run(plan)


if __name__ == "__main__":
    as_command(main)
