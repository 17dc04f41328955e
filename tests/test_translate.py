"""fairseq_csan.recipes.translate: raw text -> translations through the hub interface, line for
line whatever the input holds (odd line breaks, a BOM, empty lines, over-long lines, stdin)."""

import os
import subprocess
import sys

import pytest
import torch

from recipe_helpers import fake_task, in_process, lines, refusal_of, walk_options, write

from fairseq_csan.recipes import translate
from fairseq_csan.recipes.runner import write_file
from fairseq_csan.recipes.translate import pieces

TRANSLATE = [sys.executable, "-m", "fairseq_csan.recipes.translate"]


@pytest.fixture
def tiny(tiny_task):
    """conftest.py's session-wide tiny task and checkpoint (read only)."""
    return tiny_task["task"], tiny_task["checkpoint"]


# ---------------------------------------------------------------- without a model

def test_pieces_cut_between_words_and_fit():
    tokens = "a@@ b c@@ d@@ e f g@@ h i j".split()
    out = pieces(tokens, 4)
    assert [t for p in out for t in p] == tokens and all(len(p) <= 4 for p in out)
    assert all(not p[-1].endswith("@@") for p in out)  # no word cut in two
    assert pieces(tokens, 100) == [tokens]
    one_word = [f"x{i}@@" for i in range(9)] + ["y"]
    out = pieces(one_word, 4)  # a word longer than the limit is cut anyway
    assert [t for p in out for t in p] == one_word and all(len(p) <= 4 for p in out)
    assert [len(p) for p in pieces(["w"] * 9, 8)] == [5, 4]  # even pieces, no stub


def fake_model(tmp_path):
    data = fake_task(tmp_path)
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"not read before the input is")
    return ["--data", str(data), "--checkpoint", str(checkpoint)]


def test_undecodable_input_is_named_by_file_and_line_before_any_work(tmp_path):
    bad = tmp_path / "bad.en"
    bad.write_bytes(b"\xef\xbb\xbfgood\nbad \xff byte\n")  # a BOM, then a Latin-1 byte on line 2
    done = in_process(translate.main, [*fake_model(tmp_path), "--input", bad, "--output", tmp_path / "o"], check=False)
    assert done.returncode == 2 and f"{bad}:2: not UTF-8 (byte 0xff at column 5)" in done.stderr
    for name in ("-", "/dev/stdin"):  # standard input, by either name, as processes
        done = subprocess.run(TRANSLATE + fake_model(tmp_path) + ["--input", name, "--output", str(tmp_path / "o")],
                              input=b"ok\n\x80\n", capture_output=True)
        assert done.returncode == 2 and b"<stdin>:2: not UTF-8" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("extra, message", [
    (["--model", "M", "--input", "x"], "--model replaces --data and --checkpoint"),
    (["--input", "-"], "needs --output"),
    (["--input", "x", "--beam", "0"], "--beam must be a whole number of 1 or more, got '0'"),
    (["--input", "x", "--batch-size", "0"], "--batch-size must be a whole number of 1 or more, got '0'"),
])
def test_bad_command_lines_stop_early(tmp_path, extra, message):
    (tmp_path / "x").write_text("a\n", encoding="utf-8")
    # scripts/translate.py's main, in this process
    done = in_process(translate.main, fake_model(tmp_path) + extra, check=False, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr


def test_model_or_task_is_required(tmp_path):
    done = in_process(translate.main, ["--input", "x"], check=False, cwd=tmp_path)
    assert done.returncode == 2 and "give --data and --checkpoint" in done.stderr
    done = in_process(translate.main, ["--model", tmp_path, "--input", "x"], check=False)
    assert done.returncode == 2 and "no model.pt there" in done.stderr


# ---------------------------------------------------------------- with a tiny trained model

@pytest.mark.slow
def test_odd_lines_keep_their_place(tiny, tmp_path):
    """Only \\n ends a line: a \\r, \\r\\n, form feed, NEL or U+2028 inside a line is a blank, as
    preparation reads it (str.splitlines() broke there and shifted every later translation);
    a BOM is removed; an empty or blank line gets an empty translation; standard input."""
    task, checkpoint = tiny
    rows = ["A man in red.", "A man\rin red.", "", "A man\fin red.", "A man\x85in red.", "A man\u2028in red.",
            "   ", "A man in red.\r", "Two dogs play."]
    raw = ("\ufeff" + "\n".join(rows) + "\n").encode("utf-8")
    assert len(raw.decode("utf-8").splitlines()) > len(rows)  # the old reader's fault
    out = tmp_path / "out.de"
    done = subprocess.run(TRANSLATE + ["--data", str(task), "--checkpoint", str(checkpoint), "--input", "-",
                                       "--output", str(out), "--cpu"], input=raw, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    got = out.read_bytes().decode("utf-8").split("\n")
    assert len(got) == len(rows) + 1 and got[-1] == ""
    assert got[2] == got[6] == ""
    # the same sentence with a blank of another kind is the same sentence
    assert got[0] and all(got[i] == got[0] for i in (1, 3, 4, 5, 7)), got
    assert len(lines(tmp_path / "out.de.tok")) == len(rows)
    # nothing overwritten without --force, and a file translate.py did not write (or that was
    # changed since) not even with it (translate's main in this process: refused before it reads
    # its input)
    again = in_process(translate.main, ["--data", task, "--checkpoint", checkpoint, "--input", "-", "--output", out,
                                        "--cpu"], check=False)
    assert again.returncode == 2 and f"--output {out} exists (an earlier output of translate): pass --force" \
        in again.stderr
    edited = out.read_bytes() + b"a line of the user's\n"
    out.write_bytes(edited)
    forced = in_process(translate.main, ["--data", task, "--checkpoint", checkpoint, "--input", "-", "--output", out,
                                         "--cpu", "--force"], check=False)
    assert forced.returncode == 2 and f"--output {out}: translate did not write it (or it changed since)" in forced.stderr
    assert out.read_bytes() == edited


@pytest.mark.slow
def test_too_long_lines_are_translated_in_pieces(tiny, tmp_path):
    """A line over the model's source positions is cut between words and each piece translated;
    no line is dropped and the file goes on (fairseq stops at such a line)."""
    import argparse

    from fairseq_csan.recipes.translate import load, translate_lines

    task, checkpoint = tiny
    hub = load(argparse.Namespace(model=None, data=task, checkpoint=checkpoint, batch_size=1, cpu=True, fp16=False,
                                   unchecked=False))
    short, long = "A man in red.", "A man in red. Two dogs play. " * 4 + "A girl runs."
    subwords = hub.apply_bpe(hub.tokenize(long)).split()
    limit = 12
    assert len(subwords) > limit
    hub.max_positions = (limit + 1, hub.max_positions[1])  # as a model with 13 source positions
    with pytest.raises(Exception, match="(?i)invalid|max_positions"):
        hub.generate([hub.binarize(" ".join(subwords))], beam=4)
    messages = []
    tok, detok = translate_lines(hub, [short, long, "", short], beam=4, lenpen=0.6, progress_every=0,
                                 log=messages.append)
    assert len(tok) == len(detok) == 4 and detok[2] == "" and detok[0] == detok[3] != ""
    expected_pieces = pieces(subwords, limit)
    assert f"line 2: {len(subwords)} subword tokens, over the model's {limit + 1} source positions " \
           f"(with the end of sentence): translated in {len(expected_pieces)} pieces" in messages
    hyps = [hub.remove_bpe(hub.string(hub.generate([hub.binarize(" ".join(p))], beam=4, lenpen=0.6)[0][0]["tokens"]))
            for p in expected_pieces]  # one piece a batch, as batch_size=1 above
    assert tok[1] == " ".join(h for h in hyps if h)
    assert any("sentences" in m for m in messages)  # progress on the way


@pytest.mark.slow
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
    bad = in_process(translate.main, [*command[3:], "--force"], check=False)  # its main in this process
    assert bad.returncode == 2 and f"{tmp_path / 'bad.en'}:2: not UTF-8" in bad.stderr


@pytest.mark.slow
def test_every_option_changes_the_translation_or_is_refused(tree, tmp_path, monkeypatch, capsys):
    """No option of translate.py is accepted and ignored: with a model folder and with a task
    and checkpoint, each option changes what is loaded, how it decodes or what is written, or
    is refused with one line. (The model loads; the decoding and the writing are recorded.)"""
    import itertools
    import shutil

    runs = itertools.count()
    source = tree / "task/raw/test.en"
    write(tmp_path / "other.en", lines(source)[:3])
    shutil.copytree(tree / "model", tmp_path / "model_copy")

    def plan_of(base):
        def plan(extra):
            out = tmp_path / "walk" / f"{next(runs)}.de"
            if "--force" in extra:  # what --force is for: an output of translate.py's that is there already
                out.parent.mkdir(parents=True, exist_ok=True)
                write_file(out, "an older translation\n", "translate")
            record = []

            def decode(hub, lines_, beam, lenpen, every):
                parameter = next(hub.parameters())
                weights = float(sum(p.detach().double().sum() for p in hub.parameters()))
                record.append((hub.cfg.task.data, weights, hub.cfg.dataset.batch_size, str(parameter.device),
                               str(parameter.dtype), torch.get_num_threads(), lines_, beam, lenpen, every))
                return lines_, lines_

            monkeypatch.setattr(translate, "translate_lines", decode)
            monkeypatch.setattr(translate, "write_file",
                                lambda path, data, by: record.append(("write", str(path), path.exists())))
            threads = torch.get_num_threads()  # (main sets them, in this process: put back for the next plan)
            try:
                refused = refusal_of(translate.main, [*base, "--input", source, "--output", out, "--cpu", *extra], capsys)
            finally:
                torch.set_num_threads(threads)
            return repr(record).replace(str(out), "OUT"), refused
        return plan

    options = [["--data", tree / "task", "--checkpoint", tree / "ev/averaged.pt"], ["--data", tree / "task"],
               ["--checkpoint", tree / "ck/checkpoint_last.pt"], ["--model", tmp_path / "model_copy"],
               ["--input", tmp_path / "other.en"], ["--output", tmp_path / "elsewhere.de"], ["--beam", "2"],
               ["--lenpen", "1.0"], ["--batch-size", "3"], ["--fp16"], ["--force"], ["--progress-every", "5"],
               ["--threads", "3"], ["--threads", "0"]]
    walk_options(plan_of(["--model", tree / "model"]), options)
    walk_options(plan_of(["--data", tree / "task", "--checkpoint", tree / "ev/averaged.pt"]),
                 [o for o in options if o[0] not in ("--data", "--model")] + [["--model", tree / "model"]])


def test_an_output_that_is_the_input_is_refused_even_with_force(tmp_path):
    """--output X.de beside an input X.de.tok (its tokenised file would be the input), or an
    --output that is the input under another name (a hard link): refused, --force or not, and
    the input is as it was."""
    source = tmp_path / "x.de.tok"
    source.write_text("ein Satz .\n", encoding="utf-8")
    linked = tmp_path / "linked.de"
    os.link(source, linked)
    for output, what in ((tmp_path / "x.de", "the tokenised output beside --output"), (linked, "--output")):
        for force in ([], ["--force"]):
            done = in_process(translate.main, [*fake_model(tmp_path), "--input", source, "--output", output, *force],
                              check=False)
            assert done.returncode == 2 and f"{what} " in done.stderr and "is the input --input" in done.stderr
            assert "--force" not in done.stderr.splitlines()[-1]
    assert source.read_text(encoding="utf-8") == "ein Satz .\n"
