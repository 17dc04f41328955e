"""A training's save folder (train.py): its lock and run record (:func:`claim`), what a training
writes there (``--force`` removes that, and nothing else: :func:`start_over`), and its
checkpoints as fairseq-train leaves them, read once and mended.

:func:`repair_checkpoints` mends them before a resume (train.py): docs/recipes.md, "Training:
scripts/train.sh" (resume), says why and how.
"""

import functools
import re
import shutil
import zipfile
from pathlib import Path
from typing import List, Optional

from .average_checkpoints import listed, model_config, updates_of
from .runner import RUN, Damaged, Refusal, WriterLock, atomic, listing, made_from, say
from .runner.records import changed_since


def read_checkpoint(path: Path) -> dict:
    """A fairseq checkpoint's state; its tensors are mapped, not read, where torch can (>= 2.1).
    A file cut short (a kill while it was copied) has no zip directory at its end: Damaged. A resume
    reads each file once (while its inode, size and modification time are the same)."""
    info = Path(path).stat()
    return _read_checkpoint(Path(path), info.st_ino, info.st_size, info.st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _read_checkpoint(path: Path, *_identity) -> dict:
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
    updates = updates_of(state)
    if updates is None:
        raise Damaged("not a fairseq training checkpoint (no optimizer_history)")
    state["num_updates"] = updates
    return state


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
    for p in listed(save):
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
    for p in listed(save):
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


def check_same_run(last: Path, identity: dict) -> None:
    """Refuse to resume a checkpoint_last.pt of another run: the seed or architecture it carries
    (its own cfg) is not this run's (a checkpoint copied in from another seed's folder)."""
    config = model_config(read_checkpoint(last))
    arch = config.get("_name") or config.get("arch")
    pairs = (("seed", config.get("seed"), str(identity["seed"])), ("--arch", arch, identity["arch"]))
    differ = [f"{what} {then} in it, {now} here" for what, then, now in pairs if then not in (None, "None") and then != now]
    if differ:
        raise Refusal(f"{last} is a checkpoint of another run ({'; '.join(differ)}): fairseq would resume it as this "
                      "one; move it away, or give its own run's --save-dir")


def write_identity(save: Path, identity: dict) -> None:
    """The run record of ``save`` (records.RUN), with what the run is made from (the task's
    dictionaries and training data, records.made_from); a folder that holds another run, or this
    run made from other data (the task prepared again since), is refused."""
    held = RUN.read(save)
    identity = dict(identity, made_from=made_from(identity["data"]))
    if held is not None and "made_from" not in held:
        raise Refusal(f"{save} holds a run that an earlier version of the kit started ({RUN.path(save).name} does not "
                      "say which data it was made from): give a new --save-dir, or --force to start it again")
    changed = held is not None and changed_since(held["made_from"], identity["made_from"])
    if changed:
        raise Refusal(f"{save} holds a run made from other data than {identity['data']} holds now: {changed}; the "
                      "task was prepared again. Give a new --save-dir, or --force to start this run again on it")
    if held is not None and held != identity:
        differ = ", ".join(f"{k} {held.get(k)!r} there, {identity.get(k)!r} here" for k in sorted(set(held) | set(identity))
                           if held.get(k) != identity.get(k))
        raise Refusal(f"{save} holds another run ({differ}; see {RUN.path(save)}); give a new --save-dir")
    theirs = [] if held is not None else sorted(p.name for p in save.iterdir()
                                                 if p.is_file() and TRAINING_WRITES.fullmatch(p.name))
    if theirs:  # fairseq-train's own checkpoints, or a log of another's: a training would resume from, then replace them
        raise Refusal(f"{save} holds {listing(theirs)}, which no training of the kit wrote (it has no "
                      f"{RUN.file}): train.sh would resume from them and replace them; give a new --save-dir "
                      "(nothing was changed)")
    # every machine of a multi-node run writes it, into a save folder they may share
    RUN.write(save, identity)


# what a training of the kit writes into its save folder: fairseq-train's checkpoints, the kit's
# log, record and command list (train.nodeN.log: the other machines of a multi-node run)
TRAINING_WRITES = re.compile(r"checkpoint[\w.-]*\.pt|train(\.node\d+)?\.log|run\.json|train_command\.sh|\.written\.json"
                             r"|run\.env|train(\.node\d+)?\.lock")  # the last two: an earlier version's


def start_over(save: Path) -> None:
    """--force: remove what a training of the kit wrote into ``save`` (TRAINING_WRITES) but the
    lock files; a folder with any other file, or without the kit's run record, is
    refused before anything is removed (:func:`removable`)."""
    files = removable(save)
    for path in files:
        path.unlink()
    if files:
        say(f"--force: removed {len(files)} file(s) of the earlier run in {save} (checkpoints, log, record)")


def removable(save: Path) -> List[Path]:
    """What --force removes from ``save``, or the refusal it meets (the quick start asks before its first step)."""
    # (the lock files stay: another machine of a multi-node run may hold its own)
    files = sorted(p for p in save.iterdir() if not WriterLock.is_lock(p)) if save.is_dir() else []
    theirs = [p.name for p in files if not (p.is_file() and TRAINING_WRITES.fullmatch(p.name))]
    if theirs:
        raise Refusal(f"--force would start {save} again, but it holds what a training did not write "
                      f"({listing(theirs)}); move those away or give another --save-dir (nothing was removed)")
    if files and not RUN.exists(save):
        raise Refusal(f"--force would start {save} again, but it holds no run record of the kit's (run.json), so its "
                      f"files ({listing(p.name for p in files)}) are not a training's of this kit: give another "
                      "--save-dir (nothing was removed)")
    return files


def claim(plan: dict) -> WriterLock:
    """The save folder: its lock, emptied with --force (of what a training wrote), and its run record."""
    save = plan["save"]
    try:
        lock = WriterLock(save, folder=True, what="train.sh", part=plan["part"]).acquire()
    except Refusal as e:
        raise Refusal(str(e).replace("or give another output", "or give another --save-dir")) from None
    try:
        if plan.get("force") and plan["rank0"]:
            start_over(save)
        write_identity(save, plan["identity"])
    except Refusal:
        lock.release()  # as the end of this process would (a caller's in-process main too)
        raise
    return lock
