"""Sealed model folders: a folder that ``fairseq_csan.recipes.export`` wrote is checked before
fairseq loads it.

export.json lists the SHA-256 of every file of the folder (model.pt, the dictionaries,
bpecodes) and seals itself (``sealed``: the SHA-256 of its other fields), so that no field of it
is believed after a hand edit. With the plugin imported, fairseq's ``from_pretrained`` (``hub_utils.from_pretrained``,
which ``TransformerModel.from_pretrained`` and translate.py call) and its checkpoint loader
(``checkpoint_utils.load_model_ensemble_and_task``, which fairseq-interactive and
fairseq-generate call with ``--path FOLDER/model.pt``, the csan_recipe tokenizer's usual
company) check them first (patches.py wraps both with :func:`verifying` and
:func:`verifying_checkpoints`), and stop with the name of a file that is missing or differs: a
cut ``bpecodes`` or two swapped dictionary lines would otherwise translate wrongly with no error,
and a missing ``bpecodes`` would make fairseq read one from the current folder (the exported
configuration names it relatively). A folder is hashed once per process while its files are
unchanged. Folders without export.json (fairseq's published models, anyone else's) load as before.
"""

import hashlib
import json
import os
from pathlib import Path

_checked = {}  # folder -> the files' identities when they were last found intact


class DamagedModelFolder(ValueError):
    pass


def sha256(path) -> str:
    """The SHA-256 of a file's content (export.json's record of each file)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def seal_of(record: dict) -> str:
    """export.json's seal of itself: the SHA-256 of its other fields, written canonically."""
    fields = {k: v for k, v in record.items() if k != "sealed"}
    text = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def unsealed(folder, about) -> str:
    """What is wrong with the record ``about`` of ``folder/export.json``, in one line; '' where it
    is as export wrote it."""
    if isinstance(about, dict) and isinstance(about.get("files"), dict) and about.get("sealed") == seal_of(about):
        return ""
    return (f"model folder {folder}: export.json is not the record that export wrote (its seal of itself is missing "
            "or differs: changed by hand, or written by an earlier version); export the model again")


def verify(folder) -> None:
    """Raise DamagedModelFolder, naming the file, unless ``folder/export.json`` is as export wrote
    it (its seal of itself) and every file it lists is there with its recorded hash. A folder
    without export.json passes."""
    folder = Path(folder)
    record = folder / "export.json"
    if not record.is_file():
        return
    try:
        about = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise DamagedModelFolder(f"model folder {folder}: {record} is not readable JSON ({error}); "
                                 "export the model again") from None
    if unsealed(folder, about):
        raise DamagedModelFolder(unsealed(folder, about))
    files = about["files"]
    identities = {}
    for name in files:
        try:
            st = (folder / name).stat()
        except FileNotFoundError:
            raise DamagedModelFolder(f"model folder {folder}: {name} is missing; export the model again") from None
        identities[name] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    key = os.path.realpath(folder)
    if _checked.get(key) == identities:
        return
    for name, expected in files.items():
        if sha256(folder / name) != expected:
            raise DamagedModelFolder(f"model folder {folder}: {name} is not the file that export wrote "
                                     "(its SHA-256 differs from export.json's); export the model again")
    _checked[key] = identities


def verifying(from_pretrained):
    """fairseq's ``hub_utils.from_pretrained``, checking a model folder first."""
    def wrapped(model_name_or_path, *args, **kwargs):
        if os.path.isdir(str(model_name_or_path)):
            verify(model_name_or_path)
        return from_pretrained(model_name_or_path, *args, **kwargs)

    wrapped.__wrapped__ = from_pretrained
    wrapped.__doc__ = from_pretrained.__doc__
    return wrapped


def verifying_checkpoints(load):
    """fairseq's ``checkpoint_utils.load_model_ensemble_and_task``, checking the folder of each
    checkpoint first (a checkpoint inside a model folder)."""
    def wrapped(filenames, *args, **kwargs):
        for name in filenames:
            verify(os.path.dirname(os.path.abspath(str(name))))
        return load(filenames, *args, **kwargs)

    wrapped.__wrapped__ = load
    wrapped.__doc__ = load.__doc__
    return wrapped
