"""Files and locks: where a command may write, one writer per output, and writing whole
(:func:`refuse_overlaps`, :class:`WriterLock`, :func:`atomic`, :func:`replace_folder`, :func:`save_torch`).

docs/recipes.md, "What each command owns, reuses and redoes", says what a user meets of each: the
lock files and their holder line, the temporaries (``.NAME.PID-TOKEN.tmp``: this process's own) and
what a kill leaves. What the kit wrote is recorded by records.py.
"""

import atexit
import contextlib
import errno
import fcntl
import filecmp
import os
import secrets
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from .failure import Refusal

_TOKEN = secrets.token_hex(3)  # with the process's id, its mark on its temporaries (a forked child has its own id)


def refuse_overlaps(outputs: Dict[str, object], inputs: Dict[str, object]) -> None:
    """Refuse (one line) when an output is, holds or lies inside an input, links resolved (a link
    to an input is that input). The dicts map how the user named each path (e.g. ``--out``) to the
    path; None values are left out."""
    real = {path: Path(os.path.realpath(os.path.abspath(os.fspath(path))))
            for path in (*outputs.values(), *inputs.values()) if path is not None}
    for out_name, out in outputs.items():
        for in_name, inp in inputs.items():
            if out is None or inp is None:
                continue
            how = ("is" if real[out] == real[inp] else "holds" if real[out] in real[inp].parents
                   else "lies inside" if real[inp] in real[out].parents else None)
            if how:
                raise Refusal(f"{out_name} {out} {how} {in_name} {inp}, which this command reads; "
                              f"give {out_name} a place of its own")


def listing(paths, limit: int = 5) -> str:
    paths = list(paths)
    shown = ", ".join(str(p) for p in paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


_HELD = {}  # lock file -> the WriterLock of this process that holds it


class WriterLock:
    """An exclusive, non-blocking lock on an output (a folder, or a file), held until
    :meth:`release` or the end of the process (``with`` works too). ``what`` names the command in
    the line a second writer sees; ``part`` names the part of a folder this writer alone writes.
    A lock this process holds already is returned as it is (one process is one writer)."""

    def __init__(self, output, folder: bool, what: str, part: Optional[str] = None):
        output = Path(output)
        self.path = output / (f".{part}.lock" if part else ".lock") if folder else output.with_name(f".{output.name}.lock")
        self.output, self.what, self.fd, self.holder = output, what, None, ""

    @staticmethod
    def is_lock(path) -> bool:
        """Whether ``path`` is named as one of the kit's lock files (``.lock``, ``.PART.lock``, ``.NAME.lock``)."""
        name = Path(path).name
        return name.startswith(".") and name.endswith(".lock")

    def acquire(self) -> "WriterLock":
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
        self.fd = self._open_locked(where)
        command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv[:6]))
        self.holder = f"{self.what} (pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%H:%M:%S')}: {command})"
        self.note()
        _HELD[os.path.realpath(self.path)] = self
        atexit.register(self.release)  # an error exit removes the lock file too
        return self

    def _open_locked(self, where: Path) -> int:
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
            # the holder before us may have removed the file after we opened it: lock the file at
            # the path now, or try again
            with contextlib.suppress(FileNotFoundError):
                if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    return fd
            os.close(fd)

    def refuse_foreign(self, ours: bool, by: str) -> "WriterLock":
        """Refuse the locked --out folder where it holds files (its lock aside) and ``ours`` is False:
        a folder that ``by`` never wrote, whose files are someone else's."""
        found = sorted(p for p in self.output.iterdir() if p != self.path)
        if found and not ours:
            raise Refusal(f"--out {self.output} holds files {by} did not write ({listing(found)}); give a new or empty "
                          "folder (nothing was changed)")
        return self

    def note(self, more: str = "") -> None:
        """Write the holder line (with ``more``: e.g. the child that holds the lock too)."""
        text = self.holder + (f", {more}" if more else "")
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, text.encode("utf-8"), 0)

    def release(self) -> None:
        if self.fd is not None:
            _HELD.pop(os.path.realpath(self.path), None)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)  # while still held: a waiter re-checks the path
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *_exc):
        self.release()


def _temporary(path, ending: str = "tmp") -> Path:
    """A temporary name beside ``path``, this process's own: ``.NAME.PID-TOKEN.tmp``."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}-{_TOKEN}.{ending}")


def _files(path, links: bool = False) -> List[Path]:
    """``path``, a file, or the files in the folder ``path`` (none where it is neither); with
    ``links``, links too (to anything, or broken)."""
    path = Path(path)
    if path.is_file() or (links and path.is_symlink()):
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() or (links and p.is_symlink()))


def _named_as_outputs(error: OSError, pairs) -> None:
    """Name in ``error`` (both its file names: a copy's has two) each temporary of ``pairs``
    (temporary, output), or a file inside a temporary folder, as the output the user asked for."""
    pairs = [(Path(t), Path(o)) for t, o in pairs]
    for attr in ("filename", "filename2"):
        name = getattr(error, attr)
        for temp, output in pairs if name is not None else ():
            try:
                inside = Path(str(name)).relative_to(temp)
            except ValueError:
                continue
            setattr(error, attr, str(output / inside) if inside.parts else str(output))
            break


def _flush(path: Path) -> None:
    for f in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()):
        with open(f, "rb") as opened:
            os.fsync(opened.fileno())


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic(*paths):
    """Write whole outputs: ``with atomic(a, b) as (part_a, part_b):`` write each output (a file, or
    a folder the block makes) to its temporary; when the block ends normally each is flushed to the
    disk and renamed over its output, in order; when it raises (a kill's KeyboardInterrupt too)
    every temporary is removed and no output is touched. A fault of the machine (a full disk) names
    the output, not its temporary."""
    paths = [Path(p) for p in paths]
    parts = [_temporary(p) for p in paths]
    for part in parts:
        part.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield parts
        for part in parts:
            _flush(part)
        for part, path in zip(parts, paths):
            if path.is_dir() and not path.is_symlink() and part.is_dir():
                shutil.rmtree(path)
            os.replace(part, path)
    except OSError as error:
        if error.filename is None:  # a write that names no file: the output's
            error.filename = " and ".join(map(str, paths))
        _named_as_outputs(error, zip(parts, paths))
        raise
    finally:
        for part in parts:
            _remove(part)


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
    """``torch.save`` of ``state`` into ``path`` (a part of :func:`atomic`); a fault of the
    machine raised as the OSError it is, naming ``path``: torch's own writer reports a full disk
    as a RuntimeError that names neither the file nor the cause."""
    import torch

    with open(path, "wb", buffering=0) as f:
        sink = _Sink(f)
        torch.save(state, sink)
    if sink.error is not None:
        sink.error.filename = sink.error.filename or str(path)
        raise sink.error


def _same_folder(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir())
    if names != sorted(p.name for p in b.iterdir()):
        return False
    _match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    return not mismatch and not errors


def replace_folder(out: Path, write: Callable[[Path], None], may_replace: Callable[[Path], None],
                   ours: Callable[[Path], bool]) -> str:
    """A whole folder: ``write(new)`` fills a new folder (a temporary of this process's), which
    takes the place of ``out``: 'written' (``out`` missing or empty), 'unchanged' (``out`` holds the
    same files; the new one is dropped) or, unless ``may_replace(out)`` raises to refuse,
    'replaced'. The swap moves the old folder aside (``.NAME.PID-TOKEN.old``) until the new one is
    in place; a kill between the two renames leaves it there and ``out`` missing, and the next call
    puts it back first where ``ours(old)`` says it is the kit's (its record)."""
    out = Path(out)
    if not out.exists():
        for old in sorted(out.parent.glob(f".{out.name}.*.old")):
            if ours(old):
                os.replace(old, out)  # killed between the renames: the folder as it was
                break
    new, old = _temporary(out), _temporary(out, "old")
    new.mkdir()
    try:
        write(new)
        _flush(new)
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
    except OSError as error:  # a file of the new folder (a full disk): named as in ``out``
        _named_as_outputs(error, [(new, out)])
        raise
    finally:
        _remove(new)


def _writable(path: Path, flag: str) -> None:
    """Refuse before any slow work when ``path`` (a file to write) cannot be written: its folder
    is missing and cannot be made, is not writable, or the path is a folder."""
    path = Path(path)
    if path.is_dir():
        raise Refusal(f"{flag} {path} is a folder; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe = _temporary(path)
        probe.open("wb").close()
        probe.unlink()
    except OSError as error:
        raise Refusal(f"{flag} {path}: cannot write in {path.parent} ({error.strerror})") from None
