"""The task recipes of examples/ end to end, offline, on small real corpora from the shared data:
prepare -> train a tiny model for a few updates on the CPU -> evaluate with every BLEU variant.
WMT17 Zh-En (with the gate-weight analysis) and WAT17 Ja-En here; WMT14 En-De is the shared
fixture ``ende`` (tests/conftest.py), whose steps are checked in the test file of each command
(test_prepare.py, test_train.py, test_evaluate.py, test_sweep.py, test_translate.py)."""

import json

import pytest

from conftest import shared_corpus
from recipe_helpers import (N_TEST, aspec_folder, check_prepared, check_results, evaluate_tiny, head, lay_out_wmt,
                            lines, prepare_task, run, train_tiny, write)


# ---------------------------------------------------------------- WMT17 Zh-En

@pytest.mark.slow
def test_zhen_recipe(tmp_path):
    tatoeba, wmt = shared_corpus("tatoeba_zh_en"), shared_corpus("wmt17_zh_en")
    raw = tmp_path / "raw"
    lay_out_wmt(raw, ("zh", "en"), tatoeba / "train",
                ["training/news-commentary-v12.zh-en", "en-zh/UNv1.0.en-zh", "cwmt/casia2015", "cwmt/neu2017"],
                wmt / "newsdev2017", "newsdev2017",
                wmt / "newstest2017-zhen", "test/newstest2017-zhen-src.zh.sgm", "test/newstest2017-zhen-ref.en.sgm")
    out = tmp_path / "prepared"
    done = prepare_task("wmt17_zh_en", raw, out)
    assert "CWMT (casia2015.zh)" in done.stderr and "CWMT (neu2017.zh)" in done.stderr
    check_prepared(out, "zh", "en")
    # jieba segmented the Chinese: more tokens than sentences' worth of characters split by spaces
    assert sum(len(x.split()) for x in lines(out / "tok/test.zh")) > 3 * N_TEST
    # separate BPE and dictionaries
    assert (out / "bpe/codes.zh").is_file() and (out / "bpe/codes.en").is_file()
    assert (out / "data-bin/dict.zh.txt").read_text() != (out / "data-bin/dict.en.txt").read_text()
    train_tiny(out, tmp_path / "ck", "transformer_ctxaware")
    evaluate_tiny(out, tmp_path / "ck", tmp_path / "ev", door=False)  # its door: test_evaluate.py
    results = check_results(tmp_path / "ev", N_TEST, compound=False)
    assert results["task"] == "wmt17_zh_en" and results["name"] == "transformer_ctxaware"
    assert "--share-decoder-input-output-embed" in (tmp_path / "ck/train_command.sh").read_text()
    # the gate-weight analysis on the trained context-aware model, with one tag per word
    tags = [" ".join("X" if i % 2 else "N" for i, _ in enumerate(line.split())) for line in lines(out / "tok/valid.zh")]
    write(tmp_path / "valid.pos", tags)
    run(["python", "-m", "fairseq_csan.recipes.analysis.gate_weights", "--model", f"ctx={tmp_path / 'ck/checkpoint_last.pt'}",
         "--data", out, "--out", tmp_path / "gates", "--cpu", "--pos", tmp_path / "valid.pos"])
    layers = lines(tmp_path / "gates/gate_weights.csv")
    assert layers[0] == "model,side,layer,mean λQ,mean λK,tokens" and len(layers) == 1 + 3  # 3 encoder layers
    assert all(0.0 < float(row.split(",")[3]) < 1.0 for row in layers[1:])
    pos = {row.split(",")[1]: row for row in lines(tmp_path / "gates/gate_weights_pos.csv")[1:]}
    assert set(pos) == {"N", "X"}
    assert (tmp_path / "gates/gate_weights_pos.png").is_file()


# ---------------------------------------------------------------- WAT17 Ja-En

@pytest.mark.slow
def test_jaen_recipe(tmp_path):
    kftt = shared_corpus("kftt30k_ja_en")
    aspec = tmp_path / "ASPEC-JE"
    aspec_folder(aspec, kftt)
    out = tmp_path / "prepared"
    done = prepare_task("wat17_ja_en", aspec, out)
    assert "ASPEC-JE train-1" in done.stderr and "ASPEC-JE train-2" in done.stderr
    check_prepared(out, "ja", "en")
    assert lines(out / "raw/train.en")[0] == " ".join(head(kftt / "train.en", 1)[0].split())
    train_tiny(out, tmp_path / "ck", "transformer_csan2d")
    evaluate_tiny(out, tmp_path / "ck", tmp_path / "ev", door=False)  # its door: test_evaluate.py
    check_results(tmp_path / "ev", N_TEST, compound=False)
    # --force with other settings deletes the outputs (never the ASPEC folder) and redoes them
    before = sorted(p for p in aspec.rglob("*"))
    redone = prepare_task("wat17_ja_en", aspec, out, "--merges", 300, "--force")
    assert "--force: removing" in redone.stderr and "learn 300 BPE merges on ja" in redone.stderr
    assert json.loads((out / "task.json").read_text())["merges"] == 300
    assert sorted(p for p in aspec.rglob("*")) == before
    check_prepared(out, "ja", "en")
