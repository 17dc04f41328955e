"""The three task recipes end to end, offline, on small real corpora from the shared data:
prepare -> train a tiny model for a few updates on the CPU -> evaluate with every BLEU
variant and the paired bootstrap -> collect into a table. Raw folders are laid out as the
official downloads (plain text and SGM) or the user's ASPEC-JE copy would be."""

import json
import os
import re

import pytest

from conftest import shared_corpus
from recipe_helpers import lines, run, split_into, write, write_sgm

pytestmark = pytest.mark.slow

N_TRAIN, N_DEV, N_TEST, MERGES = 1200, 40, 40, 400


def head(path, n):
    return lines(path)[:n]


def prepare(task, raw, out, *extra):
    return run(["bash", f"examples/{task}/prepare.sh", "--raw-dir", raw, "--out", out,
                "--merges", MERGES, "--workers", 2, "--no-download", *extra])


def train(data, save, arch, *extra):
    return run(["bash", "scripts/train.sh", "--data", data, "--arch", arch, "--save-dir", save, "--cpu-tiny", *extra])


def evaluate(data, save, out, *extra):
    return run(["bash", "scripts/evaluate.sh", "--data", data, "--checkpoints", save, "--out", out,
                "--last", 2, "--cpu", "--bootstrap-samples", 200, *extra])


def lay_out_wmt(raw, langs, train, train_stems, dev, dev_name, test, test_src_sgm, test_ref_sgm):
    """A WMT raw folder: the first N_TRAIN pairs of ``train`` cut into one piece per training
    corpus, N_DEV dev pairs as plain text, N_TEST test pairs as the official SGM files."""
    src, tgt = langs
    pieces = split_into(head(f"{train}.{src}", N_TRAIN), head(f"{train}.{tgt}", N_TRAIN), len(train_stems))
    for stem, (s, t) in zip(train_stems, pieces):
        write(raw / f"{stem}.{src}", s)
        write(raw / f"{stem}.{tgt}", t)
    for lang in langs:
        write(raw / f"{dev_name}.{lang}", head(f"{dev}.{lang}", N_DEV))
    write_sgm(raw / test_src_sgm, head(f"{test}.{src}", N_TEST))
    write_sgm(raw / test_ref_sgm, head(f"{test}.{tgt}", N_TEST))


def check_prepared(out, src, tgt):
    for split, n in (("train", N_TRAIN), ("valid", N_DEV), ("test", N_TEST)):
        for lang in (src, tgt):
            assert len(lines(out / "raw" / f"{split}.{lang}")) == n
            assert len(lines(out / "tok" / f"{split}.{lang}")) == n
            if split != "train":
                assert len(lines(out / "bpe" / f"{split}.{lang}")) == n
    kept = len(lines(out / f"tok/train.clean.{src}"))
    assert 0.5 * N_TRAIN < kept <= N_TRAIN
    assert len(lines(out / f"bpe/train.{tgt}")) == kept
    for name in ("train", "valid", "test"):
        for lang in (src, tgt):
            assert (out / "data-bin" / f"{name}.{src}-{tgt}.{lang}.bin").is_file()
    return kept


def check_results(folder, n, compound):
    results = json.loads((folder / "results.json").read_text())
    assert len(lines(folder / "hyp.tok")) == n and len(lines(folder / "hyp.detok")) == n
    assert 0.0 <= results["bleu_tok"] <= 100.0
    assert (results["bleu_compound"] is not None) == compound
    assert results["sacrebleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert results["sacrebleu_text"].startswith("BLEU = ")
    assert results["decode"]["sentences"] == n and results["decode"]["sent_per_s"] > 0
    assert results["train"]["steps_per_s"] > 0 and results["train"]["params"] > 0
    return results


# ---------------------------------------------------------------- WMT14 En-De

@pytest.fixture(scope="module")
def ende(tmp_path_factory):
    """Multi30k pairs as the three WMT14 training corpora, newstest2013 as plain text and
    newstest2014 as the official SGM files, prepared, then two tiny systems trained."""
    m30k, wmt = shared_corpus("multi30k_en_de"), shared_corpus("wmt14_en_de")
    work = tmp_path_factory.mktemp("ende")
    raw = work / "raw"
    lay_out_wmt(raw, ("en", "de"), m30k / "train",
                ["training/europarl-v7.de-en", "commoncrawl.de-en", "training/news-commentary-v9.de-en"],
                wmt / "newstest2013", "newstest2013",
                wmt / "newstest2014", "test-full/newstest2014-deen-src.en.sgm", "test-full/newstest2014-deen-ref.de.sgm")
    out = work / "prepared"
    first = prepare("wmt14_en_de", raw, out)
    train(out, work / "ck_base", "transformer")
    train(out, work / "ck_csan", "transformer_csan2d")
    return {"work": work, "raw": raw, "out": out, "first": first, "wmt": wmt}


def test_ende_prepare_outputs(ende):
    out = ende["out"]
    check_prepared(out, "en", "de")
    # joint BPE: one codes file, one dictionary for both languages
    assert (out / "bpe/codes").is_file() and not (out / "bpe/codes.en").exists()
    assert (out / "data-bin/dict.en.txt").read_text() == (out / "data-bin/dict.de.txt").read_text()
    # the test set came from the SGM files, segment for segment
    assert lines(out / "raw/test.de") == [" ".join(x.split()) for x in head(ende["wmt"] / "newstest2014.de", N_TEST)]
    assert "merges=400" in (out / "recipe.env").read_text()
    assert "6/6 binarise with fairseq-preprocess" in ende["first"].stderr


def test_ende_rerun_skips_every_step_and_keeps_outputs(ende):
    out = ende["out"]
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name not in ("recipe.env", "tools.txt")}
    again = prepare("wmt14_en_de", ende["raw"], out)
    steps = [line for line in again.stderr.splitlines() if re.match(r"\[prepare wmt14_en_de\] \d/6 ", line)]
    assert {line.split()[2] for line in steps} == {"1/6", "2/6", "3/6", "4/6", "5/6", "6/6"}
    assert all(line.endswith("skipped") for line in steps)
    assert "learn 400" not in again.stderr and "fairseq-preprocess" not in again.stderr
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    # a changed raw file (edited in place, its modification time kept): exactly the steps after
    # it are redone, each saying why; the others are skipped
    sgm = ende["raw"] / "test-full/newstest2014-deen-ref.de.sgm"
    original = sgm.read_bytes()
    st = sgm.stat()
    sgm.write_bytes(original.replace(b"<seg id=\"1\">", b"<seg id=\"1\">Neu ", 1))
    os.utime(sgm, ns=(st.st_atime_ns, st.st_mtime_ns))
    try:
        again = prepare("wmt14_en_de", ende["raw"], out)
        redone = [line.split("] ")[1].split(" (")[0] for line in again.stderr.splitlines()
                  if re.match(r"\[prepare wmt14_en_de\] \d/6 ", line) and not line.endswith("skipped")]
        assert redone == ["1/6 gather test from " + str(ende["raw"]), "2/6 tokenise test.de", "5/6 apply BPE to test.de",
                          "6/6 binarise with fairseq-preprocess"], again.stderr
        assert f"input {sgm} changed since the last run" in again.stderr
        assert lines(out / "raw/test.de")[0].startswith("Neu ")
    finally:
        sgm.write_bytes(original)
        restored = prepare("wmt14_en_de", ende["raw"], out)
    assert not lines(out / "raw/test.de")[0].startswith("Neu ") and "6/6 binarise with" in restored.stderr


def test_ende_other_settings_are_refused(ende):
    done = run(["bash", "examples/wmt14_en_de/prepare.sh", "--raw-dir", ende["raw"], "--out", ende["out"],
                "--merges", 500, "--no-download"], check=False)
    assert done.returncode == 2 and "prepared with other settings" in done.stderr


def test_ende_missing_input_stops_with_the_file_and_its_source(ende, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for p in ende["raw"].rglob("*"):
        if p.is_file() and "news-commentary" not in p.name:
            target = raw / p.relative_to(ende["raw"])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(p.read_bytes())
    done = run(["bash", "examples/wmt14_en_de/prepare.sh", "--raw-dir", raw, "--out", tmp_path / "out",
                "--no-download"], check=False)
    assert done.returncode == 2
    assert "missing News Commentary v9" in done.stderr
    assert "training/news-commentary-v9.de-en.en" in done.stderr
    assert "https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz" in done.stderr
    assert not (tmp_path / "out/raw/train.en").exists()


def test_ende_training_resumes_and_refuses_another_run(ende):
    save = ende["work"] / "ck_base"
    # --cpu-tiny keeps 8 checkpoints, enough for evaluate.sh's default average of the last 5
    assert sorted(int(p.stem.split("_")[-1]) for p in save.glob("checkpoint_1_*.pt")) == list(range(2, 17, 2))
    speed = run(["python", "-m", "fairseq_csan.recipes.score", "speed", save / "train.log"]).stdout
    assert "training steps/s" in speed
    other = run(["bash", "scripts/train.sh", "--data", ende["out"], "--arch", "transformer_csan1d",
                 "--save-dir", save, "--cpu-tiny"], check=False)
    assert other.returncode == 2 and "holds another run" in other.stderr


def test_ende_evaluate_with_bootstrap_and_table(ende):
    work, out = ende["work"], ende["out"]
    evaluate(out, work / "ck_base", work / "ev_base", "--name", "Transformer-Base")
    evaluate(out, work / "ck_csan", work / "ev_csan", "--name", "+ CSANs", "--baseline", work / "ev_base")
    base = check_results(work / "ev_base", N_TEST, compound=True)
    csan = check_results(work / "ev_csan", N_TEST, compound=True)
    assert base["bootstrap"] is None and base["arch"] == "transformer"
    test = csan["bootstrap"]
    assert test["baseline"] == "Transformer-Base" and test["samples"] == 200
    assert 0.0 < test["p_value"] <= 1.0
    assert test["baseline_bleu"] == pytest.approx(base["bleu_tok"]) and test["bleu"] == pytest.approx(csan["bleu_tok"])
    table = run(["python", "-m", "fairseq_csan.recipes.collect_results", work / "ev_base", work / "ev_csan"]).stdout
    assert "| System | WMT14 En⇒De #Params | WMT14 En⇒De Speed | WMT14 En⇒De BLEU |" in table
    assert "| Transformer-Base | 0.2M |" in table and "| + CSANs | 0.2M |" in table
    # a second evaluation of the same checkpoints and settings keeps the average and the decoding
    stamps = [(work / "ev_base" / name).stat().st_mtime_ns for name in ("averaged.pt", "generate.txt")]
    again = evaluate(out, work / "ck_base", work / "ev_base", "--name", "Transformer-Base")
    assert "averaged.pt (the same checkpoints): up to date; skipped" in again.stderr
    assert "generate.txt (the same model and settings): up to date; skipped" in again.stderr
    assert [(work / "ev_base" / name).stat().st_mtime_ns for name in ("averaged.pt", "generate.txt")] == stamps
    # other settings in the same folder: refused, then redone with --force
    other = run(["bash", "scripts/evaluate.sh", "--data", out, "--checkpoints", work / "ck_base",
                 "--out", work / "ev_base", "--last", 3, "--cpu"], check=False)
    assert other.returncode == 2 and "holds an evaluation of other checkpoints or settings" in other.stderr
    redone = evaluate(out, work / "ck_base", work / "ev_base", "--name", "Transformer-Base", "--beam", 1, "--force")
    assert "1/3 averaging the last 2" in redone.stderr and re.search(r"2/3 decoding test \(\d+ sentences\): beam 1,", redone.stderr)
    assert "beam=1" in (work / "ev_base/evaluation.env").read_text()


def test_ende_evaluate_redoes_what_was_made_from_changed_inputs(ende, tmp_path):
    """A rerun into the same --out never scores old translations: another prepared test set,
    or a checkpoint replaced with its modification time kept (cp -p, rsync -a), redoes the
    decoding (and the steps after the change) and says why."""
    import shutil

    work, out = ende["work"], ende["out"]
    checkpoint = tmp_path / "model.pt"
    shutil.copy2(work / "ck_base/checkpoint_last.pt", checkpoint)
    ev = tmp_path / "ev"
    first = run(["bash", "scripts/evaluate.sh", "--data", out, "--checkpoint", checkpoint, "--out", ev, "--cpu",
                 "--bootstrap-samples", 10])
    assert len(lines(ev / "hyp.tok")) == N_TEST
    # another prepared folder whose test set is the first one's valid set (N_DEV sentences)
    other = tmp_path / "other"
    shutil.copytree(out, other)
    for folder in ("raw", "tok", "bpe"):
        for lang in ("en", "de"):
            shutil.copy(out / folder / f"valid.{lang}", other / folder / f"test.{lang}")
    for suffix in ("bin", "idx"):
        for lang in ("en", "de"):
            shutil.copy(out / f"data-bin/valid.en-de.{lang}.{suffix}", other / f"data-bin/test.en-de.{lang}.{suffix}")
    again = run(["bash", "scripts/evaluate.sh", "--data", other, "--checkpoint", checkpoint, "--out", ev, "--cpu",
                 "--bootstrap-samples", 10])
    assert "2/3 decoding test" in again.stderr and "redone: its inputs are other files than last time" in again.stderr
    assert lines(ev / "hyp.tok") != [] and len(lines(ev / "hyp.tok")) == len(lines(other / "tok/test.de"))
    assert lines(other / "tok/test.de") == lines(out / "tok/valid.de")
    # the checkpoint replaced by another one, its times kept
    st = checkpoint.stat()
    shutil.copyfile(work / "ck_csan/checkpoint_last.pt", checkpoint)
    os.utime(checkpoint, ns=(st.st_atime_ns, st.st_mtime_ns))
    third = run(["bash", "scripts/evaluate.sh", "--data", other, "--checkpoint", checkpoint, "--out", ev, "--cpu",
                 "--bootstrap-samples", 10])
    assert f"input {checkpoint} changed since the last run" in third.stderr
    assert first.returncode == again.returncode == third.returncode == 0


def test_ende_missing_reference_is_found_before_any_work(ende, tmp_path):
    import shutil

    other = tmp_path / "task"
    shutil.copytree(ende["out"], other)
    (other / "raw/test.de").unlink()
    done = run(["bash", "scripts/evaluate.sh", "--data", other, "--checkpoints", ende["work"] / "ck_base",
                "--out", tmp_path / "ev", "--cpu"], check=False)
    assert done.returncode == 2 and f"no raw reference {other / 'raw/test.de'}" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "ev/averaged.pt").exists()


def test_ende_resume_continues_from_the_last_checkpoint(ende):
    save = ende["work"] / "ck_csan"
    done = train(ende["out"], save, "transformer_csan2d", "--max-update", 20)
    assert "resuming from" in done.stderr
    assert "loaded checkpoint" in done.stdout.lower() and (save / "checkpoint_1_20.pt").is_file()


def test_ende_bf16_training_through_our_entry_point(ende):
    """--precision bf16 runs python -m fairseq_csan.train, where stock fairseq-train --bf16
    would ask for a TPU; on the CPU the model trains in bfloat16."""
    import torch

    save = ende["work"] / "ck_bf16"
    done = train(ende["out"], save, "transformer", "--precision", "bf16", "--max-update", 2)
    assert "python -m fairseq_csan.train " in done.stderr
    # fairseq-train's log format, so the speed is found as for the other runs
    assert "| train_inner |" in done.stdout and "training steps/s" in done.stderr
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["cfg"]["common"]["bf16"] is True and state["cfg"]["common"]["tpu"] is False
    assert state["optimizer_history"][-1]["num_updates"] == 2


def test_ende_window_sweep_trains_evaluates_and_plots(ende):
    """scripts/sweep.sh at a tiny budget (one window, one head area), then the plot; a rerun
    keeps what is finished."""
    sweep = ende["work"] / "sweep"
    command = ["bash", "scripts/sweep.sh", "--data", ende["out"], "--out", sweep, "--windows", 3, "--heads", 3,
               "--last", 2, "--cpu-tiny", "--", "--max-update", 8]
    run(command)
    assert "--csan-window 3" in (sweep / "csan1d_window3/checkpoints/train_command.sh").read_text()
    assert "--csan-window 11 --csan-heads 3" in (sweep / "csan2d_heads3/checkpoints/train_command.sh").read_text()
    assert "subset=valid" in (sweep / "csan2d_heads3/eval/evaluation.env").read_text()
    again = run(command)
    assert "[sweep] csan2d_heads3" in again.stderr
    assert "up to date; skipped" in (sweep / "csan1d_window3/eval.out").read_text()
    run(["python", "-m", "fairseq_csan.recipes.analysis.window_sweep", "--sweep", sweep, "--out", ende["work"] / "sweep_plot"])
    rows = lines(ende["work"] / "sweep_plot/window_sweep.csv")
    assert [r.split(",")[:2] for r in rows[1:]] == [["window", "3"], ["heads", "3"]]


# ---------------------------------------------------------------- WMT17 Zh-En

def test_zhen_recipe(tmp_path):
    tatoeba, wmt = shared_corpus("tatoeba_zh_en"), shared_corpus("wmt17_zh_en")
    raw = tmp_path / "raw"
    lay_out_wmt(raw, ("zh", "en"), tatoeba / "train",
                ["training/news-commentary-v12.zh-en", "en-zh/UNv1.0.en-zh", "cwmt/casia2015", "cwmt/neu2017"],
                wmt / "newsdev2017", "newsdev2017",
                wmt / "newstest2017-zhen", "test/newstest2017-zhen-src.zh.sgm", "test/newstest2017-zhen-ref.en.sgm")
    out = tmp_path / "prepared"
    done = prepare("wmt17_zh_en", raw, out)
    assert "CWMT (casia2015.zh)" in done.stderr and "CWMT (neu2017.zh)" in done.stderr
    check_prepared(out, "zh", "en")
    # jieba segmented the Chinese: more tokens than sentences' worth of characters split by spaces
    assert sum(len(x.split()) for x in lines(out / "tok/test.zh")) > 3 * N_TEST
    # separate BPE and dictionaries
    assert (out / "bpe/codes.zh").is_file() and (out / "bpe/codes.en").is_file()
    assert (out / "data-bin/dict.zh.txt").read_text() != (out / "data-bin/dict.en.txt").read_text()
    train(out, tmp_path / "ck", "transformer_ctxaware")
    evaluate(out, tmp_path / "ck", tmp_path / "ev")
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

def _aspec_folder(root, kftt):
    """KFTT pairs laid out as an ASPEC-JE folder: train-N with five fields, dev/test with four."""
    ja, en = head(kftt / "train.ja", N_TRAIN), head(kftt / "train.en", N_TRAIN)
    for part, (s, t) in enumerate(split_into(ja, en, 2), 1):
        write(root / f"train/train-{part}.txt",
              [f"0.{900 - i} ||| D{part}-{i // 10} ||| {i + 1} ||| {a} ||| {b}" for i, (a, b) in enumerate(zip(s, t))])
    for name, source, n in (("dev", "dev", N_DEV), ("test", "tune", N_TEST)):
        rows = zip(head(kftt / f"{source}.ja", n), head(kftt / f"{source}.en", n))
        write(root / f"{name}/{name}.txt", [f"D-{i // 10} ||| {i + 1} ||| {a} ||| {b}" for i, (a, b) in enumerate(rows)])


def test_jaen_recipe(tmp_path):
    kftt = shared_corpus("kftt30k_ja_en")
    aspec = tmp_path / "ASPEC-JE"
    _aspec_folder(aspec, kftt)
    out = tmp_path / "prepared"
    done = prepare("wat17_ja_en", aspec, out)
    assert "ASPEC-JE train-1" in done.stderr and "ASPEC-JE train-2" in done.stderr
    check_prepared(out, "ja", "en")
    assert lines(out / "raw/train.en")[0] == " ".join(head(kftt / "train.en", 1)[0].split())
    train(out, tmp_path / "ck", "transformer_csan2d")
    evaluate(out, tmp_path / "ck", tmp_path / "ev")
    check_results(tmp_path / "ev", N_TEST, compound=False)
    # --force with other settings deletes the outputs (never the ASPEC folder) and redoes them
    before = sorted(p for p in aspec.rglob("*"))
    redone = prepare("wat17_ja_en", aspec, out, "--merges", 300, "--force")
    assert "--force: removing" in redone.stderr and "learn 300 BPE merges on ja" in redone.stderr
    assert "merges=300" in (out / "recipe.env").read_text()
    assert sorted(p for p in aspec.rglob("*")) == before
    check_prepared(out, "ja", "en")


def test_jaen_missing_aspec_file(tmp_path):
    kftt = shared_corpus("kftt30k_ja_en")
    aspec = tmp_path / "ASPEC-JE"
    _aspec_folder(aspec, kftt)
    (aspec / "test/test.txt").unlink()
    done = run(["bash", "examples/wat17_ja_en/prepare.sh", "--raw-dir", aspec, "--out", tmp_path / "out"], check=False)
    assert done.returncode == 2
    assert str(aspec / "test/test.txt") in done.stderr and "ASPEC is licensed" in done.stderr


def test_ende_test_lines_longer_than_the_model_are_named_before_decoding(ende, tmp_path):
    import shutil

    other = tmp_path / "task"
    shutil.copytree(ende["out"], other)
    rows = lines(other / "bpe/test.en")
    rows[2] = " ".join(["x"] * 1100)  # the tiny models keep fairseq's 1024 source positions
    write(other / "bpe/test.en", rows)
    done = run(["bash", "scripts/evaluate.sh", "--data", other, "--checkpoints", ende["work"] / "ck_base",
                "--out", tmp_path / "ev", "--cpu"], check=False)
    assert done.returncode == 2
    assert f"1 test sentence(s) of {other / 'bpe/test.en'} are longer than the model's 1024 source positions" in done.stderr
    assert "line(s) 3." in done.stderr and not (tmp_path / "ev/averaged.pt").exists()


def test_ende_translate_keeps_every_line_of_odd_input(ende, tmp_path):
    """Lines end at \\n only: a carriage return, form feed, NEL or U+2028 inside a line stays
    in it (str.splitlines() broke there and shifted every later translation); an empty line
    gets an empty translation; standard input with '-'; an undecodable byte is named."""
    import subprocess
    import sys

    rows = ["Ein Test.", "A man\rin red.", "", "Two dogs\fplay.", "A girl\x85runs.", "A boy\u2028jumps."]
    raw = "\ufeff" + "".join(r + "\n" for r in rows)
    command = [sys.executable, "-m", "fairseq_csan.recipes.translate", "--data", str(ende["out"]), "--checkpoint",
               str(ende["work"] / "ck_base/checkpoint_last.pt"), "--input", "-", "--output", str(tmp_path / "out.de"),
               "--cpu"]
    done = subprocess.run(command, input=raw.encode("utf-8"), capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    out = (tmp_path / "out.de").read_bytes().decode("utf-8").split("\n")
    assert len(out) == len(rows) + 1 and out[-1] == ""  # six lines, each ended by \n
    assert out[2] == "" and all(out[i] for i in (0, 1, 3, 4, 5))
    (tmp_path / "bad.en").write_bytes(b"fine\nbad \xff byte\n")
    command[command.index("-")] = str(tmp_path / "bad.en")
    bad = subprocess.run(command + ["--force"], capture_output=True, text=True)
    assert bad.returncode == 2 and f"{tmp_path / 'bad.en'}:2: not UTF-8" in bad.stderr
