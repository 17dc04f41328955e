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


def _by(path: Path) -> str:
    return f"the {path.stem} analysis"  # the writer of OUT/STEM.csv, .md and .png, in their records


def written_by_analysis(path: Path) -> bool:
    """Whether ``path`` is an output its analysis wrote, unchanged since (its record)."""
    from ..runner import is_written_by

    return is_written_by(path, _by(path))


def outputs(out: Path, stem: str, force: bool):
    """The CSV, markdown and PNG paths of one analysis. An existing one is replaced only with
    ``force``, and only where this analysis wrote it and it is unchanged since (its record,
    runner.written); a file of anyone else's is refused, ``force`` or not. A second run of the
    same analysis into ``out`` while one writes there is refused too."""
    from ..runner import Refusal, WriterLock, check_replaceable

    paths = [out / f"{stem}.{ext}" for ext in ("csv", "md", "png")]
    try:
        for path in paths:
            check_replaceable(path, _by(path), force, "--out")
        out.mkdir(parents=True, exist_ok=True)
        WriterLock(paths[0], folder=False, what=_by(paths[0])).acquire()  # held to the end
    except Refusal as error:
        raise SystemExit(f"error: {error}") from None
    return paths


def write_table(csv_path: Path, md_path: Path, header, rows, note=""):
    """The table as CSV and markdown (each written whole, with its record); the markdown returned."""
    import io

    from ..runner import write_whole

    table = io.StringIO(newline="")
    writer = csv.writer(table)
    writer.writerow(header)
    writer.writerows(rows)
    write_whole(csv_path, table.getvalue(), _by(csv_path))
    text = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    text += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    if note:
        text += ["", note]
    write_whole(md_path, "\n".join(text) + "\n", _by(md_path))
    return "\n".join(text)


def save_figure(fig, path: Path) -> None:
    """The plot as a PNG, written whole, with its record; the figure closed."""
    from ..runner import atomic, keep_written

    with atomic(path) as (part,):
        fig.savefig(part, dpi=150, format="png")
    keep_written(path, _by(path))
    pyplot().close(fig)


def _cell(value):
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
