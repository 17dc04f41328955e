"""N-gram gap (the CSAN paper's Figure 3): how much better each system translates n-grams of
each order than a baseline.

docs/analysis.md, "N-gram gap", says what is measured (the modified n-gram precision of BLEU) and why.
"""

from ..runner import as_command, say
from ..score import tokenised_bleu as bleu
from .common import analysis_parser, compared, figure, outputs, write_table


def precisions(hyps, refs, max_order):
    """Corpus modified n-gram precisions in percent, orders 1..max_order."""
    stats = bleu(hyps, refs, max_order)
    return [100.0 * c / t if t else 0.0 for c, t in zip(stats.counts, stats.totals)]


def analyse(reference, baseline, systems, max_order=4):
    """Rows (system, n, precision, baseline precision, gap, BLEU up to n, its gap)."""
    orders = range(1, max_order + 1)

    def scores(hyps):  # the precisions, and BLEU up to each order
        return precisions(hyps, reference, max_order), [bleu(hyps, reference, n).score for n in orders]

    base = scores(baseline[1])
    return [[name, n, p, bp, p - bp, b, b - bb] for name, hyps in systems
            for n, p, b, bp, bb in zip(orders, *scores(hyps), *base)]


def plot(rows, baseline_name, path, max_order):
    names = list(dict.fromkeys(r[0] for r in rows))
    width = 0.8 / len(names)
    with figure(path, figsize=(5, 3.4)) as (ax,):
        for i, name in enumerate(names):
            gaps = [r[4] for r in rows if r[0] == name]
            ax.bar([n - 0.4 + width * (i + 0.5) for n in range(1, max_order + 1)], gaps, width, label=name)
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.set_xticks(range(1, max_order + 1))
        ax.set_xlabel("n-gram order")
        ax.set_ylabel(f"precision gap over {baseline_name} (points)")
        ax.legend(fontsize=8)


def main(argv=None):
    parser = analysis_parser("ngram_gap", __doc__, systems=True)
    parser.add_argument("--max-order", type=int, default=4)
    args, _ = parser.read(argv)
    if not 1 <= args.max_order <= 9:
        parser.error("--max-order must be between 1 and 9")
    reference, baseline, systems = compared(args)
    paths = outputs(args.out, "ngram_gap", args.force)
    rows = analyse(reference, baseline, systems, args.max_order)
    write_table(paths, ["system", "n", "precision", "baseline precision", "gap", "BLEU up to n", "BLEU gap"], rows,
                f"Baseline: {baseline[0]}. Corpus modified n-gram precision (%), tokenised, case-sensitive.")
    plot(rows, baseline[0], paths[2], args.max_order)
    say(f"wrote {', '.join(map(str, paths))}")


if __name__ == "__main__":
    as_command(main)
