"""The analysis commands on small outputs made here, their numbers checked by hand."""

import csv

import pytest

from fairseq_csan.recipes.analysis import gate_weights, length_buckets, ngram_gap, window_sweep
from fairseq_csan.recipes.sweep import SWEEP
from fairseq_csan.recipes.runner import RESULTS, Refusal
from recipe_helpers import lines, recipe_main, run, write





REF = ["a b c d", "the cat"]
BASE = ["a b x y", "the the"]
SYS = ["a b c y", "the cat"]


def test_ngram_precisions_by_hand():
    # order 1: baseline (a, b | the, clipped to one) 3 of 6, system (a, b, c | the, cat) 5 of 6
    # order 2: baseline (a b) 1 of 4, system (a b, b c | the cat) 3 of 4
    # order 3: baseline 0 of 2, system (a b c) 1 of 2; order 4: 0 of 1 for both
    assert ngram_gap.precisions(BASE, REF, 4) == pytest.approx([50.0, 25.0, 0.0, 0.0])
    assert ngram_gap.precisions(SYS, REF, 4) == pytest.approx([500 / 6, 75.0, 50.0, 0.0])
    rows = ngram_gap.analyse(REF, ("base", BASE), [("sys", SYS)], 4)
    assert [r[1] for r in rows] == [1, 2, 3, 4]
    assert [r[4] for r in rows] == pytest.approx([500 / 6 - 50, 50.0, 50.0, 0.0])
    # BLEU up to order 1 is the unigram precision (no brevity penalty: equal lengths)
    assert rows[0][5] == pytest.approx(500 / 6)


def test_equal_groups_keep_equal_lengths_together():
    lengths = [3, 1, 2, 2, 5, 4]
    assert length_buckets.equal_groups(lengths, 3) == [[1, 2, 3], [0], [5, 4]]
    assert length_buckets.equal_groups(lengths, 1) == [[1, 2, 3, 0, 5, 4]]
    assert length_buckets.equal_groups([7, 7, 7], 3) == [[0, 1, 2]]  # one length: one group


def test_width_groups():
    lengths = [3, 1, 2, 2, 5, 4]
    # [1, 2], [3, 4], and 5 and beyond in the last of three
    assert length_buckets.width_groups(lengths, 2, 3) == [[1, 2, 3], [0, 5], [4]]


def test_length_bucket_bleu_by_hand():
    lengths = [3, 1, 2, 2, 5, 4]
    refs = [f"r{i} w x y z" for i in range(6)]
    system = list(refs)  # perfect everywhere: BLEU 100
    baseline = ["q"] * 6
    baseline[4] = refs[4]  # the baseline is perfect in the last group only
    baseline[5] = refs[5]
    groups = length_buckets.equal_groups(lengths, 3)
    rows = length_buckets.analyse(lengths, refs, ("base", baseline), [("sys", system)], groups)
    assert [r[1] for r in rows] == ["1-2", "3-3", "4-5"]
    assert [r[2] for r in rows] == [3, 1, 2]
    assert [r[4] for r in rows] == pytest.approx([100.0, 100.0, 100.0])
    assert [r[5] for r in rows] == pytest.approx([0.0, 0.0, 100.0])
    assert [r[6] for r in rows] == pytest.approx([100.0, 100.0, 0.0])


def analysis(name, *argv):
    """python -m fairseq_csan.recipes.analysis.NAME ARGV, in this process; the first runs of
    ngram_gap and length_buckets below, and the rerun refused, are processes, as a user runs them."""
    return recipe_main(f"analysis.{name}", *argv)


def test_commands_write_table_and_plot_and_refuse_to_overwrite(tmp_path):
    write(tmp_path / "ref", REF)
    write(tmp_path / "src", ["x y z", "x"])
    write(tmp_path / "sys", SYS)
    # an evaluation folder of scripts/evaluate.sh as the baseline: its hyp.tok and its name
    write(tmp_path / "ev_base/hyp.tok", BASE)
    RESULTS.write(tmp_path / "ev_base", {"name": "Transformer-Base"})
    out = tmp_path / "out"
    run(["python", "-m", "fairseq_csan.recipes.analysis.ngram_gap", "--ref", tmp_path / "ref", "--baseline", tmp_path / "ev_base",
         "--system", f"CSAN={tmp_path / 'sys'}", "--out", out])
    with open(out / "ngram_gap.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["system"] for r in rows] == ["CSAN"] * 4 and float(rows[1]["gap"]) == pytest.approx(50.0)
    assert "Baseline: Transformer-Base." in (out / "ngram_gap.md").read_text()
    assert (out / "ngram_gap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    run(["python", "-m", "fairseq_csan.recipes.analysis.length_buckets", "--src", tmp_path / "src", "--ref", tmp_path / "ref",
         "--baseline", tmp_path / "ev_base", "--system", f"CSAN={tmp_path / 'sys'}", "--out", out, "--groups", 2])
    with open(out / "length_buckets.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["source length"], r["sentences"]) for r in rows] == [("1-1", "1"), ("3-3", "1")]
    assert (out / "length_buckets.png").stat().st_size > 1000
    again = run(["python", "-m", "fairseq_csan.recipes.analysis.ngram_gap", "--ref", tmp_path / "ref", "--baseline",
                 tmp_path / "ev_base", "--system", f"CSAN={tmp_path / 'sys'}", "--out", out], check=False)
    assert again.returncode != 0 and "pass --force to replace it" in again.stderr
    mine = tmp_path / "mine"
    write(mine / "ngram_gap.md", ["my table"])
    for force in ([], ["--force"]):  # a file of the user's where an output goes: never replaced
        refused = analysis("ngram_gap", "--ref", tmp_path / "ref", "--baseline", tmp_path / "ev_base", "--system",
                           f"CSAN={tmp_path / 'sys'}", "--out", mine, *force)
        assert refused.returncode != 0 and f"--out {mine / 'ngram_gap.md'}: ngram_gap did not write it" in refused.stderr
    assert [p.name for p in mine.iterdir()] == ["ngram_gap.md"] and lines(mine / "ngram_gap.md") == ["my table"]
    assert not list(out.glob(".*.lock"))  # each run's lock is gone with it
    # a second run of one analysis into the same folder while one writes there: refused, naming it
    from recipe_helpers import hold_lock

    holder = hold_lock(out / "ngram_gap.csv", False)
    try:
        busy = analysis("ngram_gap", "--ref", tmp_path / "ref", "--baseline", tmp_path / "ev_base", "--system",
                        f"CSAN={tmp_path / 'sys'}", "--out", out, "--force")
        assert busy.returncode != 0 and f"{out / 'ngram_gap.csv'} is being written by a test writer (pid {holder.pid}" \
            in busy.stderr
    finally:
        holder.kill()
        holder.wait()
    write(tmp_path / "one", ["a"])
    bad = analysis("ngram_gap", "--ref", tmp_path / "ref", "--baseline", f"b={tmp_path / 'one'}", "--system",
                   f"s={tmp_path / 'sys'}", "--out", tmp_path / "o3")
    assert bad.returncode != 0 and "b has 1 lines, the reference 2" in bad.stderr


# ---------------------------------------------------------------- gate weights



def test_bpe_pieces_group_into_words():
    assert gate_weights.words_of(["a@@", "b", "c", "d@@", "e@@", "f"]) == [[0, 1], [2], [3, 4, 5]]
    assert gate_weights.words_of([]) == []


def test_gate_means_by_hand():
    import torch

    totals = gate_weights.GateTotals()
    # one left-padded row: a pad, pieces "a@@ b c", then the EOS
    pad = torch.tensor([[True, False, False, False, False]])
    q = torch.tensor([[0.9, 0.2, 0.4, 0.6, 0.8]])
    k = torch.tensor([[0.9, 0.1, 0.1, 0.1, 0.5]])
    records = [{"side": "encoder", "layer": 1, "lambda_q": q, "lambda_k": k, "padding_mask": pad},
               {"side": "decoder", "layer": 1, "lambda_q": q, "lambda_k": None, "padding_mask": None}]
    totals.add_layers(records)
    rows = totals.layer_rows("m")
    # encoder: the four real tokens, (0.2 + 0.4 + 0.6 + 0.8) / 4 and (0.1 * 3 + 0.5) / 4
    assert rows[1][:3] == ["m", "encoder", 1] and rows[1][5] == 4
    assert rows[1][3] == pytest.approx(0.5) and rows[1][4] == pytest.approx(0.2)
    # decoder: no padding mask, all five; no key gate
    assert rows[0][1] == "decoder" and rows[0][3] == pytest.approx(2.9 / 5) and rows[0][5] == 5
    totals.add_pos(records, [["a@@", "b", "c"]], [["NOUN", "VERB"]])
    pos = {r[1]: r for r in totals.pos_rows("m")}
    # NOUN = the word "a@@ b": mean(0.2, 0.4); VERB = "c": 0.6 (the EOS never counts)
    assert pos["NOUN"][2] == pytest.approx(0.3) and pos["VERB"][2] == pytest.approx(0.6)
    assert pos["NOUN"][3] == pytest.approx(0.1) and pos["NOUN"][4] == 1


# ---------------------------------------------------------------- window / area sweep



def test_window_sweep_collects_runs_in_order(tmp_path):
    for name, kind, value, bleu in (("csan1d_window11", "window", 11, 27.5), ("csan1d_window3", "window", 3, 26.0),
                                    ("csan2d_heads3", "heads", 3, 28.1), ("csan2d_heads1", "heads", 1, 27.7)):
        SWEEP.write(tmp_path / "sweep" / name, {"kind": kind, "value": value, "arch": "a", "flags": "f"})
        RESULTS.write(tmp_path / "sweep" / name / "eval", {"bleu_tok": bleu, "sacrebleu": bleu - 1})
    SWEEP.write(tmp_path / "sweep/unfinished", {"kind": "window", "value": 5})
    rows = window_sweep.collect(tmp_path / "sweep", "bleu_tok")
    assert [r[:3] for r in rows] == [["window", 3, 26.0], ["window", 11, 27.5], ["heads", 1, 27.7], ["heads", 3, 28.1]]
    assert analysis("window_sweep", "--sweep", tmp_path / "sweep", "--out", tmp_path / "out", "--metric",
                    "sacrebleu").returncode == 0
    assert lines(tmp_path / "out/window_sweep.csv")[1] == "window,3,25.0,csan1d_window3"
    assert (tmp_path / "out/window_sweep.png").stat().st_size > 1000
    with pytest.raises(Refusal, match="no evaluated runs"):
        window_sweep.collect(tmp_path / "empty", "bleu_tok")
    write(tmp_path / "sweep/csan1d_window5/sweep.env", ["kind=window", "value=5"])  # an earlier version's run
    with pytest.raises(Refusal, match="sweep.env was written by an earlier version of the kit"):
        window_sweep.collect(tmp_path / "sweep", "bleu_tok")
    (tmp_path / "sweep/csan1d_window5/sweep.env").unlink()  # a folder of the user's, without a score: passed over
    assert window_sweep.collect(tmp_path / "sweep", "bleu_tok") == rows
    (tmp_path / "sweep/csan1d_window11/sweep.json").unlink()  # a score without its point: refused, not left out
    with pytest.raises(Refusal, match="csan1d_window11 has an evaluation but no sweep.json"):
        window_sweep.collect(tmp_path / "sweep", "bleu_tok")


def test_analysis_commands_name_a_missing_file(tmp_path):
    write(tmp_path / "hyp.txt", ["a b"])
    done = analysis("ngram_gap", "--ref", tmp_path / "missing.de", "--baseline", f"base={tmp_path / 'hyp.txt'}",
                    "--system", f"sys={tmp_path / 'hyp.txt'}", "--out", tmp_path / "out")
    assert done.returncode != 0 and f"no file {tmp_path / 'missing.de'}" in done.stderr
    assert "Traceback" not in done.stderr


def test_gate_weights_checks_its_data_before_loading_a_model(tmp_path):
    not_a_checkpoint = tmp_path / "model.pt"
    not_a_checkpoint.write_bytes(b"not a checkpoint")  # loading it would fail with a traceback
    (tmp_path / "data").mkdir()
    done = analysis("gate_weights", "--model", f"m={not_a_checkpoint}", "--data", tmp_path / "data", "--out",
                    tmp_path / "out")
    assert done.returncode == 2 and "no dict.*.txt there" in done.stderr and "Traceback" not in done.stderr
    for lang in ("en", "de"):
        write(tmp_path / "data" / f"dict.{lang}.txt", ["a 1"])
        (tmp_path / "data" / f"valid.en-de.{lang}.bin").write_bytes(b"")
    done = analysis("gate_weights", "--model", f"m={not_a_checkpoint}", "--data", tmp_path / "data", "--out",
                    tmp_path / "out", "--pos", tmp_path / "tags.txt")
    assert done.returncode == 2 and "--pos" in done.stderr and "no such file" in done.stderr
