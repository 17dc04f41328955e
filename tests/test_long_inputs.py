"""Long inputs through the stock fairseq commands: documents of about 2,000 tokens, made here
from the quick start's toy corpus, binarised by fairseq-preprocess, trained on by fairseq-train
--user-dir fairseq_csan (2D-CSAN in every encoder layer, the automatic path, which is banded at
this length) and decoded by fairseq-generate; and a smoke run of the benchmark's long mode."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from fairseq_csan.modules.local_window_attention import BANDED_FROM

pytestmark = pytest.mark.slow

DOC_TOKENS = 2000  # source words per document (fairseq adds </s>)
POSITIONS = "2400"  # --max-source-positions and --max-target-positions (German runs longer)


def run(cmd, **kwargs):
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{cmd[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def write_documents(corpus: Path, out: Path):
    """Consecutive toy sentence pairs joined into documents of about DOC_TOKENS source words."""
    out.mkdir()
    for split in ("train", "val", "test"):
        en = (corpus / f"{split}.en").read_text(encoding="utf-8").splitlines()
        de = (corpus / f"{split}.de").read_text(encoding="utf-8").splitlines()
        docs, src, tgt = [], [], []
        for s, t in zip(en, de):
            src.append(s)
            tgt.append(t)
            if len(" ".join(src).split()) >= DOC_TOKENS:
                docs.append((" ".join(src), " ".join(tgt)))
                src, tgt = [], []
        (out / f"{split}.en").write_text("".join(d[0] + "\n" for d in docs), encoding="utf-8")
        (out / f"{split}.de").write_text("".join(d[1] + "\n" for d in docs), encoding="utf-8")


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("long")
    run([sys.executable, "-m", "fairseq_csan.recipes.toy_corpus", work / "toy",
         "--train", "2000", "--valid", "260", "--test", "500"])
    write_documents(work / "toy", work / "raw")
    run(["fairseq-preprocess", "--source-lang", "en", "--target-lang", "de", "--joined-dictionary",
         "--trainpref", work / "raw" / "train", "--validpref", work / "raw" / "val",
         "--testpref", work / "raw" / "test", "--destdir", work / "bin", "--workers", "1"])
    user_dir = ["--user-dir", REPO / "fairseq_csan", "--cpu"]
    lengths = ["--max-source-positions", POSITIONS, "--max-target-positions", POSITIONS]
    train_log = run([
        "fairseq-train", work / "bin", *user_dir, *lengths, "--arch", "transformer_csan2d",
        "--encoder-layers", "2", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--csan-layers", "2",
        "--share-all-embeddings", "--optimizer", "adam", "--lr", "1e-3", "--criterion", "cross_entropy",
        "--max-tokens", "5000", "--max-update", "4", "--seed", "1", "--save-dir", work / "ckpt",
        "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "1", "--num-workers", "0",
    ])
    gen_log = run([
        "fairseq-generate", work / "bin", *user_dir, *lengths, "--path", work / "ckpt" / "checkpoint_last.pt",
        "--gen-subset", "test", "--beam", "2", "--max-tokens", "6000", "--max-len-a", "0", "--max-len-b", "40",
    ])
    return work, train_log, gen_log


def test_documents_are_long(long_run):
    work, _, _ = long_run
    for split, n in (("train", 8), ("val", 1), ("test", 2)):
        docs = (work / "raw" / f"{split}.en").read_text(encoding="utf-8").splitlines()
        assert len(docs) >= n
        assert all(DOC_TOKENS <= len(d.split()) < DOC_TOKENS + 30 for d in docs)
    assert max(BANDED_FROM.values()) < DOC_TOKENS  # so the automatic choice takes the banded path


def test_fairseq_train_runs_on_long_sources(long_run):
    work, log, _ = long_run
    assert "encoder_self_attention='csan2d'" in log and "csan_layers=2" in log
    assert "max_source_positions=2400" in log
    assert "impl=auto" in log  # the model printout: every CSAN layer on the automatic path
    epoch = re.search(r"\| train \| epoch 001 \| loss ([\d.]+) \|.*\| bsz ([\d.]+) \| num_updates 4 \|", log)
    assert epoch and 0 < float(epoch.group(1)) < 100, log[-3000:]
    assert float(epoch.group(2)) <= 2  # at most two ~2,000-token documents per batch: no short batches
    assert "done training" in log
    assert (work / "ckpt" / "checkpoint_last.pt").is_file()


def test_fairseq_generate_decodes_long_sources(long_run):
    work, _, log = long_run
    n_test = len((work / "raw" / "test.en").read_text(encoding="utf-8").splitlines())
    sources = re.findall(r"^S-\d+\t(.*)$", log, re.M)
    hypotheses = re.findall(r"^H-\d+\t(\S+)\t(.*)$", log, re.M)
    assert len(sources) == len(hypotheses) == n_test, log[-3000:]
    assert all(len(s.split()) >= DOC_TOKENS for s in sources)  # nothing truncated or skipped
    assert all(float(score) < 0 for score, _ in hypotheses)
    assert "Generate test with beam=2" in log


def test_benchmark_long_mode_runs(tmp_path):
    """The benchmark is no test of speed; this only keeps its long mode working."""
    out = tmp_path / "long.md"
    run([sys.executable, "-m", "fairseq_csan.recipes.benchmark", "--mode", "long", "--lengths", "40",
         "--tokens", "80", "--rounds", "1", "--warmup", "0", "--vocab", "100", "--threads", "1", "--out", out])
    table = out.read_text()
    for T, B in ((40, 2),):
        for variant in ("1D", "2D"):
            assert re.search(rf"^\| {T} \| {B} \| {variant} \| [\d.]+ \| [\d.]+ \| [\d.]+x \(", table, re.M), table
            assert re.search(rf"^\| {T} \| {B} \| {variant} \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$", table, re.M), table
        for model in ("transformer", "transformer_csan1d K=3", "transformer_csan1d K=6",
                      "transformer_csan2d K=3", "transformer_csan2d K=6"):
            assert re.search(rf"^\| {T} \| {B} \| {model} \| \d+ \| [\d.]+x \(", table, re.M), table
    assert len(re.findall(r"^\| \d+ \| \d+ \| transformer \| \d+ \| 1\.00x", table, re.M)) == 2  # encoder, whole
    assert "Command: python -m fairseq_csan.recipes.benchmark --mode long" in table
