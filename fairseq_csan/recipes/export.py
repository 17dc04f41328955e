"""Export a trained model as a fairseq model folder that translates raw text on its own.

FOLDER gets model.pt (without the optimizer state), the dictionaries, bpecodes and export.json,
the seal of every file; with the plugin imported, fairseq's ``from_pretrained("FOLDER")`` then
translates as evaluate.sh does, with no other argument. What the folder holds is in
docs/translation.md, "Export a model folder"; what export replaces and refuses is in
docs/recipes.md, "What each command owns, reuses and redoes".
"""

import shutil
from pathlib import Path

from . import decoding
from .command_line import UNCHECKED, Parser
from .runner import (EXPORT, Refusal, WriterLock, as_command, check_made_from, refuse_overlaps, replace_folder,
                     save_torch, say)
from .runner.records import theirs
from .task import PreparedTask

TOKENIZER = "csan_recipe"
BPE_FILES = ("bpecodes", "code", "sentencepiece.bpe.model", "merges.txt", "vocab.json")  # as from_pretrained finds them
MAKERS = ("export", "convert")  # the commands that write model folders
LANGUAGES = ("source_lang", "target_lang")


def encoders_of(task: PreparedTask):
    """The tokenizer and BPE (fairseq's names) that made the task's subwords: the recipe's, or
    those of the model folder it was prepared like (prepare files --like)."""
    like = task.settings.get("like")
    return (like["tokenizer"], like["bpe"]) if like else (TOKENIZER, "subword_nmt")


def hub_overrides(task: PreparedTask, data: str, bpe_codes: str, batch_size: int = decoding.BATCH_SIZE) -> dict:
    """The configuration that makes a checkpoint of ``task`` translate raw text as the recipe
    does: fairseq's ``arg_overrides`` (set by name in every group of the checkpoint's cfg)."""
    tokenizer, bpe = encoders_of(task)
    return {"data": data, "source_lang": task.src, "target_lang": task.tgt,
            "tokenizer": tokenizer, "pretokenized": bool(task.pretokenized), "bpe": bpe, "bpe_codes": bpe_codes,
            **decoding.generation_overrides(), "batch_size": batch_size, "max_tokens": None}


def load_state(checkpoint: Path, overrides: dict) -> dict:
    """fairseq's loading of ``checkpoint`` with ``overrides`` (by name, in every group of its cfg); a checkpoint
    whose own task cfg names other languages than they do is refused."""
    from .. import register

    register()  # our architectures, the tokenizer, the loading fixes
    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import overwrite_args_by_name

    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(
            str(checkpoint), arg_overrides={k: v for k, v in overrides.items() if k not in LANGUAGES})
    except Exception as error:  # a damaged or foreign file: say which
        raise Refusal(f"cannot read the checkpoint {checkpoint} (damaged or not a fairseq checkpoint: "
                      f"{(str(error).strip().splitlines() or [type(error).__name__])[0]})") from None
    own = [getattr(state["cfg"]["task"], key, None) for key in LANGUAGES]
    asked = [overrides.get(key) for key in LANGUAGES]
    if all(own) and all(asked) and own != asked:
        raise Refusal(f"{checkpoint} translates {own[0]}-{own[1]}, not {asked[0]}-{asked[1]} as the task does: give the "
                      "task folder it was trained on")
    overwrite_args_by_name(state["cfg"], {k: v for k, v in overrides.items() if k in LANGUAGES})
    return state


def check_dictionaries(state: dict, task: PreparedTask, checkpoint: Path, unchecked: bool = False) -> dict:
    """The checkpoint must be made from the task's data as it is now, where the kit's record of
    it says (records.check_made_from: the dictionaries' and training data's SHA-256), and its
    embedding tables must have the sizes of the task's dictionaries. Returns the task's
    ``made_from`` (records.made_from), for the record of what is made of it."""
    from fairseq.data import Dictionary

    now = check_made_from(checkpoint, task.data_bin, str(task.root), unchecked)
    weights = state["model"]
    for side, lang in (("encoder", task.src), ("decoder", task.tgt)):
        table = weights.get(f"{side}.embed_tokens.weight")
        size = len(Dictionary.load(str(task.data_bin / f"dict.{lang}.txt")))
        if table is not None and table.shape[0] != size:
            raise Refusal(f"{checkpoint} was not trained on {task.root}: its {side} has {table.shape[0]} "
                              f"embeddings, dict.{lang}.txt has {size} entries; give the task folder it was "
                              "trained on")
    return now


def write_folder(task: PreparedTask, checkpoint: Path, folder: Path, unchecked: bool) -> None:
    from fairseq_csan.model_folder import sha256  # the hash from_pretrained checks
    from omegaconf import OmegaConf, open_dict

    state = load_state(checkpoint, hub_overrides(task, data=".", bpe_codes="bpecodes"))
    made_from = check_dictionaries(state, task, checkpoint, unchecked)
    cfg = state["cfg"]  # fairseq's loader gives an OmegaConf config, the overrides set
    with open_dict(cfg):
        cfg.common.user_dir = None  # the training machine's path; importing the plugin is the user's part
    state["cfg"] = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # as fairseq saves it
    state["last_optimizer_state"] = None
    state["args"] = None
    save_torch(state, folder / "model.pt")
    for lang in (task.src, task.tgt):
        shutil.copyfile(task.data_bin / f"dict.{lang}.txt", folder / f"dict.{lang}.txt")
    shutil.copyfile(task.codes(task.src), folder / "bpecodes")
    return {"task": task.task, "source_lang": task.src, "target_lang": task.tgt, "checkpoint_sha256": sha256(checkpoint),
            # the task's dictionaries and training data it was checked against (none: taken --unchecked)
            "made_from": None if unchecked else made_from, **({"unchecked": True} if unchecked else {}),
            **dict(zip(("tokenizer", "bpe"), encoders_of(task))), "pretokenized": bool(task.pretokenized),
            **decoding.generation_overrides()}


def source_codes(task: PreparedTask) -> Path:
    """The task's BPE codes of its source language (a model folder's bpecodes), refused where there are none."""
    codes = task.codes(task.src)
    if not codes.is_file():
        raise Refusal(f"no BPE codes {codes} (prepare {task.root} again with the command that made it)")
    return codes


def export(data: Path, checkpoint: Path, out: Path, force: bool = False, unchecked: bool = False) -> str:
    """Write the model folder; 'written', 'replaced' or 'unchanged'."""
    task = PreparedTask.open(data)
    if not checkpoint.is_file():
        raise Refusal(f"--checkpoint {checkpoint}: no such file")
    source_codes(task)
    refuse_overlaps({"--out": out}, {"--data": data, "--checkpoint": checkpoint})
    return write_model_folder(out, lambda folder: write_folder(task, checkpoint, folder, unchecked), force, "export")


def write_model_folder(out: Path, fill, force: bool, by: str) -> str:
    """The model folder ``out``, written whole (runner.replace_folder) under its lock: ``fill(folder)`` writes its
    files and returns what export.json says of them, to which the seal adds ``by``, each file's SHA-256 and its own
    (``sealed``): the one place export.json is written. 'written', 'replaced' or 'unchanged'."""
    from fairseq_csan.model_folder import seal_of, sha256

    if out.exists() and not out.is_dir():
        raise Refusal(f"--out {out} exists and is not a folder")
    foreign = theirs([out], MAKERS, changed=True) if out.is_dir() else []
    if foreign:
        raise Refusal(f"--out {out} is not a model folder that export or convert wrote (it holds {foreign[0]}, which "
                      "they did not write or which changed since); give another --out (nothing was changed)")

    def sealed(folder):
        about = {**fill(folder), "by": by, "files": {p.name: sha256(p) for p in sorted(folder.iterdir())}}
        EXPORT.write(folder, {**about, "sealed": seal_of(about)})

    def may_replace(_old):
        if not force:
            raise Refusal(f"--out {out} holds another model folder that {by} wrote; pass --force to replace it, or give "
                          "another --out")

    with WriterLock(out, folder=False, what=by):
        return replace_folder(out, sealed, may_replace, lambda old: not theirs([old], MAKERS, changed=True))


def main(argv=None):
    p = Parser(prog="python -m fairseq_csan.recipes.export", description=__doc__.split("\n\n")[0],
               epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--data", required=True, type=Path, help="the prepared task folder the model was trained on")
    p.add_argument("--checkpoint", required=True, type=Path,
                   help="the checkpoint: evaluate.sh's averaged.pt, or checkpoint_best.pt")
    p.add_argument("--out", required=True, type=Path, metavar="FOLDER", help="the model folder to write")
    p.add_argument("--force", action="store_true", help="replace an existing, different model folder that export wrote")
    p.add_argument(UNCHECKED[0], action="store_true", help=UNCHECKED[1])
    args, _ = p.read(argv)
    how = export(args.data, args.checkpoint, args.out, args.force, args.unchecked)
    say(f"{args.out}: {how} (model.pt, dict.*.txt, bpecodes; translate with python -m fairseq_csan.recipes.translate "
        f"--model {args.out} --input FILE)")


if __name__ == "__main__":
    as_command(main)


# ---------------------------------------------------------------- a model folder, read for training on it

# the fairseq-train flags that give a model its shape: each is taken from the folder's checkpoint
# when a training starts from it (train.sh --finetune-from), and refused there with another value
SHAPE_FLAGS = ("encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_layers", "encoder_attention_heads",
               "decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_layers", "decoder_attention_heads",
               "decoder_output_dim", "encoder_normalize_before", "decoder_normalize_before",
               "encoder_learned_pos", "decoder_learned_pos", "no_token_positional_embeddings", "activation_fn",
               "no_scale_embedding", "layernorm_embedding", "max_source_positions", "max_target_positions",
               "share_all_embeddings", "share_decoder_input_output_embed", "no_cross_attention", "cross_self_attention")
VARIANT_FLAGS = ("csan_layers", "ctx_type", "ctx_side", "ctx_gate")  # beside each variant's own (registry)


def dictionary_words(path: Path) -> list:
    """The entries of a fairseq dictionary file (its first column), as fairseq reads them."""
    return [line.rsplit(" ", 1)[0] if " " in line else line
            for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def check_sealed(folder: Path, unchecked: bool) -> None:
    """A model folder without export.json (export's and convert's seal) is refused, unless
    ``unchecked`` (--unchecked; said in the output): nothing would tell a file cut or replaced."""
    if not EXPORT.path(folder).is_file():
        if not unchecked:
            raise Refusal(f"{folder} has no {EXPORT.file} (the seal export and convert write: each file's SHA-256): "
                          f"export it again, or pass {UNCHECKED[0]} to take it as it is")
        say(f"{UNCHECKED[0]}: {folder} has no {EXPORT.file}; its files were not checked")


def folder_model(folder: Path, unchecked: bool = False) -> dict:
    """What a model folder's checkpoint says of its model (the flags of its shape and variant: flag -> value, as
    fairseq-train takes them); a damaged folder, or one without model.pt and its dictionaries, is refused."""
    from fairseq_csan.model_folder import sha256

    checkpoint = folder / "model.pt"
    if not checkpoint.is_file():
        raise Refusal(f"{folder} is not a model folder: it has no model.pt")
    check_sealed(folder, unchecked)
    state, arch = read_model_folder(folder, checkpoint, str(folder))  # (registers the plugin before its modules load)
    from fairseq_csan.modules.registry import SELF_ATTENTION_VARIANTS, model_defining_flags

    model, task = state["cfg"]["model"], state["cfg"]["task"]
    flags = list(SHAPE_FLAGS) + list(VARIANT_FLAGS)
    variant = getattr(model, "encoder_self_attention", None)
    if variant in SELF_ATTENTION_VARIANTS:
        flags += model_defining_flags(SELF_ATTENTION_VARIANTS[variant])
    shape = {f: getattr(model, f) for f in flags if getattr(model, f, None) is not None}
    dicts = {lang: folder / f"dict.{lang}.txt" for lang in (task.source_lang, task.target_lang)}
    return {"arch": arch, "src": task.source_lang, "tgt": task.target_lang, "shape": shape, "dicts": dicts,
            "checkpoint": checkpoint, "sha256": sha256(checkpoint), "hub": hub_settings(state["cfg"])}


def read_model_folder(folder: Path, checkpoint: Path, name: str) -> tuple:
    """(the state, the architecture) of ``checkpoint`` in the model folder ``folder`` (``name``:
    how the user gave it), read by fairseq once its files match its seal (model_folder.verify) and
    its dictionaries are there; else a refusal naming the file."""
    from fairseq_csan.model_folder import DamagedModelFolder, verify

    try:
        verify(folder)
    except DamagedModelFolder as error:
        raise Refusal(str(error)) from None
    state = load_state(checkpoint, {"data": str(folder)})
    model, task = state["cfg"]["model"], state["cfg"]["task"]
    for lang in (task.source_lang, task.target_lang):
        if not (folder / f"dict.{lang}.txt").is_file():
            raise Refusal(f"{name} has no dict.{lang}.txt (its checkpoint translates "
                          f"{task.source_lang}-{task.target_lang})")
    return state, getattr(model, "arch", None) or getattr(model, "_name", None)


def fits_task(model: dict, flag: str, src: str, tgt: str, data_bin: Path, task_root) -> None:
    """A folder's model (``folder_model``'s) on a task: the same languages and the task's
    dictionaries word for word (prepare files --like FOLDER makes them); else a refusal naming
    ``flag`` and what to do."""
    if (model["src"], model["tgt"]) != (src, tgt):
        raise Refusal(f"{flag} translates {model['src']}-{model['tgt']}, {task_root} is {src}-{tgt}")
    folder = model["checkpoint"].parent
    for lang, path in model["dicts"].items():
        if dictionary_words(path) != dictionary_words(data_bin / f"dict.{lang}.txt"):
            raise Refusal(f"{data_bin}/dict.{lang}.txt is not the dictionary of {flag}: prepare the corpus "
                              f"with its vocabulary (prepare files ... --like {folder})")


def hub_settings(cfg) -> dict:
    """The tokenizer and BPE a checkpoint's configuration names (fairseq's hub interface builds
    them from there): each None where it names none, as fairseq's published models may."""
    def named(group):
        part = cfg.get(group)
        name = part.get("_name") if part is not None and hasattr(part, "get") else part
        return name or getattr(cfg.get("model"), group, None)

    tokenizer = cfg.get("tokenizer")
    pretokenized = bool(tokenizer.get("pretokenized", False)) if tokenizer is not None and hasattr(tokenizer, "get") \
        else bool(getattr(cfg.get("model"), "pretokenized", False))
    return {"tokenizer": named("tokenizer"), "bpe": named("bpe"), "pretokenized": pretokenized}


def shape_arguments(shape: dict) -> list:
    """fairseq-train's words for a model's shape (``folder_model``'s): a true switch as its flag,
    a false one left out, a value after its flag."""
    words = []
    for dest, value in shape.items():
        if dest.startswith("share_"):  # train.sh's --share, which follows the folder's (train.share_mode)
            continue
        flag = "--" + dest.replace("_", "-")
        if value is True:
            words.append(flag)
        elif value is not False:
            words += [flag, str(value)]
    return words


def contradictions(shape: dict, extra: list) -> list:
    """The words of ``extra`` (fairseq-train flags) that set one of ``shape``'s flags to another value."""
    found = []
    for i, word in enumerate(extra):
        flag, _, inline = word.partition("=")
        dest = flag[2:].replace("-", "_") if flag.startswith("--") else None
        if dest not in shape and dest not in SHAPE_FLAGS:
            continue
        theirs = shape.get(dest, False)
        given = True if isinstance(theirs, bool) else inline or (extra[i + 1] if i + 1 < len(extra) else "")
        if str(given) != str(theirs):
            said = {True: "on", False: "off"}
            found.append(f"{flag}{'' if given is True else ' ' + str(given)} (the folder's model: "
                         f"{said.get(theirs, theirs) if isinstance(theirs, bool) else theirs})")
    return found
