"""N-gram gap (the CSAN paper's Figure 3): how much better each system translates n-grams of
each order than a baseline.

usage: python -m fairseq_csan.recipes.analysis.ngram_gap --ref REF.tok --baseline BASE --system SYS
           [--system SYS2 ...] --out DIR [--max-order 4] [--force]

BASE and SYS are evaluation folders of scripts/evaluate.sh (their hyp.tok) or NAME=FILE with
one tokenised hypothesis per line; REF.tok is the tokenised reference (the prepared task's
tok/test.TGT). For every order n, the corpus-level modified n-gram precision of BLEU
(Papineni et al. 2002: clipped n-gram matches over hypothesis n-grams, case-sensitive, on the
given tokens), in percent; the gap is the system's minus the baseline's. The paper's figure
calls the y-axis "Gap of BLEU" without defining it further; the n-gram precision is the part
of BLEU that belongs to one order, so that is what we plot (the CSV also has BLEU with the
orders up to n, for those who read it that way).

Writes DIR/ngram_gap.csv, .md and .png.
"""

from pathlib import Path

from ..command_line import Parser
from ..runner import say
from .common import bleu_stats, check_lengths, outputs, pyplot, read_lines, save_figure, system, write_table
from sacrebleu.metrics import BLEU  # noqa: E402


def precisions(hyps, refs, max_order):
    """Corpus modified n-gram precisions in percent, orders 1..max_order."""
    stats = bleu_stats(hyps, refs)
    return [100.0 * c / t if t else 0.0 for c, t in zip(stats.counts[:max_order], stats.totals[:max_order])]


def cumulative_bleu(hyps, refs, order):
    return BLEU(tokenize="none", force=True, max_ngram_order=order).corpus_score(hyps, [refs]).score


def analyse(reference, baseline, systems, max_order=4):
    """Rows (system, n, precision, baseline precision, gap, BLEU up to n, its gap)."""
    base_name, base_hyps = baseline
    base_p = precisions(base_hyps, reference, max_order)
    base_bleu = [cumulative_bleu(base_hyps, reference, n) for n in range(1, max_order + 1)]
    rows = []
    for name, hyps in systems:
        p = precisions(hyps, reference, max_order)
        for n in range(1, max_order + 1):
            bleu_n = cumulative_bleu(hyps, reference, n)
            rows.append([name, n, p[n - 1], base_p[n - 1], p[n - 1] - base_p[n - 1],
                         bleu_n, bleu_n - base_bleu[n - 1]])
    return rows


def plot(rows, baseline_name, path, max_order):
    plt = pyplot()
    names = list(dict.fromkeys(r[0] for r in rows))
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for i, name in enumerate(names):
        gaps = [r[4] for r in rows if r[0] == name]
        ax.bar([n - 0.4 + width * (i + 0.5) for n in range(1, max_order + 1)], gaps, width, label=name)
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xticks(range(1, max_order + 1))
    ax.set_xlabel("n-gram order")
    ax.set_ylabel(f"precision gap over {baseline_name} (points)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def main(argv=None):
    parser = Parser(prog="python -m fairseq_csan.recipes.analysis.ngram_gap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", required=True, type=Path, help="tokenised reference")
    parser.add_argument("--baseline", required=True, help="evaluation folder or NAME=FILE")
    parser.add_argument("--system", required=True, action="append", help="evaluation folder or NAME=FILE")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--max-order", type=int, default=4)
    parser.add_argument("--force", action="store_true",
                        help="replace the outputs this analysis wrote (never anyone else's)")
    args, _ = parser.read(argv)
    if not 1 <= args.max_order <= 9:
        parser.error("--max-order must be between 1 and 9")
    reference = read_lines(args.ref)
    baseline = system(args.baseline)
    systems = [system(s) for s in args.system]
    check_lengths(reference, [baseline, *systems])
    csv_path, md_path, png_path = outputs(args.out, "ngram_gap", args.force)
    rows = analyse(reference, baseline, systems, args.max_order)
    header = ["system", "n", "precision", "baseline precision", "gap", "BLEU up to n", "BLEU gap"]
    print(write_table(csv_path, md_path, header, rows,
                      f"Baseline: {baseline[0]}. Corpus modified n-gram precision (%), tokenised, case-sensitive."))
    plot(rows, baseline[0], png_path, args.max_order)
    say(f"wrote {csv_path}, {md_path}, {png_path}")


if __name__ == "__main__":
    from ..runner import as_command

    as_command(main)
