"""A corpus in a model folder's own vocabulary: ``prepare files ... --like FOLDER`` (docs/recipes.md,
'Start from a trained Transformer', says what it takes from the folder and what it refuses).
"""

from __future__ import annotations

from pathlib import Path

from .runner import Refusal

# the folder's BPE file -> the fairseq option that names it (as hub_utils.from_pretrained maps them)
# (codes files only: export and translate.py pass a task's BPE as --bpe-codes)
BPE_OPTION = {"bpecodes": "bpe_codes", "code": "bpe_codes"}


def read(folder: Path, src: str, tgt: str, unchecked: bool = False) -> dict:
    """What --like FOLDER takes from the folder, for task.json's ``like``: the folder, its
    checkpoint's SHA-256, tokenizer, BPE kind, BPE file and dictionaries. Refused: a damaged
    folder, another language pair, no BPE file, no tokenizer or BPE named by the checkpoint."""
    from fairseq_csan.model_folder import sha256

    from .export import folder_model

    try:
        model = folder_model(folder, unchecked)
    except Refusal as error:
        raise Refusal(f"--like: {error}") from None
    if (model["src"], model["tgt"]) != (src, tgt):
        raise Refusal(f"--like {folder} translates {model['src']}-{model['tgt']}; this corpus is {src}-{tgt} "
                        "(--src/--tgt)")
    codes = [name for name in BPE_OPTION if (folder / name).is_file()]
    if not codes and (folder / "sentencepiece.bpe.model").is_file():
        raise Refusal(f"--like {folder} splits with a sentencepiece model (sentencepiece.bpe.model); --like takes "
                        f"BPE codes files only ({' or '.join(BPE_OPTION)}), so this folder cannot be followed")
    if not codes:
        raise Refusal(f"--like {folder} has no BPE codes ({' or '.join(BPE_OPTION)}): the corpus cannot be split "
                        "as the model's training data was")
    hub = model["hub"]
    for what in ("tokenizer", "bpe"):
        if not hub.get(what):
            raise Refusal(f"--like {folder}: its checkpoint names no {what}; convert it with --{what} NAME (the one "
                            "its model was trained with, e.g. --tokenizer moses --bpe subword_nmt)")
    return {"folder": str(folder.resolve()), "model.pt": model["sha256"], "tokenizer": hub["tokenizer"],
            "pretokenized": bool(hub.get("pretokenized")), "bpe": hub["bpe"], "bpe_file": codes[0],
            "dicts": {lang: {"file": str(path.resolve()), "sha256": sha256(path)} for lang, path in model["dicts"].items()}}


def encode_file(like: dict, kind: str, lang: str, source: Path, target: Path) -> None:
    """``source`` (one sentence a line) encoded by the folder's ``kind``, "tokenizer" (of raw text) or
    "bpe" (of tokenised text), into ``target``, as the hub interface encodes a sentence."""
    from argparse import Namespace

    from fairseq_csan import register

    from .text import iter_lines

    register()  # --tokenizer csan_recipe is ours
    from fairseq.data import encoders

    folder = Path(like["folder"])
    tokenizer = encoders.build_tokenizer(Namespace(tokenizer=like["tokenizer"], source_lang=lang, target_lang=lang,
                                                   moses_source_lang=lang, moses_target_lang=lang,
                                                   pretokenized=like["pretokenized"]))
    try:
        bpe = encoders.build_bpe(Namespace(bpe=like["bpe"], **{BPE_OPTION[like["bpe_file"]]: str(folder / like["bpe_file"])}))
    except ImportError as error:  # fastBPE, sentencepiece: packages of their own
        raise Refusal(f"--like {folder} splits with --bpe {like['bpe']}: {error}") from None
    encoder = tokenizer if kind == "tokenizer" else bpe
    with open(target, "w", encoding="utf-8") as out:
        for line in iter_lines(source):
            out.write((encoder.encode(line) if encoder is not None and line.strip() else line.strip()) + "\n")
