"""The recipes' helpers, each on small inputs checked by hand: gathering corpora (text, SGM,
ASPEC, archives, downloads, errors), tokenisation and cleaning, scoring, the Table 2
collector, the training script's exact commands, and the bf16 entry point."""

import json
import tarfile

import pytest

from conftest import REPO
from fairseq_csan.recipes import collect_results as collect
from fairseq_csan.recipes import corpora, score
from fairseq_csan.recipes import text as text_tools
from recipe_helpers import fake_task, lines, run, write, write_sgm



# ---------------------------------------------------------------- gathering the raw corpora

def test_sgm_and_aspec_readers(tmp_path):
    write_sgm(tmp_path / "t.sgm", ["Erster  Satz .", "Zweiter", "Dritter & letzter"])
    assert corpora.read_side(tmp_path / "t.sgm") == ["Erster Satz .", "Zweiter", "Dritter & letzter"]
    write(tmp_path / "train-1.txt", ["0.9 ||| D1 ||| 1 ||| 日本 語 ||| Japanese", "0.8 ||| D1 ||| 2 ||| 文 ||| A  sentence"])
    assert corpora.read_side(tmp_path / "train-1.txt", 3) == ["日本 語", "文"]
    assert corpora.read_side(tmp_path / "train-1.txt", 4) == ["Japanese", "A sentence"]
    write(tmp_path / "bad.txt", ["D1 ||| 1 ||| only three"])
    with pytest.raises(corpora.Missing, match="bad.txt:1: expected at least 4"):
        corpora.read_side(tmp_path / "bad.txt", 3)


def _wmt14_raw(raw, n=6):
    en = [f"english {i} ." for i in range(n)]
    de = [f"deutsch {i} ." for i in range(n)]
    write(raw / "training/europarl-v7.de-en.en", en[:2])
    write(raw / "training/europarl-v7.de-en.de", de[:2])
    write(raw / "commoncrawl.de-en.en", en[2:4])
    write(raw / "commoncrawl.de-en.de", de[2:4])
    write(raw / "training/news-commentary-v9.de-en.en", en[4:])
    write(raw / "training/news-commentary-v9.de-en.de", de[4:])
    write(raw / "newstest2013.en", ["dev en"])
    write(raw / "newstest2013.de", ["dev de"])
    write_sgm(raw / "test-full/newstest2014-deen-src.en.sgm", ["test en 1", "test en 2"])
    write_sgm(raw / "test-full/newstest2014-deen-ref.de.sgm", ["test de 1", "test de 2"])
    return en, de


def test_gather_concatenates_corpora_in_order_and_reads_sgm(tmp_path):
    en, de = _wmt14_raw(tmp_path / "raw")
    corpora.gather("wmt14_en_de", tmp_path / "raw", tmp_path / "out", allow_download=False)
    assert lines(tmp_path / "out/train.en") == en
    assert lines(tmp_path / "out/train.de") == de
    assert lines(tmp_path / "out/valid.de") == ["dev de"]
    assert lines(tmp_path / "out/test.en") == ["test en 1", "test en 2"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "test.de", "test.en", "train.de", "train.en", "valid.de", "valid.en"]


def test_gather_keeps_existing_outputs_unless_forced(tmp_path):
    _wmt14_raw(tmp_path / "raw")
    write(tmp_path / "out/train.en", ["kept"])
    write(tmp_path / "out/train.de", ["behalten"])
    corpora.gather("wmt14_en_de", tmp_path / "raw", tmp_path / "out", allow_download=False)
    assert lines(tmp_path / "out/train.en") == ["kept"]
    corpora.gather("wmt14_en_de", tmp_path / "raw", tmp_path / "out", allow_download=False, force=True)
    assert len(lines(tmp_path / "out/train.en")) == 6


def test_missing_corpus_names_the_file_and_where_to_get_it(tmp_path):
    _wmt14_raw(tmp_path / "raw")
    (tmp_path / "raw/commoncrawl.de-en.de").unlink()
    with pytest.raises(corpora.Missing) as error:
        corpora.gather("wmt14_en_de", tmp_path / "raw", tmp_path / "out", allow_download=False)
    message = str(error.value)
    assert "Common Crawl" in message and str(tmp_path / "raw/commoncrawl.de-en.de") in message
    assert "https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz" in message
    # nothing half-written is left behind
    assert not list((tmp_path / "out").glob("train.*"))


def test_misaligned_corpus_is_refused(tmp_path):
    _wmt14_raw(tmp_path / "raw")
    write(tmp_path / "raw/commoncrawl.de-en.de", ["only one"])
    with pytest.raises(corpora.Missing, match="not line-aligned: .*2 segments.*1"):
        corpora.gather("wmt14_en_de", tmp_path / "raw", tmp_path / "out", allow_download=False)


def test_archive_is_downloaded_and_extracted(tmp_path):
    """A public corpus missing from the raw folder is fetched from its URL (here a file:// URL
    to an archive laid out as the official one) and extracted."""
    staging = tmp_path / "staging"
    write(staging / "training/news-commentary-v9.de-en.en", ["a", "b"])
    write(staging / "training/news-commentary-v9.de-en.de", ["x", "y"])
    archive = tmp_path / "nc.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(staging / "training", arcname="training")
    corpus = corpora.TASKS["wmt14_en_de"].splits["train"][2]
    remote = corpora.Corpus(corpus.name, corpus.layouts, corpus.archive, archive.as_uri())
    raw = tmp_path / "raw"
    with pytest.raises(corpora.Missing, match="run without --no-download"):
        corpora.locate("t", remote, raw, ("en", "de"), allow_download=False)
    [found] = corpora.locate("t", remote, raw, ("en", "de"), allow_download=True)
    assert (raw / corpus.archive).is_file()
    assert corpora.read_side(found["de"]) == ["x", "y"]


def test_failed_download_says_what_to_do(tmp_path):
    corpus = corpora.Corpus("X", [{"en": "x.en", "de": "x.de"}], "x.tgz", (tmp_path / "absent.tgz").as_uri())
    with pytest.raises(corpora.Missing) as error:
        corpora.locate("t", corpus, tmp_path / "raw", ("en", "de"), allow_download=True)
    assert "download of" in str(error.value) and str(tmp_path / "raw/x.tgz") in str(error.value)
    assert not (tmp_path / "raw/x.tgz.part").exists()


def test_cwmt_folder_pairs_and_orphans(tmp_path):
    corpus = corpora.TASKS["wmt17_zh_en"].splits["train"][2]
    write(tmp_path / "cwmt/b.zh", ["乙"])
    write(tmp_path / "cwmt/b.en", ["B"])
    write(tmp_path / "cwmt/a.zh", ["甲"])
    write(tmp_path / "cwmt/a.en", ["A"])
    found = corpora.locate("t", corpus, tmp_path, ("zh", "en"), allow_download=False)
    assert [f["en"].name for f in found] == ["a.en", "b.en"]
    write(tmp_path / "cwmt/c.zh", ["丙"])
    with pytest.raises(corpora.Missing, match="c.zh has no partner"):
        corpora.locate("t", corpus, tmp_path, ("zh", "en"), allow_download=False)


def test_aspec_missing_message_points_to_the_licence():
    corpus = corpora.TASKS["wat17_ja_en"].splits["test"][0]
    message = corpora.missing_message("wat17_ja_en", corpus, REPO / "nowhere", ("ja", "en"))
    assert "test/test.txt" in message and "ASPEC is licensed" in message


def test_list_names_every_corpus():
    listing = run(["python", "-m", "fairseq_csan.recipes.corpora", "wmt17_zh_en", "--list"]).stdout
    for name in ("News Commentary v12", "UN Parallel Corpus v1.0", "CWMT", "newsdev2017", "newstest2017"):
        assert name in listing


# ---------------------------------------------------------------- tokenisation and cleaning

@pytest.mark.parametrize("lang, text, expected", [
    ("en", "Hello, world! It's 5 o'clock.", "Hello , world ! It 's 5 o 'clock ."),
    ("de", "Das \u201eHaus\u201c kostet 3,50 \u20ac & mehr.", 'Das " Haus " kostet 3,50 \u20ac & mehr .'),
    ("de", "Vorort-Bereich", "Vorort-Bereich"),
    ("zh", "我们在北京大学学习。", "我们 在 北京大学 学习 。"),
    ("ja", "日本語の文です。", "日本 語 の 文 です 。"),
])
def test_tokenizers(lang, text, expected):
    # Moses: clitics split, quotes normalised, no escaping, no aggressive hyphen splitting
    assert text_tools.make_tokenizer(lang)(text) == expected


def test_tokenize_file_keeps_lines_aligned_with_workers(tmp_path):
    rows = ["Ein Satz.", "", "Noch einer, bitte!"] * 5
    write(tmp_path / "in.de", rows)
    text_tools.tokenize_file("de", tmp_path / "in.de", tmp_path / "out.de", workers=2)
    out = lines(tmp_path / "out.de")
    assert len(out) == 15 and out[1] == "" and out[0] == "Ein Satz ." and out[2] == "Noch einer , bitte !"


def test_clean_pair_by_hand(tmp_path):
    src = ["a b c", "", "a b c d", "a", "a b"]
    tgt = ["x y z", "x", "x y", "x y z w v", "x y w"]
    write(tmp_path / "s", src)
    write(tmp_path / "t", tgt)
    # kept: 3/3 (ratio 1), 2/3 (1.5); dropped: empty source, 4/2 = 2 > 1.5, 1/5 = 5 > 1.5
    kept, dropped = text_tools.clean_pair(tmp_path / "s", tmp_path / "t", tmp_path / "s2", tmp_path / "t2",
                                          max_len=250, ratio=1.5)
    assert (kept, dropped) == (2, 3)
    assert lines(tmp_path / "s2") == ["a b c", "a b"]
    kept, _ = text_tools.clean_pair(tmp_path / "s", tmp_path / "t", tmp_path / "s2", tmp_path / "t2",
                                    max_len=3, ratio=9)
    assert kept == 2 and lines(tmp_path / "t2") == ["x y z", "x y w"]  # "a b c d" and "x y z w v" too long


def test_clean_refuses_misaligned_files(tmp_path):
    write(tmp_path / "s", ["a", "b"])
    write(tmp_path / "t", ["x"])
    with pytest.raises(SystemExit, match="differ in length"):
        text_tools.clean_pair(tmp_path / "s", tmp_path / "t", tmp_path / "s2", tmp_path / "t2")
    assert not (tmp_path / "s2").exists()


# ---------------------------------------------------------------- scoring

GENERATE = """S-1\tzweiter satz
T-1\tzweiter satz
H-1\t-0.5\tein zweiter satz
D-1\t-0.5\tein zweiter satz
S-0\terster satz
H-0\t-0.2\tder erste satz
2026-11-22 08:00:00 | INFO | fairseq_cli.generate | Translated 2 sentences (12 tokens) in 0.5s (4.00 sentences/s, 24.00 tokens/s)
"""


def test_hypotheses_come_back_in_corpus_order(tmp_path):
    (tmp_path / "gen.txt").write_text(GENERATE)
    assert score.hypotheses(tmp_path / "gen.txt") == ["der erste satz", "ein zweiter satz"]
    assert score.decode_speed(tmp_path / "gen.txt") == {"sentences": 2, "seconds": 0.5, "sent_per_s": 4.0}
    (tmp_path / "gap.txt").write_text("H-0\t-1\ta\nH-2\t-1\tc\n")
    with pytest.raises(SystemExit, match=r"lacks hypotheses for sentences \[1\]"):
        score.hypotheses(tmp_path / "gap.txt")


def test_train_speed_is_the_mean_of_ups(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "x | INFO | fairseq_cli.train | num. shared model params: 1,234 (num. trained: 1,200)\n"
        "x | INFO | train_inner | epoch 001:  2 / 9 loss=1, ups=1.5, wpb=3\n"
        "x | INFO | train_inner | epoch 001:  4 / 9 loss=1, ups=2.25, wpb=3\n"
        "x | INFO | train | epoch 001 | loss 9.3 | ups 7.81 | wpb 667\n")
    assert score.train_speed(log) == {"steps_per_s": 1.875, "logged_intervals": 2, "params": 1200}


def test_compound_splitting_as_the_wmt14_convention():
    assert score.split_compounds("Vorort-Bereich und Rot-Grün-Koalition") == \
        "Vorort ##AT##-##AT## Bereich und Rot ##AT##-##AT## Grün ##AT##-##AT## Koalition"
    # matches do not overlap, as with perl's s{(\S)-(\S)}{...}g: "b" is taken by the first
    assert score.split_compounds("a-b-c") == "a ##AT##-##AT## b-c"
    # a hyphen between spaces is not a compound
    assert score.split_compounds("a - b") == "a - b"


def test_tokenised_bleu_by_hand():
    # hypothesis = reference: 100; a 4-token hypothesis with 3/4 unigram, 1/3 bigram, 0 trigram
    # matches has BLEU 0 without smoothing (no 3-gram match); sacreBLEU's floor smoothing aside
    assert score.tokenised_bleu(["a b c d e"], ["a b c d e"]) == pytest.approx(100.0)
    # tokenize none: punctuation is not split, so "d." does not match "d ."
    assert score.tokenised_bleu(["a b c d."], ["a b c d ."]) < score.tokenised_bleu(["a b c d ."], ["a b c d ."])
    # compound splitting turns one unmatched token into three, two of them matching
    hyp, ref = ["das Vorort-Gebiet ist groß"], ["das Vorort-Bereich ist groß"]
    plain = score.tokenised_bleu(hyp, ref)
    split = score.tokenised_bleu([score.split_compounds(h) for h in hyp], [score.split_compounds(r) for r in ref])
    assert split > plain


@pytest.mark.parametrize("delta, p, expected", [
    (0.8, 0.001, "⇑"), (0.8, 0.03, "↑"), (0.8, 0.05, ""), (-0.4, 0.002, "⇓"), (-0.4, 0.04, "↓"),
    (0.0, 0.001, ""), (0.5, None, ""),
])
def test_significance_marks(delta, p, expected):
    assert score.mark(delta, p) == expected


def test_paired_bootstrap_through_sacrebleu(tmp_path):
    refs = [f"the cat {i} sat on the mat today" for i in range(40)]
    good = list(refs)
    bad = [f"a dog {i} stood near some rug" for i in range(40)]
    write(tmp_path / "ref", refs)
    write(tmp_path / "good", good)
    write(tmp_path / "bad", bad)
    test = score.paired_bootstrap(tmp_path / "ref", tmp_path / "bad", tmp_path / "good", 200)
    assert test["baseline_bleu"] < 5 and test["bleu"] == pytest.approx(100.0)
    assert test["p_value"] < 0.01 and "--paired-bs" in test["command"]
    assert score.mark(test["bleu"] - test["baseline_bleu"], test["p_value"]) == "⇑"


# ---------------------------------------------------------------- the Table 2 collector

def _result(folder, name, task, bleu, mark="", steps=None, params=None, bootstrap=None):
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({
        "name": name, "task": task, "bleu_tok": bleu, "bleu_compound": None, "sacrebleu": bleu - 1,
        "sacrebleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
        "mark": mark, "train": {"steps_per_s": steps, "params": params, "logged_intervals": 1},
        "bootstrap": bootstrap}))
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
    with pytest.raises(SystemExit, match="two runs named"):
        collect.table(collect.load(runs + [duplicate]))


def test_collect_results_refuses_to_overwrite(tmp_path):
    run_dir = _result(tmp_path / "a", "T", "wmt14_en_de", 20.0)
    (tmp_path / "table.md").write_text("mine")
    done = run(["python", "-m", "fairseq_csan.recipes.collect_results", run_dir, "--output", tmp_path / "table.md"], check=False)
    assert done.returncode != 0 and "exists" in done.stderr
    assert (tmp_path / "table.md").read_text() == "mine"
    run(["python", "-m", "fairseq_csan.recipes.collect_results", run_dir, "--output", tmp_path / "table.md", "--force"])
    assert "| T |" in (tmp_path / "table.md").read_text()


# ---------------------------------------------------------------- the training command

@pytest.fixture
def fake_data(tmp_path):
    """A prepared-task folder with a joined (identical) pair of dictionaries."""
    return fake_task(tmp_path)


def dry_run(data, *extra):
    done = run(["bash", "scripts/train.sh", "--data", data, "--save-dir", "/ckpt", "--dry-run", *extra])
    return done.stdout.strip(), done.stderr


def test_dry_run_prints_the_exact_8_gpu_command(fake_data):
    command, _ = dry_run(fake_data, "--arch", "transformer_csan2d")
    assert command == (
        f"fairseq-train {fake_data}/data-bin --user-dir {REPO}/fairseq_csan --arch transformer_csan2d "
        "--source-lang en --target-lang de --share-all-embeddings "
        "--optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 "
        "--lr-scheduler inverse_sqrt --lr 0.000699 --warmup-updates 4000 --warmup-init-lr 1e-07 "
        "--criterion label_smoothed_cross_entropy --label-smoothing 0.1 "
        "--dropout 0.1 --weight-decay 0.0 --clip-norm 0.0 "
        "--max-tokens 4096 --max-update 100000 --distributed-world-size 8 --update-freq 1 --fp16 "
        "--save-dir /ckpt --save-interval-updates 1000 --keep-interval-updates 20 --no-epoch-checkpoints "
        "--log-format simple --log-interval 100 --seed 1")


def test_dry_run_big_settings_fewer_gpus_and_bf16(fake_data):
    command, warning = dry_run(fake_data, "--arch", "transformer_ctxaware_big", "--gpus", "2", "--precision", "bf16")
    assert command.startswith("python -m fairseq_csan.train ")
    assert "--lr 0.000494 " in command and "--dropout 0.3 " in command and "--max-update 300000 " in command
    assert "--distributed-world-size 2 --update-freq 4 --bf16 " in command and "--fp16" not in command
    assert warning == ""
    command, warning = dry_run(fake_data, "--arch", "transformer", "--gpus", "3", "--precision", "fp32")
    assert "--distributed-world-size 3 --update-freq 3 " in command and "16" not in command.split("--update-freq")[1][:4]
    assert "9 batches per update, not the papers' 8" in warning
    command, _ = dry_run(fake_data, "--arch", "transformer", "--", "--max-epoch", "3")
    assert command.endswith("--seed 1 --max-epoch 3")


def test_separate_dictionaries_share_only_the_decoder_embeddings(fake_data):
    command, _ = dry_run(fake_data, "--arch", "transformer", "--share", "none")
    assert "--share-" not in command
    write(fake_data / "data-bin/dict.de.txt", ["c 5"])
    command, _ = dry_run(fake_data, "--arch", "transformer")
    assert "--share-decoder-input-output-embed" in command and "--share-all-embeddings" not in command
    done = run(["bash", "scripts/train.sh", "--data", fake_data, "--arch", "transformer", "--save-dir", "/c",
                "--dry-run", "--share", "all"], check=False)
    assert done.returncode == 2 and "--share all needs one joined dictionary" in done.stderr


@pytest.mark.parametrize("args, message", [
    (["--precision", "fp8"], "--precision must be fp16, bf16 or fp32"),
    (["--size", "huge"], "--size must be base or big"),
    (["--share", "some"], "--share must be auto, all, decoder or none"),
    (["--gpus", "two"], "--gpus must be a whole number"),
    (["--fp16"], "unknown argument '--fp16' (fairseq-train arguments go after --)"),
    (["--cpu-tiny", "--precision", "fp16"], "--precision fp16 needs a GPU"),
])
def test_train_script_bad_arguments(fake_data, args, message):
    done = run(["bash", "scripts/train.sh", "--data", fake_data, "--arch", "transformer",
                "--save-dir", "/ckpt", "--dry-run", *args], check=False)
    assert done.returncode == 2 and message in done.stderr


def test_train_script_needs_prepared_data(tmp_path):
    done = run(["bash", "scripts/train.sh", "--data", tmp_path / "absent", "--arch", "transformer",
                "--save-dir", "/ckpt", "--dry-run"], check=False)
    assert done.returncode == 2 and "no data folder" in done.stderr


# ---------------------------------------------------------------- bf16 without --tpu

def test_bf16_entry_point_undoes_only_the_tpu_implication():
    from fairseq import options

    from fairseq_csan.train import bf16_without_tpu

    parse = bf16_without_tpu(options.parse_args_and_arch)
    base = ["/dev/null", "--task", "translation", "-s", "en", "-t", "de", "--arch", "transformer"]
    stock = options.parse_args_and_arch(options.get_training_parser(), base + ["--bf16"])
    assert stock.tpu is True  # the fairseq behaviour this entry point exists for
    ours = parse(options.get_training_parser(), base + ["--bf16"])
    assert ours.bf16 is True and ours.tpu is False
    assert parse(options.get_training_parser(), base + ["--bf16", "--tpu"]).tpu is True
    assert parse(options.get_training_parser(), base).tpu is False
