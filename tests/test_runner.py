"""fairseq_csan/recipes/runner/ and the commands that go through it: the one failure path, an
output never overlaps an input, one writer per output, only what a command wrote is replaced (each
case of the user's files that a command once deleted or mixed up, as its user would meet it; and a
property test: no command, refused under any of these flags or run to the end, changes a file it
did not write); the records; the step stamps; the child processes and the signals passed on to
them."""

import errno
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, shared_corpus, snapshot
from recipe_helpers import hold_lock, lines, recipe_main, run, write

from fairseq_csan.recipes import runner
from fairseq_csan.recipes.average_checkpoints import newest_checkpoints
from fairseq_csan.recipes.evaluate import OUTPUTS
from fairseq_csan.recipes.multi30k import REPRODUCTION
from fairseq_csan.recipes.runner import (EVALUATION, EXPORT, RESULTS, RUN, Damaged, Failed, Kind, Refusal, WriterLock,
                                         check_owned, refuse_overlaps, theirs, write_file)
from fairseq_csan.recipes.runner.records import TYPES
from fairseq_csan.recipes.sweep import SWEEP
from fairseq_csan.recipes.task import TASK


# ---------------------------------------------------------------- the rules, on their own

def test_an_output_that_is_holds_or_lies_inside_an_input_is_refused(tmp_path):
    a = tmp_path / "a"
    for output, input_, how in ((a, a, "is"), (a, a / "x.pt", "holds"), (a / "out", a, "lies inside")):
        with pytest.raises(Refusal, match=f"^--out {output} {how} --in {input_}, which this command reads"):
            refuse_overlaps({"--out": output}, {"--in": input_, "--other": None})
    refuse_overlaps({"--out": tmp_path / "b"}, {"--in": a})
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    with pytest.raises(Refusal, match="is --in"):  # through a link too
        refuse_overlaps({"--out": tmp_path / "link" / "f"}, {"--in": tmp_path / "real" / "f"})


def test_the_one_failure_path_gives_each_ending_its_status_and_one_line(capsys):
    """as_command: done 0, a refusal 2, a failure 1, a fault of the machine 1, an interruption 130,
    each in one line prefixed with the command's name; another status a command gives on purpose
    (gpu_check's 3) stays."""
    def ending(what):
        def main(argv):
            if what is not None:
                raise what
        return main

    for raised, status, said in ((None, 0, None), (Refusal("no such --data x"), 2, "error: no such --data x"),
                                 (Failed("a child ended with exit status 3"), 1, "error: a child ended with"),
                                 (OSError(errno.ENOSPC, "No space left on device", "out.txt"), 1,
                                  "error: out.txt: No space left on device; free space on its disk"),
                                 (KeyboardInterrupt(), 130, "interrupted"), (SystemExit(3), 3, None)):
        with pytest.raises(SystemExit) as stop:
            runner.as_command(ending(raised), [])
        err = capsys.readouterr().err
        assert stop.value.code == status and (said is None or err.startswith(f"[test_runner] {said}")), (raised, err)
        assert len(err.splitlines()) <= 1


def test_what_the_kit_wrote_is_its_own_and_nothing_else(tmp_path):
    """The record of what the kit wrote in a folder (.written.json): a file it names as a command's
    is that command's while unchanged; a file of the user's, one changed since, or one of another
    command's is refused, --force or not; one of its own is replaced with --force only (or freely,
    force None); a step's output changed by hand is its own (redo)."""
    write_file(tmp_path / "raw/train.en", "a\n", "prepare")
    write(tmp_path / "raw/notes.txt", ["mine"])
    write_file(tmp_path / "raw/x.txt", "x\n", "translate")
    (tmp_path / ".lock").write_text("")
    assert theirs([tmp_path / "raw"], "prepare") == [tmp_path / "raw/notes.txt", tmp_path / "raw/x.txt"]
    assert theirs([tmp_path / "raw"], ("prepare", "translate")) == [tmp_path / "raw/notes.txt"]
    assert theirs([tmp_path], "prepare", changed=True) == [tmp_path / "raw/notes.txt", tmp_path / "raw/x.txt"]
    check_owned([tmp_path / "raw/train.en"], "prepare", None, "--out")
    check_owned([tmp_path / "raw/train.en"], "prepare", True, "--out")
    with pytest.raises(Refusal, match=f"^--out {tmp_path / 'raw/train.en'} exists \\(an earlier output of prepare\\): "
                                      "pass --force to replace it"):
        check_owned([tmp_path / "raw/train.en"], "prepare", False, "--out")
    for force in (None, False, True):
        with pytest.raises(Refusal, match=f"^--out {tmp_path / 'raw/notes.txt'}, {tmp_path / 'raw/x.txt'}: prepare did "
                                          "not write them"):
            check_owned([tmp_path / "raw"], "prepare", force, "--out")
    (tmp_path / "raw/train.en").write_text("changed by hand\n")
    with pytest.raises(Refusal, match="did not write it \\(or it changed since\\)"):
        check_owned([tmp_path / "raw/train.en"], "prepare", True, "--out")
    check_owned([tmp_path / "raw/train.en"], "prepare", None, "--out", redo=True)


def _write_often(path, text, times):
    for _ in range(times):
        write_file(path, text, "train")


def test_writing_whole_when_two_processes_write_one_file_at_once(tmp_path):
    """The machines of a multi-node training each write its run.json into one save folder: with
    one shared temporary name, one machine's rename found the other's already gone and it
    stopped, leaving the other waiting for it. Each writer's whole file lands; none is lost; the
    folder's record of what the kit wrote holds the last."""
    import multiprocessing

    target = tmp_path / "run.json"
    texts = ["arch=a\n" * 50, "arch=b\n" * 50]
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_write_often, args=(target, text, 300)) for text in texts]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
    assert [w.exitcode for w in writers] == [0, 0]
    assert target.read_text() in texts
    assert sorted(p.name for p in tmp_path.iterdir()) == [".written.json", "run.json"]  # no temporary left
    assert not theirs([target], "train", changed=True)
    write_file(target, b"bytes\n", "train")
    assert target.read_bytes() == b"bytes\n"


def test_replace_folder_puts_a_whole_folder_in_place_or_leaves_the_old_one(tmp_path):
    """A folder is written whole beside its place, then renamed in: 'written', 'unchanged' for the
    same files, 'replaced' unless the caller refuses; a failure or a refusal leaves the folder
    as it was and no temporary; a kill between the swap's two renames (the old folder aside, the
    new one not yet in) is undone by the next call, where the folder aside is the kit's."""
    out = tmp_path / "model"

    def files(folder):
        return {p.name: p.read_text() for p in folder.iterdir()}

    def writer(**content):
        def write(folder):
            for name, text in content.items():
                (folder / name).write_text(text)
        return write

    def allowed(_out):
        pass

    def refused(_out):
        raise Refusal("not with this one")

    def ours(_old):
        return True

    assert runner.replace_folder(out, writer(a="1"), refused, ours) == "written"
    assert runner.replace_folder(out, writer(a="1"), refused, ours) == "unchanged"
    with pytest.raises(Refusal, match="not with this one"):
        runner.replace_folder(out, writer(a="2"), refused, ours)

    def failing(folder):
        (folder / "a").write_text("half")
        raise OSError("full disk")

    with pytest.raises(OSError):
        runner.replace_folder(out, failing, allowed, ours)
    assert files(out) == {"a": "1"} and sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert runner.replace_folder(out, writer(b="2"), allowed, ours) == "replaced" and files(out) == {"b": "2"}
    os.replace(out, tmp_path / ".model.4242-abcdef.old")  # killed after the first rename
    assert runner.replace_folder(out, writer(b="2"), refused, ours) == "unchanged" and files(out) == {"b": "2"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    (tmp_path / ".model.mine.old").mkdir()  # a folder of the user's of such a name: not the kit's, never moved
    runner.replace_folder(tmp_path / "other", writer(c="3"), allowed, lambda old: False)
    assert (tmp_path / ".model.mine.old").is_dir()


def test_a_second_writer_is_refused_naming_the_first(tmp_path):
    out = tmp_path / "out"
    holder = hold_lock(out, True)
    try:
        with pytest.raises(Refusal, match=f"{out} is being written by a test writer \\(pid {holder.pid} on "):
            WriterLock(out, folder=True, what="me").acquire()
    finally:
        holder.send_signal(signal.SIGKILL)  # a killed holder's lock is free at once
        holder.wait()
    with WriterLock(out, folder=True, what="me") as lock:
        assert f"me (pid {os.getpid()}" in lock.path.read_text()
    assert not (out / ".lock").exists()  # removed by its holder
    with WriterLock(tmp_path / "f.txt", folder=False, what="me") as lock:
        assert lock.path == tmp_path / ".f.txt.lock"


def test_an_output_that_cannot_be_written_is_refused(tmp_path):
    with pytest.raises(Refusal, match="is a folder; give a file name"):
        check_owned([tmp_path], "translate", None, "--output", writable=True)
    (tmp_path / "file").write_text("")
    with pytest.raises(Refusal, match=f"cannot write in {tmp_path / 'file'}"):
        check_owned([tmp_path / "file" / "out.txt"], "translate", None, "--output", writable=True)


# ---------------------------------------------------------------- prepare

def multi30k_raw(folder, n_train=300):
    m30k = shared_corpus("multi30k_en_de")
    for name, size in (("train", n_train), ("val", 20), ("test_2016_flickr", 20)):
        for lang in ("en", "de"):
            write(folder / f"{name}.{lang}", lines(m30k / f"{name}.{lang}")[:size])
    return folder


def prepare(raw, out, *extra, check=False, background=False):
    command = ["bash", "examples/multi30k/prepare.sh", "--raw-dir", raw, "--out", out, "--merges", 100,
               "--workers", 1, "--no-download", *extra]
    if background:
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        return subprocess.Popen([str(c) for c in command], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    return run(command, check=check)


def test_prepare_refuses_raw_files_where_it_writes(tmp_path):
    """Raw files kept in OUT/raw (the task folder's own layout) were deleted before being read."""
    out = tmp_path / "task"
    raw = multi30k_raw(out / "raw")
    before = snapshot(tmp_path)
    done = prepare(raw, out)
    assert done.returncode == 2
    assert f"error: --out {out}'s raw/ {out / 'raw'} is or holds --raw-dir {raw}, which this command reads" in done.stderr
    assert snapshot(tmp_path) == before
    # the raw files in a folder inside one that prepare writes
    inner = multi30k_raw(out / "tok" / "mine")
    before = snapshot(tmp_path)
    done = prepare(inner, out)
    assert done.returncode == 2 and f"--out {out}'s tok/ {out / 'tok'} is or holds --raw-dir {inner}" in done.stderr
    assert snapshot(tmp_path) == before


@pytest.mark.slow
def test_prepare_force_keeps_others_files_one_writer_and_long_tokens(tmp_path):
    raw = multi30k_raw(tmp_path / "raw")
    # a training line of one 100,000-character token: dropped and counted, not learnt by BPE
    write(raw / "train.en", lines(raw / "train.en") + ["x" * 100_000])
    write(raw / "train.de", lines(raw / "train.de") + ["ein Satz"])
    out = tmp_path / "task"
    # two prepare.sh into one --out at once: the second is refused, naming the first
    first = prepare(raw, out, background=True)
    deadline = time.time() + 120
    while not (out / ".lock").exists() and first.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    second = prepare(raw, out)
    assert second.returncode == 2 and f"{out} is being written by prepare.sh (multi30k_en_de) (pid {first.pid}" \
        in second.stderr, second.stderr
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert re.search(r"dropped \d+: \d+ with an empty side, \d+ over 250 tokens, \d+ of a length ratio over 1.5, 1 "
                     r"with a token over 100 characters", err), err
    assert max(len(line) for line in lines(out / "bpe/codes")) < 1000
    assert not (out / ".lock").exists()
    # a file of the user's in a folder prepare writes (one a redone step would replace whole):
    # a rerun refuses, --force or not, listing it, and changes nothing
    for folder in ("bpe", "data-bin"):
        write(out / folder / "my_notes.txt", ["keep"])
        before = snapshot(tmp_path)
        for force in ([], ["--force"]):
            done = prepare(raw, out, *force)
            assert done.returncode == 2 and f"--out {out / folder / 'my_notes.txt'}: prepare did not write it" \
                in done.stderr
            assert snapshot(tmp_path) == before
        (out / folder / "my_notes.txt").unlink()
    # a fresh --out holding another pipeline's data-bin and a tools.txt of the user's: refused, untouched
    fresh = tmp_path / "fresh"
    write(fresh / "data-bin/dict.en.txt", ["hello 1"])
    write(fresh / "tools.txt", ["mine"])
    before = snapshot(fresh)
    done = prepare(raw, fresh)
    assert done.returncode == 2 and "prepare did not write them" in done.stderr
    assert str(fresh / "data-bin/dict.en.txt") in done.stderr and snapshot(fresh) == before
    codes = lines(out / "bpe/codes")
    redone = prepare(raw, out, "--force", check=True)
    assert "--force: removing what prepare wrote" in redone.stderr
    assert lines(out / "bpe/codes") == codes


# ---------------------------------------------------------------- a trained model's folders

def kit(module, *args):
    return run([sys.executable, "-m", f"fairseq_csan.recipes.{module}", *args], check=False)


def evaluate(*args):
    return run(["bash", "scripts/evaluate.sh", *args], check=False)


@pytest.mark.slow
def test_no_refused_command_changes_a_file_it_did_not_write(tree):
    """Each of these once deleted or replaced the user's files, or reported success for output
    that was not what was asked; now each is refused with one line naming the file or flag, and
    the whole tree is unchanged. (Each command's main in this process, scripts/evaluate.sh's for
    evaluate: the refusals come before any work; the doors run in the tests below.)"""
    task, ck, ev, model = tree / "task", tree / "ck", tree / "ev", tree / "model"
    newest = newest_checkpoints(ck, 2)
    before = snapshot(tree)
    cases = [
        # an export into a checkpoint folder, or into the evaluation that holds its input
        (recipe_main("export", "--data", task, "--checkpoint", ck / "checkpoint_last.pt", "--out", ck, "--force"),
         f"--out {ck} holds --checkpoint {ck / 'checkpoint_last.pt'}"),
        (recipe_main("export", "--data", task, "--checkpoint", ck / "checkpoint_last.pt", "--out", ev, "--force"),
         f"{ev} is not a model folder that export or convert wrote (it holds "),
        (recipe_main("export", "--data", task, "--checkpoint", ev / "averaged.pt", "--out", ev, "--force"),
         f"--out {ev} holds --checkpoint {ev / 'averaged.pt'}"),
        # an evaluation whose --out holds its own input
        (recipe_main("evaluate", "--data", task, "--checkpoint", ev / "averaged.pt", "--out", ev, "--force", "--cpu"),
         f"--out {ev} holds --checkpoint {ev / 'averaged.pt'}"),
        (recipe_main("evaluate", "--data", task, "--checkpoints", ck, "--out", ck, "--cpu"),
         f"--out {ck} is --checkpoints {ck}"),
        (recipe_main("evaluate", "--data", task, "--checkpoints", ck, "--out", task / "ev", "--cpu"),
         f"--out {task / 'ev'} lies inside --data {task}"),
        # conflicting selections and settings: usage errors
        (recipe_main("evaluate", "--data", task, "--checkpoints", ck, "--checkpoint", ck / "checkpoint_last.pt",
                     "--last", "3", "--out", tree / "ev2", "--cpu"),
         "(not --checkpoints and --checkpoint together)"),
        (recipe_main("evaluate", "--data", task, "--checkpoints", ck, "--out", tree / "ev2", "--cpu", "--fp16"),
         "--fp16 decodes on a GPU; leave out --cpu, or --fp16"),
        # averaging over its own input
        (recipe_main("average_checkpoints", "--dir", ck, "--last", "2", "--output", newest[1], "--force"),
         f"--output {newest[1]} is input 2 {newest[1]}"),
        # a translation into the model folder
        (recipe_main("translate", "--model", model, "--input", task / "raw/test.en", "--output", model / "model.pt",
                     "--force", "--cpu"), f"--output {model / 'model.pt'} lies inside --model {model}"),
    ]
    for done, message in cases:
        assert done.returncode != 0 and message in done.stderr, (message, done.stderr[-2000:])
        assert "Traceback" not in done.stderr
    assert snapshot(tree) == before
    assert not (tree / "ev2").exists()


@pytest.mark.slow
def test_evaluate_refuses_an_out_of_others_files_and_a_second_writer(tree, tmp_path):
    task, ck = tree / "task", tree / "ck"
    mine = tmp_path / "mine"
    write(mine / "results.json", ["{}"])
    done = evaluate("--data", task, "--checkpoints", ck, "--out", mine, "--last", "2", "--cpu")
    assert done.returncode == 2 and f"--out {mine / 'results.json'}: evaluate did not write it" in done.stderr
    assert lines(mine / "results.json") == ["{}"] and sorted(p.name for p in mine.iterdir()) == ["results.json"]
    busy = tmp_path / "busy"
    holder = hold_lock(busy, True)
    try:
        done = evaluate("--data", task, "--checkpoints", ck, "--out", busy, "--last", "2", "--cpu")
        assert done.returncode == 2 and f"{busy} is being written by a test writer (pid {holder.pid}" in done.stderr
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_evaluate_labels_results_from_the_checkpoint_evaluated(ende, tree, tmp_path):
    """A csan2d checkpoint copied into a Transformer run's folder is labelled csan2d, and that
    run's log (its speed and parameters) is not taken as its own."""
    base = tmp_path / "base_run"
    base.mkdir()
    for record in ("run.json", ".written.json"):  # the run's record, as that run's folder holds it
        shutil.copy(ende["work"] / "ck_base" / record, base / record)
    shutil.copy(ende["work"] / "ck_base/train.log", base / "train.log")
    shutil.copy(tree / "ck/checkpoint_last.pt", base / "stray.pt")
    ev = tmp_path / "ev"
    done = evaluate("--data", tree / "task", "--checkpoint", base / "stray.pt", "--out", ev, "--cpu")
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    results = json.loads((ev / "results.json").read_text())
    assert results["arch"] == "transformer_csan2d" and results["name"] == "transformer_csan2d"
    assert results["train"] is None or results["train"].get("params") is None
    # averaging checkpoints of one run that run.json says is another architecture: refused
    for path in newest_checkpoints(tree / "ck", 2):
        shutil.copy(path, base / path.name)
    done = evaluate("--data", tree / "task", "--checkpoints", base, "--out", tmp_path / "ev2", "--last", "2", "--cpu")
    assert done.returncode == 2 and "is a transformer_csan2d checkpoint, but" in done.stderr \
        and "says the run trained transformer: it does not belong to this run" in done.stderr


# ---------------------------------------------------------------- translate

@pytest.mark.slow
def test_translate_checks_its_output_first_and_takes_one_writer(tree, tmp_path):
    model, source = tree / "model", tree / "task/raw/test.en"
    folder = tmp_path / "a_folder"
    folder.mkdir()
    started = time.time()
    done = kit("translate", "--model", model, "--input", source, "--output", folder, "--cpu")
    assert done.returncode == 2 and f"--output {folder} is a folder; give a file name" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1  # refused before loading or decoding anything
    out = tmp_path / "out.de"
    holder = hold_lock(out, False)
    try:
        done = kit("translate", "--model", model, "--input", source, "--output", out, "--cpu")
        assert done.returncode == 2 and f"{out} is being written by a test writer (pid {holder.pid}" in done.stderr
    finally:
        holder.kill()
        holder.wait()
    assert not out.exists()
    assert time.time() - started < 120
    # a checkpoint with the task folder of another vocabulary: named, not a size-mismatch traceback
    from recipe_helpers import fake_task

    other = fake_task(tmp_path)
    write(other / "bpe/codes", ["#version: 0.2", "a b"])
    write(other / "raw/x.en", ["a"])
    done = kit("translate", "--data", other, "--checkpoint", tree / "ev/averaged.pt", "--input", other / "raw/x.en",
               "--output", tmp_path / "x.de", "--cpu")
    # (its evaluation's record says what it was made from: other dictionaries than other's)
    assert done.returncode != 0 and f"{tree / 'ev/averaged.pt'} was made from other data than {other}" in done.stderr
    assert "size mismatch" not in done.stderr
    # the same for an evaluation: named before fairseq-generate starts
    write(other / "tok/test.en", ["a"])
    write(other / "tok/test.de", ["a"])
    write(other / "raw/test.de", ["a"])
    # a checkpoint that no record of the kit's speaks for (a copy elsewhere): its embedding sizes
    loose = tmp_path / "loose" / "averaged.pt"
    loose.parent.mkdir()
    loose.write_bytes((tree / "ev/averaged.pt").read_bytes())
    done = evaluate("--data", other, "--checkpoint", loose, "--out", tmp_path / "ev", "--cpu")
    assert done.returncode == 2 and f"{loose}: no record of what made it" in done.stderr  # refused as it is
    done = evaluate("--data", other, "--checkpoint", loose, "--out", tmp_path / "ev", "--cpu", "--unchecked")
    assert done.returncode == 2 and f"{loose} was not trained on {other}" in done.stderr  # taken: its sizes checked
    assert not (tmp_path / "ev").exists()


def test_an_output_that_cannot_be_a_folder_is_one_line(tmp_path):
    """An --out that is a file, or lies under one: every command's lock says so in one line (it
    was a FileExistsError traceback), before anything is written."""
    (tmp_path / "afile").write_text("mine\n")
    with pytest.raises(Refusal, match=r"afile is a file, not a folder: give an output folder elsewhere"):
        WriterLock(tmp_path / "afile", folder=True, what="me").acquire()
    with pytest.raises(Refusal, match=r"cannot create the folder .*afile/sub \(Not a directory\)"):
        WriterLock(tmp_path / "afile" / "sub", folder=True, what="me").acquire()
    with pytest.raises(Refusal, match=r"afile is a file, not a folder: give an output elsewhere"):
        WriterLock(tmp_path / "afile" / "out.txt", folder=False, what="me").acquire()
    done = recipe_main("prepare", "toy_en_de", "--raw-dir", tmp_path, "--out", tmp_path / "afile", "--no-download")
    assert done.returncode != 0 and done.stderr.strip().splitlines()[-1].endswith(
        "afile is a file, not a folder: give an output folder elsewhere (nothing was changed)")
    assert (tmp_path / "afile").read_text() == "mine\n"


def test_the_toy_corpus_replaces_only_its_own_files(tmp_path):
    """toy_corpus records what it wrote (the folder's record of what the kit wrote): a rerun of
    other sizes replaces its own files, a val.de of the user's there is refused and kept, and so is
    one of its own changed by hand since."""
    def toy(*args):
        return subprocess.run([sys.executable, "-m", "fairseq_csan.recipes.toy_corpus", tmp_path / "raw", *args],
                              capture_output=True, text=True, cwd=REPO, timeout=120)

    assert toy("--train", "20", "--valid", "2", "--test", "2").returncode == 0
    assert toy("--train", "30", "--valid", "2", "--test", "2").returncode == 0
    assert len(lines(tmp_path / "raw/train.en")) == 30
    write(tmp_path / "raw/val.de", ["mine"])
    done = toy("--train", "40", "--valid", "2", "--test", "2")
    assert done.returncode == 2 and f"OUT_DIR {tmp_path / 'raw/val.de'}: toy_corpus did not write it" in done.stderr
    assert lines(tmp_path / "raw/val.de") == ["mine"] and len(lines(tmp_path / "raw/train.en")) == 30


def test_one_process_is_one_writer(tmp_path):
    """A command called twice in one process (a test, a notebook) does not lock itself out."""
    first = WriterLock(tmp_path / "out", folder=True, what="me").acquire()
    assert WriterLock(tmp_path / "out", folder=True, what="me again").acquire() is first
    first.release()
    assert not (tmp_path / "out/.lock").exists()


@pytest.mark.slow
def test_no_command_that_succeeds_changes_a_file_it_did_not_write(tree, tmp_path):
    """The other half of the property: each writing command, run to the end (a new output, and
    --force over its own earlier output beside a file of the user's), changes nothing outside
    what it owns."""
    task, ck, model = tree / "task", tree / "ck", tree / "model"
    shutil.copytree(tree / "ev", tmp_path / "ev")
    shutil.copytree(model, tmp_path / "model")
    for folder in (tmp_path / "ev", tmp_path / "model"):
        write(folder.parent / f"{folder.name}_notes.txt", ["the user's notes, beside the output"])
    write(tmp_path / "ev/notes.txt", ["the user's notes, inside an evaluation folder"])
    before = {**snapshot(tree), **snapshot(tmp_path)}
    owned = {  # each command and what it may write
        "evaluate": (evaluate("--data", task, "--checkpoints", ck, "--last", "2", "--out", tmp_path / "ev_new", "--cpu"),
                     [tmp_path / "ev_new"]),
        "evaluate --force": (evaluate("--data", task, "--checkpoints", ck, "--last", "2", "--beam", "2", "--out",
                                      tmp_path / "ev", "--cpu", "--force"),
                             [tmp_path / "ev" / name for name in ("evaluation.json", ".steps", ".lock", ".written.json",
                                                                  *OUTPUTS)]),
        "export --force": (kit("export", "--data", task, "--checkpoint", ck / "checkpoint_last.pt", "--out",
                               tmp_path / "model", "--force"), [tmp_path / "model"]),
        "translate": (kit("translate", "--model", model, "--input", task / "raw/test.en", "--output",
                          tmp_path / "out.de", "--cpu"), [tmp_path / name for name in ("out.de", "out.de.tok")]),
        "average": (kit("average_checkpoints", "--dir", ck, "--last", "2", "--output", tmp_path / "avg.pt"),
                    [tmp_path / "avg.pt", tmp_path / ".written.json"]),  # (the folder's record of what the kit wrote)
    }
    for name, (done, _) in owned.items():
        assert done.returncode == 0, (name, done.stderr[-2000:])
    after = {**snapshot(tree), **snapshot(tmp_path)}
    allowed = [Path(p) for _, paths in owned.values() for p in paths]
    changed = [path for path in set(before) | set(after) if before.get(path) != after.get(path)
               and not any(Path(path) == p or p in Path(path).parents for p in allowed)]
    assert not changed, changed
    assert before[str(tmp_path / "ev/notes.txt")] == after[str(tmp_path / "ev/notes.txt")]
    assert after[str(tmp_path / "model/model.pt")] != before[str(tmp_path / "model/model.pt")]  # it did replace its own


@pytest.mark.slow
def test_export_and_averaging_take_one_writer(tree, tmp_path):
    """A second export into one --out, or a second averaging into one --output, is refused with
    one line naming the first; nothing is written."""
    for output, command in (
            (tmp_path / "model", ["export", "--data", tree / "task", "--checkpoint", tree / "ev/averaged.pt", "--out"]),
            (tmp_path / "avg.pt", ["average_checkpoints", "--dir", tree / "ck", "--last", "2", "--output"])):
        holder = hold_lock(output, False)
        try:
            done = kit(*command, output)
            assert done.returncode != 0 and f"{output} is being written by a test writer (pid {holder.pid}" \
                in done.stderr, done.stderr[-2000:]
            assert "Traceback" not in done.stderr and not output.exists()
        finally:
            holder.kill()
            holder.wait()


# ======================================================================== records
# every record the kit keeps is one JSON form, typed by its kind; a folder of an earlier version
# of the kit (its KEY=VALUE file) is refused, never read


def test_a_record_is_written_as_json_and_read_back_typed(tmp_path):
    written = TASK.write(tmp_path, {"task": "en_de", "src": "en", "tgt": "de", "merges": "400", "joint_bpe": 1,
                                    "clean_max_len": 250, "clean_ratio": "1.5", "tests": "test,test1"})
    assert written["merges"] == 400 and written["joint_bpe"] is True and written["tests"] == ["test", "test1"]
    assert json.loads((tmp_path / "task.json").read_text()) == written == TASK.read(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".written.json", "task.json"]  # atomically: no temporary left
    assert not theirs([tmp_path / "task.json"], "kit", changed=True)  # recorded as the running command's
    assert TASK.read(tmp_path / "elsewhere") is None and not TASK.exists(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match=r"unknown task fields \['mergers'\]"):
        TASK.write(tmp_path, {"mergers": 3})


@pytest.mark.parametrize("kind", [TASK, RUN, EVALUATION, SWEEP])
def test_a_folder_an_earlier_version_made_is_refused_not_read(tmp_path, kind):
    write(tmp_path / kind.earlier[0], ["arch=transformer", "seed=1"])
    assert kind.exists(tmp_path)  # its folder is not taken for a fresh one
    with pytest.raises(Damaged, match=f"{kind.earlier[0]} was written by an earlier version of the kit, which this one "
                                      "does not read: run the step that made .* again"):
        kind.read(tmp_path)
    kind.write(tmp_path, {})  # a rerun with --force writes the record; then it is read
    assert kind.read(tmp_path) == {}


def test_a_damaged_record_is_named_and_refused(tmp_path):
    (tmp_path / "run.json").write_text('{"arch": "transformer", "seed": "one"}')
    with pytest.raises(Damaged, match=r"run.json is not a run record as this kit writes it"):
        RUN.read(tmp_path)
    (tmp_path / "run.json").write_text('["not", "an", "object"]')
    with pytest.raises(Damaged, match="not a JSON object"):
        RUN.read(tmp_path)
    (tmp_path / "run.json").write_text('{"arch": "transformer", "se')  # cut short
    with pytest.raises(Damaged):
        RUN.read(tmp_path)
    assert issubclass(Damaged, Refusal)  # exit status 2, in one line


@pytest.mark.parametrize("kind", [TASK, RUN, EVALUATION, SWEEP, RESULTS])
def test_a_record_edited_by_hand_or_copied_in_alone_is_refused_not_believed(tmp_path, kind):
    """A record is read only as the kit wrote it (its folder's .written.json names it, with its
    SHA-256): the same JSON edited (task.json with src and tgt swapped) or copied in without the
    folder's record of what the kit wrote is Damaged, naming the file."""
    values, edit = {"task.json": ({"src": "en", "tgt": "de"}, {"src": "de", "tgt": "en"}),
                    "run.json": ({"seed": 1}, {"seed": 2}), "evaluation.json": ({"subset": "test"}, {"subset": "valid"}),
                    "sweep.json": ({"value": 3}, {"value": 5}),
                    "results.json": ({"sacrebleu": 18.77}, {"sacrebleu": 27.0})}[kind.file]
    kind.write(tmp_path, values)
    assert kind.read(tmp_path) == kind.typed(values)
    path = kind.path(tmp_path)
    edited = {**json.loads(path.read_text()), **edit}
    path.write_text(json.dumps(edited, indent=2) + "\n")  # valid, typed, and not what the kit wrote
    with pytest.raises(Damaged, match=f"{path} changed since .* wrote it"):
        kind.read(tmp_path)
    (tmp_path / ".written.json").unlink()  # the record alone, as a copy of one file would bring it
    with pytest.raises(Damaged, match=f"{path} is not a record this kit wrote"):
        kind.read(tmp_path)
    kind.write(tmp_path, edited)  # the step run again writes it: then it is read
    assert kind.read(tmp_path) == kind.typed(edited)


def test_an_open_record_keeps_its_fields_as_they_are(tmp_path):
    settings = {"raw_dir": "/raw", "max_update": 600, "trained": {"csan2d/seed1": {"threads": 1}}, "jobs": 2}
    assert REPRODUCTION.read(REPRODUCTION.write(tmp_path, settings) and tmp_path) == settings


def test_every_kind_has_its_own_file_and_known_types():
    kinds = (TASK, RUN, EVALUATION, RESULTS, EXPORT, SWEEP, REPRODUCTION)
    assert len({k.file for k in kinds}) == len(kinds) and len({k.name for k in kinds}) == len(kinds)
    for kind in kinds:
        assert isinstance(kind, Kind) and set((kind.fields or {}).values()) <= set(TYPES), kind.name


# ---- what a model is made from (runner.made_from, lineage, check_made_from) -------------------

def test_made_from_hashes_the_dictionaries_and_training_data_only(tmp_path):
    import hashlib

    from fairseq_csan.recipes.runner import changed_since, made_from

    for name in ("dict.en.txt", "dict.de.txt", "train.en-de.en.bin", "train.en-de.en.idx", "valid.en-de.de.bin",
                 "test.en-de.en.bin", "preprocess.log"):
        (tmp_path / name).write_text(name)
    found = made_from(tmp_path)
    assert sorted(found) == ["dict.de.txt", "dict.en.txt", "train.en-de.en.bin", "train.en-de.en.idx",
                             "valid.en-de.de.bin"]  # the test set and the log are not what a model is made from
    assert found["dict.en.txt"] == hashlib.sha256(b"dict.en.txt").hexdigest()
    assert changed_since(found, made_from(tmp_path)) is None
    (tmp_path / "dict.de.txt").write_text("w1 1\nw0 1\n")
    assert changed_since(found, made_from(tmp_path)).startswith("dict.de.txt (sha256 ")
    (tmp_path / "valid.en-de.de.bin").unlink()
    assert "now)" in changed_since(found, made_from(tmp_path))


def test_a_checkpoint_is_checked_against_what_its_record_says_it_was_made_from(tmp_path):
    from fairseq_csan.recipes.runner import EVALUATION, check_made_from, made_from

    data = tmp_path / "data-bin"
    data.mkdir()
    (data / "dict.en.txt").write_text("a 1\nb 1\n")
    run = tmp_path / "ck"
    run.mkdir()
    # no record of the kit's: refused, unless taken --unchecked, which says so
    with pytest.raises(Refusal, match=r"checkpoint_last.pt: no record of what made it \(.* has no run.json, "
                                        r"evaluation.json or export.json\).* pass --unchecked"):
        check_made_from(run / "checkpoint_last.pt", data, "TASK")
    check_made_from(run / "checkpoint_last.pt", data, "TASK", unchecked=True)
    RUN.write(run, {"arch": "transformer", "data": str(data), "seed": 1, "made_from": made_from(data)})
    check_made_from(run / "checkpoint_last.pt", data, "TASK")
    (data / "dict.en.txt").write_text("b 1\na 1\n")  # prepared again: a dictionary of the same size
    with pytest.raises(Refusal, match=r"checkpoint_last.pt was made from other data than TASK holds now: "
                                        r"dict.en.txt \(sha256 \w{12} then, \w{12} now\), as .*run.json recorded it"):
        check_made_from(run / "checkpoint_last.pt", data, "TASK")
    RUN.write(run, {"arch": "transformer", "data": str(data), "seed": 1})  # an earlier version's record
    with pytest.raises(Damaged, match="does not say which data it was made from"):
        check_made_from(run / "checkpoint_last.pt", data, "TASK")
    ev = tmp_path / "ev"  # an evaluation's average carries its checkpoints' record on
    ev.mkdir()
    EVALUATION.write(ev, {"checkpoints": ["x"], "made_from": made_from(data)})
    check_made_from(ev / "averaged.pt", data, "TASK")
    EVALUATION.write(ev, {"checkpoints": ["x"], "made_from": None})  # of checkpoints taken --unchecked: so again
    with pytest.raises(Damaged, match="pass --unchecked"):
        check_made_from(ev / "averaged.pt", data, "TASK")
    check_made_from(ev / "averaged.pt", data, "TASK", unchecked=True)


@pytest.mark.slow
def test_a_task_prepared_again_is_refused_by_resume_evaluation_export_and_translation(tree, tmp_path):
    """The En-De tree's task prepared again with a dictionary of the same size (two entries
    swapped): the run's resume, the evaluation of its checkpoints, the export of its average
    and a translation with its checkpoint are each refused in one line naming the file; the same
    commands on the task as it was go through (the tree fixture ran them)."""
    import shutil

    from recipe_helpers import recipe_main, train_main

    task, ck, ev = tmp_path / "task", tmp_path / "ck", tmp_path / "ev"
    for name, copy in (("task", task), ("ck", ck), ("ev", ev)):
        shutil.copytree(tree / name, copy)
    dictionaries = sorted((task / "data-bin").glob("dict.*.txt"))
    for path in dictionaries:
        rows = path.read_text(encoding="utf-8").splitlines(True)
        rows[0], rows[1] = rows[1], rows[0]
        path.write_text("".join(rows), encoding="utf-8")
    name = dictionaries[0].name
    before = {p.name: p.read_bytes() for p in ck.iterdir()}

    resumed = train_main("--data", task, "--arch", "transformer_csan2d", "--save-dir", ck, "--cpu-tiny", check=False)
    assert resumed.returncode == 2 and "holds a run made from other data than" in resumed.stderr
    assert f"{name} (sha256 " in resumed.stderr and "the task was prepared again" in resumed.stderr
    assert {p.name: p.read_bytes() for p in ck.iterdir() if p.name != ".lock"} == \
        {k: v for k, v in before.items() if k != ".lock"}  # nothing resumed, nothing rewritten
    evaluated = recipe_main("evaluate", "--data", task, "--checkpoints", ck, "--out", tmp_path / "ev2", "--last", 2,
                            "--cpu")
    assert evaluated.returncode != 0 and "was made from other data than" in evaluated.stderr
    assert f"{name} (sha256 " in evaluated.stderr and not (tmp_path / "ev2" / "results.json").exists()
    exported = recipe_main("export", "--data", task, "--checkpoint", ev / "averaged.pt", "--out", tmp_path / "model")
    assert exported.returncode != 0 and "averaged.pt was made from other data than" in exported.stderr
    assert "evaluation.json recorded it" in exported.stderr and not (tmp_path / "model").exists()
    (tmp_path / "mine.en").write_text("a man .\n")
    translated = recipe_main("translate", "--data", task, "--checkpoint", ck / "checkpoint_last.pt", "--input",
                             tmp_path / "mine.en", "--output", tmp_path / "mine.de", "--cpu")
    assert translated.returncode != 0 and "was made from other data than" in translated.stderr
    assert not (tmp_path / "mine.de").exists()


# ======================================================================== child processes

def test_a_child_writes_its_output_where_asked_and_reads_the_files_given(tmp_path):
    write(tmp_path / "a", ["one"])
    write(tmp_path / "b", ["two"])
    script = "import sys; data = sys.stdin.read(); print(data.upper(), end=''); print('a warning', file=sys.stderr)"
    out, log = tmp_path / "out", tmp_path / "log"
    runner.run_child([sys.executable, "-c", script], out, stdin=[tmp_path / "a", tmp_path / "b"], errors=log)
    assert out.read_text() == "ONE\nTWO\n" and log.read_text() == "a warning\n"  # the warning apart from the data
    with pytest.raises(Failed) as failed:
        runner.run_child([sys.executable, "-c", script + "; sys.exit(3)"], out, append=True, name="the child")
    assert failed.value.code == 3 and out.read_text() == "ONE\nTWO\na warning\n"
    assert str(failed.value) == f"the child ended with exit status 3: a warning (its log: {out})"


# a parent that runs a child through run_child and prints how it ended; the child says when it
# is ready, and its process group, then sleeps (IGNORE: the signals it ignores, to be killed)
PARENT = """
import signal, sys
from fairseq_csan.recipes.runner import children
children._RESEND_S = 1
child = '''
import os, signal, sys, time
for name in sys.argv[1].split(","):
    if name:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
print("ready", os.getpgrp(), flush=True)
time.sleep(60)
'''
try:
    children.run_child([sys.executable, "-c", child, sys.argv[1]], sys.argv[2], name="the child",
                       resend=sys.argv[3] == "resend", kill_after=float(sys.argv[4]) or None)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def run_parent(tmp_path, ignored, resend, kill_after, signum):
    out = tmp_path / "child.out"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, ignored, str(out), resend, str(kill_after)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (out.is_file() and "ready" in out.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    child_group = int(out.read_text().split()[1])
    assert child_group != os.getpgrp()  # a process group of its own: a terminal's Ctrl-C reaches the parent alone
    parent.send_signal(signum)
    stdout, stderr = parent.communicate(timeout=60)
    return child_group, stdout, stderr


def test_a_signal_is_passed_on_once_and_the_parent_waits_for_the_child(tmp_path):
    group, stdout, stderr = run_parent(tmp_path, "", "once", 0, signal.SIGTERM)
    assert f"SIGTERM: passed on to the child (pid {group}); waiting for it to stop" in stderr
    assert f"the child (pid {group}) stopped after SIGTERM" in stderr and "passed on again" not in stderr
    assert stdout == "interrupted\n"  # (as_command: exit status 130)


def test_a_child_that_lost_the_signal_gets_it_again_and_one_that_ignores_it_is_killed(tmp_path):
    group, stdout, stderr = run_parent(tmp_path, "SIGINT", "resend", 3.5, signal.SIGINT)
    assert stderr.count(f"the child (pid {group}) still runs 1 s after SIGINT: passed on again") >= 2
    assert f"the child (pid {group}) still runs 3.5 s after SIGINT: killed" in stderr
    assert stdout == "interrupted\n"


def test_a_fault_of_the_machine_is_one_line_naming_the_file(tmp_path):
    """A command run as its process (python -m) stopped by a file-size limit (ulimit -f, as a
    full disk would): one line naming the file and what to do, exit 1, no traceback, nothing
    half written."""
    out = tmp_path / "toy"
    done = subprocess.run(["bash", "-c", f'ulimit -f 50; exec "{sys.executable}" -m fairseq_csan.recipes.toy_corpus "{out}"'],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"[toy_corpus] error: {out / 'train.en'}: File too large; raise the file-size limit (ulimit -f), then run the "
        "same command again (no output is left half written)")
    assert not [p for p in out.rglob("*") if p.is_file() and p.name not in (".lock", ".written.json")]


def test_a_checkpoint_cut_short_by_the_machine_is_one_line_naming_it_too(tiny_task, tmp_path):
    """torch.save, given a path, tells a full disk or a file-size limit as a RuntimeError naming
    neither; save_torch (export's model.pt, written in a folder beside its place) gives the
    OSError itself: one line naming the file as it would stand in the output, nothing left."""
    out = tmp_path / "model"
    command = (f'ulimit -f 200; exec "{sys.executable}" -m fairseq_csan.recipes.export --data "{tiny_task["task"]}" '
               f'--checkpoint "{tiny_task["checkpoint"]}" --out "{out}"')
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"[export] error: {out / 'model.pt'}: File too large; raise the file-size limit (ulimit -f), then run the "
        "same command again (no output is left half written)")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no folder, no part of one


def test_a_child_shown_as_it_writes_keeps_the_lines_asked_for(tmp_path, capfd):
    script = "import sys; print('+ a command'); print('noise'); print('| train_inner | 1'); sys.stdout.write('+ end')"
    out = tmp_path / "out"
    runner.run_child([sys.executable, "-c", script], out, show=re.compile(rb"^\+ |train_inner"))
    assert out.read_text() == "+ a command\nnoise\n| train_inner | 1\n+ end"
    assert capfd.readouterr().out == "+ a command\n| train_inner | 1\n+ end\n"  # the last line without its newline too


def test_progress_counts_the_lines_of_either_stream_and_shows_the_others_of_its_errors(tmp_path, capfd):
    """A Progress of the child's output counts its lines as they come; one of its errors (read
    by a thread: a child that fills the pipe is read as it writes) counts those it can and shows
    the others as they are, and none of them reaches the output."""
    script = ("import sys\nfor i in range(3000): print(f'pair {i}', file=sys.stderr)\n"
              "print('error: bad', file=sys.stderr); print('noise'); print('| train_inner | 1')")
    out, counted = tmp_path / "out", []

    def pair(line):
        counted.append(line)
        return int(line.split()[1]) + 1 if line.startswith(b"pair") else None

    progress = runner.Progress("merge", "merges", 3000, count_of=pair, stream="err")
    runner.run_child([sys.executable, "-c", script], out, progress=progress)
    assert out.read_text() == "noise\n| train_inner | 1\n" and len(counted) == 3001
    err = capfd.readouterr().err
    assert re.search(r"^\[kit\] \d\d:\d\d:\d\d merge 1 of 3000 \(0%\)$", err, re.M) and "error: bad\n" in err
    assert "pair 5" not in err
    lines_seen = []
    out_progress = runner.Progress("line", "lines", count_of=lambda line: lines_seen.append(line) or None)
    runner.run_child([sys.executable, "-c", script], out, progress=out_progress, errors=tmp_path / "err")
    assert lines_seen == [b"noise", b"| train_inner | 1"]


# ---- the step stamps (runner.Step, make) ------------------------------------------------------

def upper(step, calls):
    def action(temps):
        calls.append(1)
        temps[0].write_text(step.inputs[0].read_text().upper())

    return step.make(action)


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "in.txt").write_text("a\nb\n")
    return tmp_path


def make_step(folder, **settings):
    return runner.Step(folder, "upper", [folder / "in.txt"], [folder / "out.txt"], settings)


def test_a_current_step_is_skipped_and_a_changed_one_redone(folder, capsys):
    calls = []
    assert upper(make_step(folder, k=1), calls) and (folder / "out.txt").read_text() == "A\nB\n"
    assert not upper(make_step(folder, k=1), calls) and len(calls) == 1
    assert "up to date; skipped" in capsys.readouterr().err
    # a setting changed
    assert upper(make_step(folder, k=2), calls)
    assert "settings changed: k '1' -> '2'" in capsys.readouterr().err
    # an output changed by hand: the step's own, redone
    (folder / "out.txt").write_text("junk")
    assert upper(make_step(folder, k=2), calls) and (folder / "out.txt").read_text() == "A\nB\n"
    assert "output" in capsys.readouterr().err


def test_a_file_of_the_user_s_where_a_step_writes_is_refused(folder):
    (folder / "out.txt").write_text("mine")
    with pytest.raises(Refusal, match="step upper's output .*out.txt: kit did not write it"):
        upper(make_step(folder), [])
    assert (folder / "out.txt").read_text() == "mine"


def test_a_step_killed_while_it_writes_leaves_a_temporary_its_rerun_takes_as_its_own(folder):
    """kill -9 in the middle of a step's write: the temporary it left (named in the step's stamp)
    is the kit's, not the user's: the folder's ownership check passes it, and the rerun removes it
    and makes the output. A file of the same shape that no stamp names is still refused."""
    killed = ("import os, signal, sys; from pathlib import Path; from fairseq_csan.recipes import runner\n"
              "def half(temps):\n    temps[0].write_text('A\\n'); os.kill(os.getpid(), signal.SIGKILL)\n"
              "f = Path(sys.argv[1]); runner.Step(f, 'upper', [f / 'in.txt'], [f / 'out.txt'], {}).make(half)\n")
    done = subprocess.run([sys.executable, "-c", killed, str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    (left,) = folder.glob(".out.txt.*.tmp")
    runner.check_owned([left], "kit", None, "--out", redo=True)  # no refusal: the stamp names it
    assert upper(make_step(folder), []) and (folder / "out.txt").read_text() == "A\nB\n" and not left.exists()
    assert not list(folder.glob(".out.txt.*.tmp"))
    left.write_text("the user's")  # the same name, now that no stamp names it
    with pytest.raises(Refusal, match=r"--out .*\.out\.txt\..*\.tmp: kit did not write it"):
        runner.check_owned([left], "kit", None, "--out", redo=True)


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
    step = runner.Step(folder, "upper", [folder / "other.txt"], [folder / "out.txt"], {})
    assert step.stale() == "its inputs are other files than last time"


def test_a_stamp_names_its_folder_s_files_relative_to_it_and_a_copy_is_its_own(folder):
    """A copied folder's stamps name the copy's files: a step of the copy is current there, and a
    redo there touches the copy alone."""
    calls = []
    upper(make_step(folder), calls)
    stamp = json.loads((folder / ".steps/upper.json").read_text())
    assert sorted(stamp["outputs"]) == ["out.txt"] and sorted(stamp["inputs"]) == ["in.txt"]
    copy = folder.parent / "copy"
    shutil.copytree(folder, copy)
    assert make_step(copy).stale() is None
    (copy / "in.txt").write_text("z\n")
    assert upper(make_step(copy), calls) and (copy / "out.txt").read_text() == "Z\n"
    assert (folder / "out.txt").read_text() == "A\nB\n"


def test_a_step_killed_before_its_stamp_is_redone_and_its_temporaries_removed(folder):
    calls = []
    upper(make_step(folder), calls)
    (folder / ".steps" / "upper.json").unlink()  # outputs there, no record: not trusted
    assert "no record" in make_step(folder).stale()
    leftover = folder / ".out.txt.1-aaaaaa.tmp"  # a killed run's temporary, which its stamp names
    leftover.write_text("half")
    runner.records._STAMP.write(folder / ".steps", {"by": "kit", "settings": {}, "inputs": {}, "outputs": {},
                                                    "temporaries": [leftover.name]}, "upper.json")
    assert upper(make_step(folder), calls) and not leftover.exists()


def test_a_failed_action_leaves_no_output_that_looks_finished(folder):
    def fail(temps):
        temps[0].write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        make_step(folder).make(fail)
    assert not (folder / "out.txt").exists() and not list(folder.glob(".out.txt.*"))
    assert make_step(folder).stale() == f"no {folder / 'out.txt'}"


def test_a_fault_while_writing_names_the_output_not_its_temporary(folder, capsys):
    """make, atomic and replace_folder name a file the user asked for, never the temporary it was
    written as (a copy's error carries two names: both are mapped)."""
    def full_disk(path):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    with pytest.raises(OSError) as raised:
        make_step(folder).make(lambda temps: full_disk(temps[0]))
    assert raised.value.filename == str(folder / "out.txt")
    with pytest.raises(OSError) as raised:
        with runner.atomic(folder / "a.txt", folder / "b.txt") as (_, part_b):
            full_disk(part_b)
    assert raised.value.filename == str(folder / "b.txt")
    with pytest.raises(OSError) as raised:
        with runner.atomic(folder / "a.txt", folder / "b.txt"):
            raise OSError(errno.EFBIG, "File too large")  # a write names no file
    assert raised.value.filename == f"{folder / 'a.txt'} and {folder / 'b.txt'}"

    def copy_fails(new):
        error = OSError(errno.ENOSPC, "No space left on device")
        error.filename, error.filename2 = str(folder / "in.txt"), str(new / "sub" / "in.txt")
        raise error

    with pytest.raises(OSError) as raised:
        runner.replace_folder(folder / "model", copy_fails, lambda out: None, lambda old: True)
    assert (raised.value.filename, raised.value.filename2) == (str(folder / "in.txt"), str(folder / "model/sub/in.txt"))
    assert sorted(p.name for p in folder.iterdir() if p.name != ".steps") == ["in.txt"]
    with pytest.raises(SystemExit):
        runner.as_command(lambda argv: runner.replace_folder(folder / "model", copy_fails, lambda out: None,
                                                             lambda old: True), [])
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"[test_runner] error: {folder / 'model/sub/in.txt'} (a copy of {folder / 'in.txt'}): No space left on device; "
        "free space on its disk, then run the same command again (no output is left half written)")


def test_a_folder_output_is_fingerprinted_file_by_file(folder):
    step = runner.Step(folder, "dir", [folder / "in.txt"], [folder / "bin"], {})
    step.make(lambda temps: (temps[0].mkdir(), (temps[0] / "x").write_text("1")))
    assert step.stale() is None
    (folder / "bin" / "x").write_text("2")
    assert step.stale() == f"output {folder / 'bin'} changed since the last run"


def test_a_missing_input_is_refused_naming_it(folder):
    step = runner.Step(folder, "x", [folder / "absent.txt"], [folder / "out.txt"], {})
    with pytest.raises(Refusal, match="absent.txt"):
        step.stale()


def test_progress_lines_come_at_most_once_a_minute_with_the_speed_and_the_time_left(capsys):
    progress = runner.Progress("update", "updates", 600)
    first = progress.at(100, 1000.0)  # a resumed run: its speed counts from update 100, not from 0
    assert re.fullmatch(r"\d\d:\d\d:\d\d update 100 of 600 \(17%\)", first)
    assert progress.at(130, 1030.0) is None  # 30 s since the last line
    assert progress.at(250, 1075.0).endswith(" update 250 of 600 (42%), 2 updates/s, about 3 min left")
    assert progress.at(600, 1275.0).endswith(" update 600 of 600 (100%), 1.82 updates/s, about 0 s left")
    unbounded = runner.Progress("update", "updates")
    unbounded.at(10, 0.0)
    assert unbounded.at(250, 480.0, "epoch 2 of 5").endswith(" update 250, epoch 2 of 5, 0.5 updates/s")
    assert len(capsys.readouterr().err.splitlines()) == 5  # each line said ([kit] ...)
    from fairseq_csan.recipes.runner.children import _duration

    assert [_duration(s) for s in (40, 180, 7500)] == ["40 s", "3 min", "2 h 05 min"]


def test_learn_bpe_shows_its_merges_as_progress_and_learns_the_same_codes(folder, capfd):
    """prepare's ``subword-nmt learn-bpe -s N`` runs with --verbose for the merges it prints: the
    codes are those learn_bpe writes without it, and no merge line reaches the output."""
    from subword_nmt.learn_bpe import learn_bpe

    from fairseq_csan.recipes import prepare

    corpus = folder / "corpus.txt"
    corpus.write_text("low lower lowest newer newest wider widest\n" * 3 + "new wide low\n")
    quiet = io.StringIO()
    with open(corpus, encoding="utf-8") as text:
        learn_bpe(text, quiet, 20)
    capfd.readouterr()  # its own progress bar
    prepare.learn_bpe(20, [corpus], folder / "codes", folder / "codes")
    assert (folder / "codes").read_text(encoding="utf-8") == quiet.getvalue()
    err = capfd.readouterr().err
    assert "learn-bpe -s 20 --verbose" in err and not re.search(r"^pair \d", err, re.M)
    assert re.search(r"^\[kit\] \d\d:\d\d:\d\d learn BPE: merge 1 of 20 \(5%\)$", err, re.M)


def test_a_damaged_stamp_is_redone(folder):
    calls = []
    upper(make_step(folder), calls)
    (folder / ".steps" / "upper.json").write_text('{"settings": {}, "inp')  # cut short
    assert "no record" in make_step(folder).stale()
    assert upper(make_step(folder), calls) and len(calls) == 2


# ======================================================================== the property, walked

@pytest.mark.slow
def test_every_command_refuses_to_touch_a_users_file_in_what_it_writes_force_or_not(tree, transformer_folder, tmp_path):
    """Rule (a) walked over every writing command: its output (a folder it creates by default
    included) pre-filled with a file of the user's that it would write, replace or resume from.
    Each run, with --force where the command has it and without, ends with one line naming the
    file, no traceback, and every file under the tree and tmp_path as it was."""
    from recipe_helpers import fake_task, in_process, module_main, train_main

    task, ck, model = tree / "task", tree / "ck", tree / "model"
    raw = tmp_path / "m30k"
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("en", "de"):
            write(raw / f"{split}.{lang}", ["a"])
    sweep_task = fake_task(tmp_path / "sweep_task")
    planted = {  # the user's file -> its content
        "prep/bpe/codes": "my own codes\n", "save/checkpoint_last.pt": "fairseq-train's own checkpoint\n",
        "ev/results.md": "my results\n", "model/notes.txt": "my notes\n", "out.de": "my translation\n",
        "avg.pt": "my average\n", "converted/notes.txt": "my notes\n", "sweep/csan1d_window3/train.out": "my log\n",
        "toy/val.de": "mine\n", "repro/notes.txt": "my notes\n", "gpu/summary.md": "my summary\n",
        "table.md": "my table\n", "bench.md": "my timings\n", "gaps/ngram_gap.md": "my gaps\n"}
    for name, text in planted.items():
        write(tmp_path / name, [text.rstrip("\n")])
    t = tmp_path
    commands = [  # (module or train, argv without --force, whether it has --force, the file it must name)
        ("prepare", ["files", "--src", "en", "--tgt", "de", "--train", task / "raw/train", "--valid", task / "raw/valid",
                     "--test", task / "raw/test", "--out", t / "prep", "--merges", "50"], True, "codes"),
        ("train", ["--data", task, "--arch", "transformer_csan2d", "--save-dir", t / "save", "--cpu-tiny"], True,
         "checkpoint_last.pt"),
        ("evaluate", ["--data", task, "--checkpoints", ck, "--last", "2", "--out", t / "ev", "--cpu"], True,
         "results.md"),
        ("export", ["--data", task, "--checkpoint", ck / "checkpoint_last.pt", "--out", t / "model"], True, "notes.txt"),
        ("translate", ["--model", model, "--input", task / "raw/test.en", "--output", t / "out.de", "--cpu"], True,
         "out.de"),
        ("average_checkpoints", ["--dir", ck, "--last", "2", "--output", t / "avg.pt"], True, "avg.pt"),
        ("convert", ["--model", transformer_folder["model"], "--arch", "transformer_csan1d", "--out", t / "converted"], True, "converted"),
        ("sweep", ["--data", sweep_task, "--out", t / "sweep", "--windows", "3", "--heads", "", "--cpu-tiny"], False,
         "train.out"),
        ("toy_corpus", [t / "toy", "--train", "20", "--valid", "2", "--test", "2"], False, "val.de"),
        ("multi30k", ["--raw-dir", raw, "--out", t / "repro", "--seeds", "1", "--systems", "transformer"], False,
         "notes.txt"),
        ("gpu_check", ["--out", t / "gpu", "--rehearse", "--only", "tests"], False, "summary.md"),
        ("collect_results", [tree / "ev", "--output", t / "table.md"], True, "table.md"),
        ("benchmark", ["--mode", "crossover", "--out", t / "bench.md"], True, "bench.md"),
        ("analysis.ngram_gap", ["--ref", task / "raw/test.de", "--baseline", f"b={task / 'raw/test.de'}", "--system",
                                f"s={task / 'raw/test.de'}", "--out", t / "gaps"], True, "ngram_gap.md"),
    ]
    before = {**snapshot(tree), **snapshot(transformer_folder["model"]), **snapshot(tmp_path)}
    for module, argv, has_force, named in commands:
        for force in ([], ["--force"]) if has_force else ([],):
            done = (train_main(*argv, *force, check=False) if module == "train"
                    else in_process(module_main(f"fairseq_csan.recipes.{module}"), [*argv, *force], check=False)
                    if module == "benchmark" else recipe_main(module, *argv, *force))  # (its main reads sys.argv)
            said = done.stderr.strip().splitlines()
            assert done.returncode not in (0, None) and said and named in said[-1], (module, force, done.stderr[-2000:])
            assert "Traceback" not in done.stderr, (module, force, done.stderr[-2000:])
            after = {**snapshot(tree), **snapshot(transformer_folder["model"]), **snapshot(tmp_path)}
            changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
            assert not changed, (module, force, changed)


@pytest.mark.slow
def test_every_record_a_command_reads_fails_closed_and_a_copy_acts_on_itself(tree, tmp_path):
    """The user's tree copied (as cp -a would): each record that evaluate, export, translate,
    collect_results and the gate-weight analysis read, removed, cut short or edited by hand, is a refusal in one line (exit 2) with no result
    written, never a result with exit 0; the copy run again with --force acts on itself alone (the
    original byte for byte as it was); a file of the user's at a name of the kit's temporaries and
    backups (another process's token) is kept."""
    before = snapshot(tree)
    copy = tmp_path / "copy"
    shutil.copytree(tree, copy, symlinks=True)
    task, ck, ev, model = (copy / name for name in ("task", "ck", "ev", "model"))
    write(tmp_path / "mine.en", ["a small cat ."])
    outputs = {"evaluate": tmp_path / "ev2" / "results.json", "export": tmp_path / "model2", "translate": tmp_path / "mine.de",
               "collect_results": tmp_path / "table.md", "analysis.gate_weights": tmp_path / "gates"}
    commands = {
        "analysis.gate_weights": ["--model", f"m={ck / 'checkpoint_last.pt'}", "--data", task, "--out", outputs[
            "analysis.gate_weights"], "--cpu"],
        "collect_results": [ev, "--output", outputs["collect_results"]],
        "evaluate": ["--data", task, "--checkpoints", ck, "--out", tmp_path / "ev2", "--last", 2, "--cpu"],
        "export": ["--data", task, "--checkpoint", ev / "averaged.pt", "--out", outputs["export"]],
        "translate": ["--model", model, "--input", tmp_path / "mine.en", "--output", outputs["translate"], "--cpu"]}

    def edited(data: bytes, change: dict) -> bytes:
        values = json.loads(data)
        for key, value in change.items():  # a dict merges into the field; None removes it
            if value is None:
                values.pop(key)
            else:
                values[key] = {**values[key], **value} if isinstance(value, dict) else value
        return json.dumps(values, indent=1).encode()

    for command, record, change in (
            ("evaluate", task / "task.json", {"src": "de", "tgt": "en"}), ("evaluate", ck / "run.json", {"seed": 2}),
            ("analysis.gate_weights", ck / "run.json", {"seed": 2}),
            ("export", ev / "evaluation.json", {"beam": 12}), ("collect_results", ev / "results.json", {"sacrebleu": 99.0}), ("export", task / "task.json", {"src": "de", "tgt": "en"}),
            ("translate", model / "export.json", {"files": {"bpecodes": "0" * 64}}),  # a file's hash as the seal lists it
            ("translate", model / "export.json", {"made_from": None, "target_lang": "fr"})):  # a field of the seal's own
        kept = record.read_bytes()
        for damage in ("removed", "cut short", "edited by hand"):
            if damage == "removed":
                record.unlink()
            else:
                record.write_bytes(kept[:len(kept) // 2] if damage == "cut short" else edited(kept, change))
            done = recipe_main(command, *commands[command])
            assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (command, record, damage,
                                                                                           done.stderr)
            assert not outputs[command].exists(), (command, record, damage)
            record.write_bytes(kept)
    # a task record the kit itself rewrote with the languages swapped: the checkpoint's own languages are not its
    swapped = tmp_path / "swapped"
    shutil.copytree(task, swapped)
    TASK.write(swapped, {**TASK.read(swapped), "src": "de", "tgt": "en"})
    done = recipe_main("export", "--data", swapped, "--checkpoint", ev / "averaged.pt", "--out", outputs["export"])
    assert done.returncode == 2 and "averaged.pt translates en-de, not de-en as the task does" in done.stderr, done.stderr
    # --unchecked takes a checkpoint with no record on purpose, and says so
    (ck / "run.json").rename(tmp_path / "run.json")
    done = recipe_main("export", "--data", task, "--checkpoint", ck / "checkpoint_last.pt", "--out", outputs["export"],
                       "--unchecked")
    assert done.returncode == 0 and "--unchecked: " in done.stderr and "nothing of its lineage was checked" in done.stderr
    assert EXPORT.read(outputs["export"])["unchecked"] is True and EXPORT.read(outputs["export"])["made_from"] is None
    done = recipe_main("analysis.gate_weights", *commands["analysis.gate_weights"], "--unchecked")  # taken, then measured
    assert "--unchecked: " in done.stderr and "has no context-aware gates" in done.stderr, done.stderr  # (a csan2d model)
    (tmp_path / "run.json").rename(ck / "run.json")
    # the copy redone with --force, beside files of the user's named as the kit's temporaries and backups
    theirs = [ev / ".generate.txt.1-abcdef.tmp", copy / ".model.1-abcdef.old" / "notes.txt"]
    for path in theirs:
        write(path, ["mine"])
    for command, argv in (("evaluate", ["--data", task, "--checkpoints", ck, "--out", ev, "--last", 2, "--cpu"]),
                          ("export", ["--data", task, "--checkpoint", ev / "averaged.pt", "--out", model])):
        assert recipe_main(command, *argv, "--force").returncode == 0
    assert all(lines(path) == ["mine"] for path in theirs)
    assert snapshot(tree) == before
