"""fairseq_csan/recipes/multi30k.py: its significance test against sacreBLEU's own, its
refusals of bad settings. The whole reproduction at a tiny budget (two systems, two seeds, one
sweep point, a rerun, another budget refused) runs from an installed wheel in
tests/test_install.py (test_the_project_as_a_wheel_runs_its_pipelines_from_an_empty_folder)."""

import json
import statistics
import subprocess
import sys

import numpy as np
import pytest

from fairseq_csan.recipes.multi30k import REPRODUCTION
from fairseq_csan.recipes.runner import RESULTS, Failed, Refusal
from fairseq_csan.recipes.runner.children import _RUNNING as RUNNING
from sacrebleu.metrics import BLEU

from conftest import shared_corpus
from recipe_helpers import lines, recipe_main, write


def load():
    from fairseq_csan.recipes import multi30k

    return multi30k


REFS = ["the cat sat on the mat .", "a dog runs in the park", "two men are playing football",
        "a woman reads a book on a bench", "children swim in the lake", "the red car is parked outside",
        "a man plays the guitar on stage", "people walk along the beach at sunset"]
BASE = ["the cat sat on a mat", "a dog runs in a park", "two men play football", "a woman reads on a bench",
        "kids swim in the lake", "the car is outside", "a man plays guitar", "people walk on the beach"]
SYSTEM = ["the cat sat on the mat .", "a dog runs in the park", "two men are playing soccer",
          "a woman reads a book on a bench", "children swim in a lake", "the red car is parked",
          "a man plays the guitar on stage", "people walk along the beach"]


def sacrebleu_paired_bs(tmp_path, samples):
    for name, rows in (("ref", REFS), ("base", BASE), ("sys", SYSTEM)):
        write(tmp_path / name, rows)
    done = subprocess.run([sys.executable, "-m", "sacrebleu", tmp_path / "ref", "-i", tmp_path / "base",
                           tmp_path / "sys", "--paired-bs", "--paired-bs-n", str(samples), "-m", "bleu", "-f", "json"],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)[1]["BLEU"]


def test_one_seed_bootstrap_is_sacrebleus_paired_bs(tmp_path):
    reproduce = load()
    ours = reproduce.seed_pooled_bootstrap(REFS, [BASE], [SYSTEM], samples=200)
    theirs = sacrebleu_paired_bs(tmp_path, 200)
    assert ours["p_value"] == pytest.approx(theirs["p_value"], abs=1e-4)
    expected = BLEU().corpus_score(SYSTEM, [REFS]).score - BLEU().corpus_score(BASE, [REFS]).score
    assert ours["delta"] == pytest.approx(expected)
    assert expected > 10  # a clear gain: the interval lies above zero
    assert 0 < ours["ci"][0] < expected < ours["ci"][1]


def test_seed_pooled_bootstrap_tests_the_difference_of_means():
    reproduce = load()
    other = ["the cat is on the mat", *SYSTEM[1:]]
    pooled = reproduce.seed_pooled_bootstrap(REFS, [BASE, BASE], [SYSTEM, other], samples=200)
    scores = [BLEU().corpus_score(h, [REFS]).score for h in (SYSTEM, other)]
    assert pooled["delta"] == pytest.approx(statistics.fmean(scores) - BLEU().corpus_score(BASE, [REFS]).score)
    # two copies of the same seed are that seed: the same resamples give the same test
    single = reproduce.seed_pooled_bootstrap(REFS, [BASE], [SYSTEM], samples=200)
    twice = reproduce.seed_pooled_bootstrap(REFS, [BASE, BASE], [SYSTEM, SYSTEM], samples=200)
    assert twice["delta"] == pytest.approx(single["delta"]) and twice["p_value"] == single["p_value"]
    assert twice["ci"] == pytest.approx(single["ci"])
    # a system against itself: no difference, in every resample
    same = reproduce.seed_pooled_bootstrap(REFS, [BASE], [BASE], samples=200)
    assert same["delta"] == 0 and same["ci"] == [0, 0]


def test_seed_pooled_bootstrap_against_a_brute_force_reference():
    """Two different seeds per system, against corpus BLEU recomputed from the resampled
    sentences themselves (no sentence statistics), with the same resamples."""
    reproduce = load()
    base_runs = [BASE, ["the cat sat on the mat", *BASE[1:]]]
    system_runs = [SYSTEM, ["the cat is on the mat", *SYSTEM[1:4], "kids swim in the lake", *SYSTEM[5:]]]
    samples = 100
    ours = reproduce.seed_pooled_bootstrap(REFS, base_runs, system_runs, samples=samples)

    def mean_bleu(runs, idx):
        return statistics.fmean(BLEU().corpus_score([h[i] for i in idx], [[REFS[i] for i in idx]]).score for h in runs)

    observed = mean_bleu(system_runs, range(len(REFS))) - mean_bleu(base_runs, range(len(REFS)))
    draws = np.random.default_rng(12345).choice(len(REFS), size=(samples, len(REFS)), replace=True)
    diffs = np.array([mean_bleu(system_runs, idx) - mean_bleu(base_runs, idx) for idx in draws])
    centred = np.abs(diffs) - np.abs(diffs).mean()
    assert ours["delta"] == pytest.approx(observed)
    assert ours["p_value"] == pytest.approx((np.sum(centred > abs(observed)) + 1) / (samples + 1))
    assert ours["ci"] == pytest.approx(list(np.percentile(diffs, [2.5, 97.5])))


@pytest.mark.parametrize("args, message", [
    (["--systems", "transformer,lstm"], "--systems: each item must be one of transformer, csan1d, csan2d, ctxaware, "
                                        "csan2d_ctxaware, got 'lstm'"),
    (["--systems", "transformer,csan2d,transformer"], "--systems: lists transformer more than once"),
    (["--windows", "3,4"], "each item must be a positive odd number, got '4'"),
    (["--heads", "5"], "--heads: each item must be one of 1, 3, got '5'"),
    (["--seeds", ""], "--seeds: needs at least one"),
    (["--seeds", "1,x"], "comma-separated whole numbers"),
    (["--max-update", "0"], "--max-update must be a whole number of 1 or more"),
])
def test_bad_settings_are_refused_before_any_work(tmp_path, args, message):
    from recipe_helpers import in_process

    from fairseq_csan.recipes import multi30k

    done = in_process(multi30k.main, ["--out", tmp_path / "out", *args], check=False)
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "out").exists()


def test_the_model_sizes():
    """tiny keeps the settings that runs made before --model recorded (so they are kept, not
    refused); small is the GPU's: 128-dim, FFN 256, 4 heads, dropout 0.3, 4096-token batches,
    8000 updates, and 6 encoder layers for CSAN's lowest 3 of 6."""
    from fairseq_csan.recipes.multi30k import MODELS, training_args

    assert MODELS["tiny"]["model"] == [
        "--encoder-embed-dim", "64", "--encoder-ffn-embed-dim", "256", "--encoder-attention-heads", "4",
        "--encoder-layers", "6", "--decoder-embed-dim", "64", "--decoder-ffn-embed-dim", "256",
        "--decoder-attention-heads", "4", "--decoder-layers", "3"]
    assert training_args(1200) == training_args(1200, "tiny") == [
        "--max-tokens", "1024", "--lr", "0.002", "--warmup-updates", "300", "--save-interval-updates", "100",
        "--keep-interval-updates", "5", "--log-interval", "50"]
    small = dict(zip(MODELS["small"]["model"][::2], MODELS["small"]["model"][1::2]))
    assert small == {"--encoder-embed-dim": "128", "--encoder-ffn-embed-dim": "256", "--encoder-attention-heads": "4",
                     "--encoder-layers": "6", "--decoder-embed-dim": "128", "--decoder-ffn-embed-dim": "256",
                     "--decoder-attention-heads": "4", "--decoder-layers": "4", "--dropout": "0.3"}
    assert training_args(8000, "small")[:6] == ["--max-tokens", "4096", "--lr", "0.005", "--warmup-updates", "2000"]
    assert MODELS["small"]["max_update"] == 8000 and MODELS["tiny"]["max_update"] == 1200
    assert training_args(1000, "small")[5] == "250"  # a shorter run leaves its warm-up
    assert training_args(300, "tiny")[5] == "300"  # (tiny's settings stay as they were)


def test_the_runs_and_the_sweep_train_the_chosen_model(tmp_path, monkeypatch):
    """--model reaches fairseq-train's flags in every run, the sweep's included."""
    import argparse

    from fairseq_csan.recipes import multi30k

    commands = []
    monkeypatch.setattr(multi30k, "call", lambda command, log, env: commands.append(list(map(str, command))))
    for size in ("tiny", "small"):
        (tmp_path / "data" / "data-bin").mkdir(parents=True, exist_ok=True)
        args = argparse.Namespace(out=tmp_path / size, model=size, max_update=8000, device="cuda")
        multi30k.main_run(args, tmp_path / "data", "csan2d", 1, {})
        multi30k.sweep_run(args, tmp_path / "data", "window", 3, {})
        train = [c for c in commands if c[2] in ("fairseq_csan.recipes.train", "fairseq_csan.recipes.sweep")]
        assert len(train) == 2
        for command in train:
            flags = command[len(command) - command[::-1].index("--"):]  # after the last --: fairseq-train's
            assert flags[:len(multi30k.MODELS[size]["model"])] == multi30k.MODELS[size]["model"]
            assert " ".join(multi30k.training_args(8000, size)) in " ".join(flags)
        commands.clear()


def test_prepare_names_the_missing_file_and_where_to_get_it(tmp_path):
    """examples/multi30k/prepare.sh is prepare multi30k_en_de: its main in this process here and
    below (refusals and --help); the smoke run takes the commands as processes."""
    (tmp_path / "raw").mkdir()
    done = recipe_main("prepare", "multi30k_en_de", "--raw-dir", tmp_path / "raw", "--out", tmp_path / "out")
    assert done.returncode == 2
    assert f"missing Multi30k train: expected {tmp_path / 'raw' / 'train.en'} + {tmp_path / 'raw' / 'train.de'}" in done.stderr
    assert "https://github.com/multi30k/dataset" in done.stderr


def test_prepare_defaults_to_the_readme_folder_and_8000_merges():
    """The raw folder defaults to where the README unpacks Multi30k, never outside the clone."""
    done = recipe_main("prepare", "multi30k_en_de", "--help")
    assert done.returncode == 0 and "else data/multi30k_raw)" in done.stdout and "shared" not in done.stdout
    assert "--merges N     BPE merge operations (default: 8000" in done.stdout


def test_a_second_reproduction_into_one_out_is_refused(tmp_path):
    from recipe_helpers import hold_lock

    out = tmp_path / "out"
    holder = hold_lock(out, True)
    try:
        done = recipe_main("multi30k", "--raw-dir", shared_corpus("multi30k_en_de"), "--out", out)
        assert done.returncode != 0 and f"[multi30k] error: {out} is being written by a test writer (pid {holder.pid}" \
            in done.stderr
        assert sorted(p.name for p in out.iterdir()) == [".lock"]
    finally:
        holder.kill()
        holder.wait()


def test_reproduce_a_wrong_raw_dir_does_not_lock_the_output(tmp_path, monkeypatch):
    out = tmp_path / "out"
    done = recipe_main("multi30k", "--raw-dir", tmp_path / "nowhere", "--out", out)
    assert done.returncode != 0 and "lacks train.en" in done.stderr
    assert not (out / "settings.json").exists()
    # settings.json from a first run that stopped before training: a corrected rerun replaces it
    raw = tmp_path / "raw"
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("en", "de"):
            write(raw / f"{split}.{lang}", ["a"])
    write(raw / "train.de", ["a", "b"])  # not line-aligned with train.en: the real preparation fails
    out.mkdir()
    REPRODUCTION.write(out, {"raw_dir": "/elsewhere"})
    from fairseq_csan.recipes import multi30k as module

    with pytest.raises(Failed, match="prepare ended with exit status 2"):
        module.main(["--raw-dir", str(raw), "--out", str(out)])
    assert json.loads((out / "settings.json").read_text())["raw_dir"] == str(raw.resolve())
    # with a run in it, other settings are still refused
    (out / "runs" / "transformer" / "seed1").mkdir(parents=True)
    with pytest.raises(Refusal, match="holds runs with other settings"):
        module.main(["--raw-dir", str(raw), "--out", str(out), "--max-update", "7"])


def test_a_run_is_kept_while_its_evaluation_is_finished_and_of_the_task_as_it_is(tmp_path):
    """A run (or sweep point) is kept once its evaluation wrote results.json, while its record's
    training files are those the task holds (else refused, naming the file, before anything
    trains) and its steps' inputs are as they were (a test set prepared again: evaluated again)."""
    from argparse import Namespace

    from fairseq_csan.recipes.multi30k import check_kept, kept
    from fairseq_csan.recipes.runner import EVALUATION, Refusal, Step, made_from

    binary = tmp_path / "data" / "data-bin"
    for name in ("dict.en.txt", "train.en-de.en.bin", "valid.en-de.en.bin", "test.en-de.de.bin"):
        write(binary / name, [name])
    assert "test.en-de.de.bin" not in made_from(binary)
    args = Namespace(out=tmp_path)
    run, point = tmp_path / "runs" / "transformer" / "seed1", tmp_path / "sweep" / "csan1d_window3"
    for folder in (run, point):
        (folder / "eval").mkdir(parents=True)
        EVALUATION.write(folder / "eval", {"made_from": made_from(binary)})
        assert not kept(folder, binary, "the run")  # no results.json yet: the evaluation did not finish
        Step(folder / "eval", "decode", [binary / "test.en-de.de.bin"], [folder / "eval" / "gen"]).make(
            lambda temps: temps[0].write_text("hypotheses"))
        RESULTS.write(folder / "eval", {})
        assert kept(folder, binary, "the run")
    check_kept(args, tmp_path / "data")

    write(binary / "test.en-de.de.bin", ["another test set"])  # evaluated again, not refused
    assert not kept(run, binary, "the run") and not kept(point, binary, "the sweep point")
    check_kept(args, tmp_path / "data")
    write(binary / "dict.en.txt", ["another dictionary"])
    with pytest.raises(Refusal, match=r"the run .*seed1 was trained on other data .* dict\.en\.txt"):
        check_kept(args, tmp_path / "data")
    with pytest.raises(Refusal, match=r"the sweep point .*csan1d_window3 .* dict\.en\.txt"):
        kept(point, binary, "the sweep point")
    EVALUATION.write(run / "eval", {"subset": "test"})  # no record of what it was made from
    with pytest.raises(Refusal, match="has no record of the data it was made from"):
        kept(run, binary, "the run")


def test_the_settings_of_an_earlier_version_are_other_settings(tmp_path, monkeypatch):
    """A settings.json that an earlier version wrote with a setting this one no longer keeps
    (its "jobs") is read as other settings, not as a damaged file."""
    from fairseq_csan.recipes import multi30k as module

    raw, out = tmp_path / "raw", tmp_path / "out"
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("en", "de"):
            write(raw / f"{split}.{lang}", ["a"])
    (out / "runs" / "transformer" / "seed1").mkdir(parents=True)
    REPRODUCTION.write(out, {"raw_dir": str(raw.resolve()), "jobs": 2})
    with pytest.raises(Refusal, match="holds runs with other settings"):
        module.main(["--raw-dir", str(raw), "--out", str(out)])


def test_a_failed_run_ends_the_reproduction_and_stops_the_others(tmp_path, monkeypatch):
    """One run fails while another runs and a third waits: the command ends with the failure at
    once, the running run's child is stopped (SIGTERM) and the waiting run never starts (before,
    the cancelled waiting run never came out of as_completed, and the command hung for good)."""
    import time
    from types import SimpleNamespace

    m30k = load()
    started, children = [], []

    def main_run(args, data, system, seed, env):
        started.append(system)
        if system == "bad":
            time.sleep(0.5)  # the slow run has started its child by now
            raise Failed("bad seed 1: fairseq-train ... failed")
        m30k.call(["sleep", "60"], tmp_path / f"{system}.log", env)  # stopped by the failure
        children.append(system)
        return tmp_path, None

    monkeypatch.setattr(m30k, "main_run", main_run)
    args = SimpleNamespace(seeds=[1], systems=["slow", "bad", "waiting"], windows=[], heads=[], jobs=2, max_update=2)
    began = time.monotonic()
    with pytest.raises(Failed, match="bad seed 1: fairseq-train ... failed"):
        m30k.run_all(args, None)
    assert time.monotonic() - began < 30  # not the 60 s of the slow run's child
    # (the waiting run may have been taken up by the failed run's thread just before the stop)
    assert set(started[:2]) == {"slow", "bad"} and not children and not RUNNING


def test_an_out_holding_files_the_reproduction_did_not_write_is_refused(tmp_path):
    """A user's settings.json that is not the reproduction's record, or a folder of the user's
    files without one: refused before anything is written, and the user's files are as they were."""
    raw = tmp_path / "raw"
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("en", "de"):
            write(raw / f"{split}.{lang}", ["a"])
    out = tmp_path / "out"
    out.mkdir()
    (out / "settings.json").write_text("my own settings\n")
    done = recipe_main("multi30k", "--raw-dir", raw, "--out", out)
    assert done.returncode != 0 and "settings.json is not a reproduction record" in done.stderr
    assert (out / "settings.json").read_text() == "my own settings\n"
    (out / "settings.json").unlink()
    (out / "notes.md").write_text("mine\n")
    done = recipe_main("multi30k", "--raw-dir", raw, "--out", out)
    assert done.returncode != 0 and "holds files the reproduction did not write" in done.stderr
    assert sorted(p.name for p in out.iterdir() if p.name != ".lock") == ["notes.md"]
    # a folder the reproduction wrote, with a file of the user's in OUT/analysis, which every run
    # rewrites: refused before anything is prepared or trained, the file kept
    (out / "notes.md").unlink()
    REPRODUCTION.write(out, {"raw_dir": str(raw.resolve())})
    write(out / "analysis/ngram_gap.md", ["my reading of the gaps"])
    done = recipe_main("multi30k", "--raw-dir", raw, "--out", out)
    assert done.returncode != 0 and f"{out / 'analysis'} holds files the reproduction did not write " \
        f"({out / 'analysis/ngram_gap.md'})" in done.stderr
    assert lines(out / "analysis/ngram_gap.md") == ["my reading of the gaps"] and not (out / "data").exists()
    # and so is a user's file in OUT/analysis/pooled, under a name of the pooled files or another
    (out / "analysis/ngram_gap.md").unlink()
    for name in ("ref.tok", "my_pooling.txt"):
        write(out / "analysis/pooled" / name, ["mine"])
        done = recipe_main("multi30k", "--raw-dir", raw, "--out", out)
        assert done.returncode != 0 and f"({out / 'analysis/pooled' / name})" in done.stderr
        assert lines(out / "analysis/pooled" / name) == ["mine"] and not (out / "data").exists()
        (out / "analysis/pooled" / name).unlink()
