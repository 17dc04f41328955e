"""End to end through the stock fairseq commands and --user-dir, via the quick start:
subword-nmt BPE, fairseq-preprocess, fairseq-train, fairseq-generate; then
fairseq-interactive and the hub interface on the checkpoint it wrote."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, shared_corpus
from fairseq_csan.modules import SELF_ATTENTION_VARIANTS

pytestmark = pytest.mark.slow

QUICKSTART = REPO / "examples" / "quickstart.sh"


def run_quickstart(work: Path, **env):
    full_env = {**os.environ, "WORK": str(work), "MAX_TOKENS": "2048", "DIM": "32",
                "GEN_FLAGS": "--max-len-a 1 --max-len-b 5", **env}
    done = subprocess.run(["bash", str(QUICKSTART)], env=full_env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"quick start failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def check_outputs(work: Path, arch: str, n_test: int, stdout: str):
    hyp = (work / "translations" / arch / "test.hyp").read_text(encoding="utf-8").splitlines()
    assert len(hyp) == n_test
    assert "@@" not in " ".join(hyp)  # BPE was removed
    bleu = (work / "translations" / arch / "bleu.txt").read_text()
    assert re.match(r"BLEU\|nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:\S+ = \d+\.\d+ ", bleu), bleu
    assert (work / "checkpoints" / arch / "checkpoint_last.pt").is_file()
    for step in ("1/6", "2/6", "3/6", "4/6", "5/6", "6/6"):
        assert f"] {step} " in stdout
    assert "done training" in stdout and "| valid |" in stdout  # training progress was shown


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """The default corpus (written by the quick start itself), trained for a few updates."""
    work = tmp_path_factory.mktemp("toy")
    out = run_quickstart(work, MAX_UPDATE="20", TOY_ARGS="--train 1500 --valid 40 --test 30")
    return work, out


def test_quickstart_on_its_own_toy_corpus(toy_run):
    work, out = toy_run
    check_outputs(work, "transformer_csan2d", 30, out)
    assert (work / "raw" / "train.en").read_text().count("\n") == 1500


def test_quickstart_rerun_skips_finished_steps(toy_run):
    work, _ = toy_run
    out = run_quickstart(work, MAX_UPDATE="20", TOY_ARGS="--train 1500 --valid 40 --test 30")
    for step in ("1/6", "2/6", "3/6"):
        assert re.search(rf"\] {step} .*skipped", out), out
    check_outputs(work, "transformer_csan2d", 30, out)


@pytest.fixture(scope="module")
def multi30k_subset(tmp_path_factory):
    source = shared_corpus("multi30k_en_de")
    corpus = tmp_path_factory.mktemp("multi30k_subset")
    for split, n in (("train", 2000), ("val", 50), ("test_2016_flickr", 25)):
        for lang in ("en", "de"):
            lines = (source / f"{split}.{lang}").read_text(encoding="utf-8").splitlines(keepends=True)[:n]
            (corpus / f"{split}.{lang}").write_text("".join(lines), encoding="utf-8")
    return corpus


@pytest.fixture(scope="module")
def variants_work(tmp_path_factory):
    """One work folder for every variant: BPE and binarisation run once, then are skipped."""
    return tmp_path_factory.mktemp("variants")


@pytest.mark.parametrize("variant", sorted(set(SELF_ATTENTION_VARIANTS) - {"standard"}))
def test_every_variant_trains_and_translates_multi30k(variant, multi30k_subset, variants_work):
    """fairseq-train then fairseq-generate through --user-dir, for every registered variant."""
    arch = f"transformer_{variant}"
    out = run_quickstart(variants_work, CORPUS=str(multi30k_subset), ARCH=arch, MAX_UPDATE="15", BPE_MERGES="1000")
    check_outputs(variants_work, arch, 25, out)
    log = (variants_work / f"train_{arch}.log").read_text()
    assert f"encoder_self_attention='{variant}'" in log and "csan_layers=2" in log  # the quick start's setting
    gen = (variants_work / "translations" / arch / "generate.log").read_text()
    assert "Generate test with beam=5" in gen


@pytest.mark.parametrize("flags", ["", "--ctx-side decoder", "--ctx-side both"])
def test_context_aware_trains_and_translates_multi30k(flags, multi30k_subset, tmp_path):
    """Encoder side, decoder side (incremental decoding in fairseq-generate) and both."""
    arch = "transformer_ctxaware"
    work = tmp_path / "work"
    out = run_quickstart(work, CORPUS=str(multi30k_subset), ARCH=arch, MAX_UPDATE="15", BPE_MERGES="1000",
                         MODEL_FLAGS=flags)
    check_outputs(work, arch, 25, out)
    side = flags.split()[-1] if flags else "encoder"
    assert f"ctx_side='{side}'" in (work / f"train_{arch}.log").read_text()
    gen = (work / "translations" / arch / "generate.log").read_text()
    assert "Generate test with beam=5" in gen


def test_quickstart_reports_a_missing_corpus_file(tmp_path):
    corpus = tmp_path / "broken"
    corpus.mkdir()
    (corpus / "train.en").write_text("a\n")
    full_env = {**os.environ, "WORK": str(tmp_path / "w"), "CORPUS": str(corpus)}
    done = subprocess.run(["bash", str(QUICKSTART)], env=full_env, capture_output=True, text=True)
    assert done.returncode != 0
    assert f"missing {corpus}/train.de" in done.stderr


def test_interactive_and_hub_interface_agree(toy_run):
    """fairseq-interactive and TransformerModel-style from_pretrained on the same checkpoint."""
    work, _ = toy_run
    arch = "transformer_csan2d"
    ckpt_dir = work / "checkpoints" / arch
    sentences = (work / "raw" / "test.en").read_text(encoding="utf-8").splitlines()[:3]
    bpe = ["--bpe", "subword_nmt", "--bpe-codes", str(work / "bpe" / "codes")]
    done = subprocess.run(
        ["fairseq-interactive", str(work / "bin"), "--user-dir", str(REPO / "fairseq_csan"),
         "--path", str(ckpt_dir / "checkpoint_last.pt"), "--cpu", "--beam", "5", *bpe],
        input="\n".join(sentences) + "\n", capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    interactive = [line.split("\t")[2] for line in done.stdout.splitlines() if line.startswith("D-")]
    assert len(interactive) == 3

    from fairseq_csan.models import VariantTransformerModel

    hub = VariantTransformerModel.from_pretrained(
        str(ckpt_dir), checkpoint_file="checkpoint_last.pt", data_name_or_path=str(work / "bin"),
        bpe="subword_nmt", bpe_codes=str(work / "bpe" / "codes"), cpu=True,
    )
    assert type(hub.models[0]).__name__ == "VariantTransformerModel"
    assert hub.translate(sentences, beam=5) == interactive


@pytest.mark.parametrize("selection,archs", [
    ([], ["transformer_csan1d", "transformer_csan2d", "transformer_ctxaware"]),
    (["--table1"], ["transformer_bidirect", "transformer_relpos", "transformer_neighbor", "transformer_local_hard",
                    "transformer_local_soft", "transformer_block", "transformer_cnn", "transformer_csan1d",
                    "transformer_csan2d"]),
])
def test_benchmark_script_runs(selection, archs, tmp_path):
    """The benchmark is no test of speed; this only keeps the script working."""
    lengths = shared_corpus("wmt14_en_de") / "newstest2014"
    out = tmp_path / "bench.md"
    done = subprocess.run(
        ["python", "-m", "fairseq_csan.recipes.benchmark", "--lengths-from", str(lengths), "--max-tokens", "300", "--rounds", "1",
         "--warmup", "0", "--vocab", "200", "--out", str(out), *selection],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    table = out.read_text()
    for arch in ["transformer"] + archs:
        assert re.search(rf"^\| {arch} \| \d+\.\d\dM \| \d+ \| \d\.\d{{3}} \|", table, re.M), table
    assert re.search(r"^\| transformer \| .* \| 1\.000 \|", table, re.M)
    assert len(re.findall(r"^\| transformer", table, re.M)) == 1 + len(archs)
