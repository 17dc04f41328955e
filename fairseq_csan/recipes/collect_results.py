"""Collect evaluated runs into a markdown table shaped like the papers' Table 2.

docs/recipes.md, "Evaluation: scripts/evaluate.sh", says what the table holds (its last paragraph).
"""

from pathlib import Path

from .command_line import Parser
from .runner import RESULTS, Refusal, as_command, check_owned, write_file

TASK_TITLES = {"wmt14_en_de": "WMT14 En⇒De", "wmt17_zh_en": "WMT17 Zh⇒En", "wat17_ja_en": "WAT17 Ja⇒En"}
METRICS = {"bleu_tok": "tokenised BLEU", "bleu_compound": "compound-split BLEU", "sacrebleu": "sacreBLEU",
           "chrf": "chrF"}


def load(folders):
    runs = [RESULTS.read(folder) for folder in folders]
    for folder, run in zip(folders, runs):
        if run is None:
            raise Refusal(f"{RESULTS.path(folder)} not found (run scripts/evaluate.sh --out {folder} first)")
    return runs


def table(runs, metric="bleu_tok"):
    systems, tasks, cells = [], [], {}
    for run in runs:
        system, task = run["name"], run.get("task") or "?"
        if run.get("subset") not in (None, "test"):  # another test set or the dev set: its own column, by its name
            task = f"{task} {run.get('test_set') or run['subset']}"
        if system not in systems:
            systems.append(system)
        if task not in tasks:
            tasks.append(task)
        if (system, task) in cells:
            raise Refusal(f"two runs named '{system}' for {task}; give them distinct --name")
        cells[(system, task)] = run
    head, rule, column = ["System"], ["---"], "chrF" if metric == "chrf" else "BLEU"
    for task in tasks:
        title = TASK_TITLES.get(task, task)
        head += [f"{title} #Params", f"{title} Speed", f"{title} {column}"]
        rule += ["---:", "---:", "---:"]
    rows = ["| " + " | ".join(head) + " |", "| " + " | ".join(rule) + " |"]
    for system in systems:
        row = [system]
        for task in tasks:
            run = cells.get((system, task))
            if run is None:
                row += ["-", "-", "-"]
                continue
            value, train, bootstrap = run.get(metric), run.get("train") or {}, run.get("bootstrap") or {}
            # the mark of the paired bootstrap: of chrF for the chrF column, else of tokenised BLEU
            mark = (bootstrap.get("chrf") or {}).get("mark", "") if metric == "chrf" else run.get("mark", "")
            row += [f"{train['params'] / 1e6:.1f}M" if train.get("params") else "-",
                    f"{train['steps_per_s']:.2f}" if train.get("steps_per_s") is not None else "-",
                    f"{value:.2f}{mark}" if value is not None else "-"]
        rows.append("| " + " | ".join(row) + " |")
    baselines = sorted({r["bootstrap"]["baseline"] for r in runs if r.get("bootstrap")})
    samples = sorted({r["bootstrap"]["samples"] for r in runs if r.get("bootstrap")})
    notes = ["", f"{column}: {METRICS.get(metric, metric)} on each task's test set. Speed: training steps/s (mean of "
             "fairseq's 'ups'). #Params: trained parameters."]
    if baselines:
        how = "chrF, {} samples (sacreBLEU's PairedTest)" if metric == "chrf" else \
            "tokenised BLEU, {} samples (sacreBLEU --paired-bs)"
        notes.append(f"⇑ / ↑: significantly better than the baseline ({', '.join(baselines)}) at p < 0.01 / 0.05, "
                     f"⇓ / ↓ worse; paired bootstrap resampling of {how.format('/'.join(map(str, samples)))}.")
    signatures = sorted({r.get(f"{metric}_signature") for r in runs if metric in ("sacrebleu", "chrf")} - {None})
    if signatures:
        notes.append(f"{METRICS[metric]} signature: " + "; ".join(signatures))
    return "\n".join(rows + notes) + "\n"


def main(argv=None):
    p = Parser(prog="python -m fairseq_csan.recipes.collect_results", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="evaluation folders (scripts/evaluate.sh --out)")
    p.add_argument("--metric", choices=sorted(METRICS), default="bleu_tok")
    p.add_argument("--output", type=Path, help="write the table here as well as printing it")
    p.add_argument("--force", action="store_true", help="replace an --output that collect_results wrote "
                   "(a file of anyone else's, or one changed since, is never replaced)")
    args, _ = p.read(argv)
    if args.output:
        check_owned([args.output], "collect_results", args.force, "--output", writable=True)
    text = table(load(args.runs), args.metric)
    if args.output:
        write_file(args.output, text, "collect_results")
    print(text, end="")


if __name__ == "__main__":
    as_command(main)
