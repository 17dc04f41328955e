"""fairseq_csan.recipes.collect_results: evaluations -> a Table-2-shaped markdown table (BLEU or
chrF), replacing only a table it wrote."""


import pytest

from fairseq_csan.recipes import collect_results as collect
from fairseq_csan.recipes.runner import RESULTS, Refusal
from recipe_helpers import run


def test_collect_results_has_a_chrf_column(tmp_path):
    from fairseq_csan.recipes import collect_results as collect

    runs = []
    for name, chrf, mark in (("Base", 50.0, ""), ("+ CSANs", 52.5, "⇑")):
        runs.append({"name": name, "task": "wmt14_en_de", "bleu_tok": 27.0, "mark": "", "chrf": chrf,
                     "chrf_signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0",
                     "train": None, "bootstrap": None if not mark else
                     {"baseline": "Base", "samples": 1000, "chrf": {"mark": mark}}})
    table = collect.table(runs, "chrf")
    assert "| Base | - | - | 50.00 |" in table and "| + CSANs | - | - | 52.50⇑ |" in table
    assert "paired bootstrap resampling of chrF" in table and "chrF signature: nrefs:1" in table


def _result(folder, name, task, bleu, mark="", steps=None, params=None, bootstrap=None):
    RESULTS.write(folder, {
        "name": name, "task": task, "bleu_tok": bleu, "bleu_compound": None, "sacrebleu": bleu - 1,
        "sacrebleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
        "mark": mark, "train": {"steps_per_s": steps, "params": params, "logged_intervals": 1},
        "bootstrap": bootstrap})
    return folder


def test_collect_results_table(tmp_path):
    boot = {"baseline": "Transformer-Base", "samples": 1000}
    runs = [
        _result(tmp_path / "a", "Transformer-Base", "wmt14_en_de", 27.31, steps=1.28, params=88_000_000),
        _result(tmp_path / "b", "+ CSANs", "wmt14_en_de", 28.18, "⇑", 1.22, 88_000_000, boot),
        _result(tmp_path / "c", "Transformer-Base", "wat17_ja_en", 28.1, steps=1.33, params=90_100_000),
    ]
    text = collect.table(collect.load(runs))
    rows = text.splitlines()
    assert rows[0] == ("| System | WMT14 En⇒De #Params | WMT14 En⇒De Speed | WMT14 En⇒De BLEU | "
                       "WAT17 Ja⇒En #Params | WAT17 Ja⇒En Speed | WAT17 Ja⇒En BLEU |")
    assert rows[2] == "| Transformer-Base | 88.0M | 1.28 | 27.31 | 90.1M | 1.33 | 28.10 |"
    assert rows[3] == "| + CSANs | 88.0M | 1.22 | 28.18⇑ | - | - | - |"
    assert "baseline (Transformer-Base)" in text
    sacre = collect.table(collect.load(runs), "sacrebleu")
    assert "| 26.31 |" in sacre and "sacreBLEU signature: nrefs:1" in sacre
    duplicate = _result(tmp_path / "d", "+ CSANs", "wmt14_en_de", 1.0)
    with pytest.raises(Refusal, match="two runs named"):
        collect.table(collect.load(runs + [duplicate]))


def test_collect_results_refuses_to_overwrite(tmp_path):
    run_dir = _result(tmp_path / "a", "T", "wmt14_en_de", 20.0)
    (tmp_path / "table.md").write_text("mine")
    done = run(["python", "-m", "fairseq_csan.recipes.collect_results", run_dir, "--output", tmp_path / "table.md"], check=False)
    assert done.returncode == 2 and "collect_results did not write it" in done.stderr
    done = run(["python", "-m", "fairseq_csan.recipes.collect_results", run_dir, "--output", tmp_path / "table.md",
                "--force"], check=False)  # a file of the user's: --force does not change that
    assert done.returncode == 2 and "collect_results did not write it" in done.stderr
    assert (tmp_path / "table.md").read_text() == "mine"
    run(["python", "-m", "fairseq_csan.recipes.collect_results", run_dir, "--output", tmp_path / "mine.md"])
    done = run(["python", "-m", "fairseq_csan.recipes.collect_results", run_dir, "--output", tmp_path / "mine.md"],
               check=False)
    assert done.returncode == 2 and "pass --force to replace it" in done.stderr
    run(["python", "-m", "fairseq_csan.recipes.collect_results", run_dir, "--output", tmp_path / "mine.md", "--force"])
    assert "| T |" in (tmp_path / "mine.md").read_text()
