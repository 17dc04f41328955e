"""Window and area sweep (the CSAN paper's Figure 2): dev BLEU of 1D-CSAN against the window
size M, and of 2D-CSAN against the number of heads N in its area (window fixed).

docs/analysis.md, "Window and area sweep", says what it reads from the sweep and what it plots.
"""

from pathlib import Path

from ..runner import RESULTS, Refusal, as_command, say
from ..sweep import SWEEP
from .common import analysis_parser, figure, outputs, write_table

LABELS = {"window": "1D-CSAN: window size M", "heads": "2D-CSAN: heads N in the area"}


def collect(sweep: Path, metric: str):
    """Rows (kind, value, score, run folder), sorted by kind then value."""
    rows = []
    for run in sorted(p for p in sweep.iterdir() if p.is_dir()) if sweep.is_dir() else []:
        if not SWEEP.exists(run):  # a point's score without the record of which point it is: never guessed
            if RESULTS.path(run / "eval").is_file():
                raise Refusal(f"{run} has an evaluation but no {SWEEP.file} (which point of the sweep it is): run "
                              "scripts/sweep.sh for it again, or move the folder out of --sweep")
            continue
        settings, results = SWEEP.read(run), RESULTS.read(run / "eval")
        if results is None:
            say(f"{run.name}: no eval/results.json yet; left out")
        else:
            rows.append([settings["kind"], settings["value"], results[metric], run.name])
    if not rows:
        raise Refusal(f"no evaluated runs under {sweep} (run scripts/sweep.sh first)")
    return sorted(rows, key=lambda r: (r[0] != "window", r[1]))


def plot(rows, metric, path):
    kinds = list(dict.fromkeys(r[0] for r in rows))
    with figure(path, 1, len(kinds), figsize=(4 * len(kinds), 3.2)) as axes:
        for ax, kind in zip(axes, kinds):
            xs, ys = [r[1] for r in rows if r[0] == kind], [r[2] for r in rows if r[0] == kind]
            ax.plot(xs, ys, marker="o")
            best = max(range(len(ys)), key=ys.__getitem__)
            ax.plot([xs[best]], [ys[best]], marker="*", markersize=14, color="tab:red")
            ax.set_xticks(xs)
            ax.set_xlabel(LABELS.get(kind, kind))
            ax.set_ylabel(f"dev {metric}")


def main(argv=None):
    parser = analysis_parser("window_sweep", __doc__)
    parser.add_argument("--sweep", required=True, type=Path, help="the --out of scripts/sweep.sh")
    parser.add_argument("--metric", choices=["bleu_tok", "sacrebleu"], default="bleu_tok")
    args, _ = parser.read(argv)
    rows = collect(args.sweep, args.metric)
    paths = outputs(args.out, "window_sweep", args.force)
    write_table(paths, ["kind", "value", args.metric, "run"], rows,
                f"Dev-set {args.metric} of each run of {args.sweep}.")
    plot(rows, args.metric, paths[2])


if __name__ == "__main__":
    as_command(main)
