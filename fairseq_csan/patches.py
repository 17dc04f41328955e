"""Everything the plugin changes in fairseq, torch and Python beyond fairseq's registries, and why.

Importing ``fairseq_csan`` (``--user-dir fairseq_csan`` does) registers our models, named
architectures and ``--tokenizer csan_recipe`` through fairseq's registries, the extension point
fairseq has for plugins, which changes none of fairseq's own code. Apart from that,
``fairseq_csan.register()`` calls :func:`apply`, which makes the changes in ``AT_IMPORT`` and no
others. Each one is there because without it a stock fairseq tool (fairseq-train, -generate,
-interactive, the hub interface) would go wrong with our models or model folders, mostly
without a word:

- the faults of fairseq and torch that ``fairseq_compat`` finds by probing the running
  versions, each fixed only where found (its docstring explains fixes 1 to 8;
  ``fairseq_compat.APPLIED`` says which were applied);
- the sealed model folder (``model_folder``): a damaged exported folder is refused, not
  translated wrongly with exit status 0;
- the beam of an exported folder in the hub's ``translate()``, and its threads for one sentence on
  the CPU (``tokenizer``);
- Python's warning filters (``quiet``): only messages that say nothing about the run, appended
  after the user's own filters. They replace no function of fairseq or torch; they stay because
  every fairseq-train and checkpoint load would otherwise print a page of them.

``python -m fairseq_csan.train``, our own command, makes the changes in ``IN_TRAIN_COMMAND`` as
well (:func:`apply_for_training`), in its own process and in the workers fairseq spawns from it.

Each entry names what its replacement relies on in the original: ``shape``, the original's
leading parameters (``shape_of`` when they are read elsewhere); ``called_as``, the call in
fairseq's source through which the replacement takes effect (a module attribute looked up at
call time); ``attributes``, what else it reads. tests/test_fairseq_compat.py checks all three
against the running fairseq and torch, so that a fairseq that changes them fails a test rather
than meeting a wrapper written for another; tests/test_import.py checks that importing the
plugin rebinds nothing else in fairseq or torch, leaves a logging configuration that was there
before it alone, and ``sys.meta_path`` too.

What importing no longer does, and where it went (docs/implementation.md): ``--help`` listing the
model's flags (``python -m fairseq_csan help TOOL ...``, cli_help.py); warm starts across settings
(``python -m fairseq_csan.train``); setting the root logger's level and that of
``fairseq.tasks.text_to_speech`` (dropped: what fairseq's import configures is undone instead,
fix 8 of fairseq_compat); deferring
registration with a finder on ``sys.meta_path`` (the kit's commands that need no model simply do
not register, and call ``fairseq_csan.register()`` where they do).
"""

import importlib
import sys
from dataclasses import dataclass
from typing import Tuple

from . import quiet


@dataclass(frozen=True)
class Patch:
    target: str  # "module:attribute" that is replaced or wrapped (or, for torch's allow-list, called)
    why: str
    shape: Tuple[str, ...] = ()  # the original's leading parameters relied on: "name", "name=default", "**kwargs"
    shape_of: str = ""  # where ``shape`` is read, if not from the target's original
    called_as: Tuple[Tuple[str, str], ...] = ()  # (fairseq function, regex of the call in its source)
    attributes: Tuple[str, ...] = ()  # other "module:attribute"s the replacement reads
    fix: str = ""  # the fairseq_compat.APPLIED entry that says whether it applies here ("": always)


AT_IMPORT = (
    Patch("torch.serialization:add_safe_globals",
          "fix 1: torch >= 2.6 loads weights-only by default and refuses the argparse.Namespace that every fairseq "
          "checkpoint holds, so no checkpoint would load in fairseq-generate, -interactive or the hub; "
          "argparse.Namespace joins torch's allow-list (it only stores attributes: a checkpoint still cannot run code)",
          shape=("safe_globals",), fix="1 checkpoints"),
    Patch("fairseq.data.data_utils:batch_by_size",
          "fix 2: fairseq-fixed leaves out the last batch when its size is not a multiple of "
          "--required-batch-size-multiple: fairseq-generate silently translates and scores part of a test set; "
          "the left-out batch is given back",
          shape=("indices", "num_tokens_fn", "num_tokens_vec=None", "max_tokens=None", "max_sentences=None",
                 "required_batch_size_multiple=1"),
          called_as=(("fairseq.data.fairseq_dataset:FairseqDataset.batch_by_size", r"\bdata_utils\.batch_by_size\("),),
          fix="2 batches"),
    Patch("fairseq.distributed.utils:call_main",
          "fixes 3, 5, 6: under torchrun fairseq-train silently ran N separate trainings into one folder, and "
          "nothing ran data-parallel without GPUs; the launch takes torchrun's world size, and gloo on CPUs",
          shape=("cfg", "main", "**kwargs"),
          called_as=(("fairseq_cli.train:cli_main", r"\bdistributed_utils\.call_main\("),), fix="3,5,6 launch"),
    Patch("fairseq.models.distributed_fairseq_model:DistributedDataParallel",
          "fix 4: fairseq passes CUDA device_ids to torch DDP, which refuses them for a CPU model",
          shape=("self", "module", "device_ids=None", "output_device=None"),
          shape_of="torch.nn.parallel:DistributedDataParallel.__init__",
          called_as=(("fairseq.models.distributed_fairseq_model:DistributedFairseqModel",
                      r"(?<![\w.])DistributedDataParallel\("),),
          fix="4 ddp"),
    Patch("fairseq.distributed.utils:_broadcast_object_slow",
          "fix 7: a data-parallel run could not resume: the other ranks unpickle rank 0's state weights-only and "
          "refuse fairseq's classes",
          shape=("obj", "src_rank", "group", "dist_device"),
          called_as=(("fairseq.distributed.utils:broadcast_object", r"(?<![\w.])_broadcast_object_slow\("),),
          fix="7 broadcast"),
    Patch("fairseq.hub_utils:from_pretrained",
          "sealed model folders: TransformerModel.from_pretrained of a folder that export wrote checks its files "
          "against export.json first; a cut bpecodes or swapped dictionary lines would translate wrongly with no "
          "error, and a missing bpecodes would be read from the current folder",
          shape=("model_name_or_path",),
          called_as=(("fairseq.models.fairseq_model:BaseFairseqModel.from_pretrained",
                      r"\bhub_utils\.from_pretrained\("),)),
    Patch("fairseq.checkpoint_utils:load_model_ensemble_and_task",
          "sealed model folders: fairseq-generate and fairseq-interactive with --path FOLDER/model.pt check the "
          "folder the same way before they load it",
          shape=("filenames",),
          called_as=(("fairseq.checkpoint_utils:load_model_ensemble", r"(?<![\w.])load_model_ensemble_and_task\("),
                     ("fairseq_cli.generate:_main", r"\bcheckpoint_utils\.load_model_ensemble\("),
                     ("fairseq_cli.interactive:main", r"\bcheckpoint_utils\.load_model_ensemble\("))),
    Patch("fairseq.hub_utils:GeneratorHubInterface.translate",
          "an exported folder's beam: the hub decodes with every generation setting of the folder (length penalty, "
          "length limits) but the beam, which translate() takes from its own default, 5; a folder with our "
          "tokenizer would silently translate with neither the papers' setting (beam 4) nor fairseq's defaults, "
          "and not as evaluate.sh does. Without a beam argument it takes the folder's; other models keep 5. Such a "
          "folder translates one sentence on the CPU with one thread, as translate.py does (recipes/decoding.py: "
          "as fast on a quiet machine, several times faster on a busy one; OMP_NUM_THREADS wins)",
          shape=("self", "sentences", "beam=5", "verbose=False", "**kwargs"),
          attributes=("fairseq.dataclass.configs:GenerationConfig.beam",
                      "fairseq.dataclass.configs:FairseqConfig.tokenizer", "fairseq.hub_utils:GeneratorHubInterface.device")),
    Patch("logging:root",
          "fix 8: importing fairseq calls logging.basicConfig (a DEBUG handler on the root logger, from a wav2vec "
          "module translation never uses), so a program that imports the plugin printed every INFO line of fairseq "
          "(13 KB of configuration before the hub's one translation); where the plugin's own import of fairseq "
          "configured a root logger that had no handler, it is put back as it was", fix="8 logging"),
    Patch("warnings:filters",
          "quiet.py: fairseq's known harmless warnings (hydra's and torch's deprecation notices about fairseq's "
          "calls) are ignored, after any filter of the user's own (PYTHONWARNINGS=default shows them)"),
)

IN_TRAIN_COMMAND = (
    Patch("fairseq.options:parse_args_and_arch",
          "fairseq 0.12 turns on --tpu whenever --bf16 is given, so fairseq-train --bf16 on GPUs asks for torch_xla; "
          "--bf16 alone stops implying it (an explicit --tpu is kept)",
          shape=("parser", "input_args=None"),
          called_as=(("fairseq_cli.train:cli_main", r"\boptions\.parse_args_and_arch\("),)),
    Patch("fairseq.checkpoint_utils:load_checkpoint",
          "warm starts: with --finetune-from-model CHECKPOINT (and no checkpoint_last.pt yet, fairseq's condition) "
          "a model of ours takes the weights both models have from a checkpoint of other settings, which a resume "
          "refuses (models/variant_transformer.py)",
          shape=("cfg", "trainer", "**passthrough_args"),
          called_as=(("fairseq_cli.train:main", r"\bcheckpoint_utils\.load_checkpoint\("),),
          attributes=("fairseq.dataclass.configs:CheckpointConfig.finetune_from_model",
                      "fairseq.dataclass.configs:CheckpointConfig.restore_file",
                      "fairseq.dataclass.configs:CheckpointConfig.save_dir",
                      "fairseq.trainer:Trainer.checkpoint_suffix", "fairseq.trainer:Trainer.get_model")),
    Patch("fairseq.checkpoint_utils:load_checkpoint_to_cpu",
          "only while a warm start into one of fairseq's own architectures loads its checkpoint: our settings and a "
          "variant's own weights are left out of what it reads, which fairseq's strict load would refuse",
          called_as=(("fairseq.trainer:Trainer.load_checkpoint", r"\bcheckpoint_utils\.load_checkpoint_to_cpu\("),)),
)

ORIGINALS = {}  # target -> what it was before this module changed it
_done = set()


def find(path: str):
    """The object at ``"module:attribute.attribute"``."""
    module, _, attributes = path.partition(":")
    found = importlib.import_module(module)
    for name in attributes.split("."):
        found = getattr(found, name)
    return found


def original(target: str):
    """What ``target`` was before the plugin changed it (what it is, where it did not)."""
    return ORIGINALS[target] if target in ORIGINALS else find(target)


def _remember(patches) -> None:
    for patch in patches:
        try:
            ORIGINALS.setdefault(patch.target, find(patch.target))
        except AttributeError:  # torch without the allow-list (it needs none)
            pass


def apply() -> None:
    """Make the changes of ``AT_IMPORT``, once per process."""
    if "import" in _done:
        return
    _done.add("import")
    quiet.filter_known_warnings()  # first: some of the warnings come from fairseq's first import
    from . import fairseq_compat

    with fairseq_compat.logging_as_it_was():  # fix 8: the caller's logging as it was before fairseq
        from fairseq import checkpoint_utils, hub_utils
        from fairseq.data import data_utils
        from fairseq.distributed import utils as distributed_utils
        from fairseq.models import distributed_fairseq_model

    from . import model_folder, tokenizer

    _remember(AT_IMPORT)
    fairseq_compat.APPLIED.update(fairseq_compat.apply_fixes(data_utils, distributed_utils, distributed_fairseq_model))
    hub_utils.from_pretrained = model_folder.verifying(hub_utils.from_pretrained)
    checkpoint_utils.load_model_ensemble_and_task = model_folder.verifying_checkpoints(
        checkpoint_utils.load_model_ensemble_and_task)
    hub = hub_utils.GeneratorHubInterface
    hub.translate = tokenizer.translate_with_stored_beam(hub.translate)


def bf16_without_tpu(parse_args_and_arch):
    """Wrap fairseq's parser so that --bf16 stops implying --tpu."""

    def parse(parser, input_args=None, *args, **kwargs):
        argv = sys.argv[1:] if input_args is None else input_args
        parsed = parse_args_and_arch(parser, input_args, *args, **kwargs)
        if getattr(parsed, "bf16", False) and "--tpu" not in argv:
            parsed.tpu = False
        return parsed

    parse.__wrapped__ = parse_args_and_arch
    return parse


def apply_for_training() -> None:
    """Make the changes of ``IN_TRAIN_COMMAND`` (``python -m fairseq_csan.train``), once per process."""
    if "train" in _done:
        return
    _done.add("train")
    from fairseq import checkpoint_utils, options

    from .models.variant_transformer import marking_warm_starts

    _remember(IN_TRAIN_COMMAND)
    options.parse_args_and_arch = bf16_without_tpu(options.parse_args_and_arch)
    checkpoint_utils.load_checkpoint = marking_warm_starts(checkpoint_utils.load_checkpoint)
