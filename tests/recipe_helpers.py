"""Helpers for the recipe tests: run the shell recipes, and lay out raw folders as the official downloads (or the user's ASPEC copy) would be."""

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO


def door_environment():
    """The environment ``run`` gives a recipe: this Python's tools first on PATH, and none of the
    variables that point the recipes at raw corpora."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for name in ("WMT14_RAW", "WMT17_RAW", "ASPEC_JE", "MULTI30K"):
        env.pop(name, None)
    return env


def run(command, check=True, **kwargs):
    """Run a recipe with this Python's tools first on PATH; returns the CompletedProcess."""
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, env=door_environment(), cwd=REPO,
                          **kwargs)
    if check and done.returncode != 0:
        raise AssertionError(f"{command} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    return done


def in_process(main, argv, check=True, cwd=REPO):
    """A kit command's ``main(argv)`` in this process, with the environment ``run`` gives and from
    ``cwd`` (by default the repository root, where ``run`` starts the command's door; each door
    in ``scripts/`` ends in one ``python`` call, which other tests run as a process). Returns a
    CompletedProcess: the exit code (SystemExit's), and what main wrote to standard output and
    error; not what Python and fairseq print as they start, which the door tests see. It saves the
    door's Python start and fairseq import (about 4 s): for refusals and dry runs, --help texts,
    and pipeline steps whose door other tests run. An output lock that main holds to the end of
    its process is released when main returns, as the end of the process would release it. main
    must leave nothing else for the end of a process to undo (train.main's signal handlers and
    trainer do: use its door), and must not replace the process: an exec (the benchmark's re-exec,
    after its checks) fails the test instead of taking the worker's place. There is no time limit:
    give it only what ends at once or is bounded by its inputs."""
    import contextlib
    import io
    from unittest import mock

    from fairseq_csan.recipes.runner import as_command
    from fairseq_csan.recipes.runner.files import _HELD

    def no_exec(*args, **kwargs):
        raise AssertionError(f"{argv}: main would replace this process (os.exec*); run it as a process instead")

    out, err, code, back, environ = io.StringIO(), io.StringIO(), 0, os.getcwd(), dict(os.environ)
    door, held = door_environment(), set(_HELD)
    try:
        os.environ.clear()
        os.environ.update(door)
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                mock.patch.multiple(os, execv=no_exec, execve=no_exec, execvp=no_exec, execvpe=no_exec):
            try:
                as_command(main, [str(a) for a in argv])  # as its process runs it: its refusals in one line, its status
            except SystemExit as stop:
                if isinstance(stop.code, str):  # as Python ends: the message on standard error, exit 1
                    print(stop.code, file=sys.stderr)
                    code = 1
                else:
                    code = stop.code or 0
    finally:
        os.chdir(back)
        os.environ.clear()
        os.environ.update(environ)
        for path in set(_HELD) - held:  # what the end of main's process would release
            _HELD[path].release()
    done = subprocess.CompletedProcess([str(a) for a in argv], code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"{argv} failed ({code}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    return done


def recipe_main(module: str, *argv, check=False):
    """``python -m fairseq_csan.recipes.MODULE ARGV`` in this process (``in_process`` of its main)."""
    import importlib

    return in_process(importlib.import_module(f"fairseq_csan.recipes.{module}").main, argv, check=check)


def module_main(module: str):
    """``python -m MODULE`` as a function of its arguments, for ``in_process``: the module run as
    ``__main__`` with ``sys.argv`` set (for commands whose main reads sys.argv itself)."""
    import runpy
    import warnings

    def main(argv):
        saved = sys.argv
        sys.argv = [module, *argv]
        try:
            with warnings.catch_warnings():  # runpy's note that the package had imported the module
                warnings.filterwarnings("ignore", r".* found in sys\.modules after import of package",
                                        RuntimeWarning)
                runpy.run_module(module, run_name="__main__", alter_sys=True)
        finally:
            sys.argv = saved

    return main


def train_main(*argv, check=True):
    """scripts/train.sh ARGV (fairseq_csan.recipes.train), in this process: for --dry-run and
    refusals, which start nothing."""
    from fairseq_csan.recipes import train

    return in_process(train.main, argv, check)


def python_m(*args, cwd):
    """python -m fairseq_csan ARGS, run from ``cwd``, with this checkout's package (first on
    PYTHONPATH: an installed copy elsewhere, editable or not, is not the code under test)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "fairseq_csan", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=120)


def lines(path: Path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def write(path: Path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(row + "\n" for row in rows)


def write_sgm(path: Path, rows, setid="newstest"):
    """Rows as a WMT SGML file, one <seg> per row, in two documents."""
    half = len(rows) // 2
    out = [f'<srcset setid="{setid}" srclang="any">']
    for doc, chunk in enumerate((rows[:half], rows[half:]), 1):
        out.append(f'<doc sysid="ref" docid="doc{doc}" genre="news" origlang="en">')
        out += [f'<seg id="{i}">{row}</seg>' for i, row in enumerate(chunk, 1)]
        out.append("</doc>")
    out.append("</srcset>")
    write(path, out)


def split_into(rows_src, rows_tgt, parts):
    """Cut two aligned lists into ``parts`` consecutive aligned pieces."""
    size = -(-len(rows_src) // parts)
    return [(rows_src[i:i + size], rows_tgt[i:i + size]) for i in range(0, len(rows_src), size)]


def fake_task(tmp_path: Path) -> Path:
    """A prepared-task folder (task.json and data-bin/) with a joined (identical) pair of dictionaries."""
    data = tmp_path / "task"
    write(data / "data-bin/dict.en.txt", ["a 5", "b 3"])
    write(data / "data-bin/dict.de.txt", ["a 5", "b 3"])
    from fairseq_csan.recipes.task import TASK

    TASK.write(data, {"task": "wmt14_en_de", "src": "en", "tgt": "de"})  # as prepare writes it (with its record)
    return data


# ---------------------------------------------------------------- the task recipes at a tiny size
# (raw folders laid out as the official downloads, or the user's ASPEC-JE copy, would be)

N_TRAIN, N_DEV, N_TEST, MERGES = 1200, 40, 40, 400


def head(path, n):
    return lines(path)[:n]


def prepare_task(task, raw, out, *extra):
    return run(["bash", f"examples/{task}/prepare.sh", "--raw-dir", raw, "--out", out,
                "--merges", MERGES, "--workers", 2, "--no-download", *extra])


def train_tiny(data, save, arch, *extra):
    return run(["bash", "scripts/train.sh", "--data", data, "--arch", arch, "--save-dir", save, "--cpu-tiny", *extra])


def evaluate_tiny(data, save, out, *extra, door=True):
    """scripts/evaluate.sh on the last 2 checkpoints of ``save``; ``door=False``: its main in this
    process (``in_process``), for evaluations after a test's first, whose door it has run."""
    bootstrap = ["--bootstrap-samples", 200] if "--baseline" in extra else []
    argv = ["--data", data, "--checkpoints", save, "--out", out, "--last", 2, "--cpu", *bootstrap, *extra]
    if door:
        return run(["bash", "scripts/evaluate.sh", *argv])
    return recipe_main("evaluate", *argv, check=True)


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



def aspec_folder(root, kftt):
    """KFTT pairs laid out as an ASPEC-JE folder: train-N with five fields, dev/test with four."""
    ja, en = head(kftt / "train.ja", N_TRAIN), head(kftt / "train.en", N_TRAIN)
    for part, (s, t) in enumerate(split_into(ja, en, 2), 1):
        write(root / f"train/train-{part}.txt",
              [f"0.{900 - i} ||| D{part}-{i // 10} ||| {i + 1} ||| {a} ||| {b}" for i, (a, b) in enumerate(zip(s, t))])
    for name, source, n in (("dev", "dev", N_DEV), ("test", "tune", N_TEST)):
        rows = zip(head(kftt / f"{source}.ja", n), head(kftt / f"{source}.en", n))
        write(root / f"{name}/{name}.txt", [f"D-{i // 10} ||| {i + 1} ||| {a} ||| {b}" for i, (a, b) in enumerate(rows)])


def hold_lock(target, folder):
    """Another process holding the writer lock on ``target``, until it is killed."""
    code = ("import sys, time; from fairseq_csan.recipes.runner import WriterLock; "
            f"WriterLock(sys.argv[1], folder={folder}, what='a test writer').acquire(); print('held', flush=True); "
            "time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def refusal_of(main, argv, capsys):
    """Run a command's ``main(argv)`` in this process, as its process runs it (runner.as_command):
    None when it ends normally, else its refusal (the last line it wrote); its standard error is read
    from ``capsys``."""
    from fairseq_csan.recipes.runner import as_command

    try:
        as_command(main, [str(a) for a in argv])
    except SystemExit as stop:
        if stop.code in (0, None):
            return None
        message = stop.code if isinstance(stop.code, str) else capsys.readouterr().err
        return message.strip().splitlines()[-1] if message.strip() else f"exit {stop.code} without a message"
    return None


def walk_options(plan, options, against=None):
    """No option is accepted and ignored: ``plan(extra)`` returns (what the command would do
    with the extra arguments, its refusal or None); each option either changes the first or
    is refused with one line. ``against`` maps an option (its words) to the arguments it is
    compared with instead of none (an option that needs another: --bootstrap-samples against
    --baseline alone)."""
    baseline, refused = plan([])
    assert refused is None, f"the baseline is refused: {refused}"
    ignored = []
    for option in options:
        reference = (against or {}).get(tuple(map(str, option)))
        if reference is not None:
            baseline, refused = plan(list(reference))
            assert refused is None, f"{reference} is refused: {refused}"
        changed, refused = plan(list(option))
        if refused is not None:
            assert refused.strip() and "\n" not in refused.strip() and "Traceback" not in refused, (option, refused)
        elif changed == baseline:
            ignored.append(" ".join(map(str, option)))
        if reference is not None:
            baseline, _ = plan([])
    assert not ignored, f"accepted, and changing nothing: {ignored}"


def prepare_planner(monkeypatch, capsys, root, base):
    """``plan(extra)`` for :func:`walk_options` over prepare: its main with ``base + ["--out",
    ROOT/N] + extra``, the steps recorded (with their inputs, settings and commands), not run."""
    import itertools
    import os
    import sys

    from fairseq_csan.recipes import prepare as preparer
    from fairseq_csan.recipes.runner.records import _record_written

    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")  # its tools
    runs = itertools.count()

    def plan(extra):
        out = Path(root) / "walk" / str(next(runs))
        record = []

        def step(stp, *rest, **kwargs):
            command = rest[0] if rest and isinstance(rest[0], list) else None
            record.append((stp.name, [str(p) for p in stp.inputs], stp.settings, command))
            if stp.name == "binarise":
                rest[0]([out / "data-bin.tmp"])
            for path in stp.outputs:  # what the next steps read
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
            _record_written(stp.outputs, "prepare")  # as make leaves them: what prepare wrote
            return True

        monkeypatch.setattr(preparer.Step, "make", step)
        monkeypatch.setattr(preparer, "call", lambda command, **_: record.append([str(c) for c in command]))
        refused = refusal_of(preparer.main, [*base, "--out", out, *extra], capsys)
        return repr(record).replace(str(out), "OUT"), refused

    return plan


def trained_task(root, test_lines=32, updates=4):
    """A small prepared Multi30k task (1,000 training pairs, 300 BPE merges, ``test_lines`` test
    pairs) and a tiny model trained on it for a few updates on the CPU."""
    from conftest import shared_corpus

    m30k = shared_corpus("multi30k_en_de")
    raw = root / "raw"
    for name, source, size in (("train", "train", 1000), ("val", "val", 20), ("test_2016_flickr", "test_2016_flickr", test_lines)):
        for lang in ("en", "de"):
            write(raw / f"{name}.{lang}", lines(m30k / f"{source}.{lang}")[:size])
    task, save = root / "task", root / "ck"
    run(["bash", "examples/multi30k/prepare.sh", "--raw-dir", raw, "--out", task, "--merges", 300, "--workers", 2,
         "--no-download"])
    run(["bash", "scripts/train.sh", "--data", task, "--arch", "transformer_csan2d", "--save-dir", save, "--cpu-tiny",
         "--max-update", updates])
    return task, save / "checkpoint_last.pt"
