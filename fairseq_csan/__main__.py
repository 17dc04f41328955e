"""``python -m fairseq_csan``: small facts about the installed plugin, for shell scripts.

usage:
  python -m fairseq_csan user-dir       the folder to give fairseq's --user-dir, from any folder:
                                        fairseq-train ... --user-dir "$(python -m fairseq_csan user-dir)"
  python -m fairseq_csan variant ARCH   the encoder self-attention variant of a registered
                                        architecture: a name such as csan2d, 'standard' for our
                                        architectures without one (transformer_ctxaware), or
                                        'none' for fairseq's own architectures (transformer)
  python -m fairseq_csan variant ARCH --device
                                        the same, then the device a run would take: cuda when
                                        torch sees a CUDA device, else cpu (both in one Python
                                        start, for examples/quickstart.sh)
  python -m fairseq_csan help TOOL [ARGS]
                                        the --help of fairseq-train, fairseq-generate or
                                        fairseq-interactive with the flags of the --arch, --task,
                                        --optimizer, --criterion, --tokenizer, --bpe, ... in ARGS
                                        (or their defaults), ours included: the tool's own --help
                                        lists none of them (cli_help.py)
"""

import argparse
import sys

from . import register, user_dir
from .cli_help import TOOL_PARSERS, full_help


def variant(arch: str) -> str:
    """The variant of ``arch``: by its name where arch_names lists it (no fairseq import), else
    from fairseq's registry."""
    from .arch_names import variant_of

    return variant_of(arch) or registered_variant(arch)


def registered_variant(arch: str) -> str:
    """The variant ``arch``'s defaults set, from fairseq's registry (the plugin's included)."""
    register()  # this command starts without fairseq (WITHOUT_FAIRSEQ)
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY

    if arch not in ARCH_MODEL_NAME_REGISTRY:
        ours = sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == "transformer_variant")
        raise SystemExit(f"fairseq_csan: unknown architecture {arch!r}; ours: {', '.join(ours)}; "
                         "or any fairseq architecture, such as transformer")
    if ARCH_MODEL_NAME_REGISTRY[arch] != "transformer_variant":
        return "none"
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    return getattr(args, "encoder_self_attention", "standard")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fairseq_csan", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("user-dir", help="print the folder to give fairseq's --user-dir")
    v = sub.add_parser("variant", help="print the encoder self-attention variant of an architecture")
    v.add_argument("arch")
    v.add_argument("--device", action="store_true",
                   help="print a second word: cuda when torch sees a CUDA device, else cpu")
    h = sub.add_parser("help", help="print a fairseq tool's --help with the flags of the model and components chosen")
    h.add_argument("tool", choices=sorted(TOOL_PARSERS))
    h.add_argument("args", nargs=argparse.REMAINDER, help="the tool's arguments: --arch, --task, ...")
    args = parser.parse_args(argv)
    if args.command == "user-dir":
        print(user_dir())
        return
    if args.command == "help":
        register()  # this command starts without fairseq (WITHOUT_FAIRSEQ)
        print(full_help(args.tool, args.args), end="")
        return
    words = [variant(args.arch)]
    if args.device:
        import torch

        words.append("cuda" if torch.cuda.is_available() else "cpu")
    print(" ".join(words))


if __name__ == "__main__":
    sys.exit(main())
