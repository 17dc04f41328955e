"""BLEU by source length (the context-aware paper's Figure 5): the test sentences split into
groups by source length, each system's BLEU in every group, and its gap to a baseline.

usage: python -m fairseq_csan.recipes.analysis.length_buckets --src SRC.tok --ref REF.tok --baseline BASE
           --system SYS [--system SYS2 ...] --out DIR [--groups 10 | --width 10] [--force]

BASE and SYS are evaluation folders of scripts/evaluate.sh (their hyp.tok) or NAME=FILE.
SRC.tok is the tokenised source (the prepared task's tok/test.SRC); a sentence's length is
its number of tokens. The paper divides the sentences "into 10 disjoint groups according to
their lengths" (following Tu et al. 2016) without saying how; by default we sort by length
and cut into --groups groups of nearly equal size (a run of equal lengths is never split, so
there may be fewer groups), so every group's BLEU rests on about as many sentences; --width W instead makes groups of fixed width [1, W], [W+1, 2W], ... (Tu et al.'s
way; the last group takes every longer sentence). BLEU is tokenised, case-sensitive corpus
BLEU within the group.

Writes DIR/length_buckets.csv, .md and .png (the gaps as lines, the baseline's BLEU in grey
on the right-hand axis, as the paper draws it).
"""

from pathlib import Path

from ..command_line import Parser, positive
from ..runner import Refusal, say
from .common import bleu_stats, check_lengths, outputs, pyplot, read_lines, save_figure, system, write_table


def equal_groups(lengths, groups):
    """Sentence indices cut into about ``groups`` groups of nearly equal size by length, never
    splitting one length between two groups (so the groups' length ranges are disjoint)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    out, start = [], 0
    for g in range(1, groups + 1):
        end = round(g * len(order) / groups)
        while 0 < end < len(order) and lengths[order[end]] == lengths[order[end - 1]]:
            end += 1  # keep a run of equal lengths together
        if end > start:
            out.append(order[start:end])
            start = end
    return out


def width_groups(lengths, width, groups):
    """Fixed-width groups [1, W], [W+1, 2W], ...; the last takes every longer sentence."""
    out = [[] for _ in range(groups)]
    for i, length in enumerate(lengths):
        out[min(max(length - 1, 0) // width, groups - 1)].append(i)
    return [g for g in out if g]


def analyse(lengths, reference, baseline, systems, groups):
    """Rows (group, lengths, sentences, system, BLEU, baseline BLEU, gap)."""
    rows = []
    for number, members in enumerate(groups, 1):
        span = f"{min(lengths[i] for i in members)}-{max(lengths[i] for i in members)}"
        refs = [reference[i] for i in members]
        base = bleu_stats([baseline[1][i] for i in members], refs).score
        for name, hyps in systems:
            score = bleu_stats([hyps[i] for i in members], refs).score
            rows.append([number, span, len(members), name, score, base, score - base])
    return rows


def plot(rows, baseline_name, path):
    plt = pyplot()
    spans = list(dict.fromkeys((r[0], r[1]) for r in rows))
    xs = list(range(len(spans)))
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name in dict.fromkeys(r[3] for r in rows):
        ax.plot(xs, [r[6] for r in rows if r[3] == name], marker="o", label=name)
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xticks(xs)
    ax.set_xticklabels([s for _, s in spans], rotation=45, fontsize=8)
    ax.set_xlabel("source length (tokens)")
    ax.set_ylabel(f"BLEU gap over {baseline_name}")
    right = ax.twinx()
    first = next(r[3] for r in rows)
    right.plot(xs, [r[5] for r in rows if r[3] == first], color="grey", linestyle="--", label=baseline_name)
    right.set_ylabel(f"{baseline_name} BLEU", color="grey")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    save_figure(fig, path)


def parse(argv):
    parser = Parser(prog="python -m fairseq_csan.recipes.analysis.length_buckets", description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", required=True, type=Path, help="tokenised source")
    parser.add_argument("--ref", required=True, type=Path, help="tokenised reference")
    parser.add_argument("--baseline", required=True, help="evaluation folder or NAME=FILE")
    parser.add_argument("--system", required=True, action="append", help="evaluation folder or NAME=FILE")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--groups", type=positive, default=10, help="number of groups (default 10)")
    parser.add_argument("--width", type=positive, help="fixed group width in tokens instead of equal-size groups")
    parser.add_argument("--force", action="store_true",
                        help="replace the outputs this analysis wrote (never anyone else's)")
    return parser.read(argv)[0]


def main(argv=None):
    args = parse(argv)
    source, reference = read_lines(args.src), read_lines(args.ref)
    if len(source) != len(reference):
        raise Refusal(f"{args.src} has {len(source)} lines, {args.ref} {len(reference)}")
    baseline, systems = system(args.baseline), [system(s) for s in args.system]
    check_lengths(reference, [baseline, *systems])
    csv_path, md_path, png_path = outputs(args.out, "length_buckets", args.force)
    lengths = [len(line.split()) for line in source]
    groups = width_groups(lengths, args.width, args.groups) if args.width else equal_groups(lengths, args.groups)
    rows = analyse(lengths, reference, baseline, systems, groups)
    header = ["group", "source length", "sentences", "system", "BLEU", "baseline BLEU", "gap"]
    print(write_table(csv_path, md_path, header, rows, f"Baseline: {baseline[0]}. Tokenised, case-sensitive BLEU per group."))
    plot(rows, baseline[0], png_path)
    say(f"wrote {csv_path}, {md_path}, {png_path}")


if __name__ == "__main__":
    from ..runner import as_command

    as_command(main)
