"""BLEU by source length (the context-aware paper's Figure 5): the test sentences split into
groups by source length, each system's BLEU in every group, and its gap to a baseline.

docs/analysis.md, "Length buckets", says how the groups are cut (the paper does not) and what is plotted.
"""

from pathlib import Path

from ..command_line import positive
from ..runner import Refusal, as_command, say
from ..score import tokenised_bleu as bleu
from .common import analysis_parser, compared, figure, outputs, read_lines, write_table


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
        base = bleu([baseline[1][i] for i in members], refs).score
        for name, hyps in systems:
            score = bleu([hyps[i] for i in members], refs).score
            rows.append([number, span, len(members), name, score, base, score - base])
    return rows


def plot(rows, baseline_name, path):
    spans = list(dict.fromkeys((r[0], r[1]) for r in rows))
    xs = list(range(len(spans)))
    with figure(path, figsize=(6, 3.6)) as (ax,):
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


def main(argv=None):
    parser = analysis_parser("length_buckets", __doc__, systems=True)
    parser.add_argument("--src", required=True, type=Path, help="tokenised source")
    parser.add_argument("--groups", type=positive, default=10, help="number of groups (default 10)")
    parser.add_argument("--width", type=positive, help="fixed group width in tokens instead of equal-size groups")
    args, _ = parser.read(argv)
    source = read_lines(args.src)
    reference, baseline, systems = compared(args)
    if len(source) != len(reference):
        raise Refusal(f"{args.src} has {len(source)} lines, {args.ref} {len(reference)}")
    paths = outputs(args.out, "length_buckets", args.force)
    lengths = [len(line.split()) for line in source]
    groups = width_groups(lengths, args.width, args.groups) if args.width else equal_groups(lengths, args.groups)
    rows = analyse(lengths, reference, baseline, systems, groups)
    write_table(paths, ["group", "source length", "sentences", "system", "BLEU", "baseline BLEU", "gap"], rows,
                f"Baseline: {baseline[0]}. Tokenised, case-sensitive BLEU per group.")
    plot(rows, baseline[0], paths[2])
    say(f"wrote {', '.join(map(str, paths))}")


if __name__ == "__main__":
    as_command(main)
