"""fairseq_csan.recipes.corpora: each task's corpora gathered in order from plain text, SGM and
ASPEC files, from an archive fetched through a URL and extracted; the missing file and its
source named; misaligned corpora refused. (prepare's gather step writes them: test_prepare.)"""

import tarfile

import pytest

from conftest import REPO
from fairseq_csan.recipes import corpora
from fairseq_csan.recipes.runner import Refusal
from recipe_helpers import lines, run, write, write_sgm


def gather(task, raw, out):
    """Every split of ``task``, as prepare's gather step writes them."""
    out.mkdir(parents=True, exist_ok=True)
    for split in corpora.TASKS[task].splits:
        located = corpora.locate_split(task, split, raw, allow_download=False)
        corpora.write_split(task, split, located, {lang: out / f"{split}.{lang}" for lang in ("en", "de")})


def test_sgm_and_aspec_readers(tmp_path):
    write_sgm(tmp_path / "t.sgm", ["Erster  Satz .", "Zweiter", "Dritter & letzter"])
    assert corpora.read_side(tmp_path / "t.sgm") == ["Erster Satz .", "Zweiter", "Dritter & letzter"]
    write(tmp_path / "train-1.txt", ["0.9 ||| D1 ||| 1 ||| 日本 語 ||| Japanese", "0.8 ||| D1 ||| 2 ||| 文 ||| A  sentence"])
    assert corpora.read_side(tmp_path / "train-1.txt", 3) == ["日本 語", "文"]
    assert corpora.read_side(tmp_path / "train-1.txt", 4) == ["Japanese", "A sentence"]
    write(tmp_path / "bad.txt", ["D1 ||| 1 ||| only three"])
    with pytest.raises(Refusal, match="bad.txt:1: expected at least 4"):
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
    gather("wmt14_en_de", tmp_path / "raw", tmp_path / "out")
    assert lines(tmp_path / "out/train.en") == en
    assert lines(tmp_path / "out/train.de") == de
    assert lines(tmp_path / "out/valid.de") == ["dev de"]
    assert lines(tmp_path / "out/test.en") == ["test en 1", "test en 2"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "test.de", "test.en", "train.de", "train.en", "valid.de", "valid.en"]


def test_missing_corpus_names_the_file_and_where_to_get_it(tmp_path):
    _wmt14_raw(tmp_path / "raw")
    (tmp_path / "raw/commoncrawl.de-en.de").unlink()
    with pytest.raises(Refusal) as error:
        gather("wmt14_en_de", tmp_path / "raw", tmp_path / "out")
    message = str(error.value)
    assert "Common Crawl" in message and str(tmp_path / "raw/commoncrawl.de-en.de") in message
    assert "https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz" in message
    assert not list((tmp_path / "out").glob("train.*"))  # found missing before anything is written


def test_misaligned_corpus_is_refused(tmp_path):
    _wmt14_raw(tmp_path / "raw")
    write(tmp_path / "raw/commoncrawl.de-en.de", ["only one"])
    with pytest.raises(Refusal, match="not line-aligned: .*2 segments.*1"):
        gather("wmt14_en_de", tmp_path / "raw", tmp_path / "out")


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
    with pytest.raises(Refusal, match="run without --no-download"):
        corpora.locate("t", remote, raw, ("en", "de"), allow_download=False)
    [found] = corpora.locate("t", remote, raw, ("en", "de"), allow_download=True)
    assert (raw / corpus.archive).is_file()
    assert corpora.read_side(found["de"]) == ["x", "y"]


def test_failed_download_says_what_to_do(tmp_path):
    corpus = corpora.Corpus("X", [{"en": "x.en", "de": "x.de"}], "x.tgz", (tmp_path / "absent.tgz").as_uri())
    with pytest.raises(Refusal) as error:
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
    with pytest.raises(Refusal, match="c.zh has no partner"):
        corpora.locate("t", corpus, tmp_path, ("zh", "en"), allow_download=False)


def test_aspec_missing_message_points_to_the_licence():
    corpus = corpora.TASKS["wat17_ja_en"].splits["test"][0]
    message = corpora.missing_message("wat17_ja_en", corpus, REPO / "nowhere", ("ja", "en"))
    assert "test/test.txt" in message and "ASPEC is licensed" in message


def test_list_names_every_corpus():
    listing = run(["python", "-m", "fairseq_csan.recipes.prepare", "wmt17_zh_en", "--list"]).stdout
    for name in ("News Commentary v12", "UN Parallel Corpus v1.0", "CWMT", "newsdev2017", "newstest2017"):
        assert name in listing


def test_each_test_set_is_named_by_its_files():
    names = {task: corpora.test_name(corpora.TASKS[task], "test") for task in corpora.TASKS}
    assert names["wmt14_en_de"] == "newstest2014" and names["wmt17_zh_en"] == "newstest2017"
    assert names["multi30k_en_de"] == "test_2016_flickr"
    own = corpora.files_task("fr", "en", "a/train", "a/val", ["a/b c/test_2016_flickr", "x/test_2018_flickr"])
    assert [corpora.test_name(own, split) for split in ("test", "test1")] == ["test_2016_flickr", "test_2018_flickr"]
