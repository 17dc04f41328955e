"""Shared by the analysis commands: reading systems, tokenised BLEU statistics, writing the
table (CSV and markdown) and the plot without overwriting anything unasked."""

import csv
import io
from pathlib import Path

from sacrebleu.metrics import BLEU

from ..runner import RESULTS, Refusal, WriterLock, check_owned, write_file


def read_lines(path):
    """The lines of a text file; a missing file is refused with its name, not a traceback."""
    if not Path(path).is_file():
        raise Refusal(f"no file {path}")
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
        return (RESULTS.read(folder) or {}).get("name", folder.name), read_lines(folder / "hyp.tok")
    raise Refusal(f"'{spec}' is neither NAME=HYP_FILE nor an evaluation folder with hyp.tok")


def check_lengths(reference, systems):
    for name, hyps in systems:
        if len(hyps) != len(reference):
            raise Refusal(f"{name} has {len(hyps)} lines, the reference {len(reference)}")


def bleu_stats(hyps, refs):
    """Tokenised case-sensitive corpus BLEU (no further tokenisation) and its statistics."""
    return BLEU(tokenize="none", force=True).corpus_score(hyps, [refs])


def outputs(out: Path, stem: str, force: bool):
    """The CSV, markdown and PNG paths of one analysis. An existing one is replaced only with
    ``force``, and only where this analysis wrote it and it is unchanged since (the record of what
    the kit wrote); a file of anyone else's is refused, ``force`` or not. A second run of the same
    analysis into ``out`` while one writes there is refused too."""
    paths = [out / f"{stem}.{ext}" for ext in ("csv", "md", "png")]
    WriterLock(paths[0], folder=False, what=f"the {stem} analysis").acquire()  # held to the end
    check_owned(paths, None, force, "--out")
    return paths


def write_table(csv_path: Path, md_path: Path, header, rows, note=""):
    """The table as CSV and markdown (each written whole, with its record); the markdown returned."""
    table = io.StringIO(newline="")
    writer = csv.writer(table)
    writer.writerow(header)
    writer.writerows(rows)
    write_file(csv_path, table.getvalue())
    text = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    text += ["| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row) + " |" for row in rows]
    text += ["", note] if note else []
    write_file(md_path, "\n".join(text) + "\n")
    return "\n".join(text)


def save_figure(fig, path: Path) -> None:
    """The plot as a PNG, written whole, with its record; the figure closed."""
    write_file(path, lambda part: fig.savefig(part, dpi=150, format="png"))
    pyplot().close(fig)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
