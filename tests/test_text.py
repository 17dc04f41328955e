"""fairseq_csan.recipes.text: the line-exact reader."""

import subprocess
import sys

import pytest

from fairseq_csan.recipes.text import TextError, iter_lines, read_lines

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
    assert isinstance(caught.value, ValueError)
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
    code = ("import sys; from fairseq_csan.recipes.text import read_lines; "
            "print(repr(read_lines(sys.argv[1])))")
    data = "\ufeffa\u2028b\nc\r\n".encode("utf-8")
    for name in ("-", "/dev/stdin"):
        out = subprocess.run([sys.executable, "-c", code, name], input=data, capture_output=True, check=True)
        assert out.stdout.decode().strip() == repr(["a\u2028b", "c\r"])
    out = subprocess.run([sys.executable, "-c", code, "-"], input=b"\x80\n", capture_output=True)
    assert out.returncode != 0 and b"<stdin>:1: not UTF-8" in out.stderr
