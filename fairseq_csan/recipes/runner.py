"""The runner: what every command of the kit goes through to touch the disk or start a process.

Every command (prepare, train, evaluate, export, translate, average, sweep, the Multi30k
reproduction, gpu_check, the analyses) is: parse its options, build a plan, and carry it out
through this module, which alone owns

- **the rules** checked before any work starts: no output overlaps an input
  (:func:`refuse_overlaps`: an output that is an input, holds one or lies inside one, through
  links too), and only what a command wrote is replaced (:func:`foreign_files` lists the rest,
  which is refused, ``--force`` or not);
- **one writer per output** (:class:`WriterLock`): ``fcntl.flock`` on ``FOLDER/.lock`` for an
  output folder, ``FOLDER/.PART.lock`` for one part of it that another process writes at the same
  time (the machines of a multi-node training, ``.node1.lock`` ...), ``.NAME.lock`` beside an
  output file. A second writer is refused in one line naming the holder (pid, host, command,
  start). A holder removes the file when it ends; the kernel frees the lock of a killed one;
  a child given the lock's descriptor (:func:`run_child`) keeps it held while it runs;
- **atomic writes** (:func:`atomic`, :func:`write_atomically`): a temporary of the writer's own,
  fsynced, then renamed, so a reader, a kill or a power cut sees the old file or the new;
- **the records** kept beside outputs, one typed JSON form per kind (:class:`Kind`; the table
  below), and what a model is made from (:func:`made_from`, :func:`check_made_from`);
- **child processes** (:func:`run_child`): each in a process group of its own, with SIGINT,
  SIGTERM and SIGHUP passed on to it, once (and again after ``RESEND_S`` where it may lose one).

- **the step stamps** of prepare and evaluate (:class:`Step`, :func:`make`, :func:`run`): each
  step's outputs with what they were made from, so that a rerun redoes exactly the steps whose
  inputs, settings or outputs changed.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import fcntl
import filecmp
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..model_folder import sha256  # the one file hash (fairseq is not imported)


class Refusal(Exception):
    """A command must not run as asked; the message says why, in one line."""


def real(path) -> Path:
    """The absolute path with links resolved (a link to an input is that input)."""
    return Path(os.path.realpath(os.path.abspath(os.fspath(path))))


def overlap(output, input_) -> Optional[str]:
    """How ``output`` overlaps ``input_`` ('is', 'holds', 'lies inside'), or None."""
    out, inp = real(output), real(input_)
    if out == inp:
        return "is"
    if out in inp.parents:
        return "holds"
    if inp in out.parents:
        return "lies inside"
    return None


def refuse_overlaps(outputs: Dict[str, object], inputs: Dict[str, object]) -> None:
    """Refuse (one line) when an output is, holds or lies inside an input. The dicts map how the
    user named each path (e.g. ``--out``) to the path; None values are left out."""
    for out_name, out in outputs.items():
        if out is None:
            continue
        for in_name, inp in inputs.items():
            if inp is None:
                continue
            how = overlap(out, inp)
            if how:
                raise Refusal(f"{out_name} {out} {how} {in_name} {inp}, which this command reads; "
                              f"give {out_name} a place of its own")


def foreign_files(folder: Path, owned: Iterable) -> List[Path]:
    """Files under ``folder`` that are not among ``owned`` (paths or folders this command
    wrote; a file inside an owned folder is owned), sorted. The command's lock file and the
    temporary files of what it owns (``NAME.tmp``, ``NAME.tmp.tmp``, ``.NAME.PID.tmp``) are its
    own too."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    mine = {real(p) for p in owned}
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_dir() and not path.is_symlink():
            continue
        r = real(path) if not path.is_symlink() else real(path.parent) / path.name
        while r.name.endswith(".tmp"):
            r = r.with_name(r.name[:-len(".tmp")])
        own = re.fullmatch(r"\.(.+)\.\d+", r.name)  # unique_temporary's .NAME.PID.tmp
        if own and path.name.endswith(".tmp"):
            r = r.with_name(own.group(1))
        record = re.fullmatch(r"\.(.+)\.written\.json", r.name)  # the record of an output file (written)
        if record:
            r = r.with_name(record.group(1))
        if r in mine or any(parent in mine for parent in r.parents) or path.name == ".lock":
            continue
        found.append(path)
    return found


def listing(paths: List[Path], limit: int = 5) -> str:
    shown = ", ".join(str(p) for p in paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


_HELD = {}  # lock file -> the WriterLock of this process that holds it


def lock_path(output: Path, folder: bool, part: Optional[str] = None) -> Path:
    """The lock file of an output: ``FOLDER/.lock`` (``FOLDER/.PART.lock`` for one part of a
    folder that several processes write at once), or ``.NAME.lock`` beside a file."""
    output = Path(output)
    if folder:
        return output / (f".{part}.lock" if part else ".lock")
    return output.with_name(f".{output.name}.lock")


def is_lock(path: Path) -> bool:
    """Whether ``path`` is named as a lock file of the kit's (in any of lock_path's forms)."""
    return bool(re.fullmatch(r"\.(.+\.)?lock", Path(path).name))


class WriterLock:
    """An exclusive, non-blocking lock on an output (a folder, or a file), held until
    :meth:`release` or the end of the process (``with`` works too).

    ``what`` names the command in the holder line that a second writer sees; ``part`` names the
    part of a folder this writer alone writes (:func:`lock_path`)."""

    def __init__(self, output, folder: bool, what: str, part: Optional[str] = None):
        self.path = lock_path(Path(output), folder, part)
        self.output, self.what, self.fd, self.holder = Path(output), what, None, ""

    def acquire(self) -> "WriterLock":
        """The lock, taken; a lock this process holds already is returned as it is (one
        process is one writer, however many of its calls write)."""
        where = self.path.parent  # the output folder, or the folder of an output file
        if where.exists() and not where.is_dir():
            raise Refusal(f"{where} is a file, not a folder: give {'an output folder' if where == self.output else 'an output'} "
                          "elsewhere (nothing was changed)")
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a parent that is a file, no permission, a read-only or full disk
            raise Refusal(f"cannot create the folder {where} ({error.strerror}): give an output where you can write "
                          "(nothing was changed)") from None
        held = _HELD.get(os.path.realpath(self.path))
        if held is not None and held.fd is not None:
            return held
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as error:
                raise Refusal(f"cannot write in {where} ({error.strerror}): give an output where you can write "
                              "(nothing was changed)") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
                os.close(fd)
                raise Refusal(f"{self.output} is being written by {holder}; wait for it to end, or give "
                              "another output") from None
            # the holder before us may have removed the file after we opened it: lock the file
            # that is at the path now, or try again
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv[:6]))
        self.fd = fd
        self.holder = f"{self.what} (pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%H:%M:%S')}: {command})"
        self.note()
        _HELD[os.path.realpath(self.path)] = self
        atexit.register(self.release)  # an error exit removes the lock file too
        return self

    def note(self, more: str = "") -> None:
        """Write the holder line (with ``more``: e.g. the child that holds the lock too)."""
        text = self.holder + (f", {more}" if more else "")
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, text.encode("utf-8"), 0)

    def release(self) -> None:
        if self.fd is not None:
            _HELD.pop(os.path.realpath(self.path), None)
            try:
                os.unlink(self.path)  # while still held: a waiter re-checks the path (acquire)
            except FileNotFoundError:
                pass
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *_exc):
        self.release()


def unique_temporary(path: Path) -> Path:
    """A temporary name beside ``path``, its own to this process (``.NAME.PID.tmp``)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def named_as_outputs(error: OSError, pairs) -> None:
    """Name in ``error`` (both its file names: a copy's error has two) each temporary of ``pairs``
    (temporary, output), or a file inside a temporary folder, as the output the user asked for."""
    pairs = [(Path(t), Path(o)) for t, o in pairs]
    for attr in ("filename", "filename2"):
        name = getattr(error, attr)
        if name is None:
            continue
        for temporary, output in pairs:
            try:
                inside = Path(str(name)).relative_to(temporary)
            except ValueError:
                continue
            setattr(error, attr, str(output / inside) if inside.parts else str(output))
            break


@contextlib.contextmanager
def atomic(*paths):
    """The kit's one way to write a file: ``with atomic(a, b) as (part_a, part_b):`` write each
    output to its temporary (:func:`unique_temporary`); when the block ends normally each
    temporary is flushed to the disk and renamed over its output, in order, so that a reader, a
    kill or a power cut sees the old content or the new, never a part; when it raises (a kill's
    KeyboardInterrupt and SystemExit too) every temporary is removed and no output is touched.
    Two processes writing one file at once (the machines of one multi-node training) each rename
    their own whole file."""
    parts = [unique_temporary(Path(p)) for p in paths]
    try:
        yield parts
        for part in parts:
            with open(part, "rb") as f:
                os.fsync(f.fileno())
        for part, path in zip(parts, paths):
            os.replace(part, path)
    except OSError as error:  # a write (a full disk, a file-size limit) names no file: the output's
        if error.filename is None:
            error.filename = " and ".join(map(str, paths))
        named_as_outputs(error, zip(parts, paths))
        raise
    finally:
        for part in parts:
            part.unlink(missing_ok=True)


ADVICE = {errno.ENOSPC: "free space on its disk", errno.EDQUOT: "free space within your disk quota",
          errno.EFBIG: "raise the file-size limit (ulimit -f)", errno.EACCES: "give a place where you can write",
          errno.EPERM: "give a place where you can write", errno.EROFS: "give a place on a disk that can be written"}


def as_command(main: Callable[[], None]) -> None:
    """A command's process (``python -m MODULE``): ``main()``, with a fault of the machine's (a
    full disk, a file-size limit, a folder that cannot be written: OSError) or a damaged record
    told in one line naming the file and what to do, exit 1, instead of a traceback. What the
    command writes goes through :func:`atomic`, so no output is left half written; a rerun goes
    on from its last finished step."""
    spec = getattr(sys.modules.get(main.__module__), "__spec__", None)  # python -m: __main__, its spec the module
    name = (spec.name if spec else main.__module__).rpartition(".")[2]
    try:
        main()
    except Damaged as error:
        print(f"[{name}] error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except OSError as error:
        where = error.filename or "a file it writes"
        if error.filename2:  # a copy: where it was written, and from what
            where = f"{error.filename2} (a copy of {error.filename})"
        what = error.strerror or str(error)
        print(f"[{name}] error: {where}: {what}; {ADVICE.get(error.errno, 'see above')}, then run the same command "
              "again (no output is left half written)", file=sys.stderr)
        raise SystemExit(1) from None


class _Sink:
    """A file for torch.save that keeps the first OSError of its writes (a full disk, a file-size
    limit) and takes the rest unwritten, so that torch's writer ends as usual (torch 1.13 aborts
    the process when its writer is dropped after a failed write) and :func:`save_torch` raises it."""

    def __init__(self, file):
        self.file, self.error = file, None

    def write(self, data) -> int:
        if self.error is None:
            rest = memoryview(data)
            try:
                while rest:  # an unbuffered file may take a part at a time
                    rest = rest[self.file.write(rest):]
            except OSError as error:
                self.error = error
        return len(data)

    def flush(self) -> None:
        pass


def save_torch(state, path) -> None:
    """``torch.save`` of ``state`` into ``path`` (a part of :func:`atomic`), a fault of the
    machine raised as the OSError it is, naming ``path`` (told in one line by
    :func:`as_command`). torch's own writer, given a path, reports a full disk or a file-size
    limit as a RuntimeError that names neither the file nor the cause."""
    import torch

    with open(path, "wb", buffering=0) as f:
        sink = _Sink(f)
        torch.save(state, sink)
    if sink.error is not None:
        sink.error.filename = sink.error.filename or str(path)
        raise sink.error


def write_atomically(path: Path, data) -> None:
    """Write ``data`` (str, as UTF-8, or bytes) to ``path`` through :func:`atomic`."""
    with atomic(path) as (part,):
        part.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


def _same_folder(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir())
    if names != sorted(p.name for p in b.iterdir()):
        return False
    _match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    return not mismatch and not errors


def replace_folder(out: Path, write: Callable[[Path], None], may_replace: Callable[[Path], None]) -> str:
    """The kit's one way to write a whole folder: ``write(new)`` fills a new folder beside ``out``
    (:func:`unique_temporary`), whose files are then flushed to the disk and which takes the place
    of ``out``: 'written' (``out`` missing or empty), 'unchanged' (``out`` holds the same files;
    the new one is dropped) or, unless ``may_replace(out)`` raises to refuse, 'replaced'. The
    swap is two renames (``out`` aside as ``.NAME.old``, the new one in); a kill between them
    leaves ``.NAME.old``, which the next call puts back first."""
    out = Path(out)
    old = out.with_name(f".{out.name}.old")
    if old.is_dir():
        if out.exists():
            shutil.rmtree(old)  # the swap was done
        else:
            os.replace(old, out)  # killed between the renames: the folder as it was
    new = unique_temporary(out)
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir()
    try:
        write(new)
        for path in new.rglob("*"):
            if path.is_file() and not path.is_symlink():
                with open(path, "rb") as f:
                    os.fsync(f.fileno())
        if out.is_dir() and any(out.iterdir()):
            if _same_folder(new, out):
                return "unchanged"
            may_replace(out)
            os.replace(out, old)
            os.replace(new, out)
            shutil.rmtree(old)
            return "replaced"
        if out.is_dir():
            out.rmdir()
        os.replace(new, out)
        return "written"
    except OSError as error:  # a file of the new folder (a full disk, a file-size limit): named as in ``out``
        named_as_outputs(error, [(new, out)])
        raise
    finally:
        shutil.rmtree(new, ignore_errors=True)


def check_writable(path: Path, flag: str) -> None:
    """Refuse before any slow work when ``path`` (a file to write) cannot be written: its folder
    is missing and cannot be made, is not writable, or the path is a folder."""
    path = Path(path)
    if path.is_dir():
        raise Refusal(f"{flag} {path} is a folder; give a file name")
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise Refusal(f"{flag} {path}: cannot make its folder {parent} ({error.strerror})") from None
    probe = parent / f".{path.name}.{os.getpid()}.probe"
    try:
        probe.open("wb").close()
        probe.unlink()
    except OSError as error:
        raise Refusal(f"{flag} {path}: cannot write in {parent} ({error.strerror})") from None


# ======================================================================== records
#
#     kind          file               written by   says
#     TASK          task.json          prepare      what a task folder was prepared with
#     RUN           run.json           train        which run a save folder holds, made from what
#     EVALUATION    evaluation.json    evaluate     what an evaluation was made of
#     SWEEP         sweep.json         sweep        which point of a window/area sweep a run is
#     REPRODUCTION  settings.json      multi30k     a Multi30k reproduction's settings, and how each
#                                                   finished run shared the machine
#     TOY           toy_corpus.json    toy_corpus   the files it wrote, by SHA-256 (a user's train.en is not replaced)
#     GPU_STEP      .steps/NAME.json   gpu_check    one step: its command, machine, status, time and outputs
#     STAMP         .steps/NAME.json   prepare,     one step: its settings and the SHA-256 of its inputs
#                                      evaluate     and outputs (the step stamps below)
#
# A record is a JSON object of its kind's fields, each of the field's type, written atomically.
# A folder that an earlier version of the kit made holds KEY=VALUE files instead (recipe.env,
# run.env, evaluation.env, sweep.env): it is refused with one line saying to run the step again.


class Damaged(Exception):
    """A record that is not the JSON object of its kind: changed by hand, or cut short."""


class Earlier(Damaged):
    """A folder that an earlier version of the kit wrote (its KEY=VALUE file, no record)."""


def _text(value) -> str:
    return str(value)


def _flag(value) -> bool:
    if isinstance(value, bool):
        return value
    return {"1": True, "0": False, "yes": True, "no": False}[str(value)]


def _words(value) -> list:
    """A list of strings (or one string, comma-separated)."""
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [v for v in str(value).split(",") if v]


def _anything(value):
    return value


TYPES: Dict[str, Callable] = {"text": _text, "int": int, "float": float, "flag": _flag, "list": _words,
                              "json": _anything}


@dataclass(frozen=True)
class Kind:
    """One kind of record: its file, its fields (name -> type name of TYPES) and, where an earlier
    version of the kit kept the same facts as ``KEY=VALUE`` lines, that file's name (``old``): a
    folder holding only it is refused (:class:`Earlier`), never read."""

    name: str
    file: str
    fields: Dict[str, str]
    old: Optional[str] = None
    open_fields: bool = False  # fields beyond the declared ones are kept as they are (JSON values)

    def path(self, folder) -> Path:
        return Path(folder) / self.file

    def exists(self, folder) -> bool:
        return self.path(folder).is_file() or self.earlier(folder)

    def earlier(self, folder) -> bool:
        """Whether ``folder`` holds this kind's file of an earlier version of the kit, and no record."""
        return self.old is not None and (Path(folder) / self.old).is_file() and not self.path(folder).is_file()

    def typed(self, values: dict) -> dict:
        """``values`` with each field converted to its type; an unknown field is an error."""
        unknown = set(values) - set(self.fields)
        if unknown and not self.open_fields:
            raise ValueError(f"unknown {self.name} fields {sorted(unknown)}; known: {', '.join(self.fields)}")
        return {k: (TYPES[self.fields[k]](v) if k in self.fields else v) for k, v in values.items()}

    def read(self, folder) -> Optional[dict]:
        """The record of ``folder`` (typed), or None. A damaged record raises Damaged, a folder of
        an earlier version of the kit (its ``old`` file alone) Earlier, each in one line."""
        if self.earlier(folder):
            raise Earlier(f"{Path(folder) / self.old} was written by an earlier version of the kit, which this one does "
                          f"not read: run the step that made {folder} again (into a new folder, or with --force)")
        try:
            text = self.path(folder).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            values = json.loads(text)
            if not isinstance(values, dict):
                raise ValueError("not a JSON object")
            return self.typed(values)
        except (ValueError, KeyError, TypeError) as error:
            raise Damaged(f"{self.path(folder)} is not a {self.name} record as this kit writes it ({error}); "
                          "it was changed by hand or cut short") from None

    def write(self, folder, values: dict) -> dict:
        """Write the record of ``folder`` atomically; the typed values."""
        values = self.typed(values)
        write_atomically(self.path(folder), json.dumps(values, indent=1, sort_keys=True) + "\n")
        return values


TASK = Kind("task", "task.json", {
    "task": "text", "src": "text", "tgt": "text", "merges": "int", "joint_bpe": "flag", "clean_max_len": "int",
    "clean_ratio": "float", "tests": "list", "tokenizer_src": "text", "tokenizer_tgt": "text",
    "pretokenized": "flag", "test_names": "json", "warnings": "json", "like": "json"}, old="recipe.env")
RUN = Kind("run", "run.json", {"arch": "text", "data": "text", "size": "text", "seed": "int", "share": "text",
                               "tiny": "flag", "made_from": "json", "finetuned_from": "json"}, old="run.env")
EVALUATION = Kind("evaluation", "evaluation.json", {
    "checkpoints": "list", "averaged": "flag", "subset": "text", "beam": "int", "lenpen": "float", "batch_size": "int",
    "decoding": "text", "made_from": "json"}, old="evaluation.env")
SWEEP = Kind("sweep", "sweep.json", {"kind": "text", "value": "int", "arch": "text", "flags": "text"}, old="sweep.env")
# open: a setting an earlier version kept (its "jobs") is read, and compares as other settings
REPRODUCTION = Kind("reproduction", "settings.json", {
    "raw_dir": "text", "max_update": "int", "merges": "int", "model": "json", "training": "json", "device": "text",
    "trained": "json"}, open_fields=True)
TOY = Kind("toy corpus", "toy_corpus.json", {"files": "json"})  # what the toy corpus wrote (name -> SHA-256)
# one step of gpu_check, in OUT/.steps/NAME.json (gpu_check.step_record names the file)
GPU_STEP = Kind("gpu-check step", "STEP.json", {"command": "text", "machine": "text", "status": "text",
                                                "seconds": "float", "finished": "text", "outputs": "list"})
# one step of prepare or evaluate, in STAMPS/NAME.json (Step names the file): what it was made from
STAMP = Kind("step stamp", "STAMP.json", {"settings": "json", "inputs": "json", "outputs": "json"})
KINDS = (TASK, RUN, EVALUATION, SWEEP, REPRODUCTION, TOY, GPU_STEP, STAMP)


# ------------------------------------------------------------------ one output file, written whole

def written(path) -> Kind:
    """The record of one output file a command writes whole (translate.py's and
    average_checkpoints' ``--output``): ``.NAME.written.json`` beside it, with its SHA-256 and
    the command that wrote it."""
    return Kind("written file", f".{Path(path).name}.written.json", {"sha256": "text", "by": "text"})


def is_written_by(path, by: str) -> bool:
    """Whether the file ``path`` is one ``by`` wrote, unchanged since (its record says so)."""
    try:
        record = written(path).read(Path(path).parent)
    except Damaged:
        return False
    return record is not None and record.get("by") == by and record.get("sha256") == sha256(path)


def check_replaceable(path, by: str, force: bool, flag: str) -> None:
    """Refuse (one line) to write ``path`` where a file is: one ``by`` wrote, unchanged since (its
    record says so), is replaced with ``force`` only; any other (the user's, or one changed by
    hand since) is never replaced, ``--force`` or not."""
    path = Path(path)
    if not path.exists():
        return
    if not is_written_by(path, by):
        raise Refusal(f"{flag} {path} exists, and {by} did not write it (or it was changed since): move it away or "
                      f"give another {flag} (nothing was changed)")
    if not force:
        raise Refusal(f"{flag} {path} exists (an earlier output of {by}): pass --force to replace it")


def keep_written(path, by: str) -> None:
    """Record that ``by`` wrote ``path`` as it is now (after its atomic write)."""
    written(path).write(Path(path).parent, {"sha256": sha256(path), "by": by})


def write_whole(path, data, by: str) -> None:
    """Write one output file atomically (:func:`write_atomically`) and record that ``by`` wrote it."""
    write_atomically(path, data)
    keep_written(path, by)


# ------------------------------------------------------------------ what a model is made from

def made_from(binary) -> Dict[str, str]:
    """The SHA-256 of each file of a task's binarised folder that a model is made from: the
    dictionaries and the training and validation data (fairseq-preprocess's ``dict.*.txt`` and
    ``train.*``/``valid.*`` ``.bin``/``.idx``). A run records it (RUN's ``made_from``), and so does
    an evaluation for the average it writes (EVALUATION's): a task prepared again, with a new
    dictionary of the same size or other training data, no longer matches."""
    splits = ("train.", "valid.")
    found = {}
    for path in sorted(Path(binary).iterdir()):
        name = path.name
        if path.is_file() and ((name.startswith("dict.") and name.endswith(".txt"))
                               or (name.startswith(splits) and name.endswith((".bin", ".idx")))):
            found[name] = sha256(path)
    return found


def changed_since(then: Dict[str, str], now: Dict[str, str]) -> Optional[str]:
    """None where ``then`` and ``now`` (``made_from`` values) are the same files; else the first
    that differs, with both hashes, for a one-line refusal."""
    for name in sorted(set(then) | set(now)):
        if then.get(name) != now.get(name):
            def short(digest):
                return digest[:12] if digest else "absent"
            return f"{name} (sha256 {short(then.get(name))} then, {short(now.get(name))} now)"
    return None


class OtherData(Exception):
    """A checkpoint made from other data than the task it is used with; the message says which file."""


def lineage(checkpoint) -> Optional[Tuple[Path, Optional[dict]]]:
    """(the record, what it says the checkpoint was made from) for a checkpoint in a folder this
    kit wrote: a training's save folder (run.json) or an evaluation's (evaluation.json, for its
    averaged.pt); None for a checkpoint no record of the kit's speaks for (fairseq-train's own).
    A record of an earlier version of the kit, which did not say, gives (record, None)."""
    folder = Path(checkpoint).parent
    for kind in (RUN, EVALUATION):
        if kind.earlier(folder):
            return folder / kind.old, "earlier"
        record = kind.read(folder)
        if record is not None:
            return kind.path(folder), record.get("made_from", "earlier")
    return None


def check_made_from(checkpoint, binary, task_name) -> Dict[str, str]:
    """Refuse (OtherData, one line naming both) a checkpoint whose record says it was made from
    other files than ``binary`` holds now: a task prepared again since (a new dictionary of the
    same size, other training data), or another task. A checkpoint without a record of the kit's
    passes (its embedding sizes are still checked against the dictionaries). Returns what
    ``binary`` holds now (``made_from``), hashed once for the caller's own record too."""
    now = made_from(binary)
    found = lineage(checkpoint)
    if found is None:
        return now
    record, then = found
    if then == "earlier":
        raise OtherData(f"{checkpoint} comes from a folder that an earlier version of the kit wrote ({record} does "
                        "not say which data it was made from): train (or evaluate) it again with this version")
    if then is None:  # an evaluation of checkpoints that no record spoke for: as unknown as they were
        return now
    changed = changed_since(then, now)
    if changed:
        raise OtherData(f"{checkpoint} was made from other data than {task_name} holds now: {changed}, as "
                        f"{record} recorded it; the task was prepared again or is another one. Give the task "
                        "folder it was trained on, or train again")
    return now


# ======================================================================== step stamps
#
# A step (tokenising a file, learning BPE, averaging checkpoints, decoding a test set, ...) has
# input files, settings and output files. When it finishes, its stamp (a STAMP record,
# ``STAMPS/NAME.json``; the recipes keep them in ``OUT/.steps/``) holds the settings and the
# SHA-256 of every input and output. A rerun redoes a step, and says why, when its settings
# differ, an input's content changed (a corpus edited in place, a checkpoint replaced with its
# modification time kept), an output is missing or was changed by hand, or the stamp is missing
# or damaged (a step that was killed); otherwise it skips it. A step writes its outputs under
# temporary names and renames them once complete, so a kill leaves the old outputs or the new.
#
# Hashing a large file costs a read of it, so a stamp keeps each file's identity (device, inode,
# size, modification and change time) beside its hash, and a file whose identity is unchanged is
# not read again. The change time cannot be set by hand, and a copy (``cp -p``, ``rsync -a``) gets
# a new one, so a replaced file is always read again.

def _identity(path: Path) -> list:
    st = path.stat()
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def fingerprint(path: Path, known: Optional[dict] = None) -> dict:
    """{"sha256", "identity"} of a file or folder (a folder: the hash of its files' names and
    hashes). ``known`` is an earlier fingerprint: its hash is reused when the identity matches."""
    path = Path(path)
    if path.is_dir():
        h = hashlib.sha256()
        known_files = (known or {}).get("files", {})
        files = {}
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            rel = f.relative_to(path).as_posix()
            files[rel] = fingerprint(f, known_files.get(rel))
            h.update(f"{rel}\0{files[rel]['sha256']}\n".encode("utf-8"))
        return {"sha256": h.hexdigest(), "files": files}
    identity = _identity(path)
    if known and known.get("identity") == identity and "sha256" in known:
        return known
    return {"sha256": sha256(path), "identity": identity}


class Step:
    """One step: its name, input and output paths and settings; its stamp is the STAMP record
    ``STAMPS/NAME.json`` (see the section's comment)."""

    def __init__(self, stamps: Path, name: str, inputs: Sequence = (), outputs: Sequence = (),
                 settings: Optional[Dict[str, str]] = None):
        if not outputs:
            raise ValueError(f"step {name}: no outputs")
        self.kind = dataclasses.replace(STAMP, file=f"{name}.json")
        self.folder = Path(stamps)
        self.stamp = self.kind.path(self.folder)
        self.name = name
        self.inputs = [Path(p) for p in inputs]
        self.outputs = [Path(p) for p in outputs]
        self.settings = {k: str(v) for k, v in (settings or {}).items()}

    def _load(self) -> Optional[dict]:
        try:
            return self.kind.read(self.folder)
        except Damaged:
            return None  # redone, as one that did not finish

    def stale(self) -> Optional[str]:
        """None when the outputs were made from these inputs and settings; else the reason."""
        for p in self.inputs:
            if not p.exists():
                raise FileNotFoundError(f"step {self.name}: input {p} does not exist")
        missing = [str(p) for p in self.outputs if not p.exists()]
        if missing:
            return f"no {missing[0]}"
        stamp = self._load()
        if stamp is None:
            return "no record of what its outputs were made from (a step that did not finish)"
        if stamp.get("settings") != self.settings:
            old = stamp.get("settings", {})
            diff = sorted(k for k in set(old) | set(self.settings) if old.get(k) != self.settings.get(k))
            return "settings changed: " + ", ".join(f"{k} {old.get(k)!r} -> {self.settings.get(k)!r}" for k in diff)
        for kind, paths in (("inputs", self.inputs), ("outputs", self.outputs)):
            recorded = stamp.get(kind, {})
            if sorted(recorded) != sorted(str(p) for p in paths):
                return f"its {kind} are other files than last time"
            for p in paths:
                if fingerprint(p, recorded[str(p)])["sha256"] != recorded[str(p)]["sha256"]:
                    what = "input" if kind == "inputs" else "output"
                    return f"{what} {p} changed since the last run"
        return None

    def record(self) -> None:
        old = self._load() or {}
        stamp = {"settings": self.settings}
        for kind, paths in (("inputs", self.inputs), ("outputs", self.outputs)):
            known = old.get(kind, {})
            stamp[kind] = {str(p): fingerprint(p, known.get(str(p))) for p in paths}
        self.folder.mkdir(parents=True, exist_ok=True)
        self.kind.write(self.folder, stamp)

    def forget(self) -> None:
        """Remove the stamp and the outputs (before redoing the step)."""
        self.stamp.unlink(missing_ok=True)
        for p in self.outputs:
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()

    def temporary(self, path: Path) -> Path:
        return path.with_name(path.name + ".tmp")

    def commit(self) -> None:
        """Flush every temporary output to the disk (as :func:`atomic` does), rename each to its
        name, then record the stamp."""
        for p in self.outputs:
            tmp = self.temporary(p)
            if not tmp.exists():
                raise RuntimeError(f"step {self.name}: the command made no {tmp}")
            for f in ([tmp] if tmp.is_file() else sorted(f for f in tmp.rglob("*") if f.is_file())):
                with open(f, "rb") as opened:
                    os.fsync(opened.fileno())
        for p in self.outputs:
            tmp = self.temporary(p)
            if p.is_dir():
                shutil.rmtree(p)
            os.replace(tmp, p)
        self.record()


def recorded_outputs(stamps: Path) -> List[Path]:
    """Every file that the steps stamped in ``stamps`` wrote, as their stamps name them (a folder
    output: each file of it, as recorded): what a command may replace or remove again."""
    found = []
    for stamp in sorted(Path(stamps).glob("*.json")):
        try:
            outputs = (dataclasses.replace(STAMP, file=stamp.name).read(stamps) or {}).get("outputs") or {}
        except Damaged:
            continue  # a damaged stamp: its step is redone, its outputs are nobody's yet
        for path, fp in outputs.items():
            files = fp.get("files") if isinstance(fp, dict) else None
            found += [Path(path) / rel for rel in files] if files is not None else [Path(path)]
    return found


def stamped_change(stamps: Path) -> Optional[str]:
    """None when every file that the stamps in ``stamps`` record, input or output, is as recorded;
    else the first that is not (changed or gone): the steps would be redone. For a command that
    keeps another command's finished output only while that output's steps are current (the
    Multi30k reproduction keeps an evaluation so)."""
    for stamp in sorted(Path(stamps).glob("*.json")):
        try:
            recorded = dataclasses.replace(STAMP, file=stamp.name).read(stamps) or {}
        except Damaged:
            return f"{stamp} is damaged"
        for kind in ("inputs", "outputs"):
            for path, known in (recorded.get(kind) or {}).items():
                if not Path(path).exists() or fingerprint(Path(path), known)["sha256"] != known.get("sha256"):
                    return f"{path} changed since {stamp.stem} ran"
    return None


def _log(prefix: str, message: str) -> None:
    print(f"[{prefix}] {message}", file=sys.stderr, flush=True)


def make(step: Step, action: Callable[[List[Path]], None], force: bool = False, prefix: str = "step",
         what: str = "", short: str = "") -> bool:
    """Unless ``step`` is current, run ``action(temporary output paths)`` and commit the outputs;
    True when it ran. The log line says why it ran, or that it was skipped."""
    what = what or step.name
    reason = "--force" if force else step.stale()
    if reason is None:
        _log(prefix, f"{short or what}: up to date; skipped")
        return False
    _log(prefix, f"{what} ({'redone: ' if step.stamp.exists() else ''}{reason})")
    step.forget()
    temps = [step.temporary(p) for p in step.outputs]
    for t in temps:
        if t.is_dir():
            shutil.rmtree(t)
        elif t.exists():
            t.unlink()
        t.parent.mkdir(parents=True, exist_ok=True)
    try:
        action(temps)
        step.commit()
    except OSError as error:
        named_as_outputs(error, zip(temps, step.outputs))
        raise
    return True


# ======================================================================== child processes

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
RESEND_S = 10  # seconds after a signal passed on before it is passed on again (run_child's resend)


def shell_words(argv: Sequence) -> str:
    """A command as one line that can be pasted into a shell."""
    return " ".join(shlex.quote(str(w)) for w in argv)


def die_with_parent() -> None:
    """In a child (before exec): be killed when this process dies, even by SIGKILL, so that no
    orphaned command goes on writing a step's temporary files while a rerun writes them anew
    (Linux only: prctl PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
        except OSError:
            pass


def _starter(with_parent: bool):
    def start():
        # the default action for the signals, whatever the caller ignored (a script's background
        # job ignores SIGINT and SIGQUIT), and a process group of its own: a terminal's Ctrl-C
        # reaches this process alone, which passes it on once
        for sig in (*SIGNALS, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_DFL)
        os.setpgrp()
        if with_parent:
            die_with_parent()
    return start


@dataclass(frozen=True)
class Ended:
    """How a child ended: its exit status (``128 + N`` when killed by signal N, or when signal N
    came to this process and was passed on), and that signal, where one came (else None)."""

    code: int
    signal: Optional[int] = None


def shown_lines(lines: List[bytes], keep: Optional["re.Pattern"], watch: Optional[Callable[[bytes], Optional[str]]]):
    """What :func:`run_child` shows of whole ``lines`` (without their line feeds): those ``keep``
    matches (all, without it), each followed by the line ``watch`` returns for it, if any."""
    for line in lines:
        if keep is None or keep.search(line):
            yield line + b"\n"
        said = watch(line) if watch is not None else None
        if said:
            yield said.encode("utf-8") + b"\n"


def pass_errors(pipe, errors: Callable[[bytes], Optional[str]]) -> None:
    """A child's errors, line by line to ``errors``, and what it returns to this stderr."""
    with pipe:
        for line in pipe:
            said = errors(line.rstrip(b"\n"))
            if said:
                print(said, file=sys.stderr, flush=True)


def run_child(command: Sequence, out: Optional[Path] = None, *, append: bool = False, show: bool = False,
              keep: Optional["re.Pattern"] = None, errors_to_out: bool = True,
              stdin: Iterable[Path] = (), env: Optional[dict] = None, cwd=None, keep_fds: Sequence[int] = (),
              with_parent: bool = False, whole_group: bool = False, resend: bool = False,
              kill_after: Optional[float] = None, name: str = "the child", say: Callable[[str], None] = None,
              started: Callable[[subprocess.Popen], None] = None,
              watch: Callable[[bytes], Optional[str]] = None, errors: Callable[[bytes], Optional[str]] = None) -> Ended:
    """Run ``command`` to its end in a process group of its own (how it ended: :class:`Ended`).

    - ``out``: the file its output and errors go to (``append``: added to its end; not
      ``errors_to_out``: its output alone, its errors to this process's stderr), else this
      process's stderr; ``show``: what it writes to ``out`` is shown on this stdout as it grows
      (``keep``: only its lines that match); ``watch``: called with each of those lines, kept or
      not, as it is shown, and a line it returns is shown after it (a progress line).
    - ``errors`` (with ``out``, not ``errors_to_out``): called with each line of its errors as it
      comes (read by a thread), and what it returns goes to this process's stderr instead.
    - ``stdin``: files fed to its input, one after the other.
    - ``keep_fds``: descriptors it inherits (a :class:`WriterLock`'s: the lock stays held while
      it runs, even when this process is killed); ``with_parent``: it is killed when this process
      dies, even by SIGKILL.
    - SIGINT, SIGTERM and SIGHUP to this process (from the main thread) are passed on to the child,
      each one
      (``whole_group``: to its process group, the processes it started included), this process
      waits for it to end, and says so through ``say``. ``resend``: passed on again every
      ``RESEND_S`` seconds while it runs (a lone fairseq-train can lose a SIGINT: Python raises
      its KeyboardInterrupt wherever the main thread is, and native code that calls back into
      Python may clear it; a launcher such as torchrun is not resent one, which would cut its own
      shutdown of its workers short). ``kill_after``: its group is killed that many
      seconds after the first signal.
    - ``started``: called with the child once it runs (before any wait).
    """
    say = say or (lambda message: print(message, file=sys.stderr, flush=True))
    argv = [str(w) for w in command]
    received, passed, child, rest = [], [], None, b""

    def deliver(signum):
        target = (lambda s: os.killpg(child.pid, s)) if whole_group else child.send_signal
        try:
            target(signum)
        except ProcessLookupError:
            pass
        passed.append(time.monotonic())

    def pass_on(signum, _frame):  # each one (a second Ctrl-C too)
        received.append(signum)
        if child is not None:
            say(f"{signal.Signals(signum).name}: passed on to {name} (pid {child.pid}); waiting for it to stop")
            deliver(signum)

    main = threading.current_thread() is threading.main_thread()
    # caught before the child starts: a signal meanwhile is passed on once it runs
    previous = {sig: signal.signal(sig, pass_on) for sig in SIGNALS} if main else {}
    shown = reader = None
    try:
        output = open(out, "ab" if append else "wb") if out is not None else None
        start = output.tell() if output is not None else 0
        try:
            child = subprocess.Popen(argv, stdout=output or sys.stderr,
                                     stderr=subprocess.STDOUT if errors_to_out or output is None
                                     else subprocess.PIPE if errors else None,
                                     stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, env=env, cwd=cwd,
                                     pass_fds=tuple(keep_fds), preexec_fn=_starter(with_parent))
            if show and output is not None:
                shown = open(out, "rb")
                shown.seek(start)
        finally:
            if output is not None:
                output.close()
        if child.stderr is not None:  # read from the start: a child that writes errors while it is fed never waits
            reader = threading.Thread(target=pass_errors, args=(child.stderr, errors), daemon=True)
            reader.start()
        if started:
            started(child)
        if received and not passed:  # it came before the child ran
            say(f"{signal.Signals(received[0]).name}: passed on to {name} (pid {child.pid}); waiting for it to stop")
            deliver(received[0])
        try:
            for path in stdin:
                with open(path, "rb") as f:
                    while not received:
                        block = f.read(1 << 20)
                        if not block:
                            break
                        child.stdin.write(block)
        except BrokenPipeError:
            pass
        finally:
            if child.stdin:
                try:
                    child.stdin.close()
                except BrokenPipeError:
                    pass
        while True:
            ended = child.poll() is not None
            if not ended and passed:
                since = time.monotonic() - passed[0]
                if kill_after is not None and since >= kill_after:
                    say(f"{name} (pid {child.pid}) still runs {kill_after:g} s after "
                        f"{signal.Signals(received[0]).name}: killed")
                    try:
                        os.killpg(child.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    child.wait()
                    ended = True
                elif resend and time.monotonic() - passed[-1] >= RESEND_S:
                    say(f"{name} (pid {child.pid}) still runs {RESEND_S} s after {signal.Signals(received[-1]).name}: "
                        "passed on again")
                    deliver(received[-1])
            if shown is not None:
                chunk = shown.read()
                if (keep is not None or watch is not None) and (chunk or ended):  # whole lines: the last waits for its end
                    lines = (rest + chunk).split(b"\n")
                    rest = lines.pop()
                    if ended and rest:
                        lines.append(rest)
                    chunk = b"".join(shown_lines(lines, keep, watch))
                if chunk:
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
            if ended:
                break
            try:
                child.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if shown is not None:
            shown.close()
        if reader is not None:
            reader.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        say(f"{name} (pid {child.pid}) stopped after {signal.Signals(received[0]).name}")
        return Ended(128 + received[0], received[0])
    return Ended(child.returncode if child.returncode >= 0 else 128 - child.returncode)


# ======================================================================== a step's commands
#
# A recipe step's command (:func:`call`, :func:`run`) is logged as a shell line that can be pasted,
# started through :func:`run_child`, and a long one shows how far it is (:class:`Progress`).

EVERY_S = 60.0  # seconds between two progress lines of a long command


def duration(seconds: float) -> str:
    """A time left, rounded: ``40 s``, ``3 min``, ``2 h 05 min``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60:02d} min"


class Progress:
    """How far a long command is, in one line now and then:
    ``[PREFIX HH:MM:SS] WHAT COUNT of TOTAL (P%), R UNIT/s, about T left``.

    :meth:`at` takes each count the command reports with the time it was seen, and returns a
    line for the first count and then for the first count after ``every`` seconds since the last
    line (else None). The speed is over the counts seen here (a resumed training's from where it
    resumed), so the first line has none; without a total there is no time left."""

    def __init__(self, prefix: str, what: str, unit: str, total: Optional[int] = None, every: float = EVERY_S):
        self.prefix, self.what, self.unit, self.total, self.every = prefix, what, unit, total, every
        self.first = None  # (count, time) of the first count seen
        self.said = None  # the time of the last line

    def at(self, count: int, now: float, note: str = "") -> Optional[str]:
        if self.first is None:
            self.first = (count, now)
        if self.said is not None and now - self.said < self.every:
            return None
        self.said = now
        words = [f"{self.what} {count}" + (f" of {self.total} ({100 * count / self.total:.0f}%)" if self.total else "")]
        words += [note] if note else []
        done, spent = count - self.first[0], now - self.first[1]
        if done > 0 and spent > 0:
            rate = done / spent
            words.append(f"{rate:.0f}" if rate >= 100 else f"{rate:.3g}")
            words[-1] += f" {self.unit}/s"
            if self.total:
                words.append(f"about {duration(max(self.total - count, 0) / rate)} left")
        return f"[{self.prefix} {time.strftime('%H:%M:%S', time.localtime(now))}] " + ", ".join(words)


MERGE = re.compile(rb"pair (\d+): ")  # subword-nmt learn-bpe --verbose: "pair K: a b -> ab (frequency F)", K from 0


def bpe_merges(argv: Sequence[str]) -> Optional[int]:
    """The merges that a ``subword-nmt learn-bpe -s N`` command learns (N); None for another command."""
    if list(argv[:2]) != ["subword-nmt", "learn-bpe"]:
        return None
    for i, word in enumerate(argv[:-1]):
        if word in ("-s", "--symbols") and argv[i + 1].isdigit():
            return int(argv[i + 1])
    return None


def merges_seen(progress: Progress, line: bytes, now: float) -> Optional[str]:
    """What stderr shows for a line of learn-bpe --verbose's errors: a merge ("pair K: ...")
    counts towards ``progress`` (its line now and then); any other line is shown as it is."""
    found = MERGE.match(line)
    if found is None:
        return line.decode("utf-8", "replace")
    return progress.at(int(found.group(1)) + 1, now)


def call(argv: Sequence, stdout: Optional[Path] = None, stdin: Iterable[Path] = (), prefix: str = "step") -> None:
    """Run a command (logged as a shell line), its output to ``stdout`` and ``stdin`` files fed
    to its input; a failure stops the recipe with the command's status."""
    argv = [str(w) for w in argv]
    merges, errors = bpe_merges(argv), None
    if merges is not None and stdout:  # its merges, a line each with --verbose (the same codes): a progress line
        argv.append("--verbose")
        progress = Progress(prefix, "learn BPE: merge", "merges", merges)

        def merge_lines(line):
            return merges_seen(progress, line, time.time())
        errors = merge_lines
    stdin = list(stdin)
    shown = shell_words(argv)
    if stdin:
        shown = f"cat {shell_words(stdin)} | {shown}"
    if stdout:
        shown += f" > {shlex.quote(str(stdout))}"
    _log(prefix, f"  $ {shown}")
    # a progress bar (tqdm's, as subword-nmt learn-bpe draws) only where someone watches and no
    # progress line is made: in a log file its carriage returns make one line of hundreds of updates
    env = None if sys.stderr.isatty() and errors is None else {**os.environ, "TQDM_DISABLE": "1"}
    code = run_child(argv, stdout, stdin=stdin, errors_to_out=False, env=env, with_parent=True, name=argv[0],
                     say=lambda message: _log(prefix, message), errors=errors).code
    if code != 0:
        _log(prefix, f"error: {argv[0]} exited with status {code}")
        raise SystemExit(code if 0 < code < 126 or code > 128 else 1)


def run(step: Step, command: List[str], stdout: bool = False, stdin: Iterable[Path] = (),
        force: bool = False, prefix: str = "step", what: str = "", short: str = "") -> bool:
    """Run ``command`` for ``step`` unless it is current ({out}, {out:N} name the temporary outputs)."""

    def action(temps):
        argv = []
        for word in command:
            for i, t in enumerate(temps):
                word = word.replace("{out:%d}" % i, str(t))
            argv.append(word.replace("{out}", str(temps[0])))
        call(argv, stdout=temps[0] if stdout else None, stdin=stdin, prefix=prefix)

    return make(step, action, force=force, prefix=prefix, what=what, short=short)
