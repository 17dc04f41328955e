"""Training or decoding throughput of each architecture against the Transformer, side by side.

Not a test. Every architecture runs the very same batches, in rounds: each round runs one
batch through every model in a rotating order and then in the reverse order (A B C C B A), so
that drift in the machine's speed hits all of them alike. The ratio of an architecture in a
round is its throughput over the baseline's in that round; the table reports the median over
rounds and their range.

--mode train (default): forward + backward of the cross-entropy loss (no optimizer step) on
batches of at most --max-tokens tokens; throughput in target tokens/s.

--mode decode: fairseq's beam search (SequenceGenerator, --beam 4, --lenpen 0.6, the papers'
setting) in eval mode over batches of --batch-size source sentences; throughput in
sentences/s. The weights are untrained, so the end of sentence is banned until the batch's
longest source length and forced there: every model decodes the same number of steps.

On Linux the script re-executes itself with glibc's malloc told to keep freed memory
(MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_): otherwise every step of a
base model page-faults its activations in again, which on a 2-core machine costs about a third
of the step and most of the noise. It speeds all models alike; --no-malloc-tuning turns it off.

Batches: sentence pairs whose lengths are the word counts of real newstest2014 En-De pairs
(from ../shared/data/wmt14_en_de, or --lengths-from), sorted by length and cut into batches
of at most --max-tokens tokens, as fairseq batches them; token ids are random.

--table1 times every architecture of the CSAN paper's Table 1 in one run: the seven locality
baselines, 1D-CSAN and 2D-CSAN, each against the Transformer.

usage: python scripts/benchmark.py [--mode train|decode] [--size base|big] [--rounds 5]
                                   [--max-tokens 4096] [--batch-size 64] [--archs ARCH ... | --table1]
                                   [--out FILE]
"""

import argparse
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import fairseq_csan  # noqa: F401  (registers the architectures)
from fairseq import options
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator
from fairseq.tasks.translation import TranslationTask

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LENGTHS = REPO.parent / "shared" / "data" / "wmt14_en_de" / "newstest2014"
BASELINE = {"base": "transformer", "big": "transformer_vaswani_wmt_en_de_big"}
TABLE1 = ["transformer_bidirect", "transformer_relpos", "transformer_neighbor", "transformer_local_hard",
          "transformer_local_soft", "transformer_block", "transformer_cnn", "transformer_csan1d", "transformer_csan2d"]
MALLOC_TUNING = {
    "MALLOC_MMAP_THRESHOLD_": str(4 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(64 << 30),
    "MALLOC_TOP_PAD_": str(1 << 30),
}


def build(arch, dictionary, seed=0):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, ["/dev/null", "--task", "translation", "-s", "src", "-t", "tgt", "--arch", arch,
                 "--share-all-embeddings"])
    task = TranslationTask(args, dictionary, dictionary)
    torch.manual_seed(seed)
    return task.build_model(args).train()


def length_pairs(prefix: Path, max_len: int):
    src = (prefix.parent / f"{prefix.name}.en").read_text(encoding="utf-8").splitlines()
    tgt = (prefix.parent / f"{prefix.name}.de").read_text(encoding="utf-8").splitlines()
    pairs = [(len(s.split()) + 1, len(t.split()) + 1) for s, t in zip(src, tgt)]  # + </s>
    return [(s, t) for s, t in pairs if 1 < s <= max_len and 1 < t <= max_len]


def make_batches(pairs, max_tokens, vocab, n_batches, seed):
    """fairseq-style batches: sorted by length, each at most max_tokens (padded) tokens."""
    pairs = sorted(pairs)
    batches, current = [], []
    for pair in pairs:
        longest = max(max(p) for p in current + [pair])
        if current and longest * (len(current) + 1) > max_tokens:
            batches.append(current)
            current = []
        current.append(pair)
    batches.append(current)
    rng = random.Random(seed)
    chosen = rng.sample(batches, min(n_batches, len(batches)))
    gen = torch.Generator().manual_seed(seed)
    out = []
    for batch in chosen:
        B, S, T = len(batch), max(p[0] for p in batch), max(p[1] for p in batch)
        src = torch.full((B, S), 1, dtype=torch.long)  # pad = 1; sources left-padded as in fairseq
        tgt = torch.full((B, T), 1, dtype=torch.long)
        prev = torch.full((B, T), 1, dtype=torch.long)
        for b, (s, t) in enumerate(batch):
            src[b, S - s:] = torch.randint(4, vocab, (s,), generator=gen)
            src[b, -1] = 2  # </s>
            tgt[b, :t] = torch.randint(4, vocab, (t,), generator=gen)
            tgt[b, t - 1] = 2
            prev[b, 0] = 2
            prev[b, 1:t] = tgt[b, : t - 1]
        out.append((src, torch.tensor([p[0] for p in batch]), prev, tgt))
    return out


def make_source_batches(pairs, batch_size, vocab, n_batches, seed):
    """Batches of ``batch_size`` source sentences of similar length (sorted, then cut)."""
    lengths = sorted(s for s, _ in pairs)
    chunks = [lengths[i:i + batch_size] for i in range(0, len(lengths) - batch_size + 1, batch_size)]
    chosen = random.Random(seed).sample(chunks, min(n_batches, len(chunks)))
    gen = torch.Generator().manual_seed(seed)
    out = []
    for chunk in chosen:
        S = max(chunk)
        src = torch.full((len(chunk), S), 1, dtype=torch.long)  # left-padded
        for b, s in enumerate(chunk):
            src[b, S - s:] = torch.randint(4, vocab, (s,), generator=gen)
            src[b, -1] = 2
        out.append((src, torch.tensor(chunk)))
    return out


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def train_step(model, batch):
    src, src_lengths, prev, tgt = batch
    logits, _ = model(src, src_lengths, prev)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), tgt.view(-1), ignore_index=1, reduction="sum")
    loss.backward()
    model.zero_grad(set_to_none=True)


def decode_step(model, batch, dictionary, beam):
    src, src_lengths = batch
    steps = int(src_lengths.max())
    generator = SequenceGenerator([model], dictionary, beam_size=beam, len_penalty=0.6,
                                  max_len_a=0, max_len_b=steps, min_len=steps)
    generator.forward({"net_input": {"src_tokens": src, "src_lengths": src_lengths}})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", nargs="+", default=["transformer_csan1d", "transformer_csan2d", "transformer_ctxaware"])
    parser.add_argument("--table1", action="store_true",
                        help="instead of --archs: the CSAN paper's Table 1 (seven baselines, csan1d, csan2d)")
    parser.add_argument("--mode", choices=["train", "decode"], default="train")
    parser.add_argument("--size", choices=["base", "big"], default="base")
    parser.add_argument("--max-tokens", type=int, default=4096, help="training batch size in tokens")
    parser.add_argument("--batch-size", type=int, default=64, help="decoding batch size in sentences")
    parser.add_argument("--beam", type=int, default=4, help="decoding beam size")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (one batch per model each)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument("--vocab", type=int, default=32000, help="joined dictionary size")
    parser.add_argument("--lengths-from", type=Path, default=DEFAULT_LENGTHS,
                        help="prefix of an .en/.de pair of files whose word counts give the lengths")
    parser.add_argument("--max-len", type=int, default=128)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    parser.add_argument("--no-malloc-tuning", action="store_true", help="keep glibc malloc's defaults")
    args = parser.parse_args()
    tuned = all(os.environ.get(k) == v for k, v in MALLOC_TUNING.items())
    if not args.no_malloc_tuning and not tuned and platform.system() == "Linux":
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **MALLOC_TUNING})
    torch.set_num_threads(args.threads)

    if not Path(f"{args.lengths_from}.en").exists():
        sys.exit(f"no length source at {args.lengths_from}.en; give --lengths-from PREFIX")
    dictionary = Dictionary()
    for i in range(args.vocab - len(dictionary)):
        dictionary.add_symbol(f"w{i}")
    baseline = BASELINE[args.size]
    chosen = TABLE1 if args.table1 else args.archs
    archs = [baseline] + [a if args.size == "base" or a.endswith("_big") else a + "_big" for a in chosen]
    pairs = length_pairs(args.lengths_from, args.max_len)
    n_batches = args.warmup + args.rounds
    if args.mode == "train":
        batches = make_batches(pairs, args.max_tokens, len(dictionary), n_batches, args.seed)
        step = train_step
    else:
        batches = make_source_batches(pairs, args.batch_size, len(dictionary), n_batches, args.seed)
        step = lambda model, batch: decode_step(model, batch, dictionary, args.beam)  # noqa: E731
    models = {a: build(a, dictionary) for a in archs}
    if args.mode == "decode":
        for model in models.values():
            model.eval()
    params = {a: sum(p.numel() for p in m.parameters()) for a, m in models.items()}

    tokens = {a: [] for a in archs}
    seconds = {a: [] for a in archs}
    for r, batch in enumerate(batches):
        order = archs[r % len(archs):] + archs[: r % len(archs)]
        units = int(batch[3].ne(1).sum()) if args.mode == "train" else batch[0].size(0)
        elapsed = dict.fromkeys(archs, 0.0)
        for arch in order + order[::-1]:
            start = time.perf_counter()
            step(models[arch], batch)
            elapsed[arch] += time.perf_counter() - start
        if r >= args.warmup:
            for arch in archs:
                tokens[arch].append(2 * units)
                seconds[arch].append(elapsed[arch])
        label = "warm-up" if r < args.warmup else f"round {r - args.warmup + 1}/{args.rounds}"
        what = f"{units} target tokens" if args.mode == "train" else f"source length up to {batch[0].size(1)}"
        ratios = " ".join(f"{a} {elapsed[baseline] / elapsed[a]:.3f}" for a in archs[1:])
        print(f"[benchmark] {label}: {batch[0].size(0)} sentences, {what}; ratios {ratios}", file=sys.stderr)

    src_len = statistics.mean(p[0] for p in pairs)
    if args.mode == "train":
        what = f"Training throughput, forward + backward, {args.size} dimensions, batches of at most {args.max_tokens} tokens"
        unit = "target tokens/s"
    else:
        what = (f"Beam-search decoding throughput (beam {args.beam}, length penalty 0.6), {args.size} dimensions, "
                f"batches of {args.batch_size} sentences, each decoded to the batch's longest source length")
        unit = "sentences/s"
    lines = [
        f"{what} (mean source length {src_len:.1f} tokens, lengths of "
        f"{args.lengths_from.name}), {args.rounds} rounds (A B C C B A) after {args.warmup} warm-up.",
        f"Machine: {cpu_name()}, {os.cpu_count()} cores, {args.threads} threads, torch {torch.__version__}, "
        f"Python {platform.python_version()}, malloc tuning {'on' if tuned else 'off'}.",
        "",
        f"| architecture | parameters | {unit} (median) | ratio to baseline (median) | ratio range |",
        "|---|---|---|---|---|",
    ]
    for arch in archs:
        tps = [t / s for t, s in zip(tokens[arch], seconds[arch])]
        ratios = [(t / s) / (tb / sb) for t, s, tb, sb in zip(tokens[arch], seconds[arch], tokens[baseline], seconds[baseline])]
        lines.append(
            f"| {arch} | {params[arch] / 1e6:.2f}M | {statistics.median(tps):.{0 if args.mode == 'train' else 2}f} | "
            f"{statistics.median(ratios):.3f} | {min(ratios):.3f}-{max(ratios):.3f} |"
        )
    lines += ["", "Command: python scripts/benchmark.py " + " ".join(sys.argv[1:])]
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
