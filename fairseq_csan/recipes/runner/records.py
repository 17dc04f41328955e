"""Records: every JSON the kit keeps is read and written through :class:`Kind`, here, and
nowhere else. The kinds:

    kind          file                 declared in  says
    TASK          task.json            task.py      what a task folder was prepared with
    RUN           run.json             here         which run a save folder holds, made from what
    EVALUATION    evaluation.json      here         what an evaluation was made of
    RESULTS       results.json         here         its scores (score.py writes them)
    EXPORT        export.json          here         a model folder's seal (export.py, convert.py):
                                                    each file's SHA-256, what it was made from
    SWEEP         sweep.json           sweep.py     which point of a window/area sweep a run is
    REPRODUCTION  settings.json        multi30k.py  a Multi30k reproduction's settings
    TABLE         results.json         multi30k.py  the reproduction's table, as records
    STEP_RECORD   .steps/NAME.json     gpu_check.py a GPU check's step: command, machine, status, time
    HYPER_PARAMETERS hparams.json      train.py     the recipes' settings (an input: not written)
    (stamps)      .steps/NAME.json     here         what a step's outputs were made from (Step)
    (written)     .written.json        here         what the kit wrote in a folder: each file's name
                                                    (relative to the folder), SHA-256 and command

docs/recipes.md, "What each command owns, reuses and redoes", says how each is written and read
("What it owns", "Fail closed"): atomically; a record its folder's ``.written.json`` does not name
with its SHA-256, or that is not what the kit writes, is :class:`Damaged`, never believed.
"""

import contextlib
import fcntl
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional

from ...model_folder import sha256, unsealed  # the one file hash (fairseq is not imported)
from .failure import Failed, Refusal, _command_name, say
from .files import WriterLock, _files, _temporary, _writable, atomic, listing


class Damaged(Refusal):
    """A record that is not the JSON object of its kind: changed by hand, cut short, or of an
    earlier version of the kit; the message names the file and what to do."""


def _flag(value) -> bool:
    if isinstance(value, bool):
        return value
    return {"1": True, "0": False, "yes": True, "no": False}[str(value)]


def _words(value) -> list:
    """A list of strings (or one string, comma-separated)."""
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [v for v in str(value).split(",") if v]


TYPES: Dict[str, Callable] = {"text": str, "int": int, "float": float, "flag": _flag, "list": _words,
                              "json": lambda value: value}


@dataclass(frozen=True)
class Kind:
    """One kind of record: its file, its fields (name -> type of TYPES; open: others kept as they
    are) and the files by which an earlier version of the kit kept the same facts (refused)."""

    name: str
    file: str
    fields: Optional[Dict[str, str]] = None  # None: any JSON object
    earlier: tuple = ()
    written: bool = True  # the kit writes it (read only as written: _believed); False: an input the user edits

    def path(self, folder) -> Path:
        return Path(folder) / self.file

    def exists(self, folder) -> bool:
        return self.path(folder).is_file() or any((Path(folder) / old).is_file() for old in self.earlier)

    def typed(self, values: dict) -> dict:
        """``values`` with each declared field converted to its type; an unknown field is an error."""
        if self.fields is None:
            return dict(values)
        unknown = set(values) - set(self.fields)
        if unknown:
            raise ValueError(f"unknown {self.name} fields {sorted(unknown)}; known: {', '.join(self.fields)}")
        return {k: TYPES[self.fields[k]](v) for k, v in values.items()}

    def read(self, folder, file: Optional[str] = None) -> Optional[dict]:
        """The record of ``folder`` (``file`` in it, for a record of another name), typed; None
        where there is none. Damaged, in one line, where it is not what the kit writes."""
        path = Path(folder) / (file or self.file)
        old = [Path(folder) / name for name in self.earlier if (Path(folder) / name).is_file()]
        if old and not path.is_file():
            raise Damaged(f"{old[0]} was written by an earlier version of the kit, which this one does not read: run "
                          f"the step that made {folder} again (into a new folder, or with --force)")
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise Damaged(f"{path} cannot be read ({error.strerror})") from None
        try:
            values = json.loads(data.decode("utf-8"))
            if not isinstance(values, dict):
                raise ValueError("not a JSON object")
            values = self.typed(values)
        except (ValueError, KeyError, TypeError) as error:
            raise Damaged(f"{path} is not a {self.name} record as this kit writes it ({error}); it was changed by "
                          "hand or cut short: run the step that made it again") from None
        if path.name == EXPORT.file and (why := unsealed(folder, values)):  # a model folder's seal of itself
            raise Damaged(why)
        if self.written and path.name not in (_WRITTEN.file, EXPORT.file):
            _believed(path, data)
        return values

    def write(self, folder, values: dict, file: Optional[str] = None) -> dict:
        """Write the record (:func:`write_file`); the typed values."""
        values = self.typed(values)
        write_file(Path(folder) / (file or self.file),
                   json.dumps(values, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        return values


RUN = Kind("run", "run.json", {"arch": "text", "data": "text", "size": "text", "seed": "int", "share": "text",
                               "tiny": "flag", "made_from": "json", "finetuned_from": "json"}, earlier=("run.env",))
EVALUATION = Kind("evaluation", "evaluation.json", {
    "checkpoints": "list", "averaged": "flag", "subset": "text", "beam": "int", "lenpen": "float", "batch_size": "int",
    "decoding": "text", "made_from": "json"}, earlier=("evaluation.env",))
RESULTS = Kind("results", "results.json")  # score.py's figures (any fields; collect_results and the analyses read them)
EXPORT = Kind("export", "export.json")  # a model folder's seal (export.py; model_folder.py checks it for fairseq)
_WRITTEN = Kind("written files", ".written.json", {"files": "json"})
_STAMP = Kind("step stamp", "STEP.json", {"by": "text", "settings": "json", "inputs": "json", "outputs": "json",
                                          "temporaries": "list"})


# ------------------------------------------------------------------------ what the kit wrote

def _written(folder: Path) -> dict:
    """What ``folder``'s ``.written.json`` says the kit wrote there: name -> {sha256, by}."""
    return dict((_WRITTEN.read(folder) or {}).get("files") or {})


@contextlib.contextmanager
def _record_of(folder: Path):
    """The ``.written.json`` of ``folder`` (its files: name -> {sha256, by}), read and written
    under an exclusive lock of the folder, so that two writers into one folder both keep theirs."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        files = _written(folder)
        before = dict(files)
        yield files
        if files != before:
            _WRITTEN.write(folder, {"files": files})
    finally:
        os.close(fd)


def _owner(path: Path) -> Optional[dict]:
    """What the record of ``path``'s folder says of it ({sha256, by}), or None. A model folder's
    files are export.json's (its seal), written by the command it names; none where the seal was
    changed by hand."""
    path = Path(path)
    try:
        seal = EXPORT.read(path.parent)
    except Damaged:
        seal = None
    if seal is not None and (path.name == EXPORT.file or path.name in (seal.get("files") or {})):
        digest = sha256(path) if path.name == EXPORT.file else seal["files"][path.name]  # the seal itself, intact
        return {"sha256": digest, "by": seal.get("by", "export")}
    entry = _written(path.parent).get(path.name)
    return entry if isinstance(entry, dict) else None


def _believed(path: Path, data: bytes) -> None:
    """A record is read only as the kit wrote it: one that its folder's ``.written.json`` does not
    name (copied in, or written by something else) or that changed since (edited by hand) is
    Damaged, never believed."""
    entry = _written(path.parent).get(path.name)
    if not isinstance(entry, dict):
        raise Damaged(f"{path} is not a record this kit wrote ({path.parent / _WRITTEN.file} does not name it): run the "
                      "step that made its folder again")
    if entry.get("sha256") != hashlib.sha256(data).hexdigest():
        raise Damaged(f"{path} changed since {entry.get('by', 'the kit')} wrote it (edited by hand?): put it back, or "
                      f"run {entry.get('by', 'the step that made it')} again")


def _record_written(paths: Iterable, by: str) -> None:
    """Record that ``by`` wrote ``paths`` (files, or folders: each of their files) as they are now."""
    by_folder: Dict[Path, List[Path]] = {}
    for f in (f for path in paths for f in _files(path)):
        by_folder.setdefault(f.parent, []).append(f)
    for folder, files in by_folder.items():
        with _record_of(folder) as record:
            record.update({f.name: {"sha256": sha256(f), "by": by} for f in files})


def forget_written(paths: Iterable) -> None:
    """Remove the files ``paths`` (a folder: each of its files) and their records."""
    for path in map(Path, paths):
        for f in [path] if path.is_symlink() else _files(path):
            with _record_of(f.parent) as record:
                record.pop(f.name, None)
            f.unlink(missing_ok=True)
        if path.is_dir() and not path.is_symlink():
            for folder in [*sorted((p for p in path.rglob("*") if p.is_dir()), reverse=True), path]:
                (folder / _WRITTEN.file).unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    folder.rmdir()


def theirs(paths: Iterable, by, changed: bool = False) -> List[Path]:
    """The files among ``paths`` (a folder: each of its files) that ``by`` (a command, or several)
    did not write: no record names them as ``by``'s, or (``changed``) one does, but they changed since."""
    found, by = [], (by,) if isinstance(by, str) else tuple(by)
    for f in (f for path in paths for f in _files(path, links=True)):
        if f.name == _WRITTEN.file or WriterLock.is_lock(f):
            continue
        entry = _owner(f)
        if entry is None and _left_by_a_step(f):
            continue  # a killed step's temporary: the kit's by its stamp, removed when the step runs again
        if f.is_symlink() or entry is None or entry.get("by") not in by or (changed and entry.get("sha256") != sha256(f)):
            found.append(f)
    return found


def _left_by_a_step(f: Path) -> bool:
    """Whether a step stamp of a folder above ``f`` names it among the temporaries of a run of
    the step that did not finish (killed while it wrote them)."""
    for root in f.parents:
        folder = root / ".steps"
        if folder.is_dir():
            with contextlib.suppress(Damaged):  # a damaged stamp speaks for nothing: the file is not the kit's
                name = _name_in(root, f)
                return any(name in (_STAMP.read(folder, p.name).get("temporaries") or ())
                           for p in folder.glob("[!.]*.json"))
            return False
    return False


def check_owned(paths: Iterable, by: Optional[str], force: Optional[bool], flag: str, redo: bool = False,
                writable: bool = False) -> None:
    """Refuse, in one line naming the file and ``flag``, to write ``paths`` (a folder: each of its
    files) where a file is that ``by`` did not write, or that changed since it did (but where
    ``redo``: a step's output changed by hand, which the step redoes): it is the user's, and never
    replaced, ``--force`` or not. ``force`` False: an output of ``by``'s own is refused too
    (replaced with --force only); None: the command replaces its own outputs. ``by`` None: the
    running command. ``writable``: each of ``paths`` (files) is first checked writable
    (:func:`~.files._writable`), before any slow work."""
    paths, by = [Path(p) for p in paths], by or _command_name()
    for path in paths if writable else ():
        _writable(path, flag)
    foreign = theirs(paths, by, changed=not redo)
    if foreign:
        raise Refusal(f"{flag} {listing(foreign)}: {by if isinstance(by, str) else ' or '.join(by)} did not write "
                      f"{'it' if len(foreign) == 1 else 'them'} (or it changed since): move it away or give another "
                      f"{flag} (nothing was changed)")
    mine = [p for p in paths if p.exists()]
    if force is False and mine:
        raise Refusal(f"{flag} {mine[0]} exists (an earlier output of {by}): pass --force to replace it")


def write_file(path, data, by: Optional[str] = None) -> None:
    """The kit's one way to write a whole output: ``data`` (str, as UTF-8; bytes; or a function
    that writes the file it is given: a plot, a checkpoint) into a temporary of
    :func:`~.files.atomic`, renamed in when complete, then recorded as ``by``'s (the running
    command's) in its folder's record."""
    with atomic(path) as (part,):
        if callable(data):
            data(part)
        else:
            part.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    if Path(path).name not in (_WRITTEN.file, EXPORT.file):  # (the two records that no record names)
        _record_written([path], by or _command_name())


# ------------------------------------------------------------------ what a model is made from

def made_from(binary) -> Dict[str, str]:
    """The SHA-256 of each file of a task's binarised folder that a model is made from: the
    dictionaries and the training and validation data (docs/recipes.md, "What a model is made from")."""
    found = {}
    for path in sorted(Path(binary).iterdir()):
        name = path.name
        if path.is_file() and ((name.startswith("dict.") and name.endswith(".txt"))
                               or (name.startswith(("train.", "valid.")) and name.endswith((".bin", ".idx")))):
            found[name] = sha256(path)
    return found


def changed_since(then: Dict[str, str], now: Dict[str, str]) -> Optional[str]:
    """None where ``then`` and ``now`` (``made_from`` values) are the same files; else the first
    that differs, with both hashes, for a one-line refusal."""
    for name in sorted(set(then) | set(now)):
        if then.get(name) != now.get(name):
            return f"{name} (sha256 {(then.get(name) or 'absent')[:12]} then, {(now.get(name) or 'absent')[:12]} now)"
    return None


def check_made_from(checkpoint, binary, task_name, unchecked: bool = False) -> Dict[str, str]:
    """Refuse (one line naming both) a checkpoint whose record (its save folder's run.json, the
    evaluation.json of an averaged.pt, or a model folder's export.json) says it was made from other
    files than ``binary`` holds now. A checkpoint that no record speaks for is refused too, unless
    ``unchecked`` (--unchecked: said in the output). Returns what ``binary`` holds now (``made_from``)."""
    now, folder = made_from(binary), Path(checkpoint).parent
    for kind in (RUN, EVALUATION, EXPORT):
        record = kind.read(folder) if kind.exists(folder) else None
        if record is None:
            continue
        then = record.get("made_from")
        if kind is EXPORT and not then:  # a sealed folder of a model trained elsewhere (convert's): its files checked
            return now
        if not then and not (kind is EVALUATION and unchecked):
            raise Damaged(f"{checkpoint}: {kind.path(folder)} does not say which data it was made from (an earlier "
                          f"version of the kit, or an evaluation of a checkpoint taken --unchecked): train (or "
                          f"evaluate) it again, or pass --unchecked to take it as it is")
        changed = then and changed_since(then, now)
        if changed:
            raise Refusal(f"{checkpoint} was made from other data than {task_name} holds now: {changed}, as "
                          f"{kind.path(folder)} recorded it; the task was prepared again or is another one. Give the "
                          "task folder it was trained on, or train again")
        if then:
            return now
    if not unchecked:
        raise Refusal(f"{checkpoint}: no record of what made it ({folder} has no {RUN.file}, {EVALUATION.file} or "
                      f"{EXPORT.file}): give it in the folder that train or evaluate wrote it in, or pass "
                      f"--unchecked to take it as it is")
    say(f"--unchecked: {checkpoint} has no record of what made it; nothing of its lineage was checked, only its "
        f"dictionaries and languages against {task_name}")
    return now


# ------------------------------------------------------------------------------ step stamps

def _fingerprint(path: Path, known: Optional[dict] = None) -> dict:
    """{"sha256", "identity"} of a file or folder (a folder: the hash of its files' names and
    hashes). ``known`` is an earlier _fingerprint: its hash is reused while the identity (device,
    inode, size, modification and change time; a copy gets a new change time) is the same."""
    path = Path(path)
    if path.is_dir():
        h, known_files, files = hashlib.sha256(), (known or {}).get("files", {}), {}
        for f in (f for f in _files(path) if f.name != _WRITTEN.file):
            rel = f.relative_to(path).as_posix()
            files[rel] = _fingerprint(f, known_files.get(rel))
            h.update(f"{rel}\0{files[rel]['sha256']}\n".encode("utf-8"))
        return {"sha256": h.hexdigest(), "files": files}
    st = path.stat()
    identity = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    if known and known.get("identity") == identity and "sha256" in known:
        return known
    return {"sha256": sha256(path), "identity": identity}


def _name_in(root: Path, path) -> str:
    """How a record of ``root`` names ``path``: relative to ``root`` where it lies inside (a copy of
    the folder names its own files), else absolute."""
    path = Path(os.path.abspath(path))
    try:
        return path.relative_to(Path(os.path.abspath(root))).as_posix()
    except ValueError:
        return str(path)


def stamped_change(root, only: Optional[Iterable] = None) -> Optional[str]:
    """None when every file that ``root``'s stamps record (``only``: of these paths), input or
    output, is as recorded; else the first that is not: its steps would be redone."""
    wanted, folder = None if only is None else {_name_in(root, p) for p in only}, Path(root) / ".steps"
    stamps = {p.stem: _STAMP.read(folder, p.name) for p in sorted(folder.glob("*.json")) if not p.name.startswith(".")}
    for name, stamp in stamps.items():  # (each read first, failing closed: Damaged)
        for kind in ("inputs", "outputs"):
            for path, known in (stamp.get(kind) or {}).items():
                if wanted is not None and path not in wanted:
                    continue
                full = Path(root) / path
                if not full.exists() or _fingerprint(full, known)["sha256"] != known.get("sha256"):
                    return f"{full} changed since {name} ran"
    return None


class Step:
    """One step of a command (tokenising a file, learning BPE, averaging checkpoints, decoding a
    test set, ...): its input and output paths and settings. Its stamp, ``ROOT/.steps/NAME.json``,
    holds the command that ran it, the settings, and a _fingerprint of every input and output, each
    named relative to ROOT where it lies inside (a copied folder names its own files), and, while
    the step runs, the temporaries its outputs are written under. docs/recipes.md, "What a rerun
    reuses, what it redoes", says when a rerun skips or redoes it."""

    def __init__(self, root, name: str, inputs=(), outputs=(), settings: Optional[Dict[str, str]] = None):
        if not outputs:
            raise ValueError(f"step {name}: no outputs")
        self.root, self.name = Path(root), name
        self.inputs, self.outputs = [Path(p) for p in inputs], [Path(p) for p in outputs]
        self.settings = {k: str(v) for k, v in (settings or {}).items()}
        self.folder, self.file = self.root / ".steps", f"{name}.json"

    def _stamp(self) -> Optional[dict]:
        try:
            return _STAMP.read(self.folder, self.file)
        except Damaged:
            return None  # redone, as a step that did not finish

    MAY_RUN = "where a step above changes what it reads"

    def stale(self, force: bool = False, remade: Iterable[Path] = ()) -> Optional[str]:
        """None when the outputs were made from these inputs and settings; else the reason, told
        without running the step (a dry run asks this too). ``remade``: inputs that steps above are
        to remake first (on a dry run they may not be there yet); a step reading one, its outputs
        there, may run (:attr:`MAY_RUN`)."""
        if force:
            return "--force"
        remade = set(remade)
        for p in self.inputs:
            if not p.exists() and p not in remade:
                raise Refusal(f"step {self.name}: its input {p} does not exist")
        missing = [str(p) for p in self.outputs if not p.exists()]
        if missing:
            return f"no {missing[0]}"
        if remade.intersection(self.inputs):
            return self.MAY_RUN
        stamp = self._stamp()
        if stamp is None or stamp.get("temporaries"):
            return "no record of what its outputs were made from (a step that did not finish)"
        if stamp.get("settings") != self.settings:
            old = stamp.get("settings") or {}
            diff = sorted(k for k in set(old) | set(self.settings) if old.get(k) != self.settings.get(k))
            return "settings changed: " + ", ".join(f"{k} {old.get(k)!r} -> {self.settings.get(k)!r}" for k in diff)
        for kind, paths in (("inputs", self.inputs), ("outputs", self.outputs)):
            recorded = stamp.get(kind) or {}
            names = {_name_in(self.root, p): p for p in paths}
            if sorted(recorded) != sorted(names):
                return f"its {kind} are other files than last time"
            for name, p in names.items():
                if _fingerprint(p, recorded[name])["sha256"] != recorded[name].get("sha256"):
                    return f"{'input' if kind == 'inputs' else 'output'} {p} changed since the last run"
        return None

    def _write_stamp(self, by: str, **parts) -> None:
        old = self._stamp() or {}
        stamp = {"by": by, "settings": self.settings, "inputs": {}, "outputs": {}, **parts}
        for kind, paths in (("inputs", self.inputs), ("outputs", self.outputs)) if not parts else ():
            known = old.get(kind) or {}
            stamp[kind] = {_name_in(self.root, p): _fingerprint(p, known.get(_name_in(self.root, p))) for p in paths}
        _STAMP.write(self.folder, stamp, self.file)

    def make(self, action: Callable[[List[Path]], None], force: bool = False, what: str = "", short: str = "") -> bool:
        """Unless the step is current, remove its outputs (a file of the user's among them is refused
        first), run ``action(the outputs' temporaries)`` and rename them in, recorded as the running
        command's, with the new stamp; True when it ran. The log line says why it ran, or that it was skipped."""
        what, by = what or self.name, _command_name()
        reason = self.stale(force)
        if reason is None:
            say(f"{short or what}: up to date; skipped")
            return False
        say(f"{what} ({'redone: ' if (self.folder / self.file).exists() else ''}{reason})")
        check_owned(self.outputs, by, None, f"step {self.name}'s output", redo=True)
        for leftover in (self._stamp() or {}).get("temporaries") or ():  # a run of this step killed: its own
            forget_written([self.root / leftover])
        forget_written(self.outputs)
        self._write_stamp(by, temporaries=[_name_in(self.root, _temporary(p)) for p in self.outputs])
        with atomic(*self.outputs) as temps:
            action(temps)
            missing = [t for t in temps if not t.exists()]
            if missing:
                raise Failed(f"step {self.name}: its command made no {missing[0]}")
        _record_written(self.outputs, by)
        self._write_stamp(by)
        return True
