"""fairseq_csan.recipes.text: the line-exact reader, each tokeniser (Moses en/de, jieba, MeCab)
on a known sentence, lines kept aligned across worker processes, length and ratio cleaning."""

import subprocess
import sys

import pytest

from fairseq_csan.recipes import text as text_tools
from fairseq_csan.recipes.runner import Refusal as TextError  # (unreadable text is refused)
from fairseq_csan.recipes.text import iter_lines, read_lines
from conftest import shared_corpus
from recipe_helpers import lines, write

# characters that str.splitlines() treats as line ends; none of them ends a line here
ODD_BREAKS = ["\r", "\f", "\x85", "\u2028", "\u2029", "\v", "\x1c", "\x1d", "\x1e"]


@pytest.mark.parametrize("mark", ODD_BREAKS)
def test_only_newline_ends_a_line(tmp_path, mark):
    text = f"one{mark}still one\ntwo\nthree{mark}\n"
    (tmp_path / "in").write_bytes(text.encode("utf-8"))
    assert len(text.splitlines()) > 3  # the fault the reader avoids
    assert read_lines(tmp_path / "in") == [f"one{mark}still one", "two", f"three{mark}"]


def test_crlf_counts_one_line_each(tmp_path):
    (tmp_path / "in").write_bytes(b"a\r\nb\r\n")
    assert read_lines(tmp_path / "in") == ["a\r", "b\r"]  # as wc -l counts: 2


def test_line_count_is_wc_l(tmp_path):
    (tmp_path / "in").write_bytes(b"a\n\n\nb")  # no final newline: still a line
    assert read_lines(tmp_path / "in") == ["a", "", "", "b"]
    (tmp_path / "empty").write_bytes(b"")
    assert read_lines(tmp_path / "empty") == []
    (tmp_path / "blank").write_bytes(b"\n")
    assert read_lines(tmp_path / "blank") == [""]


def test_bom_removed_at_start_only(tmp_path):
    (tmp_path / "in").write_bytes("\ufeffHallo\n\ufeffWelt\n".encode("utf-8"))
    assert read_lines(tmp_path / "in") == ["Hallo", "\ufeffWelt"]


def test_undecodable_byte_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"fine\nalso fine\ncaf\xe9\n")
    with pytest.raises(TextError) as caught:
        read_lines(path)
    assert isinstance(caught.value, TextError)  # a refusal: exit status 2, in one line
    message = str(caught.value)
    assert f"{path}:3:" in message and "0xe9" in message and "column 4" in message
    assert "\n" not in message


def test_lazy_iteration_reads_lines_before_the_bad_one(tmp_path):
    path = tmp_path / "in"
    path.write_bytes(b"ok\n\xff\n")
    lines = iter_lines(path)
    assert next(lines) == "ok"
    with pytest.raises(TextError, match=":2:"):
        next(lines)


def test_dash_and_dev_stdin_read_standard_input():
    # a process of its own, for a real standard input
    code = "import sys; from fairseq_csan.recipes.text import read_lines; print(repr(read_lines(sys.argv[1])))"
    data = "\ufeffa\u2028b\nc\r\n".encode("utf-8")
    for name in ("-", "/dev/stdin"):
        out = subprocess.run([sys.executable, "-c", code, name], input=data, capture_output=True, check=True)
        assert out.stdout.decode().strip() == repr(["a\u2028b", "c\r"])
    out = subprocess.run([sys.executable, "-c", code, "-"], input=b"\x80\n", capture_output=True)
    assert out.returncode != 0 and b"<stdin>:1: not UTF-8" in out.stderr


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


def test_each_language_by_its_own_rules():
    assert [text_tools.tokenizer_name(lang) for lang in ("en", "fr", "zh", "ja")] == [
        "moses en", "moses fr", "jieba", "mecab (fugashi, unidic-lite)"]
    assert text_tools.tokenizer_name("tr") == "moses (no rules for tr: English's, as tokenizer.perl)"
    # French keeps an elision on its word; German's rules split the apostrophe off
    assert text_tools.make_tokenizer("fr")("qu'un homme") == "qu' un homme"
    assert text_tools.make_tokenizer("de")("qu'un homme") == "qu ' un homme"
    assert text_tools.make_detokenizer("fr")("qu' un homme") == "qu'un homme"
    # a code with a region takes its language's rules
    assert [text_tools.tokenizer_name(lang) for lang in ("zh_CN", "pt_BR")] == ["jieba", "moses pt"]
    assert text_tools.make_tokenizer("zh_TW")("我們在學習。") == text_tools.make_tokenizer("zh")("我們在學習。")
    assert text_tools.make_detokenizer("ja_JP")("日本 語 です") == "日本語です"


@pytest.mark.parametrize("lang", ["zh", "ja"])
def test_segmented_languages_are_joined_back(lang):
    detok = text_tools.make_detokenizer(lang)
    assert detok("我们 在 北京大学 学习 。") == "我们在北京大学学习。"
    assert detok("我 喜欢 iPhone 6 和 Mac  OS ， 你 呢 ？") == "我喜欢iPhone 6和Mac OS，你呢？"
    assert detok("日本 語 の 文 です 。") == "日本語の文です。" and detok("") == ""


def test_tokenize_file_keeps_lines_aligned_with_workers(tmp_path):
    rows = ["Ein Satz.", "", "Noch einer, bitte!"] * 5
    write(tmp_path / "in.de", rows)
    text_tools.tokenize_file("de", tmp_path / "in.de", tmp_path / "out.de", workers=2)
    out = lines(tmp_path / "out.de")
    assert len(out) == 15 and out[1] == "" and out[0] == "Ein Satz ." and out[2] == "Noch einer , bitte !"


def test_clean_pair_by_hand(tmp_path, capsys):
    src = ["a b c", "", "a b c d", "a", "a b"]
    tgt = ["x y z", "x", "x y", "x y z w v", "x y w"]
    write(tmp_path / "s", src)
    write(tmp_path / "t", tgt)
    # kept: 3/3 (ratio 1), 2/3 (1.5); dropped: empty source, 4/2 = 2 > 1.5, 1/5 = 5 > 1.5
    kept, why = text_tools.clean_pair(tmp_path / "s", tmp_path / "t", tmp_path / "s2", tmp_path / "t2",
                                      max_len=250, ratio=1.5)
    assert (kept, why) == (2, {"empty": 1, "long": 0, "ratio": 2, "token": 0})
    assert lines(tmp_path / "s2") == ["a b c", "a b"]
    # 3 of 5 dropped: said, with the reasons, most first, and the option that keeps them
    assert ("] warning: cleaning dropped 3 of 5 training pairs (60.0%): 2 --clean-ratio R over 1.5 keeps more "
            "of them, 1 a pair with an empty side cannot be trained on") in capsys.readouterr().err
    kept, _ = text_tools.clean_pair(tmp_path / "s", tmp_path / "t", tmp_path / "s2", tmp_path / "t2",
                                    max_len=3, ratio=9)
    assert kept == 2 and lines(tmp_path / "t2") == ["x y z", "x y w"]  # "a b c d" and "x y z w v" too long
    write(tmp_path / "s", ["a b"] * 20 + ["a"])
    write(tmp_path / "t", ["x y"] * 20 + ["x y"])
    capsys.readouterr()
    assert text_tools.clean_pair(tmp_path / "s", tmp_path / "t", tmp_path / "s2", tmp_path / "t2")[0] == 20
    assert "warning" not in capsys.readouterr().err  # 1 of 21 (4.8%): within text.DROP_WARNING


def test_clean_refuses_misaligned_files(tmp_path):
    write(tmp_path / "s", ["a", "b"])
    write(tmp_path / "t", ["x"])
    with pytest.raises(TextError, match="differ in length"):
        text_tools.clean_pair(tmp_path / "s", tmp_path / "t", tmp_path / "s2", tmp_path / "t2")
    assert not (tmp_path / "s2").exists()


def test_a_gzipped_file_reads_as_its_text(tmp_path):
    import gzip

    with gzip.open(tmp_path / "train.en.gz", "wb") as f:
        f.write("\ufeffone\ntwo\r\nthree".encode("utf-8"))
    assert read_lines(tmp_path / "train.en.gz") == ["one", "two\r", "three"]


def test_text_tokenised_already_is_noticed():
    """Multi30k's English and German and a Japanese corpus as they come are raw text; the same
    after the recipe's tokeniser (or segmenter), and lowercased, look tokenised."""
    import itertools

    for lang, path in (("en", "multi30k_en_de/train.en"), ("de", "multi30k_en_de/train.de"),
                       ("ja", "kftt30k_ja_en/train.ja")):
        given = list(itertools.islice(iter_lines(shared_corpus(path.split("/")[0]) / path.split("/")[1]), 1000))
        raw = [line.replace(" ", "") for line in given] if lang == "ja" else given  # KFTT comes segmented
        tokenised = [text_tools.make_tokenizer(lang)(line).lower() for line in raw]
        assert text_tools.looks_tokenized(raw, lang) is None, lang
        assert text_tools.looks_tokenized(tokenised, lang), lang
    assert text_tools.looks_tokenized(["he didn 't care for swimming ."] * 20, "en")
    assert text_tools.looks_tokenized(["he didn 't care ."] * 3, "en") is None  # too few to tell


def test_pretokenized_text_keeps_its_tokens():
    assert text_tools.tokenizer_name("en", pretokenized=True) == text_tools.AS_GIVEN
    for lang in ("en", "ja"):
        tokenize = text_tools.line_tokenizer(lang, pretokenized=True)
        assert tokenize("  he didn 't  care . ") == "he didn 't care ."
        assert text_tools.make_detokenizer(lang, pretokenized=True)("he didn 't care .") == "he didn 't care ."
    assert text_tools.line_tokenizer("en")("he didn 't care .") == "he didn ' t care ."  # what it avoids


def test_a_gzip_file_cut_short_is_named_in_one_line(tmp_path):
    import gzip

    whole = gzip.compress(("a line of text\n" * 5000).encode())
    (tmp_path / "cut.en.gz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "plain.en.gz").write_bytes(b"not gzip at all\n")
    for name in ("cut.en.gz", "plain.en.gz"):
        with pytest.raises(TextError, match=rf"{name}: not a whole gzip file after [\d,]+ lines"):
            read_lines(tmp_path / name)


def test_french_typography_is_not_taken_for_tokens():
    """French sets ? ! : ; apart from the word before them in raw text; only . , and clitics tell."""
    raw = ["Tu viens ce soir ?", "Attention : la porte est fermée !", "Oui, il est parti.", "Il a dit : non ; puis il est parti."]
    assert text_tools.looks_tokenized(raw * 10, "fr") is None
    assert text_tools.looks_tokenized(raw * 10, "en")  # (where no such rule holds)
    assert text_tools.looks_tokenized([text_tools.make_tokenizer("fr")(line) for line in raw * 10], "fr")
