"""Convert a trained fairseq Transformer model folder into a model folder of one of the plugin's
architectures, to fine-tune it instead of training from scratch.

SRC is a model folder of fairseq's own Transformer: one that export wrote, or one of fairseq's
published translation models. Every size comes from its checkpoint, never from an architecture
name. DST gets a model folder of ARCH with every weight of SRC copied; its export.json says which
parameters the variant adds and how each starts. How each variant starts, and how to convert a
published folder, is in docs/recipes.md, "Start from a trained Transformer"; what convert
replaces and refuses is in docs/recipes.md, "What each command owns, reuses and redoes".
"""

import argparse
import shutil
from pathlib import Path

from . import decoding
from .command_line import Parser
from .export import BPE_FILES, VARIANT_FLAGS, hub_settings, read_model_folder, write_model_folder
from .runner import Refusal, as_command, refuse_overlaps, save_torch, say


def variant_flags():
    """The flags the plugin's models add to fairseq's Transformer (argparse actions), but
    --encoder-self-attention, which --arch sets."""
    from fairseq.models.transformer import TransformerModel

    from fairseq_csan.models.variant_transformer import VariantTransformerModel

    theirs, ours = argparse.ArgumentParser(add_help=False), argparse.ArgumentParser(add_help=False)
    TransformerModel.add_args(theirs)
    VariantTransformerModel.add_args(ours)
    known = {o for a in theirs._actions for o in a.option_strings}
    return [a for a in ours._actions if a.option_strings and not set(a.option_strings) & known
            and a.dest != "encoder_self_attention"]


def plugin_architecture(arch: str):
    from .. import register

    register()
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_csan.models.variant_transformer import VariantTransformerModel

    ours = sorted(a for a, m in ARCH_MODEL_REGISTRY.items() if isinstance(m, type) and issubclass(m, VariantTransformerModel)
                  and a != "transformer_variant")
    if arch not in ours:
        raise Refusal(f"--arch {arch} is not one of the plugin's architectures; allowed: {', '.join(ours)}")
    return ARCH_MODEL_REGISTRY[arch]


def read_source(folder: Path, name: str):
    """The source checkpoint, its configuration upgraded to fairseq's current form, and its
    model checked to be fairseq's own Transformer."""
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.models.transformer import TransformerModel

    from fairseq_csan.models.variant_transformer import VariantTransformerModel

    if not folder.is_dir():
        raise Refusal(f"--model {folder} is not a folder")
    checkpoint = folder / name
    if not checkpoint.is_file():
        found = sorted(p.name for p in folder.glob("*.pt"))
        raise Refusal(f"--model {folder} has no {name}" + (f"; it has {', '.join(found)}: give one with --checkpoint"
                                                                 if found else ""))
    state, arch = read_model_folder(folder, checkpoint, f"--model {folder}")
    cls = ARCH_MODEL_REGISTRY.get(arch)
    if cls is None or not issubclass(cls, TransformerModel) or issubclass(cls, VariantTransformerModel):
        what = "a model of the plugin already (fine-tune it as it is)" if cls and issubclass(cls, VariantTransformerModel) \
            else "not a fairseq Transformer"
        raise Refusal(f"{checkpoint} holds --arch {arch}: {what}; convert takes a model of fairseq's own "
                           "transformer architectures (transformer, transformer_wmt_en_de_big, ...)")
    return checkpoint, state


def build_converted(state: dict, arch: str, flags: dict, seed: int):
    """The converted model, its configuration, its new parameters and how each module's start
    (``start_as_standard``): the source's weights copied, through fairseq's own loader and upgrades."""
    import copy

    import torch
    from fairseq import tasks
    from fairseq.models import ARCH_CONFIG_REGISTRY
    from omegaconf import OmegaConf

    cfg = state["cfg"]
    task = tasks.setup_task(cfg.task)
    source = task.build_model(cfg.model)
    source.load_state_dict(state["model"], strict=True, model_cfg=cfg.model)  # fairseq's upgrades, then every weight
    args = copy.deepcopy(cfg.model) if isinstance(cfg.model, argparse.Namespace) else argparse.Namespace(
        **OmegaConf.to_container(cfg.model, resolve=True))  # the older form, upgraded: a config, not a Namespace
    args.arch = args._name = arch
    for dest, value in flags.items():
        setattr(args, dest, value)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(seed)  # the variant's own initial values, where it keeps them
    try:
        model = plugin_architecture(arch).build_model(args, task)
    except ValueError as error:  # a setting the model refuses, named by its flag
        raise Refusal(str(error)) from None
    theirs, ours = source.state_dict(), model.state_dict()
    missing = sorted(set(theirs) - set(ours))
    if missing:
        raise Refusal(f"--arch {arch} has no place for the source's {', '.join(missing[:3])}")
    for k, v in theirs.items():
        if ours[k].shape != v.shape:
            raise Refusal(f"the source's {k} is {tuple(v.shape)}, --arch {arch} makes it {tuple(ours[k].shape)}")
        ours[k] = v
    torch.nn.Module.load_state_dict(model, ours)  # the converted model's own settings buffer included
    starts = {}
    for name, module in model.named_modules():
        how = module.start_as_standard() if hasattr(module, "start_as_standard") else None
        if how:
            starts.setdefault(how, []).append(name)
    added = sorted(k for k in ours if k not in theirs and not k.endswith(model.SETTINGS_KEY))
    return model, args, added, starts


def name_hub_settings(cfg, given: dict) -> None:
    """The tokenizer and BPE given to convert (--tokenizer, --bpe) put into ``cfg`` where the
    source's checkpoint names none (fairseq's published models leave them to the caller of
    from_pretrained); one that contradicts what it names is refused."""
    from omegaconf import open_dict

    named = hub_settings(cfg)
    for what, name in given.items():
        if name is None:
            continue
        if named[what] and named[what] != name:
            raise Refusal(f"--{what} {name}: the source's checkpoint names --{what} {named[what]}; leave it out")
        if not named[what]:
            with open_dict(cfg):
                own = {"source_lang": cfg.task.source_lang, "target_lang": cfg.task.target_lang} if what == "tokenizer" \
                    else {"bpe_codes": "bpecodes"} if name in ("subword_nmt", "fastbpe") else {}  # the hub finds the file
                cfg[what] = {"_name": name, **own}
                setattr(cfg.model, what, name)  # a Namespace (the older form) or a config


def write_converted(source_folder: Path, checkpoint: Path, state: dict, arch: str, flags: dict, seed: int, folder: Path):
    from omegaconf import OmegaConf, open_dict

    from fairseq_csan.model_folder import sha256
    from fairseq_csan.modules.registry import get_self_attention, model_defining_flags

    cfg = state["cfg"]
    source_arch = cfg.model.arch
    model, args, added, starts = build_converted(state, arch, flags, seed)
    args.data = "."
    with open_dict(cfg):
        cfg.task.data = "."
        cfg.common.user_dir = None
        for key, value in decoding.generation_overrides().items():
            cfg.generation[key] = value
        cfg.dataset.batch_size, cfg.dataset.max_tokens = decoding.BATCH_SIZE, None
    saved = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # as fairseq saves it, the model's Namespace in it
    saved["model"] = args
    out = {"cfg": saved, "args": None, "model": model.state_dict(),
           "criterion": state.get("criterion"), "optimizer_history": state.get("optimizer_history") or [],
           "task_state": state.get("task_state") or {}, "extra_state": {"converted": True}, "last_optimizer_state": None}
    save_torch(out, folder / "model.pt")
    src, tgt = cfg.task.source_lang, cfg.task.target_lang
    for name in [f"dict.{src}.txt", f"dict.{tgt}.txt", *BPE_FILES]:
        if (source_folder / name).is_file():
            shutil.copyfile(source_folder / name, folder / name)
    own = model_defining_flags(get_self_attention(args.encoder_self_attention))
    settings = {f: getattr(args, f, None) for f in ["encoder_self_attention", *VARIANT_FLAGS, *own]}
    sizes = {f: getattr(args, f, None) for f in (
        "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_layers", "encoder_attention_heads", "decoder_embed_dim",
        "decoder_ffn_embed_dim", "decoder_layers", "decoder_attention_heads", "encoder_normalize_before",
        "decoder_normalize_before", "share_all_embeddings", "share_decoder_input_output_embed")}
    return {
        "source_lang": src, "target_lang": tgt, "arch": arch,
        "converted_from": {"folder": str(source_folder.resolve()), "checkpoint": checkpoint.name,
                           "sha256": sha256(checkpoint), "arch": source_arch},
        "settings": settings, "sizes": sizes, "seed": seed,
        "new_parameters": {"count": len(added), "names": added,
                           "start": [{"how": how, "modules": names} for how, names in starts.items()]
                           or ("none: the variant adds no parameter" if not added else
                               "the variant's usual initial values (seeded by --seed)")},
        **hub_settings(cfg), **decoding.generation_overrides(),
    }


def convert(source: Path, arch: str, flags: dict, out: Path, checkpoint_name: str = "model.pt", seed: int = 1,
            force: bool = False, hub: dict = None) -> str:
    plugin_architecture(arch)  # (registers our architectures and the loading fixes)
    refuse_overlaps({"--out": out}, {"--model": source})  # (an --out that is, holds or lies inside it)
    checkpoint, state = read_source(source, checkpoint_name)
    name_hub_settings(state["cfg"], hub or {})
    return write_model_folder(out, lambda folder: write_converted(source, checkpoint, state, arch, flags, seed, folder),
                              force, "convert")


def parser() -> Parser:
    p = Parser(prog="python -m fairseq_csan.recipes.convert", description=__doc__.split("\n\n")[0],
               epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--model", required=True, type=Path, metavar="SRC",
                   help="the Transformer's model folder (model.pt, dict.*.txt, bpecodes)")
    p.add_argument("--arch", required=True, help="the architecture to convert to, e.g. transformer_csan2d")
    p.add_argument("--out", required=True, type=Path, metavar="DST", help="the model folder to write")
    p.add_argument("--checkpoint", default="model.pt", help="the checkpoint file inside --model (default: model.pt)")
    p.add_argument("--tokenizer", help="the tokenizer the model was trained with (fairseq's name: moses, ...), where "
                   "its checkpoint names none, as fairseq's published models; kept for translate.py, the hub and "
                   "prepare --like")
    p.add_argument("--bpe", help="its BPE kind (subword_nmt for transformer.wmt16/wmt14, fastbpe for wmt19), likewise")
    p.add_argument("--seed", type=int, default=1, help="seed of the initial values a variant keeps (default: 1)")
    p.add_argument("--force", action="store_true", help="replace a different model folder that convert or export wrote")
    p.epilog += ("\n\nVARIANT FLAGS: the architecture's own (python -m fairseq_csan help fairseq-train --arch ARCH lists "
                 "them), checked as fairseq-train checks them.")
    return p


def parse(argv):
    """The options: --help and the base options before fairseq is imported; then, with the
    plugin registered, the variants' own flags, checked as fairseq-train checks them."""
    p = parser()
    p.parse_known_args(argv)  # (argv None: the command line's, as below)
    from .. import register

    register()  # the variants' flags
    actions = variant_flags()
    for action in actions:
        p._add_action(action)
    args, rest = p.parse_known_args(argv)
    if rest:
        raise Refusal(f"{rest[0]} is not a flag of convert: the model's sizes come from its checkpoint, and the flags "
                      f"that set the variant are {', '.join(sorted(a.option_strings[0] for a in actions))}")
    args.flags = {a.dest: getattr(args, a.dest) for a in actions if getattr(args, a.dest) is not None}
    return args


def main(argv=None):
    args = parse(argv)
    how = convert(args.model, args.arch, args.flags, args.out, args.checkpoint, args.seed, args.force,
                  {"tokenizer": args.tokenizer, "bpe": args.bpe})
    say(f"{args.out}: {how} (--arch {args.arch} from {args.model}; fine-tune with scripts/train.sh --finetune-from "
        f"{args.out}, or translate with python -m fairseq_csan.recipes.translate --model {args.out})")


if __name__ == "__main__":
    as_command(main)
