"""Translate a raw text file with a trained model, with exactly the recipe's pre- and
post-processing.

usage: python -m fairseq_csan.recipes.translate --data DIR --checkpoint FILE --input RAW [--output OUT]
                                   [--beam 4] [--lenpen 0.6] [--batch-size 128] [--cpu] [--fp16] [--force]

--data is the task folder that examples/*/prepare.sh made and the model was trained on: its
recipe.env names the languages, bpe/ holds the BPE codes and data-bin/ the dictionaries. Each
line of --input (raw text in the source language, one sentence a line) is

1. tokenised as the recipe tokenised its training data (fairseq_csan/recipes/text.py: Moses for en
   and de, jieba for zh, MeCab for ja),
2. split into subwords with the recipe's BPE codes (subword-nmt, as `apply-bpe -c CODES`),
3. translated by fairseq-interactive with the evaluation's settings (scripts/evaluate.sh:
   beam 4, length penalty 0.6, output length at most the source length + 50; BPE removed),
4. Moses-detokenised in the target language, as fairseq_csan/recipes/score.py detokenises hypotheses.

OUT (default: INPUT.TGT, e.g. test.en.de) gets one translation a line, in input order, and
OUT.tok the tokenised translations. Nothing is overwritten without --force, and nothing is
written inside --data. On a prepared task's test set it gives what evaluate.sh writes to
hyp.detok and hyp.tok (tests/test_readme.py checks it on a test set decoded as one batch: the
two fairseq tools group sentences into batches differently, and beam search caps each output
at 1 x the longest source of its batch + 50 tokens, so on a large test set a hypothesis that
reaches that cap can differ).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[1]  # the fairseq_csan package, for --user-dir
BUFFER_BATCHES = 8  # fairseq-interactive reads and decodes this many batches at a time (progress in between)
from .text import make_tokenizer


def recipe(data: Path):
    env = data / "recipe.env"
    if not env.is_file() or not (data / "data-bin").is_dir():
        raise SystemExit(f"translate: {data} is not a prepared task folder (no recipe.env or data-bin/; "
                         "give the folder that examples/*/prepare.sh made)")
    settings = dict(line.split("=", 1) for line in env.read_text(encoding="utf-8").splitlines() if "=" in line)
    src, tgt = settings["src"], settings["tgt"]
    codes = data / "bpe" / "codes" if settings.get("joint_bpe") == "1" else data / "bpe" / f"codes.{src}"
    if not codes.is_file():
        raise SystemExit(f"translate: no BPE codes {codes} (prepare {data} again with examples/*/prepare.sh)")
    return src, tgt, codes


def preprocess(lines, src: str, codes: Path):
    from subword_nmt.apply_bpe import BPE

    tokenize = make_tokenizer(src)
    with open(codes, encoding="utf-8") as f:
        bpe = BPE(f)
    tokenised = [" ".join(tokenize(line).split()) if line.strip() else "" for line in lines]
    return [bpe.process_line(line) for line in tokenised]


def translate(args, src, tgt, bpe_lines, progress_every=30.0):
    """Run fairseq-interactive over the subword lines; the tokenised hypotheses in input order."""
    with tempfile.TemporaryDirectory() as tmp:
        bpe_file = Path(tmp) / f"input.{src}"
        bpe_file.write_text("".join(line + "\n" for line in bpe_lines), encoding="utf-8")
        command = ["fairseq-interactive", str(args.data / "data-bin"), "--user-dir", str(PLUGIN),
                   "--path", str(args.checkpoint), "--source-lang", src, "--target-lang", tgt,
                   "--input", str(bpe_file), "--buffer-size", str(BUFFER_BATCHES * args.batch_size),
                   "--batch-size", str(args.batch_size), "--beam", str(args.beam), "--lenpen", str(args.lenpen),
                   "--max-len-a", "1", "--max-len-b", "50", "--remove-bpe"]
        command += ["--cpu"] if args.cpu else []
        command += ["--fp16"] if args.fp16 else []
        hyps, log = {}, []
        last = time.time()
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              encoding="utf-8", env={**os.environ, "PYTHONUNBUFFERED": "1"}) as proc:
            for line in proc.stdout:
                if line.startswith("H-"):
                    head, _score, text = line.rstrip("\n").split("\t", 2)  # H-id, score, text
                    hyps[int(head[2:])] = text
                    if time.time() - last >= progress_every:
                        print(f"[translate]     {len(hyps)} of {len(bpe_lines)} sentences", file=sys.stderr)
                        last = time.time()
                elif not line.startswith(("S-", "W-", "D-", "P-")):
                    log.append(line)
        if proc.returncode != 0:
            sys.stderr.write("".join(log[-20:]))
            raise SystemExit(f"translate: fairseq-interactive failed (exit {proc.returncode}; its log above)")
    if sorted(hyps) != list(range(len(bpe_lines))):
        raise SystemExit(f"translate: fairseq-interactive returned {len(hyps)} translations for {len(bpe_lines)} lines")
    return [hyps[i] for i in range(len(bpe_lines))]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[2:]))
    parser.add_argument("--data", required=True, type=Path, help="the prepared task folder (examples/*/prepare.sh)")
    parser.add_argument("--checkpoint", required=True, type=Path,
                        help="a checkpoint: checkpoint_best.pt, or evaluate.sh's averaged.pt")
    parser.add_argument("--input", required=True, type=Path,
                        help="raw text in the source language, one sentence a line ('-': standard input)")
    parser.add_argument("--output", type=Path, help="translations (default: INPUT with the target language's suffix)")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--lenpen", type=float, default=0.6)
    parser.add_argument("--batch-size", type=int, default=128, help="sentences per batch (default 128, as evaluate.sh)")
    parser.add_argument("--cpu", action="store_true", help="decode on the CPU")
    parser.add_argument("--fp16", action="store_true", help="decode in fp16 (GPU)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --output")
    args = parser.parse_args(argv)

    src, tgt, codes = recipe(args.data)
    if not args.checkpoint.is_file():
        parser.error(f"--checkpoint {args.checkpoint}: no such file")
    stdin = str(args.input) == "-"
    if not stdin and not args.input.exists():
        parser.error(f"--input {args.input}: no such file")
    if stdin and args.output is None:
        parser.error("--input - (standard input) needs --output")
    for flag, value in (("--beam", args.beam), ("--batch-size", args.batch_size)):
        if value < 1:
            parser.error(f"{flag} must be a positive whole number, got {value}")
    output = args.output or args.input.with_name(f"{args.input.name}.{tgt}")
    if not stdin and output.resolve() == args.input.resolve():
        parser.error(f"--output {output} is the input; give another --output")
    if args.data.resolve() in output.resolve().parents:
        parser.error(f"--output {output} is inside --data {args.data}, which holds the recipe's files "
                     "(its references among them); give an --output elsewhere")
    tok_output = output.with_name(output.name + ".tok")
    existing = [str(p) for p in (output, tok_output) if p.exists()]
    if existing and not args.force:
        parser.error(f"{', '.join(existing)} exist; pass --force to overwrite")

    # lines end at "\n" only: str.splitlines() would also break at "\r", form feed, NEL and
    # U+2028 inside a line and shift every translation after it
    from .corpora import Missing, text_lines

    try:
        lines = list(text_lines(Path("/dev/stdin") if stdin else args.input))
    except Missing as error:
        parser.error(str(error))
    print(f"[translate] {len(lines)} lines of {args.input}: tokenise ({src}) and apply {codes}", file=sys.stderr)
    bpe_lines = preprocess(lines, src, codes)
    print(f"[translate] fairseq-interactive with {args.checkpoint}: beam {args.beam}, length penalty {args.lenpen}",
          file=sys.stderr)
    # an empty line gets an empty translation, not one the model makes up for nothing
    content = [i for i, line in enumerate(bpe_lines) if line.strip()]
    hyps = [""] * len(bpe_lines)
    for i, hyp in zip(content, translate(args, src, tgt, [bpe_lines[i] for i in content]) if content else []):
        hyps[i] = hyp
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(tgt)
    output.parent.mkdir(parents=True, exist_ok=True)
    tok_output.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    output.write_text("".join((detok.detokenize(h.split()) if h else "") + "\n" for h in hyps), encoding="utf-8")
    print(f"[translate] done: {output} ({tgt}, detokenised) and {tok_output} (tokenised)", file=sys.stderr)


if __name__ == "__main__":
    main()
