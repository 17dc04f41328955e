"""The records the kit keeps beside what it makes: one JSON form, one typed reader per kind.

    kind          file               written by   says
    TASK          task.json          prepare      what a task folder was prepared with
    RUN           run.json           train        which run a save folder holds
    EVALUATION    evaluation.json    evaluate     what an evaluation was made of
    SWEEP         sweep.json         sweep        which point of a window/area sweep a run is
    REPRODUCTION  settings.json      multi30k     a Multi30k reproduction's settings
    TIMING        timing.json        multi30k     one finished run's times (written last: the run is done)
    TOY           toy_corpus.json    toy_corpus   the files it wrote, by SHA-256 (a user's train.en is not replaced)
    GPU_STEP      .steps/NAME.json   gpu_check    one step: its command, machine, status, time and outputs

A record is a JSON object of its kind's fields, each of the field's type, written atomically
(a temporary of the writer's own, fsynced, then renamed: ``ownership.write_atomically``).
Folders made before this form hold the same facts as ``KEY=VALUE`` lines (recipe.env,
run.env, evaluation.env, sweep.env): a reader reads those when the record is absent, and the
next write of the record replaces them. (A finished Multi30k run of before also holds a
``done`` marker, written after its timing.json; the timing record alone now says it finished.)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

from .ownership import write_atomically


class Damaged(Exception):
    """A record that is not the JSON object of its kind (or an old file that cannot be read as one)."""


def _text(value) -> str:
    return str(value)


def _flag(value) -> bool:
    if isinstance(value, bool):
        return value
    return {"1": True, "0": False, "yes": True, "no": False}[str(value)]


def _words(value) -> list:
    """A list of strings (the old form: comma-separated)."""
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [v for v in str(value).split(",") if v]


def _anything(value):
    return value


TYPES: Dict[str, Callable] = {"text": _text, "int": int, "float": float, "flag": _flag, "list": _words,
                              "json": _anything}


@dataclass(frozen=True)
class Kind:
    """One kind of record: its file, its fields (name -> type name of TYPES) and, for folders made
    before, the KEY=VALUE file it replaces."""

    name: str
    file: str
    fields: Dict[str, str]
    old: Optional[str] = None
    open_fields: bool = False  # fields beyond the declared ones are kept as they are (JSON values)
    old_names: Optional[Dict[str, str]] = None  # a field named otherwise in the old file: old -> new

    def _old_values(self, text: str) -> dict:
        """The KEY=VALUE lines of an old file: a list field is one line, comma-separated, or (a
        field named in ``old_names``) one line per item."""
        values, names = {}, self.old_names or {}
        for line in text.split("\n"):
            if "=" not in line:
                continue
            key, value = line.split("=", 1)
            if key in names:
                values.setdefault(names[key], []).append(value)
            else:
                values[key] = value
        return values

    def path(self, folder) -> Path:
        return Path(folder) / self.file

    def exists(self, folder) -> bool:
        return self.path(folder).is_file() or (self.old is not None and (Path(folder) / self.old).is_file())

    def typed(self, values: dict) -> dict:
        """``values`` with each field converted to its type; an unknown field is an error."""
        unknown = set(values) - set(self.fields)
        if unknown and not self.open_fields:
            raise ValueError(f"unknown {self.name} fields {sorted(unknown)}; known: {', '.join(self.fields)}")
        return {k: (TYPES[self.fields[k]](v) if k in self.fields else v) for k, v in values.items()}

    def read(self, folder) -> Optional[dict]:
        """The record of ``folder`` (typed), the old file's if only that is there, or None."""
        found = self.read_with_form(folder)
        return found and found[0]

    def read_with_form(self, folder):
        """(the typed record, whether it came from the old file), or None."""
        old = Path(folder) / self.old if self.old else None
        # the JSON record first; another process may replace the old file by it meanwhile (the
        # machines of a multi-node run share a save folder), so look for the record once more
        for source in (self.path(folder), old, self.path(folder)):
            if source is None:
                continue
            try:
                text = source.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            try:
                if source == old:
                    return self.typed(self._old_values(text)), True
                values = json.loads(text)
                if not isinstance(values, dict):
                    raise ValueError("not a JSON object")
                return self.typed(values), False
            except (ValueError, KeyError, TypeError) as error:
                raise Damaged(f"{source} is not a {self.name} record as this kit writes it ({error}); "
                              "it was changed by hand or cut short") from None
        return None

    def write(self, folder, values: dict) -> dict:
        """Write the record of ``folder`` (the old file, if any, goes); the typed values."""
        values = self.typed(values)
        write_atomically(self.path(folder), json.dumps(values, indent=1, sort_keys=True) + "\n")
        if self.old:
            (Path(folder) / self.old).unlink(missing_ok=True)
        return values


TASK = Kind("task", "task.json", {
    "task": "text", "src": "text", "tgt": "text", "merges": "int", "joint_bpe": "flag", "clean_max_len": "int",
    "clean_ratio": "float", "tests": "list", "tokenizer_src": "text", "tokenizer_tgt": "text",
    "warnings": "json"}, old="recipe.env")
RUN = Kind("run", "run.json", {"arch": "text", "data": "text", "size": "text", "seed": "int", "share": "text",
                               "tiny": "flag", "made_from": "json"}, old="run.env")
EVALUATION = Kind("evaluation", "evaluation.json", {
    "checkpoints": "list", "averaged": "flag", "subset": "text", "beam": "int", "lenpen": "float", "batch_size": "int",
    "decoding": "text", "made_from": "json"}, old="evaluation.env", old_names={"checkpoint": "checkpoints"})
SWEEP = Kind("sweep", "sweep.json", {"kind": "text", "value": "int", "arch": "text", "flags": "text"}, old="sweep.env")
# open: a setting an earlier version kept (its "jobs") is read, and compares as other settings
REPRODUCTION = Kind("reproduction", "settings.json", {
    "raw_dir": "text", "max_update": "int", "merges": "int", "model": "json", "training": "json", "device": "text"},
    open_fields=True)
TIMING = Kind("timing", "timing.json", {"train_s": "float", "total_s": "float"}, open_fields=True)
TOY = Kind("toy corpus", "toy_corpus.json", {"files": "json"})  # what the toy corpus wrote (name -> SHA-256)
# one step of gpu_check, in OUT/.steps/NAME.json (gpu_check.step_record names the file)
GPU_STEP = Kind("gpu-check step", "STEP.json", {"command": "text", "machine": "text", "status": "text",
                                                "seconds": "float", "finished": "text", "outputs": "list"})
KINDS = (TASK, RUN, EVALUATION, SWEEP, REPRODUCTION, TIMING, TOY, GPU_STEP)


# ------------------------------------------------------------------ what a model is made from

def made_from(binary) -> Dict[str, str]:
    """The SHA-256 of each file of a task's binarised folder that a model is made from: the
    dictionaries and the training and validation data (fairseq-preprocess's ``dict.*.txt`` and
    ``train.*``/``valid.*`` ``.bin``/``.idx``). A run records it (RUN's ``made_from``), and so does
    an evaluation for the average it writes (EVALUATION's): a task prepared again, with a new
    dictionary of the same size or other training data, no longer matches."""
    found = {}
    for path in sorted(Path(binary).iterdir()):
        name = path.name
        if path.is_file() and ((name.startswith("dict.") and name.endswith(".txt"))
                               or (name.startswith(("train.", "valid.")) and name.endswith((".bin", ".idx")))):
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            found[name] = digest.hexdigest()
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
        record = kind.read(folder)
        if record is not None:
            shown = kind.path(folder) if kind.path(folder).is_file() else folder / kind.old
            return shown, record.get("made_from", "earlier")
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
