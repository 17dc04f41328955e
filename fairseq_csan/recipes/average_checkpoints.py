"""Average the weights of several fairseq checkpoints into one (fairseq's own
``fairseq_csan/recipes/average_checkpoints.py`` is not in the pip package).

Every floating-point tensor of the models' state dicts is averaged (accumulated in float64,
stored in its own dtype); other tensors (integer buffers) must be equal in every checkpoint.
The result keeps the newest checkpoint's configuration and training state, without its
optimizer state, which averaged weights do not match; fairseq-generate, fairseq-interactive
and the hub interface load it as any checkpoint.

usage: python -m fairseq_csan.recipes.average_checkpoints --inputs A.pt B.pt ... --output avg.pt
       python -m fairseq_csan.recipes.average_checkpoints --dir CHECKPOINTS --last N --output avg.pt
       python -m fairseq_csan.recipes.average_checkpoints --dir CHECKPOINTS --last N --list   (which ones)

With --dir/--last, the N newest numbered checkpoints are taken: checkpoint_E_U.pt (saved
every --save-interval-updates) when the folder has any, else checkpointE.pt (one per epoch).
An existing --output is never overwritten without --force.
"""

import argparse
import re
import sys
from pathlib import Path

import torch

import fairseq_csan  # noqa: F401  (lets torch load fairseq checkpoints weights-only)
from fairseq.checkpoint_utils import torch_persistent_save

UPDATE = re.compile(r"^checkpoint_(\d+)_(\d+)\.pt$")
EPOCH = re.compile(r"^checkpoint(\d+)\.pt$")


def newest_checkpoints(folder: Path, n: int):
    """The n newest numbered checkpoints in ``folder``, oldest first."""
    if not folder.is_dir():
        raise SystemExit(f"average_checkpoints: no checkpoint folder {folder}")
    names = [p.name for p in folder.iterdir()]
    by_update = sorted((int(m.group(2)), name) for name in names if (m := UPDATE.match(name)))
    by_epoch = sorted((int(m.group(1)), name) for name in names if (m := EPOCH.match(name)))
    found = by_update or by_epoch
    if len(found) < n:
        raise SystemExit(
            f"average_checkpoints: --last {n} needs {n} numbered checkpoints in {folder}, found "
            f"{len(found)} ({', '.join(name for _, name in found) or 'none'}); train with "
            "--save-interval-updates and --keep-interval-updates, or average fewer"
        )
    return [folder / name for _, name in found[-n:]]


def average(paths):
    """The averaged checkpoint (a dict, as fairseq saves it) of ``paths``."""
    total, first_keys, newest = None, None, None
    for path in paths:
        if not path.is_file():
            raise SystemExit(f"average_checkpoints: missing checkpoint {path}")
        try:
            state = torch.load(path, map_location="cpu")
        except Exception as error:  # a truncated or foreign file: name it, whatever torch raised
            raise SystemExit(f"average_checkpoints: cannot read {path} (damaged or not a checkpoint: "
                             f"{str(error).splitlines()[0] if str(error) else type(error).__name__})") from None
        model = state["model"]
        if first_keys is None:
            first_keys = list(model)
            total = {k: v.to(torch.float64).clone() if v.is_floating_point() else v.clone() for k, v in model.items()}
        else:
            if list(model) != first_keys:
                missing = set(first_keys) ^ set(model)
                raise SystemExit(f"average_checkpoints: {path} holds other parameters than {paths[0]}: "
                                 f"{', '.join(sorted(missing)) or 'same names, other order'}")
            for k, v in model.items():
                if v.is_floating_point():
                    total[k] += v.to(torch.float64)
                elif not torch.equal(total[k], v):
                    raise SystemExit(f"average_checkpoints: non-float tensor {k} differs in {path}")
        newest = state
    dtypes = {k: v.dtype for k, v in newest["model"].items()}
    newest["model"] = {k: (v / len(paths)).to(dtypes[k]) if v.is_floating_point() else v for k, v in total.items()}
    newest.pop("last_optimizer_state", None)
    newest.setdefault("extra_state", {})
    newest["extra_state"] = {**(newest["extra_state"] or {}), "averaged_from": [str(p) for p in paths]}
    return newest


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--inputs", nargs="+", type=Path, help="checkpoint files to average")
    source.add_argument("--dir", type=Path, help="a checkpoint folder; with --last N")
    parser.add_argument("--last", type=int, help="how many of the newest numbered checkpoints in --dir")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--force", action="store_true", help="overwrite an existing --output")
    parser.add_argument("--list", action="store_true", help="print the checkpoints it would average, and exit")
    args = parser.parse_args(argv)
    if args.output is None and not args.list:
        parser.error("--output is required (or --list)")
    if args.dir is not None and (args.last is None or args.last < 1):
        parser.error("--dir needs --last N with N >= 1")
    if args.inputs is not None and args.last is not None:
        parser.error("--last goes with --dir, not --inputs")
    paths = args.inputs if args.inputs is not None else newest_checkpoints(args.dir, args.last)
    if args.list:
        print("\n".join(str(p) for p in paths))
        return
    if args.output.exists() and not args.force:
        raise SystemExit(f"average_checkpoints: {args.output} exists; pass --force to overwrite it")
    print(f"average_checkpoints: averaging {len(paths)} checkpoints: {', '.join(p.name for p in paths)}", file=sys.stderr)
    averaged = average(paths)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    torch_persistent_save(averaged, str(args.output))
    print(f"average_checkpoints: wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
