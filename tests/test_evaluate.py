"""fairseq_csan.recipes.evaluate (scripts/evaluate.sh) on the En-De recipe at a tiny size: every
BLEU variant, chrF, the paired bootstrap and the table; a rerun keeps what is current and redoes
what was made from changed inputs; a missing reference and over-long test lines are named
before any work; a kill at any moment, then a rerun, ends as an uninterrupted evaluation."""

import json
import os
import re

import sys

import pytest

from recipe_helpers import N_TEST, check_results, evaluate_tiny, lines, recipe_main, refusal_of, run, walk_options, write


@pytest.mark.slow
def test_ende_evaluate_with_bootstrap_and_table(ende, tmp_path):
    out, runs = ende["out"], ende["work"]
    work = tmp_path  # the evaluations' folders (the shared fixture is read only)
    evaluate_tiny(out, runs / "ck_base", work / "ev_base", "--name", "Transformer-Base")
    # the door once (scripts/evaluate.sh, a process of its own), then its main in this process
    evaluate_tiny(out, runs / "ck_csan", work / "ev_csan", "--name", "+ CSANs", "--baseline", work / "ev_base",
                  door=False)
    base = check_results(work / "ev_base", N_TEST, compound=True)
    assert "Warning" not in (work / "ev_base/generate.log").read_text(encoding="utf-8")  # quiet.py
    csan = check_results(work / "ev_csan", N_TEST, compound=True)
    assert base["bootstrap"] is None and base["arch"] == "transformer"
    test = csan["bootstrap"]
    assert test["baseline"] == "Transformer-Base" and test["samples"] == 200
    assert 0.0 < test["p_value"] <= 1.0
    assert test["baseline_bleu"] == pytest.approx(base["bleu_tok"]) and test["bleu"] == pytest.approx(csan["bleu_tok"])
    table = run(["python", "-m", "fairseq_csan.recipes.collect_results", work / "ev_base", work / "ev_csan"]).stdout
    assert "| System | WMT14 En⇒De #Params | WMT14 En⇒De Speed | WMT14 En⇒De BLEU |" in table
    assert "| Transformer-Base | 0.2M |" in table and "| + CSANs | 0.2M |" in table
    # a second evaluation of the same checkpoints and settings keeps the average and the decoding
    stamps = [(work / "ev_base" / name).stat().st_mtime_ns for name in ("averaged.pt", "generate.txt")]
    again = evaluate_tiny(out, runs / "ck_base", work / "ev_base", "--name", "Transformer-Base", door=False)
    assert "averaged.pt (the same checkpoints): up to date; skipped" in again.stderr
    assert "generate.txt (the same model and settings): up to date; skipped" in again.stderr
    assert [(work / "ev_base" / name).stat().st_mtime_ns for name in ("averaged.pt", "generate.txt")] == stamps
    # other settings in the same folder: refused, then redone with --force
    other = recipe_main("evaluate", "--data", out, "--checkpoints", runs / "ck_base", "--out", work / "ev_base",
                        "--last", 3, "--cpu")
    assert other.returncode == 2 and "holds an evaluation of other checkpoints or settings" in other.stderr
    redone = evaluate_tiny(out, runs / "ck_base", work / "ev_base", "--name", "Transformer-Base", "--beam", 1, "--force",
                           door=False)
    assert "1/3 averaging the last 2" in redone.stderr and re.search(r"2/3 decoding test \(\d+ sentences\): beam 1,", redone.stderr)
    assert json.loads((work / "ev_base/evaluation.json").read_text())["beam"] == 1


def prepared_again(ende, out, edits):
    """The En-De task copied to ``out`` and prepared again (prepare.sh, its steps of the unchanged
    files skipped) from a copy of its raw folder whose newstest2014 SGM rows are edited:
    ``edits`` maps "src" and "ref" to a function of the file's rows."""
    import shutil

    from recipe_helpers import prepare_task

    raw = out.with_name(out.name + "_raw")
    shutil.copytree(ende["out"], out)
    shutil.copytree(ende["raw"], raw)
    for side, edit in edits.items():
        sgm = raw / f"test-full/newstest2014-deen-{side}.{'en' if side == 'src' else 'de'}.sgm"
        write(sgm, edit(lines(sgm)))
    prepare_task("wmt14_en_de", raw, out)
    return out


@pytest.mark.slow
def test_ende_evaluate_redoes_what_was_made_from_changed_inputs(ende, tmp_path):
    """A rerun into the same --out never scores old translations: another prepared test set,
    or a checkpoint replaced with its modification time kept (cp -p, rsync -a), redoes the
    decoding (and the steps after the change) and says why."""
    import shutil

    work, out = ende["work"], ende["out"]
    checkpoint = tmp_path / "model.pt"
    shutil.copy2(work / "ck_base/checkpoint_last.pt", checkpoint)
    ev = tmp_path / "ev"
    # (a copy out of its run's folder: taken --unchecked)
    first = run(["bash", "scripts/evaluate.sh", "--data", out, "--checkpoint", checkpoint, "--out", ev, "--cpu",
                 "--unchecked"])
    assert len(lines(ev / "hyp.tok")) == N_TEST
    # the task prepared again into another folder, its test set without its last two sentences of each document
    def shorter(rows):
        return [row for row in rows if not re.match(r'<seg id="(\d+)">', row) or
                int(re.match(r'<seg id="(\d+)">', row).group(1)) <= N_TEST // 2 - 2]

    other = prepared_again(ende, tmp_path / "other", {"src": shorter, "ref": shorter})
    # after the door's first run, its main in this process
    again = recipe_main("evaluate", "--data", other, "--checkpoint", checkpoint, "--out", ev, "--cpu", "--unchecked",
                        check=True)
    assert "2/3 decoding test" in again.stderr and "redone: its inputs are other files than last time" in again.stderr
    assert lines(ev / "hyp.tok") != [] and len(lines(ev / "hyp.tok")) == len(lines(other / "tok/test.de")) == N_TEST - 4
    # the checkpoint replaced by another one, its times kept
    st = checkpoint.stat()
    shutil.copyfile(work / "ck_csan/checkpoint_last.pt", checkpoint)
    os.utime(checkpoint, ns=(st.st_atime_ns, st.st_mtime_ns))
    third = recipe_main("evaluate", "--data", other, "--checkpoint", checkpoint, "--out", ev, "--cpu", "--unchecked",
                        check=True)
    assert f"input {checkpoint} changed since the last run" in third.stderr
    assert first.returncode == again.returncode == third.returncode == 0


@pytest.mark.slow
def test_ende_missing_reference_is_found_before_any_work(ende, tmp_path):
    import shutil

    other = tmp_path / "task"
    shutil.copytree(ende["out"], other)
    (other / "raw/test.de").unlink()
    done = run(["bash", "scripts/evaluate.sh", "--data", other, "--checkpoints", ende["work"] / "ck_base",
                "--out", tmp_path / "ev", "--cpu"], check=False)
    assert done.returncode == 2 and f"no raw reference {other / 'raw/test.de'}" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "ev/averaged.pt").exists()


@pytest.mark.slow
def test_ende_test_lines_longer_than_the_model_are_named_before_decoding(ende, tmp_path):
    def long_third(rows):  # the tiny models keep fairseq's 1024 source positions
        third = rows.index(next(row for row in rows if row.startswith('<seg id="3">')))
        return rows[:third] + [f'<seg id="3">{" ".join(["x"] * 1100)}</seg>'] + rows[third + 1:]

    other = prepared_again(ende, tmp_path / "task", {"src": long_third})
    done = run(["bash", "scripts/evaluate.sh", "--data", other, "--checkpoints", ende["work"] / "ck_base",
                "--out", tmp_path / "ev", "--cpu"], check=False)
    assert done.returncode == 2
    assert f"1 test sentence(s) of {other / 'bpe/test.en'} are longer than the model's 1024 source positions" in done.stderr
    assert "line(s) 3." in done.stderr and not (tmp_path / "ev/averaged.pt").exists()


@pytest.mark.slow
def test_the_command_shown_in_evaluate_sh_is_what_it_runs(ende, tmp_path):
    """The fairseq-generate command in evaluate.sh's header is the one it runs (up to the paths of
    the example and the --cpu of this machine)."""
    from conftest import REPO

    header = (REPO / "scripts/evaluate.sh").read_text(encoding="utf-8").split("\nset -euo pipefail")[0]
    shown = re.sub(r"\s*\\\n#\s*", " ", header).split("#   2. ")[1].split("\n")[0].split(" > ")[0]
    work, out = ende["work"], ende["out"]
    done = evaluate_tiny(out, work / "ck_base", tmp_path / "ev", "--last", 5)
    (ran,) = [line.split("$ ", 1)[1].split(" > ")[0] for line in done.stderr.splitlines() if "$ fairseq-generate" in line]
    expected = (shown.replace("data/wmt14_en_de/data-bin", str(out / "data-bin"))
                .replace("--user-dir fairseq_csan", f"--user-dir {REPO / 'fairseq_csan'}")
                .replace("results/ende_csan2d/averaged.pt", str(tmp_path / "ev/averaged.pt")))
    assert ran == expected + " --cpu"
    assert "1/3 averaging the last 5 checkpoints" in done.stderr


@pytest.mark.slow
def test_decode_runs_fairseq_generate_its_hypotheses_apart_from_its_log(tree, tmp_path, capsys):
    """evaluate.decode runs the fairseq-generate command it shows, as a child of the kit's: its
    hypotheses in one file, its log in the other, the progress on the kit's standard error; a
    failure is named with the end of fairseq-generate's log."""
    from fairseq_csan.recipes import decoding, evaluate

    task = tree / "task"
    command = ["fairseq-generate", str(task / "data-bin"), "--user-dir", str(evaluate.PLUGIN), "--path",
               str(tree / "ev/averaged.pt"), "--source-lang", "en", "--target-lang", "de", "--gen-subset", "test",
               *decoding.generate_args(), "--remove-bpe", "--batch-size", "16", "--num-workers", "0", "--cpu"]
    gen, log = tmp_path / "gen.txt", tmp_path / "gen.log"
    evaluate.decode(command, gen, log, N_TEST, 0.05)
    shown = capsys.readouterr().err
    assert f"$ fairseq-generate {task / 'data-bin'}" in shown and f"decoded {N_TEST} of {N_TEST} sentences" in shown
    hypotheses = [line for line in gen.read_text(encoding="utf-8").splitlines() if line[:2] in ("H-", "D-", "P-")]
    assert len(hypotheses) == 3 * N_TEST
    assert f"Translated {N_TEST} sentences" in log.read_text(encoding="utf-8")  # its log, apart
    assert not any(line.startswith("INFO") for line in gen.read_text(encoding="utf-8").splitlines())
    # the threads it decodes with on the CPU reach it as OMP_NUM_THREADS (decoding.cpu_threads), shown with it
    reports = [sys.executable, "-c", "import os; print('H-0\\t0\\t' + os.environ['OMP_NUM_THREADS'])"]
    evaluate.decode(reports, gen, log, 1, 5, threads=3)
    assert gen.read_text(encoding="utf-8") == "H-0\t0\t3\n" and "$ OMP_NUM_THREADS=3 " in capsys.readouterr().err

    from fairseq_csan.recipes.runner import Failed

    for broken, why in (([*command[:5], str(tmp_path / "missing.pt"), *command[6:]], "missing.pt"),
                        ([*command, "--beam", "four"], "exit status 2")):
        with pytest.raises(Failed) as failed:
            evaluate.decode(broken, gen, log, N_TEST, 5)
        said, err = str(failed.value), capsys.readouterr().err
        assert said.startswith("fairseq-generate ended with exit status ") and why in said + err
        assert said.endswith("(the end of its log is above)")
        assert log.read_text(encoding="utf-8").strip().splitlines()[-1] in err  # the end of its log


@pytest.mark.slow
def test_a_kill_at_any_moment_then_a_rerun_gives_the_uninterrupted_result(ende, tmp_path):
    """SIGKILL of evaluate.sh's process group, then of the kit's own process alone (its
    fairseq-generate child dies with it), each at a random moment; each rerun's translations and scores equal those
    of an uninterrupted evaluation."""
    import random
    import signal
    import subprocess
    import sys
    import time

    from conftest import REPO

    work, out = ende["work"], ende["out"]
    command = ["bash", "scripts/evaluate.sh", "--data", str(out), "--checkpoints", str(work / "ck_base"), "--last", "3",
               "--cpu"]

    def outputs(folder):
        results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
        scores = {k: results[k] for k in ("bleu_tok", "bleu_compound", "sacrebleu", "chrf")}
        return scores, lines(folder / "hyp.tok"), lines(folder / "hyp.detok")

    started = time.time()
    run([*command, "--out", tmp_path / "reference"])
    duration = time.time() - started
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    rng = random.Random("evaluate-kill")
    for whom in ("group", "parent"):
        folder = tmp_path / whom
        proc = subprocess.Popen([*command, "--out", str(folder)], cwd=str(REPO), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        delay = rng.uniform(0.3, 0.6) * duration  # well before an uninterrupted run would end
        time.sleep(delay)
        if whom == "group":
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            proc.kill()
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, f"{whom}: the evaluation ended before the kill at {delay:.1f} s"
        time.sleep(0.5)  # the killed commands' own ends
        run([*command, "--out", folder])
        assert outputs(folder) == outputs(tmp_path / "reference"), f"{whom} killed after {delay:.1f} s"
    # a finished evaluation redone and killed midway: once the redo has begun (it removes
    # results.json before it changes anything else), no results.json stays to say it finished (the
    # Multi30k reproduction keeps an evaluation that has one). Killed before that, the folder is
    # the finished evaluation it was, untouched.
    before = outputs(folder)
    proc = subprocess.Popen([*command, "--out", str(folder), "--force"], cwd=str(REPO), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while (folder / "results.json").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the redo ended before it removed results.json"
    delay = rng.uniform(0.0, 0.2) * duration
    time.sleep(delay)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"the redo ended before the kill, {delay:.1f} s after it began"
    assert not (folder / "results.json").exists(), f"killed {delay:.1f} s into the redo"
    run([*command, "--out", folder])
    assert outputs(folder) == before


@pytest.mark.slow
def test_every_option_changes_the_evaluation_or_is_refused(ende, tree, tmp_path, monkeypatch, capsys):
    """No option of evaluate.sh is accepted and ignored: for an average and for one checkpoint,
    each option changes what would be averaged, decoded or scored, or is refused with one line.
    (The slow work is recorded, not done: the steps, fairseq-generate and the scoring.)"""
    import itertools

    from fairseq_csan.recipes import evaluate, score

    runs = itertools.count()

    def plan_of(base):
        def plan(extra):
            out = tmp_path / "walk" / str(next(runs))
            record = []

            def make(step, action, force=False, **_):
                record.append((step.name, [str(p) for p in step.inputs], step.settings, force))
                if step.name == "decode":
                    action([out / "generate.txt.tmp", out / "generate.log.tmp"])

            monkeypatch.setattr(evaluate.Step, "make", make)
            monkeypatch.setattr(evaluate, "decode", lambda command, gen, log, total, every, threads:
                                record.append(("fairseq-generate", command, total, every, threads)))
            monkeypatch.setattr(score, "score", lambda *args, **kwargs: record.append(("score", args, kwargs)))
            refused = refusal_of(evaluate.main, ["--data", tree / "task", "--out", out, *base, *extra], capsys)
            return repr(record).replace(str(out), "OUT"), refused
        return plan

    options = [["--data", ende["out"]], ["--checkpoints", ende["work"] / "ck_csan"], ["--out", tmp_path / "elsewhere"],
               ["--last", "1"], ["--checkpoint", tree / "ck/checkpoint_last.pt"], ["--subset", "valid"],
               ["--beam", "2"], ["--lenpen", "1.0"], ["--batch-size", "7"], ["--baseline", tree / "ev"],
               ["--baseline", tree / "ev", "--bootstrap-samples", "10"], ["--bootstrap-samples", "10"],
               ["--name", "mine"], ["--cpu"], ["--fp16"], ["--cpu", "--fp16"], ["--progress-every", "5"], ["--force"],
               ["--threads", "3"], ["--threads", "0"]]
    bootstrap = ["--baseline", tree / "ev", "--bootstrap-samples", "10"]
    for base in (["--checkpoints", tree / "ck", "--last", "2"], ["--checkpoint", tree / "ev/averaged.pt"]):
        walk_options(plan_of(base), options, against={tuple(map(str, bootstrap)): ["--baseline", tree / "ev"]})
