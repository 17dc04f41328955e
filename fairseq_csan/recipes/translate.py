"""Translate a raw text file with a trained model, with exactly the recipe's pre- and
post-processing.

The model is an exported model folder (--model), or a checkpoint with the prepared task
folder it was trained on (--data, --checkpoint). --output gets one translation a line, always
as many lines as the input, and --output.tok the tokenised ones. docs/translation.md says how lines
are read and translated (its translate.py section); what translate replaces and refuses is in
docs/recipes.md, "What each command owns, reuses and redoes".
"""

import argparse
import os
import time
from pathlib import Path

from . import decoding
from .command_line import UNCHECKED, Parser
from .runner import EXPORT, Refusal, WriterLock, as_command, check_owned, refuse_overlaps, say, write_file

BUFFER_BATCHES = 8  # batches decoded between two progress reports


def preprocess(lines, src: str, codes: Path, pretokenized: bool = False):
    """The recipe's subword lines for raw ``lines`` (tokeniser, then BPE), as the hub model
    of a task folder makes them; an empty line stays empty."""
    from fairseq.data.encoders import build_bpe

    from .text import line_tokenizer

    tokenize = line_tokenizer(src, pretokenized)
    bpe = build_bpe(argparse.Namespace(bpe="subword_nmt", bpe_codes=str(codes), bpe_separator="@@"))
    return [bpe.encode(t) if t else "" for t in map(tokenize, lines)]


def load(args):
    """The hub model (fairseq's GeneratorHubInterface) of --model, or of --checkpoint on --data."""
    from .. import register

    register()  # our architectures and --tokenizer csan_recipe
    from fairseq import checkpoint_utils, hub_utils
    from fairseq.models.transformer import TransformerModel
    from omegaconf import open_dict

    from fairseq_csan.model_folder import DamagedModelFolder

    from .export import check_dictionaries, check_sealed, hub_overrides, load_state, source_codes
    from .task import PreparedTask

    try:  # a damaged model folder (or a checkpoint inside one: the folder is checked) is named
        if args.model:
            check_sealed(args.model, args.unchecked)
            hub = TransformerModel.from_pretrained(str(args.model))
        else:
            task = PreparedTask.open(args.data)
            overrides = hub_overrides(task, data=str(task.data_bin), bpe_codes=str(source_codes(task)))
            state = load_state(args.checkpoint, overrides)  # a checkpoint of another task is named before fairseq's
            check_dictionaries(state, task, args.checkpoint, args.unchecked)  # size-mismatch traceback
            models, cfg, fairseq_task = checkpoint_utils.load_model_ensemble_and_task(
                [str(args.checkpoint)], arg_overrides=overrides, state=state)  # read once
            hub = hub_utils.GeneratorHubInterface(cfg, fairseq_task, models)
    except DamagedModelFolder as error:
        raise Refusal(str(error)) from None
    if not getattr(hub.cfg.tokenizer, "_name", None) or not getattr(hub.cfg.bpe, "_name", None):
        raise Refusal(f"{args.model} names no tokenizer or BPE in its configuration; export it with "
                      "python -m fairseq_csan.recipes.export, or give them to recipes.convert (--tokenizer, --bpe)")
    with open_dict(hub.cfg):
        hub.cfg.dataset.batch_size = args.batch_size
        hub.cfg.dataset.max_tokens = None
    hub.eval()
    import torch

    # the quick start's device rule (DEVICE=auto): the GPU when torch sees one; --cpu forces the CPU
    if not args.cpu and torch.cuda.is_available():
        hub.cuda()
    elif args.fp16:
        raise Refusal("--fp16 decodes on a GPU, and torch sees none here; leave out --fp16")
    if args.fp16:
        hub.half()
    return hub


def pieces(tokens, limit: int):
    """Cut a list of subword tokens into pieces of at most ``limit`` tokens, between words
    (after a token without the BPE continuation mark) unless a word is longer than ``limit``."""
    out = []
    while len(tokens) > limit:
        # aim at even pieces (no stub at the end); cut at the word boundary nearest that size
        size = -(-len(tokens) // -(-len(tokens) // limit))
        ends = [i for i in range(1, limit + 1) if not tokens[i - 1].endswith("@@")]
        cut = min(ends, key=lambda i: (abs(i - size), -i)) if ends else size
        out.append(tokens[:cut])
        tokens = tokens[cut:]
    return out + [tokens]


def translate_lines(hub, lines, beam: int, lenpen: float, progress_every: float = 30.0, log=say):
    """(tokenised, detokenised) translations of raw ``lines``, line for line, in batches of
    the hub's ``cfg.dataset.batch_size`` sentences."""
    limit = hub.max_positions[0] - 1 if hub.max_positions and hub.max_positions[0] else None  # + end of sentence
    jobs = []  # (line index, subword text of one piece)
    for number, line in enumerate(lines, 1):
        subwords = hub.apply_bpe(hub.tokenize(line)).split() if line.strip() else []
        if not subwords:
            continue  # an empty line gets an empty translation, not one the model makes up
        parts = pieces(subwords, limit) if limit else [subwords]
        if len(parts) > 1:
            log(f"line {number}: {len(subwords)} subword tokens, over the model's {limit + 1} source "
                f"positions (with the end of sentence): translated in {len(parts)} pieces")
        jobs += [(number - 1, " ".join(p)) for p in parts]

    results = []
    buffer = BUFFER_BATCHES * hub.cfg.dataset.batch_size
    last = time.time()
    for start in range(0, len(jobs), buffer):
        chunk = jobs[start:start + buffer]
        batched = hub.generate([hub.binarize(text) for _, text in chunk], beam=beam, lenpen=lenpen)
        results += [hub.remove_bpe(hub.string(hypos[0]["tokens"])) for hypos in batched]
        if time.time() - last >= progress_every:
            log(f"    {start + len(chunk)} of {len(jobs)} sentences")
            last = time.time()
    tokenised = [[] for _ in lines]
    for (index, _), hyp in zip(jobs, results):
        if hyp:
            tokenised[index].append(hyp)
    tokenised = [" ".join(parts) for parts in tokenised]
    return tokenised, [hub.detokenize(t) if t else "" for t in tokenised]


def parse(argv):
    p = Parser(prog="python -m fairseq_csan.recipes.translate", description=__doc__.split("\n\n")[0],
               epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--data", type=Path, help="the prepared task folder (examples/*/prepare.sh)")
    p.add_argument("--checkpoint", type=Path, help="a checkpoint: checkpoint_best.pt, or evaluate.sh's averaged.pt")
    p.add_argument("--model", type=Path, help="instead of --data and --checkpoint: a model folder that "
                                              "python -m fairseq_csan.recipes.export wrote")
    p.add_argument("--input", required=True, type=Path,
                   help="raw text in the source language, one sentence a line ('-': standard input)")
    p.add_argument(UNCHECKED[0], action="store_true", help=UNCHECKED[1])
    p.add_argument("--output", type=Path, help="translations (default: INPUT with the target language's suffix)")
    decoding.add_options(p)
    p.add_argument("--force", action="store_true",
                   help="replace an --output that translate wrote before (a file of anyone else's is never replaced)")
    p.add_argument("--progress-every", type=float, default=30.0, metavar="S",
                   help="report the sentences done every S seconds (default 30)")
    args, _ = p.read(argv)
    if args.model and (args.data or args.checkpoint):
        raise Refusal("--model replaces --data and --checkpoint; give either --model, or --data and --checkpoint")
    if not args.model and not (args.data and args.checkpoint):
        raise Refusal("give --data and --checkpoint (a task folder and a checkpoint trained on it), or --model FOLDER")
    if args.fp16 and args.cpu:
        raise Refusal("--fp16 decodes on a GPU; leave out --cpu, or --fp16")
    return args


def target_language(args) -> str:
    """The model's target language, before it is loaded: its folder's seal, or its task's record."""
    if args.model:
        if not (args.model / "model.pt").is_file():
            raise Refusal(f"--model {args.model}: no model.pt there (write the folder with "
                          "python -m fairseq_csan.recipes.export)")
        return (EXPORT.read(args.model) or {}).get("target_lang") or "out"
    if not args.checkpoint.is_file():
        raise Refusal(f"--checkpoint {args.checkpoint}: no such file")
    from .task import PreparedTask

    return PreparedTask.open(args.data).tgt


def plan(args) -> dict:
    """The input's lines, and the output and its tokenised twin, each checked before the model loads."""
    tgt, stdin = target_language(args), str(args.input) in ("-", "/dev/stdin")
    if not stdin and not args.input.is_file():
        raise Refusal(f"--input {args.input}: {'a folder, not a file' if args.input.is_dir() else 'no such file'}")
    if stdin and args.output is None:
        raise Refusal(f"--input {args.input} (standard input) needs --output")
    output = args.output or args.input.with_name(f"{args.input.name}.{tgt}")
    tok_output = output.with_name(output.name + ".tok")
    outputs = {"--output": output, "the tokenised output beside --output": tok_output}
    for what, path in outputs.items():
        if not stdin and (path.resolve() == args.input.resolve() or (path.exists() and os.path.samefile(path, args.input))):
            raise Refusal(f"{what} {path} is the input --input {args.input}; give another --output")  # --force or not
    refuse_overlaps({"--output": output}, {"--model": args.model, "--checkpoint": args.checkpoint, "--data": args.data})
    check_owned(outputs.values(), "translate", args.force, "--output", writable=True)
    from .text import read_lines

    return {"lines": read_lines("-" if stdin else args.input), "output": output, "tok_output": tok_output}


def run(args, planned: dict) -> None:
    """Translate under the output's lock (checked again there: a run that just ended may have written it)."""
    lines, output, tok_output = planned["lines"], planned["output"], planned["tok_output"]
    with WriterLock(output, folder=False, what="translate"):
        check_owned([output, tok_output], "translate", args.force, "--output")
        hub = load(args)
        threads = decoding.cpu_threads(min(args.batch_size, len(lines)), args.threads)
        if threads and hub.device.type == "cpu":  # one thread for a batch of one sentence, or --threads N
            import torch

            torch.set_num_threads(threads)
        src, tgt = hub.cfg.task.source_lang, hub.cfg.task.target_lang
        say(f"{len(lines)} lines of {args.input} ({src} -> {tgt}) with {args.model or args.checkpoint}: beam {args.beam}, "
            f"length penalty {args.lenpen:g}")
        tokenised, detokenised = translate_lines(hub, lines, args.beam, args.lenpen, args.progress_every)
        for path, rows in ((tok_output, tokenised), (output, detokenised)):
            write_file(path, "".join(row + "\n" for row in rows), "translate")
    say(f"done: {output} ({tgt}, detokenised) and {tok_output} (tokenised)")


def main(argv=None):
    args = parse(argv)
    run(args, plan(args))


if __name__ == "__main__":
    as_command(main)
