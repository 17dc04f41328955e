"""scripts/sweep.sh (fairseq_csan/recipes/sweep.py), the window and area sweep (CSAN Fig. 2), and its plot."""

import json

import pytest

from recipe_helpers import lines, run


@pytest.mark.slow
def test_ende_window_sweep_trains_evaluates_and_plots(ende, tmp_path):
    """scripts/sweep.sh at a tiny budget (one window, one head area), then the plot; a rerun
    keeps what is finished."""
    sweep = tmp_path / "sweep"  # (the shared fixture is read only)
    command = ["bash", "scripts/sweep.sh", "--data", ende["out"], "--out", sweep, "--windows", 3, "--heads", 3,
               "--last", 2, "--cpu-tiny", "--", "--max-update", 8]
    run(command)
    assert "--csan-window 3" in (sweep / "csan1d_window3/checkpoints/train_command.sh").read_text()
    assert "--csan-window 11 --csan-heads 3" in (sweep / "csan2d_heads3/checkpoints/train_command.sh").read_text()
    assert json.loads((sweep / "csan2d_heads3/eval/evaluation.json").read_text())["subset"] == "valid"
    again = run(command)
    assert "[sweep] csan2d_heads3" in again.stderr
    assert "up to date; skipped" in (sweep / "csan1d_window3/eval.out").read_text()
    run(["python", "-m", "fairseq_csan.recipes.analysis.window_sweep", "--sweep", sweep, "--out", tmp_path / "sweep_plot"])
    rows = lines(tmp_path / "sweep_plot/window_sweep.csv")
    assert [r.split(",")[:2] for r in rows[1:]] == [["window", "3"], ["heads", "3"]]


def test_sweep_checks_its_inputs_before_making_run_folders(tmp_path):
    done = run(["bash", "scripts/sweep.sh", "--data", tmp_path / "nothing", "--out", tmp_path / "sweep",
                "--windows", "3", "--heads", ""], check=False)
    assert done.returncode == 2 and "not a prepared task folder" in done.stderr
    assert not (tmp_path / "sweep").exists()


def test_a_repeated_point_and_a_help_for_training_are_refused(tmp_path):
    """A window listed twice would be one run trained twice; train.sh's --help after -- is not an
    option of the runs (it used to pass the check and print nothing); nor is a setting train.sh
    keeps, under any spelling (its --dry-run check reads the words after -- as fairseq does)."""
    from recipe_helpers import fake_task

    data = fake_task(tmp_path)
    for extra, message in ((["--windows", "3 5 3"], "--windows: lists 3 more than once"),
                           (["--heads", "1 1"], "--heads: lists 1 more than once"),
                           (["--", "--help"], "-h/--help is not a training option"),
                           # a setting the runs' records follow, under fairseq's short form, after train.sh's --
                           (["--", "--cpu-tiny", "--", "-a", "transformer"], "-a after -- sets fairseq-train's --arch")):
        done = run(["bash", "scripts/sweep.sh", "--data", data, "--out", tmp_path / "sweep", "--dry-run", *extra],
                   check=False)
        assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "sweep").exists()


def test_a_second_sweep_of_a_run_is_refused_and_other_points_share_the_out(tmp_path):
    """Two sweeps of one run would overwrite its logs: the second is refused, naming the first,
    before it writes anything; a sweep of other points into the same --out goes ahead (the
    Multi30k reproduction runs its points side by side)."""
    from recipe_helpers import fake_task, hold_lock

    data, out = fake_task(tmp_path), tmp_path / "sweep"
    out.mkdir()
    holder = hold_lock(out / "csan1d_window3", False)
    try:
        done = run(["bash", "scripts/sweep.sh", "--data", data, "--out", out, "--windows", "5 3", "--heads", "",
                    "--cpu-tiny"], check=False)
        assert done.returncode == 2 and f"{out}/csan1d_window3 is being written by a test writer (pid {holder.pid}" \
            in done.stderr and "or give another output" in done.stderr
        assert sorted(p.name for p in out.iterdir()) == [".csan1d_window3.lock"]  # the holder's; none of its own left
        other = run(["bash", "scripts/sweep.sh", "--data", data, "--out", out, "--windows", "5", "--heads", "",
                     "--cpu-tiny"], check=False)
        assert "is being written" not in other.stderr and "[sweep] csan1d_window5: transformer_csan1d" in other.stderr
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("context", [[], ["--cpu-tiny"]], ids=["gpus", "cpu-tiny"])
def test_every_option_changes_the_runs_or_is_refused(tmp_path, context):
    """No option of sweep.sh is accepted and ignored: each changes a run's train.sh or
    evaluate.sh command, or is refused with one line. sweep.sh's --dry-run, through its Python
    main in this process (the door itself: the tests above)."""
    from recipe_helpers import fake_task, in_process, walk_options

    from fairseq_csan.recipes import sweep

    data = fake_task(tmp_path)
    other = fake_task(tmp_path / "other")

    def plan(extra):
        done = in_process(sweep.main, ["--data", data, "--out", tmp_path / "sweep", "--dry-run", *context, *extra],
                          check=False)
        # all it wrote to standard error is the refusal, which must be one line
        return done.stdout, (done.stderr.strip() or f"exit {done.returncode}") if done.returncode else None

    options = [["--data", other], ["--out", tmp_path / "elsewhere"], ["--windows", "5"], ["--windows", ""],
               ["--heads", "3"], ["--heads", ""], ["--window-2d", "7"], ["--heads", "", "--window-2d", "7"],
               ["--last", "3"], ["--cpu-tiny"], ["--", "--max-update", "7"], ["--", "--", "--dropout", "0.2"],
               ["--", "--gpus", "2"], ["--", "--size", "big"]]
    walk_options(plan, [option for option in options if option[0] not in context])
    assert not (tmp_path / "sweep").exists()
    listed = plan([])[0].splitlines()
    assert [line.split(":")[0] for line in listed] == [f"csan1d_window{m}" for m in (3, 5, 7, 9, 11, 13, 15)] + [
        f"csan2d_heads{n}" for n in (1, 3, 5, 7)]
    assert "--csan-window 11 --csan-heads 3 && " in listed[8] and " -m fairseq_csan.recipes.evaluate " in listed[8]
    assert listed[8].startswith("csan2d_heads3: ") and " -m fairseq_csan.recipes.train " in listed[8]


def test_a_run_folder_of_someone_else_s_is_refused_before_any_run(tmp_path):
    """A run folder that holds a file of the user's, or that no sweep record speaks for, is named
    before any run starts, and left as it was (its train.out was overwritten before)."""
    from recipe_helpers import fake_task, in_process

    from fairseq_csan.recipes import sweep

    data, out = fake_task(tmp_path), tmp_path / "sweep"
    (out / "csan1d_window3").mkdir(parents=True)
    (out / "csan1d_window3" / "train.out").write_text("my own log\n")
    argv = ["--data", data, "--out", out, "--windows", "3", "--heads", "", "--cpu-tiny"]
    done = in_process(sweep.main, argv, check=False)
    assert done.returncode == 2 and "csan1d_window3/train.out: sweep did not write it" in done.stderr
    assert (out / "csan1d_window3" / "train.out").read_text() == "my own log\n"
    assert sorted(p.name for p in (out / "csan1d_window3").iterdir()) == ["train.out"]
