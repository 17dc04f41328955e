"""fairseq_csan.recipes.steps: a step is redone exactly when what it was made from changed."""

import io
import os
import re
import sys

import pytest

from fairseq_csan.recipes import steps


def upper(step, calls):
    def action(temps):
        calls.append(1)
        temps[0].write_text(step.inputs[0].read_text().upper())

    return steps.make(step, action)


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "in.txt").write_text("a\nb\n")
    return tmp_path


def make_step(folder, **settings):
    return steps.Step(folder / ".steps", "upper", [folder / "in.txt"], [folder / "out.txt"], settings)


def test_a_current_step_is_skipped_and_a_changed_one_redone(folder, capsys):
    calls = []
    assert upper(make_step(folder, k=1), calls) and (folder / "out.txt").read_text() == "A\nB\n"
    assert not upper(make_step(folder, k=1), calls) and len(calls) == 1
    assert "up to date; skipped" in capsys.readouterr().err
    # a setting changed
    assert upper(make_step(folder, k=2), calls)
    assert "settings changed: k '1' -> '2'" in capsys.readouterr().err
    # an output changed by hand
    (folder / "out.txt").write_text("junk")
    assert upper(make_step(folder, k=2), calls) and (folder / "out.txt").read_text() == "A\nB\n"
    assert "output" in capsys.readouterr().err


def test_an_input_replaced_with_its_modification_time_kept_is_seen(folder, capsys):
    calls = []
    upper(make_step(folder), calls)
    source = folder / "in.txt"
    st = source.stat()
    replacement = folder / "new.txt"
    replacement.write_text("c\nd\n")  # same size, another content, the old times (as cp -p / rsync -a)
    os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(replacement, source)
    assert upper(make_step(folder), calls) and (folder / "out.txt").read_text() == "C\nD\n"
    assert f"input {source} changed since the last run" in capsys.readouterr().err


def test_other_input_files_redo_the_step(folder):
    calls = []
    upper(make_step(folder), calls)
    (folder / "other.txt").write_text("a\nb\n")  # the same content under another name
    step = steps.Step(folder / ".steps", "upper", [folder / "other.txt"], [folder / "out.txt"], {})
    assert step.stale() == "its inputs are other files than last time"


def test_a_step_killed_before_its_stamp_is_redone(folder):
    calls = []
    upper(make_step(folder), calls)
    (folder / ".steps" / "upper.json").unlink()  # outputs there, no record: not trusted
    assert "no record" in make_step(folder).stale()


def test_a_failed_action_leaves_no_output_that_looks_finished(folder):
    def fail(temps):
        temps[0].write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        steps.make(make_step(folder), fail)
    assert not (folder / "out.txt").exists()
    assert make_step(folder).stale() == f"no {folder / 'out.txt'}"


def test_run_feeds_files_to_a_command_and_fails_with_its_status(folder):
    step = steps.Step(folder / ".steps", "cat", [folder / "in.txt"], [folder / "cat.txt"], {})
    cat = [sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read() * 2)"]
    assert steps.run(step, cat, stdout=True, stdin=[folder / "in.txt"])
    assert (folder / "cat.txt").read_text() == "a\nb\na\nb\n"
    failing = steps.Step(folder / ".steps", "fail", [folder / "in.txt"], [folder / "f.txt"], {})
    with pytest.raises(SystemExit) as code:
        steps.run(failing, [sys.executable, "-c", "raise SystemExit(3)"])
    assert code.value.code == 3 and not (folder / "f.txt").exists()


def test_a_folder_output_is_fingerprinted_file_by_file(folder):
    step = steps.Step(folder / ".steps", "dir", [folder / "in.txt"], [folder / "bin"], {})
    steps.make(step, lambda temps: (temps[0].mkdir(), (temps[0] / "x").write_text("1")))
    assert step.stale() is None
    (folder / "bin" / "x").write_text("2")
    assert step.stale() == f"output {folder / 'bin'} changed since the last run"


def test_a_missing_input_is_an_error_naming_it(folder):
    step = steps.Step(folder / ".steps", "x", [folder / "absent.txt"], [folder / "out.txt"], {})
    with pytest.raises(FileNotFoundError, match="absent.txt"):
        step.stale()


def test_progress_lines_come_at_most_once_a_minute_with_the_speed_and_the_time_left():
    progress = steps.Progress("train", "update", "updates", 600)
    first = progress.at(100, 1000.0)  # a resumed run: its speed counts from update 100, not from 0
    assert re.fullmatch(r"\[train \d\d:\d\d:\d\d\] update 100 of 600 \(17%\)", first)
    assert progress.at(130, 1030.0) is None  # 30 s since the last line
    assert progress.at(250, 1075.0).endswith("] update 250 of 600 (42%), 2 updates/s, about 3 min left")
    assert progress.at(600, 1275.0).endswith("] update 600 of 600 (100%), 1.82 updates/s, about 0 s left")
    unbounded = steps.Progress("train", "update", "updates")
    unbounded.at(10, 0.0)
    assert unbounded.at(250, 480.0, "epoch 2 of 5").endswith("] update 250, epoch 2 of 5, 0.5 updates/s")
    assert [steps.duration(s) for s in (40, 180, 7500)] == ["40 s", "3 min", "2 h 05 min"]


def test_learn_bpe_shows_its_merges_as_progress_and_learns_the_same_codes(folder, capfd):
    """prepare's ``subword-nmt learn-bpe -s N`` runs with --verbose for the merges it prints: the
    codes are those learn_bpe writes without it, and no merge line reaches the output."""
    from subword_nmt.learn_bpe import learn_bpe

    corpus = folder / "corpus.txt"
    corpus.write_text("low lower lowest newer newest wider widest\n" * 3 + "new wide low\n")
    quiet = io.StringIO()
    with open(corpus, encoding="utf-8") as text:
        learn_bpe(text, quiet, 20)
    capfd.readouterr()  # its own progress bar
    assert steps.bpe_merges(["subword-nmt", "learn-bpe", "-s", "20"]) == 20
    assert steps.bpe_merges(["subword-nmt", "apply-bpe", "-c", "codes"]) is None
    step = steps.Step(folder / ".steps", "learn_bpe", [corpus], [folder / "codes"], {})
    assert steps.run(step, ["subword-nmt", "learn-bpe", "-s", "20"], stdout=True, stdin=[corpus], prefix="prepare")
    assert (folder / "codes").read_text(encoding="utf-8") == quiet.getvalue()
    err = capfd.readouterr().err
    assert "learn-bpe -s 20 --verbose" in err and not re.search(r"^pair \d", err, re.M)
    assert re.search(r"^\[prepare \d\d:\d\d:\d\d\] learn BPE: merge 1 of 20 \(5%\)$", err, re.M)
