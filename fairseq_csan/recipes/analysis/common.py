"""Shared by the analysis commands: their options, reading systems, writing the table (CSV and
markdown) and the plot without overwriting anything unasked."""

import csv
import io
from contextlib import contextmanager
from pathlib import Path

from ..command_line import Parser
from ..runner import RESULTS, Refusal, WriterLock, check_owned, write_file


def analysis_parser(name: str, doc: str, systems: bool = False) -> Parser:
    """The analysis ``name``'s parser with the options every analysis takes (--out, --force), and
    with ``systems`` those of the ones that compare systems with a baseline (--ref, --baseline, --system)."""
    p = Parser(prog=f"python -m fairseq_csan.recipes.analysis.{name}", description=doc.split("\n\n")[0])
    if systems:
        p.add_argument("--ref", required=True, type=Path, help="tokenised reference")
        p.add_argument("--baseline", required=True, help="evaluation folder or NAME=FILE")
        p.add_argument("--system", required=True, action="append", help="evaluation folder or NAME=FILE")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--force", action="store_true", help="replace the outputs this analysis wrote (never anyone else's)")
    return p


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


def compared(args):
    """(reference lines, baseline, systems) of --ref, --baseline and --system; each system is
    (name, lines), as many lines as the reference."""
    reference, baseline, systems = read_lines(args.ref), system(args.baseline), [system(s) for s in args.system]
    for name, hyps in [baseline, *systems]:
        if len(hyps) != len(reference):
            raise Refusal(f"{name} has {len(hyps)} lines, the reference {len(reference)}")
    return reference, baseline, systems


def outputs(out: Path, stem: str, force: bool):
    """The CSV, markdown and PNG paths of one analysis, claimed: locked against a second run of it into
    ``out``, and an existing one replaced only with ``force`` where this analysis wrote it (check_owned)."""
    paths = [out / f"{stem}.{ext}" for ext in ("csv", "md", "png")]
    WriterLock(paths[0], folder=False, what=f"the {stem} analysis").acquire()  # held to the end
    check_owned(paths, None, force, "--out")
    return paths


def write_table(paths, header, rows, note=""):
    """The table as CSV and markdown to ``paths[:2]`` (each written whole, with its record); the markdown printed."""
    table = io.StringIO(newline="")
    csv.writer(table).writerows([header, *rows])
    write_file(paths[0], table.getvalue())
    text = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    text += ["| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row) + " |" for row in rows]
    text += ["", note] if note else []
    write_file(paths[1], "\n".join(text) + "\n")
    print("\n".join(text))


@contextmanager
def figure(path: Path, rows: int = 1, columns: int = 1, **options):
    """The axes of a new figure (matplotlib's ``subplots``, in one list), laid out and written
    whole as a PNG to ``path`` (with its record) at the end, then closed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, columns, squeeze=False, **options)
    yield list(axes.flat)
    fig.tight_layout()
    write_file(path, lambda part: fig.savefig(part, dpi=150, format="png"))
    plt.close(fig)
