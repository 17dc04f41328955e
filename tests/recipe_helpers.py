"""Helpers for the recipe tests: run the shell recipes, and lay out raw folders as the official downloads (or the user's ASPEC copy) would be."""

import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO


def run(command, check=True, **kwargs):
    """Run a recipe with this Python's tools first on PATH; returns the CompletedProcess."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for name in ("WMT14_RAW", "WMT17_RAW", "ASPEC_JE", "MULTI30K"):
        env.pop(name, None)
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, env=env, cwd=REPO, **kwargs)
    if check and done.returncode != 0:
        raise AssertionError(f"{command} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    return done


def lines(path: Path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def write(path: Path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(row + "\n" for row in rows)


def write_sgm(path: Path, rows, setid="newstest"):
    """Rows as a WMT SGML file, one <seg> per row, in two documents."""
    half = len(rows) // 2
    out = [f'<srcset setid="{setid}" srclang="any">']
    for doc, chunk in enumerate((rows[:half], rows[half:]), 1):
        out.append(f'<doc sysid="ref" docid="doc{doc}" genre="news" origlang="en">')
        out += [f'<seg id="{i}">{row}</seg>' for i, row in enumerate(chunk, 1)]
        out.append("</doc>")
    out.append("</srcset>")
    write(path, out)


def split_into(rows_src, rows_tgt, parts):
    """Cut two aligned lists into ``parts`` consecutive aligned pieces."""
    size = -(-len(rows_src) // parts)
    return [(rows_src[i:i + size], rows_tgt[i:i + size]) for i in range(0, len(rows_src), size)]


def fake_task(tmp_path: Path) -> Path:
    """A prepared-task folder (recipe.env and data-bin/) with a joined (identical) pair of dictionaries."""
    data = tmp_path / "task"
    write(data / "data-bin/dict.en.txt", ["a 5", "b 3"])
    write(data / "data-bin/dict.de.txt", ["a 5", "b 3"])
    write(data / "recipe.env", ["task=wmt14_en_de", "src=en", "tgt=de"])
    return data
