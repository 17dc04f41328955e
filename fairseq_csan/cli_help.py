"""``--help`` of fairseq's command-line tools lists the model's flags, ours included.

fairseq 0.12's ``options.parse_args_and_arch`` parses the command line twice: the first pass
learns ``--arch``, then the model's flags are added and the second pass reads them. ``--help``
is acted on in the first pass, before any model, task, optimizer or criterion flag exists, so
``fairseq-train --user-dir fairseq_csan --arch transformer_csan2d --help`` would list none of
the ``--csan-*`` or ``--ctx-*`` flags (nor the Transformer's own ones).

fairseq's tools import the ``--user-dir`` plugin while building their parser
(``options.get_parser``), before they call ``options.parse_args_and_arch``. Importing this
package wraps that function (:func:`help_lists_model_flags`): when ``-h`` or ``--help`` is on
the command line, the parser's help action first adds the flags of the ``--arch`` given, then
prints (with those of the task, optimizer, scheduler and criterion chosen, as fairseq's second
pass would add them). Without a help flag the wrapper only passes the call on.
"""

import argparse
import sys


class _HelpWithModelFlags(argparse._HelpAction):
    def __init__(self, *args, argv=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.argv = list(argv)

    def __call__(self, parser, namespace, values, option_string=None):
        from fairseq.models import ARCH_MODEL_REGISTRY

        arch_parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        arch_parser.add_argument("--arch", "-a")
        arch = arch_parser.parse_known_args(self.argv)[0].arch
        if arch in ARCH_MODEL_REGISTRY:
            group = parser.add_argument_group(f"Model-specific configuration (--arch {arch})",
                                              argument_default=argparse.SUPPRESS)
            ARCH_MODEL_REGISTRY[arch].add_args(group)
        add_chosen_components(parser, self.argv)
        super().__call__(parser, namespace, values, option_string)


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


def help_lists_model_flags(parse_args_and_arch):
    """Wrap fairseq's ``parse_args_and_arch`` so that ``--help`` lists the model's flags."""
    if getattr(parse_args_and_arch, "help_lists_model_flags", False):
        return parse_args_and_arch

    def parse(parser, input_args=None, *args, **kwargs):
        argv = sys.argv[1:] if input_args is None else list(input_args)
        if any(a in ("-h", "--help") for a in argv):
            for i, action in enumerate(parser._actions):
                if type(action) is argparse._HelpAction:
                    helper = _HelpWithModelFlags(option_strings=action.option_strings, dest=action.dest,
                                                 help=action.help, argv=argv)
                    parser._actions[i] = helper
                    for flag in action.option_strings:
                        parser._option_string_actions[flag] = helper
        return parse_args_and_arch(parser, input_args, *args, **kwargs)

    parse.help_lists_model_flags = True
    parse.__wrapped__ = parse_args_and_arch
    parse.__doc__ = parse_args_and_arch.__doc__
    return parse
