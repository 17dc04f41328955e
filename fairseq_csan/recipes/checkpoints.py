"""A training's save folder, its checkpoints as fairseq-train leaves them: read once, and mended.

fairseq copies checkpoint_last.pt and checkpoint_best.pt from the interval checkpoint without a
temporary name, so a kill during the copy leaves them cut short. :func:`repair_checkpoints` makes
checkpoint_last.pt the newest intact checkpoint (and checkpoint_best.pt intact), atomically and
with a message, before a resume (train.py).
"""

import shutil
import zipfile
from pathlib import Path
from typing import List, Optional

from .runner import Damaged, Refusal, atomic

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
        raise Damaged(f"{path.stat().st_size} bytes; torch.load: {first}") from None
    try:
        state["num_updates"] = int(state["optimizer_history"][-1]["num_updates"])
    except (KeyError, IndexError, TypeError, ValueError):
        raise Damaged("not a fairseq training checkpoint (no optimizer_history)") from None
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
    returns what was done, one message each. Refusal when checkpoint_last.pt is damaged and no
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
        raise Refusal(f"{last} is damaged ({why}) and no intact checkpoint_E_U.pt is left to resume from; "
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


def finished(last: Path, limit: Optional[str]) -> Optional[int]:
    """The updates of ``last`` when they reach the command's --max-update (``limit``), else None.
    fairseq-train resumed from such a checkpoint makes one more update before it checks the limit,
    and saves it over checkpoint_last.pt and checkpoint_best.pt: a rerun of a finished run would
    change its model each time."""
    if limit is None or not limit.isdigit() or int(limit) == 0:  # 0: fairseq's "no limit"
        return None
    updates = read_checkpoint(last)["num_updates"]
    return updates if updates >= int(limit) else None


