"""Average the weights of several fairseq checkpoints into one (fairseq's own
``scripts/average_checkpoints.py`` is not in its pip package).

docs/recipes.md, "Using it with fairseq", says which checkpoints --dir/--last takes and what the
average keeps. The sum is taken in float64 and stored in each tensor's own dtype; other tensors
(integer buffers) must be equal in every checkpoint.
"""

import argparse
import re
from pathlib import Path
from typing import Optional

from .. import register
from .command_line import Parser, positive
from .runner import Refusal, WriterLock, as_command, check_owned, refuse_overlaps, save_torch, say, write_file

# fairseq's checkpoint names, as its own listing (checkpoint_utils.checkpoint_paths) takes them
# when it removes old checkpoints: the group is the number they are ordered by
UPDATE = r"checkpoint_\d+_(\d+)\.pt"  # --save-interval-updates: checkpoint_EPOCH_UPDATES.pt
EPOCH = r"checkpoint(\d+)\.pt"  # one per epoch


def listed(folder: Path, pattern: str = UPDATE):
    """The checkpoints of ``folder`` named by ``pattern``, newest first, as fairseq lists them."""
    register()  # (this command starts without fairseq)
    from fairseq.checkpoint_utils import checkpoint_paths

    return [Path(p) for p in checkpoint_paths(str(folder), pattern=pattern)]


def newest_checkpoints(folder: Path, n: int):
    """The n newest numbered checkpoints in ``folder``, oldest first."""
    if not folder.is_dir():
        raise Refusal(f"no checkpoint folder {folder}")
    found = listed(folder, UPDATE) or listed(folder, EPOCH)
    if len(found) < n:
        raise Refusal(f"--last {n} needs {n} numbered checkpoints in {folder}, found {len(found)} "
                      f"({', '.join(p.name for p in reversed(found)) or 'none'}); train with --save-interval-updates "
                      "and --keep-interval-updates, or average fewer")
    return list(reversed(found[:n]))


def updates_of(state: dict):
    """The update count a checkpoint's contents record (None when it records none)."""
    try:
        return int(state["optimizer_history"][-1]["num_updates"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def model_flags(arch) -> Optional[frozenset]:
    """The settings that make a model of ``arch``: what its model class declares (fairseq's
    ``add_args``, our variants' flags among them), or None for an architecture not registered
    here. A fairseq architecture of argparse arguments saves every argument of the run in
    ``cfg.model`` (--max-update, --lr, --save-dir, ...): those are the run's schedule, not the
    model, and a run extended with a larger --max-update is still one run."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    model = ARCH_MODEL_REGISTRY.get(str(arch))
    if model is None:
        return None
    parser = argparse.ArgumentParser(add_help=False, conflict_handler="resolve")
    model.add_args(parser)
    return frozenset(action.dest for action in parser._actions)


def model_config(state: dict) -> dict:
    """What makes two checkpoints the same model: the model settings (arch, sizes, variant
    flags: ``model_flags``) and the seed, as a plain dict."""
    cfg = state.get("cfg") or {}
    model = cfg.get("model") if hasattr(cfg, "get") else None
    if model is None and state.get("args") is not None:  # a checkpoint saved with argparse args
        model, seed = vars(state["args"]), vars(state["args"]).get("seed")
    else:
        model = dict(model.items()) if hasattr(model, "items") else dict(vars(model)) if model is not None else {}
        common = cfg.get("common") if hasattr(cfg, "get") else None
        seed = common.get("seed") if hasattr(common, "get") else getattr(common, "seed", None)
    arch = model.get("_name") or model.get("arch")
    flags = model_flags(arch) if arch else None
    if flags is not None:
        model = {k: v for k, v in model.items() if k in flags or k in ("_name", "arch")}
    else:  # an architecture not registered here: all but the schedule's most common settings
        model = {k: v for k, v in model.items() if k not in ("lr", "max_update", "save_dir", "restore_file", "seed")}
    return {**{str(k): str(v) for k, v in model.items()}, "seed": str(seed)}


def predated_at_default(key: str, mine: dict, theirs: dict) -> bool:
    """A setting only one of two checkpoints has (the other was saved before its flag existed,
    and the run was resumed with a newer plugin), at the value its variant declares as default:
    the flag's default computes what the model computed before it, so the two are one model."""
    if (key in mine) == (key in theirs):
        return False
    present = mine if key in mine else theirs
    from fairseq_csan.modules import SELF_ATTENTION_VARIANTS, get_self_attention
    from fairseq_csan.arch_names import is_big
    from fairseq_csan.modules.registry import variant_defaults

    variant = present.get("encoder_self_attention")
    if variant not in SELF_ATTENTION_VARIANTS:
        return False
    arch = present.get("_name") or present.get("arch")  # (a checkpoint of argparse args names it arch)
    declared = variant_defaults(get_self_attention(variant), big=is_big(arch))
    return key in declared and str(declared[key]) == str(present[key])


def check_belongs(path: Path, state: dict, first_path: Path, first_config) -> None:
    """A checkpoint of another run (another model, seed or name than its contents) is refused."""
    named = re.fullmatch(UPDATE, path.name)
    updates = updates_of(state)
    if named and updates is not None and int(named.group(1)) != updates:
        raise Refusal(f"{path} holds a checkpoint of update {updates}, not {named.group(1)} as its name says: it was "
                      "renamed or belongs to another run")
    if first_config is not None:
        mine, theirs = model_config(state), first_config
        differ = sorted(k for k in set(mine) | set(theirs)
                        if mine.get(k) != theirs.get(k) and not predated_at_default(k, mine, theirs))
        if differ:
            shown = ", ".join(f"{k} {theirs.get(k)} vs {mine.get(k)}" for k in differ[:4])
            raise Refusal(f"{path} is not of the same run as {first_path} (model settings differ: {shown})")


def average(paths):
    """The averaged checkpoint (a dict, as fairseq saves it) of ``paths``; each checkpoint's
    contents must be of one run: the same model settings and seed, the update count its name
    says, and different update counts."""
    import torch

    register()  # torch loads fairseq checkpoints weights-only with the plugin's allow-list (fix 1)
    total, newest, first_config, seen = None, None, None, {}
    for path in paths:
        if not path.is_file():
            raise Refusal(f"missing checkpoint {path}")
        try:
            state = torch.load(path, map_location="cpu")
        except Exception as error:  # a truncated or foreign file: name it, whatever torch raised
            raise Refusal(f"cannot read {path} (damaged or not a checkpoint: "
                          f"{str(error).splitlines()[0] if str(error) else type(error).__name__})") from None
        check_belongs(path, state, paths[0], first_config)
        updates = updates_of(state)
        if updates in seen:  # (None, a count not recorded, is never in it)
            raise Refusal(f"{path} and {seen[updates]} are the same update ({updates}) of training: average "
                          "distinct checkpoints")
        if updates is not None:
            seen[updates] = path
        first_config = first_config if first_config is not None else model_config(state)
        model = state["model"]
        if total is None:
            total = {k: v.to(torch.float64).clone() if v.is_floating_point() else v.clone() for k, v in model.items()}
        else:
            if list(model) != list(total):
                missing = set(total) ^ set(model)
                raise Refusal(f"{path} holds other parameters than {paths[0]}: "
                              f"{', '.join(sorted(missing)) or 'same names, other order'}")
            for k, v in model.items():
                if v.shape != total[k].shape:
                    raise Refusal(f"{path} is not of the same model as {paths[0]}: {k} is {tuple(v.shape)}, "
                                  f"not {tuple(total[k].shape)} (another dictionary or size)")
                if v.is_floating_point():
                    total[k] += v.to(torch.float64)
                elif not torch.equal(total[k], v):
                    raise Refusal(f"non-float tensor {k} differs in {path}")
        newest = state
    dtypes = {k: v.dtype for k, v in newest["model"].items()}
    newest["model"] = {k: (v / len(paths)).to(dtypes[k]) if v.is_floating_point() else v for k, v in total.items()}
    newest.pop("last_optimizer_state", None)
    newest["extra_state"] = {**(newest.get("extra_state") or {}), "averaged_from": [str(p) for p in paths]}
    return newest


def main(argv=None):
    p = Parser(prog="python -m fairseq_csan.recipes.average_checkpoints", description=__doc__.split("\n\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--inputs", nargs="+", type=Path, help="checkpoint files to average")
    source.add_argument("--dir", type=Path, help="a checkpoint folder; with --last N")
    p.add_argument("--last", type=positive, help="how many of the newest numbered checkpoints in --dir")
    p.add_argument("--output", type=Path)
    p.add_argument("--force", action="store_true",
                   help="replace an --output that average_checkpoints wrote before (never anyone else's file)")
    p.add_argument("--list", action="store_true", help="print the checkpoints it would average, and exit")
    args, _ = p.read(argv)
    paths = plan(args)
    if args.list:
        print("\n".join(str(path) for path in paths))
        return
    with WriterLock(args.output, folder=False, what="average_checkpoints"):
        check_owned([args.output], "average_checkpoints", args.force, "--output")  # again, under the lock
        say(f"averaging {len(paths)} checkpoints: {', '.join(path.name for path in paths)}")
        write_file(args.output, lambda part: save_torch(average(paths), part), "average_checkpoints")
    say(f"wrote {args.output}")


def plan(args):
    """The checkpoints to average, and the output checked (never one of them, writable, its own)."""
    if args.output is None and not args.list:
        raise Refusal("--output is required (or --list)")
    if args.list and (args.output is not None or args.force):
        raise Refusal("--list prints the checkpoints and exits; --output and --force would be ignored: give one or the "
                      "other")
    if args.dir is not None and args.last is None:
        raise Refusal("--dir needs --last N")
    if args.inputs is not None and args.last is not None:
        raise Refusal("--last goes with --dir, not --inputs")
    paths = args.inputs if args.inputs is not None else newest_checkpoints(args.dir, args.last)
    if args.output is not None:  # --force never replaces a checkpoint that is being averaged
        refuse_overlaps({"--output": args.output}, {f"input {i + 1}": path for i, path in enumerate(paths)})
        check_owned([args.output], "average_checkpoints", args.force, "--output", writable=True)
    return paths


if __name__ == "__main__":
    as_command(main)
