"""What a command owns, and one writer per output.

Every command of the kit that writes (prepare, train, evaluate, export, translate, average,
sweep, the Multi30k reproduction, the analyses) follows three rules, checked here before any
work starts:

1. **No output overlaps an input.** An output that is an input, holds one (a folder around it),
   or lies inside one is refused: a rerun would remove it before reading it
   (:func:`refuse_overlaps`).
2. **One writer per output.** The command holds an exclusive lock on what it writes
   (:class:`WriterLock`: ``fcntl.flock`` on ``FOLDER/.lock`` for an output folder, or
   ``.NAME.lock`` beside an output file); a second writer is refused with one line naming the
   holder (its pid, command and start). The lock file is removed when its holder ends, and a
   lock left by a killed holder is free again at once (the kernel drops a dead process's
   locks).
3. **Only what it wrote is replaced.** What a command wrote is recorded (the step stamps,
   ``export.json``, ``evaluation.json``, ``run.json``: records.py); a rerun or ``--force`` replaces those
   files and refuses, listing them, when a folder holds others (:func:`foreign_files`).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import os
import re
import socket
import sys
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional


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
        if r in mine or any(parent in mine for parent in r.parents) or path.name == ".lock":
            continue
        found.append(path)
    return found


def listing(paths: List[Path], limit: int = 5) -> str:
    shown = ", ".join(str(p) for p in paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


_HELD = {}  # lock file -> the WriterLock of this process that holds it


def lock_path(output: Path, folder: bool) -> Path:
    output = Path(output)
    return output / ".lock" if folder else output.with_name(f".{output.name}.lock")


class WriterLock:
    """An exclusive, non-blocking lock on an output (a folder, or a file), held until
    :meth:`release` or the end of the process (``with`` works too).

    ``what`` names the command in the holder line that a second writer sees."""

    def __init__(self, output, folder: bool, what: str):
        self.path = lock_path(Path(output), folder)
        self.output, self.what, self.fd = Path(output), what, None

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
        note = f"{self.what} (pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%H:%M:%S')}: {command})"
        os.ftruncate(fd, 0)
        os.pwrite(fd, note.encode("utf-8"), 0)
        self.fd = fd
        _HELD[os.path.realpath(self.path)] = self
        atexit.register(self.release)  # an error exit removes the lock file too
        return self

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
    finally:
        for part in parts:
            part.unlink(missing_ok=True)


def write_atomically(path: Path, data) -> None:
    """Write ``data`` (str, as UTF-8, or bytes) to ``path`` through :func:`atomic`."""
    with atomic(path) as (part,):
        part.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


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
