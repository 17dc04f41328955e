"""The whole ``--help`` of a fairseq tool for a model: ``python -m fairseq_csan help TOOL [ARGS]``.

fairseq 0.12's ``options.parse_args_and_arch`` parses the command line twice: the first pass
learns ``--arch``, then the model's flags are added and the second pass reads them. ``--help``
is acted on in the first pass, before any model, task, optimizer or criterion flag exists, so
``fairseq-train --user-dir fairseq_csan --arch transformer_csan2d --help`` lists none of the
``--csan-*`` or ``--ctx-*`` flags (nor the Transformer's own ones), and fairseq has no place
where a plugin could add them. Importing the plugin leaves fairseq's parsing alone
(patches.py); this command builds the tool's parser as fairseq does, adds the flags that its
second pass would add for ARGS (those of the ``--arch``, ``--task``, optimizer, scheduler,
criterion, tokenizer, BPE, ... given, or the tool's defaults), and prints its help.
"""

import argparse

# fairseq's tools that parse their command line with parse_args_and_arch -> their parser (fairseq.options)
TOOL_PARSERS = {"fairseq-train": "get_training_parser", "fairseq-generate": "get_generation_parser",
                "fairseq-interactive": "get_interactive_generation_parser"}


def full_help(tool: str, argv) -> str:
    """What ``TOOL ARGV --help`` would print if fairseq acted on --help in its second pass."""
    from fairseq import options

    parser = getattr(options, TOOL_PARSERS[tool])()
    parser.prog = tool
    argv = list(argv)
    add_model_flags(parser, argv)
    add_chosen_components(parser, argv)
    return parser.format_help()


def add_model_flags(parser, argv):
    """The flags of the ``--arch`` on the command line, as fairseq's second pass adds them."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    arch_parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    arch_parser.add_argument("--arch", "-a")
    arch = arch_parser.parse_known_args(argv)[0].arch
    if arch in ARCH_MODEL_REGISTRY:
        group = parser.add_argument_group(f"Model-specific configuration (--arch {arch})",
                                          argument_default=argparse.SUPPRESS)
        ARCH_MODEL_REGISTRY[arch].add_args(group)


def add_chosen_components(parser, argv):
    """Add the flags of the task, optimizer, scheduler, criterion, ... named on the command line
    (or the parser's defaults), as fairseq's second parsing pass would."""
    from fairseq.dataclass.utils import gen_parser_from_dataclass
    from fairseq.registry import REGISTRIES
    from fairseq.tasks import TASK_REGISTRY

    names = ["task", *REGISTRIES]
    chooser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name in names:
        chooser.add_argument("--" + name.replace("_", "-"), dest=name, default=parser.get_default(name))
    chosen = vars(chooser.parse_known_args(argv)[0])
    if chosen["task"] in TASK_REGISTRY:
        TASK_REGISTRY[chosen["task"]].add_args(parser)
    for name, registry in REGISTRIES.items():
        cls = registry["registry"].get(chosen[name]) if chosen[name] else None
        if cls is None:
            continue
        if hasattr(cls, "add_args"):
            cls.add_args(parser)
        elif hasattr(cls, "__dataclass"):
            gen_parser_from_dataclass(parser, cls.__dataclass())
