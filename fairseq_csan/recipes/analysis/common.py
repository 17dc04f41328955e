"""Shared by the analysis commands: reading systems, tokenised BLEU statistics, writing the
table (CSV and markdown) and the plot without overwriting anything unasked."""

import csv
import json
from pathlib import Path

from sacrebleu.metrics import BLEU


def read_lines(path):
    """The lines of a text file; a missing file stops the command with its name, not a traceback."""
    if not Path(path).is_file():
        raise SystemExit(f"error: no file {path}")
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def system(spec: str):
    """``NAME=HYP_FILE``, or an evaluation folder of scripts/evaluate.sh (its hyp.tok, named
    as in its results.json). Returns (name, hypothesis lines)."""
    if "=" in spec:
        name, path = spec.split("=", 1)
        return name, read_lines(path)
    folder = Path(spec)
    if (folder / "hyp.tok").is_file():
        results = folder / "results.json"
        name = json.loads(results.read_text(encoding="utf-8"))["name"] if results.is_file() else folder.name
        return name, read_lines(folder / "hyp.tok")
    raise SystemExit(f"'{spec}' is neither NAME=HYP_FILE nor an evaluation folder with hyp.tok")


def check_lengths(reference, systems):
    for name, hyps in systems:
        if len(hyps) != len(reference):
            raise SystemExit(f"{name} has {len(hyps)} lines, the reference {len(reference)}")


def bleu_stats(hyps, refs):
    """Tokenised case-sensitive corpus BLEU (no further tokenisation) and its statistics."""
    return BLEU(tokenize="none", force=True).corpus_score(hyps, [refs])


def outputs(out: Path, stem: str, force: bool):
    """The CSV, markdown and PNG paths of one analysis; refuses to overwrite without force, and
    refuses a second run of the same analysis into ``out`` while one writes there."""
    from ..runner import Refusal, WriterLock

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.{ext}" for ext in ("csv", "md", "png")]
    try:
        WriterLock(paths[0], folder=False, what=f"the {stem} analysis").acquire()  # held to the end
    except Refusal as error:
        raise SystemExit(f"error: {error}") from None
    existing = [str(p) for p in paths if p.exists()]
    if existing and not force:
        raise SystemExit(f"{', '.join(existing)} exist; pass --force to overwrite")
    return paths


def write_table(csv_path: Path, md_path: Path, header, rows, note=""):
    with open(csv_path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    text = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    text += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    if note:
        text += ["", note]
    md_path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return "\n".join(text)


def _cell(value):
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
