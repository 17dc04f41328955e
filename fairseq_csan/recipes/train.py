"""Train any architecture with the papers' setup (scripts/train.sh runs this; docs/recipes.md).

One call checks the options, reads the prepared task and the hyper-parameters (hparams.json,
data beside this module), lays out the data-parallel processes and builds the fairseq-train
command; ``--dry-run`` prints it. A real run then, in this order:

1. takes the save folder's lock (runner.WriterLock: SAVE/.lock, SAVE/.nodeN.lock on the other
   machines of a multi-node run), held by this process and by the trainer it starts, so it
   ends only when both have: a second train.sh on the same folder is refused, even while a
   trainer orphaned by ``kill -9`` of train.sh runs on;
2. checks the run's identity against SAVE/run.json (records.RUN) (another run in the folder is refused);
3. checks checkpoint_last.pt and checkpoint_best.pt: fairseq copies them from the interval
   checkpoint without a temporary name, so a kill during the copy leaves them cut short; a
   damaged checkpoint_last.pt (or one older than the newest interval checkpoint) is replaced,
   atomically and with a message, by the newest intact checkpoint_E_U.pt;
4. runs the command through runner.run_child, its output appended to SAVE/train.log and
   shown, with a progress line of the kit's among it (:func:`progress_of`); SIGTERM, SIGINT
   or SIGHUP is passed on to the trainer, which this process then waits for (a lone
   fairseq-train that still runs runner.RESEND_S seconds later gets it again).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import signal
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional

from .command_line import Parser
from .runner import (RUN, TASK, Progress, Refusal, WriterLock, atomic, changed_since, is_lock, made_from, run_child,
                     shell_words)
from .runner import Damaged as DamagedRecord
from .task import NotATask, PreparedTask
from .. import user_dir
from ..arch_names import ARCHITECTURES, FAIRSEQ_TRANSFORMERS, is_big

PLUGIN = Path(user_dir())  # the fairseq_csan package, for --user-dir
HPARAMS = Path(__file__).with_name("hparams.json")

class Refused(Exception):
    """A bad option or a folder that must not be trained in; its message names why."""


def log(message: str) -> None:
    print(f"[train] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- the options

class _Valued(argparse.Action):
    """An option with a value, kept as given while the words are read, then checked
    (:meth:`check`): not empty, a whole number (``number``) or one of ``allowed``. What it
    needs (``what``) words its refusals."""

    def __init__(self, option_strings, dest, what, number=False, allowed=None, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.what, self.number, self.allowed = what, number, allowed

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, (option_string, values))

    def check(self, given):
        if not isinstance(given, tuple):  # not given: the default, typed already
            return given
        flag, text = given
        if text == "":
            raise Refused(f"{flag} needs {self.what}")
        if self.number:
            if not re.fullmatch(r"[0-9]+", text):
                raise Refused(f"{flag} must be a whole number, got '{text}'")
            return int(text)
        if self.allowed and text not in self.allowed:
            raise Refused(f"{flag} must be {self.what}, got '{text}'")
        return text


def parser() -> argparse.ArgumentParser:
    """train.sh's options, each declared once: its help, default, what it needs and its check."""
    p = Parser(prog="scripts/train.sh", refusal=Refused, unknown_hint=" (fairseq-train arguments go after --)",
               usage="scripts/train.sh --data DIR --arch ARCH --save-dir DIR [options] [-- FAIRSEQ-TRAIN ARGS]",
               epilog="Arguments after -- go to fairseq-train unchanged and override the ones above, but for\n"
                       "--save-dir, --arch, --seed and --user-dir, which the run's lock and record follow: give\n"
                       "train.sh's own. A value that starts with '-' is given as --option=VALUE.")

    def valued(flag, dest, metavar, what, help, number=False, allowed=None, default=None):
        p.add_argument(flag, dest=dest, metavar=metavar, action=_Valued, what=what, number=number, allowed=allowed,
                       default=default, help=help)

    valued("--data", "data", "DIR", "a folder", "a folder made by examples/*/prepare.sh (its data-bin/ is used), or a "
           "fairseq data-bin folder")
    valued("--arch", "arch", "ARCH", "a name", "any registered architecture: transformer, transformer_csan2d, "
           "transformer_ctxaware_big, ...")
    valued("--save-dir", "save", "DIR", "a folder", "checkpoints and train.log; a run that stopped resumes from "
           "DIR/checkpoint_last.pt when started again with the same arguments (a checkpoint_last.pt cut short by a "
           "kill is replaced by the newest intact checkpoint); one training at a time per folder (DIR/.lock)")
    valued("--size", "size", "base|big", "base or big", "hyper-parameter set (default: big for *_big architectures, "
           "else base; not with --cpu-tiny)", allowed=("base", "big"))
    valued("--hparams", "hparams", "FILE", "a file", "the hyper-parameters (default: the kit's hparams.json, the "
           "papers' setup)", default=str(HPARAMS))
    valued("--gpus", "gpus", "N", "a number", "GPUs on each machine (default: all visible). --update-freq is 8/(K x N) "
           "on K machines, so every update sees 8 x 4096 tokens, as on the papers' 8 GPUs", number=True)
    valued("--cpu-processes", "cpu_procs", "N", "a number", "data parallelism on the CPU: N processes through torchrun "
           "and gloo (they stand in for N GPUs), to check a multi-GPU set-up without GPUs", number=True)
    valued("--nodes", "nodes", "K", "a number", "machines (default 1), K x --gpus processes in all; see "
           "docs/distributed.md", number=True, default=1)
    valued("--launcher", "launcher", "L", "torchrun or slurm", "torchrun (the default with --nodes K > 1 or "
           "--cpu-processes: run this script on every machine, each with its --node-rank) or slurm (run it once inside "
           "an sbatch or salloc allocation: srun starts one task per GPU and fairseq reads SLURM's variables)",
           allowed=("torchrun", "slurm"))
    valued("--node-rank", "node_rank", "R", "a number", "this machine's rank, 0 to K-1 (torchrun, K > 1)", number=True)
    valued("--master-addr", "master_addr", "H", "a host name or address", "the rank-0 machine's address (torchrun, "
           "K > 1)")
    valued("--port", "port", "P", "a number", "the rank-0 machine's rendezvous port (default 29500; only with --nodes "
           "K > 1 or --launcher slurm)", number=True)
    valued("--precision", "precision", "P", "fp16, bf16 or fp32", "fp16 (default), bf16 or fp32",
           allowed=("fp16", "bf16", "fp32"))
    valued("--share", "share", "S", "auto, all, decoder or none", "embedding sharing: auto (default: all with one "
           "joined dictionary, as Vaswani et al.; decoder input/output with two), all, decoder or none",
           allowed=("auto", "all", "decoder", "none"), default="auto")
    valued("--max-tokens", "max_tokens", "N", "a number", "tokens per GPU per step (default: hparams.json's, 4096; with "
           "--cpu-tiny its cpu_tiny value, 1024)", number=True)
    valued("--max-update", "max_update", "N", "a number", "training updates (default: 100000 base, 300000 big)",
           number=True)
    valued("--seed", "seed", "N", "a number", "random seed (default 1)", number=True, default=1)
    valued("--tensorboard", "tensorboard", "DIR", "a folder", "TensorBoard event files in DIR (fairseq's "
           "--tensorboard-logdir; needs the logging extra, which scripts/install.sh installs)")
    valued("--wandb", "wandb", "PROJECT", "a project name", "log to Weights & Biases (fairseq's --wandb-project; pip "
           "install wandb first)")
    valued("--finetune-from", "finetune", "FOLDER", "a model folder", "start from the weights of a model folder "
           "(recipes.convert's or export's) of --arch: its sizes and variant settings are taken from it (a flag "
           "after -- that contradicts them is refused), the task must have its dictionaries (prepare files --like "
           "FOLDER), and the optimizer and schedule start fresh at hparams.json's finetune learning rate and "
           "warm-up (fairseq's --finetune-from-model)")
    p.add_argument("--dry-run", action="store_true", help="print the exact command (for 8 GPUs unless --gpus is "
                   "given) and exit")
    p.add_argument("--force", action="store_true", help="start the run in --save-dir again from nothing: the files a "
                   "training of the kit wrote there (checkpoints, logs, run.json) are removed first; a folder holding "
                   "any other file is refused, and so is one in use")
    p.add_argument("--cpu-tiny", dest="tiny", action="store_true", help="smoke run on the CPU: a tiny model (64-dim, "
                   "3+2 layers) for a few updates (default 16), a checkpoint every max-update/8 updates, at least 2 (8 "
                   "checkpoints when max-update >= 16, enough for evaluate.sh's default average of 5), fp32 (or "
                   "--precision bf16); for tests and first tries")
    return p


def parse(argv: List[str]) -> argparse.Namespace:
    """The options, typed (numbers are ints; an option not given is None or its default); the
    words after ``--`` are ``extra``, for fairseq-train. An unknown word is refused before any
    value is checked, and --help prints the help wherever it stands."""
    options = parser()
    opts, opts.extra = options.read(argv)
    for action in options._actions:
        if isinstance(action, _Valued):
            setattr(opts, action.dest, action.check(getattr(opts, action.dest)))
    return opts


def read_hparams(path) -> dict:
    try:
        hp = json.loads(Path(path).read_text(encoding="utf-8"))
        for key in ("sizes", "all_sizes", "cpu_tiny"):
            hp[key]  # noqa: B018  (a missing part is named below)
    except OSError as e:
        raise Refused(f"--hparams {path}: cannot read it ({e.strerror})")
    except ValueError as e:
        raise Refused(f"--hparams {path} is not JSON: {e}")
    except KeyError as e:
        raise Refused(f"--hparams {path} has no {e.args[0]!r} part (see {HPARAMS} for the layout)")
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
        raise Refused(f"--arch {arch} is not a registered architecture{hint}")


@dataclass(frozen=True)
class Data:
    """A prepared task's binarised data: the folder, the languages, one joined dictionary?"""

    binary: Path
    src: str
    tgt: str
    joined: bool


def read_data(data: str) -> Data:
    root = Path(data)
    binary = root / "data-bin" if (root / "data-bin").is_dir() else root
    if not binary.is_dir():
        raise Refused(f"no data folder {data} (make one with examples/*/prepare.sh)")
    binary = Path(os.path.abspath(binary))
    dicts = sorted(binary.glob("dict.*.txt"))
    if len(dicts) != 2:
        raise Refused(f"{binary} must hold exactly two dict.LANG.txt files (a fairseq-preprocess output)")
    if TASK.exists(root):
        try:
            task = PreparedTask.open(root)
        except NotATask as e:
            raise Refused(str(e))
        src, tgt = task.src, task.tgt
    else:
        pairs = sorted(binary.glob("train.*-*.*.bin"))
        if not pairs:
            raise Refused(f"no train.*.bin in {binary}")
        src, tgt = pairs[0].name.split(".")[1].split("-", 1)
    for lang in (src, tgt):
        if not (binary / f"dict.{lang}.txt").is_file():
            raise Refused(f"{binary} has no dict.{lang}.txt")
    joined = (binary / f"dict.{src}.txt").read_bytes() == (binary / f"dict.{tgt}.txt").read_bytes()
    return Data(binary, src, tgt, joined)


# ------------------------------------------------- options -> process layout -> fairseq arguments
# Pure functions: the options (and, for the layout, how many GPUs this machine has) in, a
# value or a Refused naming the option out; build() reads the files and puts them together.

# fairseq-train flags the kit sets from its own options, which its lock and run record follow:
# not to be given again after -- (the checkpoints would go where no lock or record is)
OWNED_AFTER_DASHES = {"--save-dir": "--save-dir DIR", "--arch": "--arch ARCH", "--seed": "--seed N",
                      "--user-dir": "nothing (the kit gives the plugin's own)"}


def check_options(o) -> None:
    """What the options alone must satisfy: the required ones, and those that exclude each other."""
    for word in o.extra:
        flag = word.split("=", 1)[0]
        if flag in OWNED_AFTER_DASHES:
            raise Refused(f"{flag} after -- would override the kit's own, which the run's lock and record follow: "
                          f"give train.sh {OWNED_AFTER_DASHES[flag]} instead")
    for flag, dest in (("--data", "data"), ("--arch", "arch"), ("--save-dir", "save")):
        if not getattr(o, dest):
            raise Refused(f"{flag} is required")
    for flag, dest in (("--max-tokens", "max_tokens"), ("--nodes", "nodes"), ("--cpu-processes", "cpu_procs")):
        if getattr(o, dest) is not None and getattr(o, dest) < 1:
            raise Refused(f"{flag} must be 1 or more, got {getattr(o, dest)}")
    if o.cpu_procs and o.gpus is not None:
        raise Refused("--cpu-processes and --gpus exclude each other: CPU processes stand in for GPUs")
    if o.tiny and o.gpus is not None:
        raise Refused("--gpus is for GPU runs; --cpu-tiny runs on the CPU (--cpu-processes N for several processes)")
    if o.tiny and o.size:
        raise Refused("--size picks the base or big model; --cpu-tiny trains its own tiny one (hparams.json's "
                      "cpu_tiny): leave out one of them")


@dataclass(frozen=True)
class Layout:
    """How the training processes are laid out."""

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
            raise Refused(f"--nodes {nodes} with torchrun needs --node-rank (0 to {nodes - 1}) and "
                          "--master-addr (the rank-0 machine)")
        if node_rank >= nodes:
            raise Refused(f"--node-rank must be 0 to {nodes - 1}, got {node_rank}")
    elif node_rank is not None or master_addr:
        raise Refused("--node-rank and --master-addr are for torchrun on --nodes K > 1 machines")
    if launcher == "slurm" and cpu_procs:
        raise Refused("--launcher slurm counts GPUs; with --cpu-processes use --launcher torchrun "
                      "(run it under srun, one task per machine, if you must)")
    if o.tiny and not cpu_procs and launcher:
        raise Refused("--cpu-tiny alone is one CPU process; add --cpu-processes N for several (--nodes, --launcher)")
    if o.port is not None and not (launcher == "slurm" or (launcher == "torchrun" and nodes > 1)):
        raise Refused("--port is the rendezvous port of several machines (--nodes K > 1 with torchrun, or "
                      "--launcher slurm); one machine needs none")
    precision = o.precision or "fp16"
    if cpu_procs:
        if o.precision == "fp16":
            raise Refused("--precision fp16 needs a GPU; --cpu-processes takes fp32 (default) or bf16")
        precision = o.precision or "fp32"
    elif o.tiny:
        if o.precision == "fp16":
            raise Refused("--precision fp16 needs a GPU; --cpu-tiny takes fp32 (default) or bf16")
        precision = o.precision or "fp32"  # bf16 works on the CPU, fp16 does not
    port = o.port if o.port is not None else 29500
    if o.tiny:
        procs = cpu_procs
        return Layout(launcher, nodes, procs, nodes * procs if procs else 1, 1, precision, node_rank, master_addr, port)
    procs = cpu_procs or o.gpus  # CPU processes stand in for GPUs
    if procs is None:
        procs = papers_gpus if visible_gpus is None else visible_gpus
    if procs < 1:
        raise Refused("no GPU found: train on GPUs, or use --cpu-tiny for a smoke run or --dry-run to see the command")
    world = nodes * procs
    return Layout(launcher, nodes, procs, world, -(-papers_gpus // world), precision, node_rank, master_addr, port)


def batch_warning(layout: Layout, papers_gpus: int, max_tokens: int) -> List[str]:
    """A warning when the processes times the update frequency is not the papers' batch count."""
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
    if getattr(o, "start_from", None) is not None:
        shape = o.start_from["shape"]
        theirs = "all" if shape.get("share_all_embeddings") else (
            "decoder" if shape.get("share_decoder_input_output_embed") else "none")
        if mode not in ("auto", theirs):
            raise Refused(f"--share {mode}: the model of --finetune-from {o.finetune} shares {theirs}")
        return theirs
    if mode == "auto":
        mode = "all" if data.joined else "decoder"
    if mode == "all" and not data.joined:
        raise Refused(f"--share all needs one joined dictionary; {data.binary} has two different ones")
    return mode


def fairseq_arguments(o, layout: Layout, data: Data, hp: dict) -> List[str]:
    """The command that trains: the runner (fairseq-train, or this package's entry point for
    bf16; under torchrun or srun for several processes) and its arguments, the words after
    ``--`` last and each flag once."""
    sized, common, small = hp["sizes"][model_size(o)], hp["all_sizes"], hp["cpu_tiny"]
    share = {"all": ["--share-all-embeddings"], "decoder": ["--share-decoder-input-output-embed"],
             "none": []}[share_mode(o, data)]
    # this package's entry point is fairseq-train without fairseq 0.12's --bf16 implying --tpu, and
    # with warm starts from a checkpoint of other settings (fairseq_csan/train.py)
    tuned_from = getattr(o, "start_from", None)  # train.sh --finetune-from: export.folder_model's account of the folder
    warm = tuned_from is not None or any(w.split("=", 1)[0] == "--finetune-from-model" for w in o.extra)
    runner = ["python", "-m", "fairseq_csan.train"] if layout.precision == "bf16" or warm else ["fairseq-train"]
    if o.tiny:
        max_update = o.max_update if o.max_update is not None else small["max_update"]
        hw = ["--cpu", "--num-workers", "0"] + (["--bf16"] if layout.precision == "bf16" else [])
        model = [w for k, v in small["model"].items() for w in (f"--{k.replace('_', '-')}", str(v))]
        max_tokens = o.max_tokens or small["max_tokens"]
        warmup, lr, log_every = small["warmup_updates"], small["lr"], small["log_interval"]
        # never 1: a rerun of a finished run takes one more update, which must not add a checkpoint
        save_every = max(max_update // small["checkpoints"], 2)
        if layout.procs:
            hw += ["--distributed-world-size", str(layout.world)]
    else:
        max_update = o.max_update if o.max_update is not None else sized["max_update"]
        max_tokens = o.max_tokens or common["max_tokens"]
        warmup = sized["warmup_updates"]
        # eq. 3's peak learning rate, d_model^-0.5 * warmup^-0.5, reached at the end of the warm-up
        lr = f"{sized['d_model'] ** -0.5 * warmup ** -0.5:.3g}"
        hw = ["--distributed-world-size", str(layout.world), "--update-freq", str(layout.update_freq)]
        hw += {"fp16": ["--fp16"], "bf16": ["--bf16"], "fp32": []}[layout.precision]
        if o.cpu_procs:
            hw = ["--cpu"] + hw
        model, save_every, log_every = [], common["save_interval_updates"], common["log_interval"]
    if o.cpu_procs:
        hw += ["--distributed-backend", "gloo"]

    # several processes (docs/distributed.md): torchrun starts them on each machine, or srun
    # starts one task per GPU and fairseq reads SLURM's variables
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

    if tuned_from is not None:  # the folder's shape, its weights, and a fine-tuning's learning rate and warm-up
        from .export import shape_arguments

        model = shape_arguments(tuned_from["shape"])
        tune = hp.get("finetune") or json.loads(HPARAMS.read_text(encoding="utf-8"))["finetune"]  # the kit's
        lr = f"{float(lr) * tune['lr_factor']:.3g}"
        warmup = max(1, int(warmup * tune["warmup_factor"]))
        hw += ["--finetune-from-model", str(tuned_from["checkpoint"])]
    logging = []
    if o.tensorboard:
        logging += ["--tensorboard-logdir", o.tensorboard]
    if o.wandb:
        logging += ["--wandb-project", o.wandb]

    return [*runner, str(data.binary), *with_overrides(["--user-dir", str(PLUGIN), "--arch", o.arch, *model,
            "--source-lang", data.src, "--target-lang", data.tgt, *share,
            "--optimizer", common["optimizer"], "--adam-betas", common["adam_betas"], "--adam-eps", common["adam_eps"],
            "--lr-scheduler", common["lr_scheduler"], "--lr", str(lr), "--warmup-updates", str(warmup),
            "--warmup-init-lr", common["warmup_init_lr"],
            "--criterion", common["criterion"], "--label-smoothing", common["label_smoothing"],
            "--dropout", sized["dropout"], "--weight-decay", common["weight_decay"], "--clip-norm", common["clip_norm"],
            "--max-tokens", str(max_tokens), "--max-update", str(max_update), *hw,
            "--save-dir", o.save, "--save-interval-updates", str(save_every),
            "--keep-interval-updates", str(common["keep_interval_updates"]), "--no-epoch-checkpoints",
            "--log-format", "simple", "--log-interval", str(log_every), "--seed", str(o.seed), *logging], o.extra)]


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
    warnings = [] if o.tiny else batch_warning(layout, papers, o.max_tokens or hp["all_sizes"]["max_tokens"])
    check_arch(o.arch)
    # machines other than rank 0 (torchrun, --nodes K) log beside it, not into its log
    suffix = f".node{o.node_rank}" if o.node_rank else ""
    save = Path(o.save)
    start = o.start_from
    identity = RUN.typed(dict(arch=o.arch, data=str(data.binary), size=model_size(o), seed=o.seed,
                              share=share_mode(o, data), tiny=o.tiny,
                              **({"finetuned_from": {"folder": str(Path(o.finetune).resolve()), "model.pt": start["sha256"]}}
                                 if start else {})))
    return dict(cmd=cmd, warnings=warnings, launcher=layout.launcher, save=save, identity=identity,
                rank0=not o.node_rank, one_machine=layout.nodes == 1, log=save / f"train{suffix}.log",
                part=f"node{o.node_rank}" if o.node_rank else None)


def start_from(o, data: Data) -> dict:
    """--finetune-from FOLDER: the folder's model (export.folder_model), checked against the
    options and the task: the same --arch, the task's dictionaries (prepare files --like FOLDER
    made them), no flag after -- that gives the model another shape, no --size or warm start of
    another checkpoint."""
    from .export import ExportError, contradictions, fits_task, folder_model

    if o.size:
        raise Refused(f"--size sets a model's dimensions; --finetune-from {o.finetune} takes them from its model")
    if any(w.split("=", 1)[0] in ("--finetune-from-model", "--restore-file") for w in o.extra):
        raise Refused("--finetune-from-model and --restore-file after -- start from another checkpoint than "
                      f"--finetune-from {o.finetune}: give one of them")
    try:
        start = folder_model(Path(o.finetune))
    except ExportError as e:
        raise Refused(f"--finetune-from: {e}")
    if start["arch"] != o.arch:
        raise Refused(f"--finetune-from {o.finetune} holds a model of --arch {start['arch']}, not {o.arch}: give "
                      f"--arch {start['arch']}, or convert it to {o.arch} first (python -m fairseq_csan.recipes.convert)")
    try:
        fits_task(start, f"--finetune-from {o.finetune}", data.src, data.tgt, data.binary, o.data)
    except ExportError as e:
        raise Refused(str(e))
    found = contradictions(start["shape"], o.extra)
    if found:
        raise Refused(f"{found[0]} after --: the model's shape comes from --finetune-from {o.finetune}; leave it out")
    return start


def with_overrides(command: List[str], extra: List[str]) -> List[str]:
    """``command + extra`` with each flag given once, as it takes effect: fairseq takes a flag's
    last value, so a flag of ``extra`` (the fairseq flags after ``--``) replaces its earlier
    occurrence in ``command``, values and all, and the printed command says what runs."""
    def flag(word):
        return word.split("=", 1)[0] if word.startswith("--") else None

    given = {flag(w) for w in extra if flag(w)}
    kept, dropping = [], False
    for word in command:
        if flag(word):
            dropping = flag(word) in given
        if not dropping:
            kept.append(word)
    return kept + list(extra)


def check_tools(opts, plan: dict) -> None:
    """What a real run needs beyond the options (not checked by --dry-run)."""
    if opts.tensorboard and not can_import("torch.utils.tensorboard"):
        raise Refused("--tensorboard needs TensorBoard: pip install 'tensorboard>=2.10' tensorboardX (the "
                      "logging extra; scripts/install.sh installs it)")
    if opts.wandb and not can_import("wandb"):
        raise Refused("--wandb needs the wandb package: pip install wandb")
    if plan["launcher"] == "slurm":
        if not os.environ.get("SLURM_JOB_ID"):
            raise Refused("--launcher slurm runs inside a SLURM allocation: sbatch (or salloc) a script that calls train.sh once")
        if not shutil.which("srun"):
            raise Refused("--launcher slurm needs srun on PATH")
    if plan["launcher"] == "torchrun" and not shutil.which("torchrun"):
        raise Refused("torchrun not found: it comes with torch; activate the environment")


def can_import(module: str) -> bool:
    try:
        __import__(module)
        return True
    except ImportError:
        return False


# ---------------------------------------------------------------------------- the save folder

def write_identity(save: Path, identity: dict) -> None:
    """The run record of ``save`` (records.RUN), with what the run is made from (the task's
    dictionaries and training data, records.made_from); a folder that holds another run, or this
    run made from other data (the task prepared again since), is refused."""
    try:
        held = RUN.read(save)
    except DamagedRecord as e:
        raise Refused(f"{e}; give a new --save-dir")
    identity = dict(identity, made_from=made_from(identity["data"]))
    if held is not None and "made_from" not in held:
        raise Refused(f"{save} holds a run that an earlier version of the kit started ({RUN.path(save).name} does not "
                      "say which data it was made from): give a new --save-dir, or --force to start it again")
    changed = held is not None and changed_since(held["made_from"], identity["made_from"])
    if changed:
        raise Refused(f"{save} holds a run made from other data than {identity['data']} holds now: {changed}; the "
                      "task was prepared again. Give a new --save-dir, or --force to start this run again on it")
    if held is not None and held != identity:
        raise Refused(f"{save} holds another run (see {RUN.path(save)}); give a new --save-dir")
    theirs = [] if held is not None else sorted(p.name for p in save.iterdir() if p.is_file() and not is_lock(p)
                                                 and TRAINING_WRITES.fullmatch(p.name))
    if theirs:  # fairseq-train's own checkpoints, or a log of another's: a training would resume from, then replace them
        raise Refused(f"{save} holds {', '.join(theirs[:5])}, which no training of the kit wrote (it has no "
                      f"{RUN.file}): train.sh would resume from them and replace them; give a new --save-dir "
                      "(nothing was changed)")
    # every machine of a multi-node run writes it, into a save folder they may share
    RUN.write(save, identity)


# what a training of the kit writes into its save folder: fairseq-train's checkpoints, the kit's
# log, record and command list (train.nodeN.log: the other machines of a multi-node run)
TRAINING_WRITES = re.compile(r"checkpoint[\w.-]*\.pt|train(\.node\d+)?\.log|run\.json|train_command\.sh"
                             r"|run\.env|train(\.node\d+)?\.lock")  # the last two: an earlier version's


def start_over(save: Path) -> List[str]:
    """--force: remove what a training of the kit wrote into ``save`` (TRAINING_WRITES) but the
    lock files; a folder with any other file, or without the kit's run record, is
    refused before anything is removed."""
    # (the lock files stay: another machine of a multi-node run may hold its own)
    files = [p for p in save.iterdir() if not is_lock(p)]
    if not files:
        return []
    theirs = [p for p in files if not (p.is_file() and TRAINING_WRITES.fullmatch(p.name))]
    if theirs:
        shown = ", ".join(p.name for p in sorted(theirs)[:5]) + (" ..." if len(theirs) > 5 else "")
        raise Refused(f"--force would start {save} again, but it holds what a training did not write ({shown}); "
                      "move those away or give another --save-dir (nothing was removed)")
    if not RUN.exists(save):
        shown = ", ".join(p.name for p in sorted(files)[:5]) + (" ..." if len(files) > 5 else "")
        raise Refused(f"--force would start {save} again, but it holds no run record of the kit's (run.json), so its "
                      f"files ({shown}) are not a training's of this kit: give another --save-dir (nothing was removed)")
    for path in files:
        path.unlink()
    return [f"--force: removed {len(files)} file(s) of the earlier run in {save} (checkpoints, log, record)"]


class Damaged(Exception):
    pass


_READ = {}  # (path, inode, size, mtime) -> the state read_checkpoint found: a resume reads each file once


def read_checkpoint(path: Path) -> dict:
    """A fairseq checkpoint's state; its tensors are mapped, not read, where torch can (>= 2.1).
    A file cut short (a kill while it was copied) has no zip directory at its end: Damaged."""
    info = Path(path).stat()
    key = (str(path), info.st_ino, info.st_size, info.st_mtime_ns)
    if key not in _READ:
        _READ[key] = _read_checkpoint(path)
    return _READ[key]


def _read_checkpoint(path: Path) -> dict:
    import torch

    try:
        if zipfile.is_zipfile(path):
            try:
                state = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
            except TypeError:  # torch < 2.1: no mmap
                state = torch.load(path, map_location="cpu", weights_only=False)
        else:  # a legacy (pre-zip) checkpoint, or a damaged one
            state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # torch raises RuntimeError, EOFError, UnpicklingError, ... for a damaged file
        first = (str(e).strip().splitlines() or [type(e).__name__])[0].split(". ")[0]
        raise Damaged(f"{path.stat().st_size} bytes; torch.load: {first}")
    try:
        state["num_updates"] = int(state["optimizer_history"][-1]["num_updates"])
    except (KeyError, IndexError, TypeError, ValueError):
        raise Damaged("not a fairseq training checkpoint (no optimizer_history)")
    return state


def interval_checkpoints(save: Path):
    """checkpoint_E_U.pt files, the newest (most updates) first (fairseq's own listing)."""
    from .average_checkpoints import listed

    return listed(save)


def replace_atomically(source: Path, target: Path) -> None:
    with atomic(target) as (tmp,):
        shutil.copyfile(source, tmp)


def repair_checkpoints(save: Path) -> List[str]:
    """Make checkpoint_last.pt the newest intact checkpoint (and checkpoint_best.pt intact);
    returns what was done, one message each. Refused when checkpoint_last.pt is damaged and no
    intact interval checkpoint is left."""
    done = []
    last = save / "checkpoint_last.pt"
    if not last.exists():
        return done
    try:
        last_updates, why = read_checkpoint(last)["num_updates"], None
    except Damaged as e:
        last_updates, why = -1, str(e)
    newest, newest_state, skipped = None, None, []
    for p in interval_checkpoints(save):
        if int(p.stem.rsplit("_", 1)[1]) <= last_updates:
            break
        try:
            newest_state, newest = read_checkpoint(p), p
            break
        except Damaged as e:
            skipped.append(f"{p.name} is damaged too ({e})")
    if why and newest is None:
        raise Refused(f"{last} is damaged ({why}) and no intact checkpoint_E_U.pt is left to resume from; "
                      "delete it to train again from the start")
    if newest is not None:
        replace_atomically(newest, last)
        if why:
            done.append(f"{last} is damaged ({why}): a kill while fairseq copied it; "
                        f"resuming from {newest.name}, the newest intact checkpoint (copied to {last.name})")
        else:
            done.append(f"{newest.name} (update {newest_state['num_updates']}) is newer than {last.name} "
                        f"(update {last_updates}): the run stopped before fairseq copied it; resuming from it")
        done += skipped
    best = save / "checkpoint_best.pt"
    if best.exists():
        try:
            read_checkpoint(best)
        except Damaged as e:
            done.append(repair_best(save, best, str(e)))
    return done


def repair_best(save: Path, best: Path, why: str) -> str:
    """checkpoint_best.pt damaged: the intact interval checkpoint whose validation loss is the
    best one the newest checkpoint records takes its place; if none is left, it is removed."""
    target = None
    states = []
    for p in interval_checkpoints(save):
        try:
            states.append((p, read_checkpoint(p).get("extra_state") or {}))
        except Damaged:
            continue
    if states:
        record = states[0][1].get("best")
        target = next((p for p, extra in states if record is not None and extra.get("val_loss") == record), None)
    if target is None:
        best.unlink()
        return (f"{best} is damaged ({why}) and the checkpoint it copied is no longer kept: removed "
                "(fairseq writes it again at the next validation that beats the recorded best loss)")
    replace_atomically(target, best)
    return f"{best} is damaged ({why}): replaced by {target.name}, the checkpoint with the best validation loss"


def flag_value(command: List[str], flag: str) -> Optional[str]:
    """The value of ``flag`` in ``command`` as it takes effect (its last occurrence, as
    ``FLAG VALUE`` or ``FLAG=VALUE``), or None."""
    value = None
    for i, word in enumerate(command):
        if word == flag and i + 1 < len(command):
            value = command[i + 1]
        elif word.startswith(flag + "="):
            value = word[len(flag) + 1:]
    return value


def finished(last: Path, cmd: List[str]) -> Optional[int]:
    """The updates of ``last`` when they reach the command's --max-update, else None. fairseq-train
    resumed from such a checkpoint makes one more update before it checks the limit, and saves it
    over checkpoint_last.pt and checkpoint_best.pt: a rerun of a finished run would change its
    model each time."""
    limit = flag_value(cmd, "--max-update")
    if limit is None or not limit.isdigit() or int(limit) == 0:  # 0: fairseq's "no limit"
        return None
    updates = read_checkpoint(last)["num_updates"]
    return updates if updates >= int(limit) else None


# fairseq-train's train_inner and train lines, --log-format simple or json: "num_updates=250",
# "num_updates 250" or "num_updates": "250"; and their epoch ("epoch 003:", "epoch 003 |", "epoch": 3)
UPDATES = re.compile(rb"\| train(?:_inner)? \| .*?\bnum_updates\W+(\d+)")
EPOCH = re.compile(rb"\bepoch\W+(\d+)")


def progress_of(cmd: List[str]) -> Callable[[bytes, float], Optional[str]]:
    """What makes the kit's progress line (steps.Progress) from the lines of fairseq-train's log,
    each given with the time it was seen: the updates of its train_inner and train lines, of the
    command's --max-update, with the time left; where --max-epoch alone bounds the run (fairseq's
    --max-update 0), the epoch of --max-epoch instead, and no time left."""
    def number(flag):
        value = flag_value(cmd, flag) or ""
        return int(value) if value.isdigit() else 0

    max_update, max_epoch = number("--max-update"), number("--max-epoch")
    progress = Progress("train", "update", "updates", max_update or None)

    def seen(line: bytes, now: float) -> Optional[str]:
        found = UPDATES.search(line)
        if found is None:
            return None
        epoch = EPOCH.search(line)
        note = f"epoch {int(epoch.group(1))} of {max_epoch}" if epoch and max_epoch and not max_update else ""
        return progress.at(int(found.group(1)), now, note)

    return seen


# ---------------------------------------------------------------------------- running it

def run(plan: dict) -> int:
    save, cmd = plan["save"], plan["cmd"]
    try:
        lock = WriterLock(save, folder=True, what="train.sh", part=plan["part"]).acquire()
    except Refusal as e:
        raise Refused(str(e).replace("or give another output", "or give another --save-dir")) from None
    try:
        if plan.get("force") and plan["rank0"]:
            for message in start_over(save):
                log(message)
        write_identity(save, plan["identity"])
    except Refused:
        lock.release()  # as the end of this process would (a caller's in-process main too)
        raise
    if plan["rank0"]:  # rank 0 reads the checkpoint and sends it to the others
        for message in repair_checkpoints(save):
            log(message)
        if (save / "checkpoint_last.pt").is_file():
            done = finished(save / "checkpoint_last.pt", plan["cmd"]) if plan["one_machine"] else None
            if done is not None:
                log(f"{plan['save_given']}/checkpoint_last.pt is at update {done}, and --max-update is "
                    f"{flag_value(plan['cmd'], '--max-update')}: this run has finished, nothing to train (a larger "
                    "--max-update trains on)")
                return 0
            log(f"resuming from {plan['save_given']}/checkpoint_last.pt")
    with open(save / "train_command.sh", "a", encoding="utf-8") as f:
        f.write(shell_words(cmd) + "\n")
    log(shell_words(cmd))
    log(f"log: {plan['log']} (the 'ups' column is training steps/s, the papers' Speed)")
    # the trainer appends to the log itself (it goes on if this process is killed) and holds
    # the lock too; torchrun and srun get a signal once: they stop their workers themselves.
    # A progress line (update N of M, the speed, the time left) is shown among its lines, at most once a minute
    progress = progress_of(cmd)
    before = plan["log"].stat().st_size if plan["log"].is_file() else 0  # its lines of earlier runs
    ended = run_child(cmd, plan["log"], append=True, show=True, keep_fds=(lock.fd,), resend=not plan["launcher"],
                      name="the trainer", say=log, started=lambda trainer: lock.note(f"trainer pid {trainer.pid}"),
                      watch=lambda line: progress(line, time.time()))
    print(summary(plan["log"]), file=sys.stderr, flush=True)
    if ended.code != 0 and ended.signal is None:  # the trainer's own end, not a signal passed on
        log(f"error: {how_it_ended(ended.code)}: {last_line(plan['log'], before)} (its log: {plan['log']}); put "
            "that right and run train.sh again (it resumes from the newest intact checkpoint, if one was saved)")
    return ended.code


def how_it_ended(code: int) -> str:
    """The trainer's exit status in words: above 128 it was killed by a signal of its own."""
    named = {int(s): s.name for s in signal.Signals}  # (a real-time signal has no name)
    if code - 128 in named:
        name = named[code - 128]
        cause = " (the kernel does so when the machine runs out of memory)" if name == "SIGKILL" else ""
        return f"the trainer was killed by {name}{cause}"
    return f"the trainer ended with exit status {code}"


def last_line(path: Path, start: int = 0) -> str:
    """The last line of a log that this run wrote after byte ``start`` and that says something
    (the error a traceback ends with; not a rule of ``=`` or ``-`` as torchrun's report ends with)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(start, f.seek(0, os.SEEK_END) - 65536))
            text = f.read().decode("utf-8", "replace")
    except OSError as error:
        return f"(its log could not be read: {error.strerror})"
    lines = [line.strip() for line in text.splitlines() if line.strip(" \t=-")]
    return lines[-1] if lines else "(no output)"


def summary(train_log: Path) -> str:
    from .score import train_speed

    speed = train_speed(train_log)
    if not speed or speed["steps_per_s"] is None:
        return f"[speed] no train_inner lines with ups in {train_log}"
    return (f"[speed] {speed['steps_per_s']:.3f} training steps/s, mean over "
            f"{speed['logged_intervals']} logged intervals of {train_log}")


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        opts = parse(argv)
        plan = build(opts)
        plan["save_given"], plan["force"] = opts.save, opts.force
        for warning in plan["warnings"]:
            log(warning)
        if opts.dry_run:
            print(shell_words(plan["cmd"]))
            return
        check_tools(opts, plan)
        code = run(plan)
    except Refused as e:
        log(f"error: {e}")
        raise SystemExit(2)
    raise SystemExit(code)


if __name__ == "__main__":
    from .runner import as_command

    as_command(main)
