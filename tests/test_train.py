"""scripts/train.sh and the kit's fairseq_csan.recipes.train: hyper-parameters from the data
file, the command shown in train.sh, a misspelt architecture, the save folder's lock, damaged
checkpoints (unit tests on small stand-ins, and a real resume), signals, and every training
command of docs/distributed.md and the training section of docs/recipes.md run as written; the
exact 8-GPU command, big settings, fewer GPUs, embedding sharing and bad arguments of --dry-run;
the logging options; the En-De recipe's resume and bf16 run; the bf16 entry point
(fairseq_csan/train.py). Data-parallel launches: test_distributed.py."""

import fcntl
import importlib.util
import json
import os
import re
import signal
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import REPO, shared_corpus, snapshot
from recipe_helpers import fake_task, lines, run, train_main, train_tiny, write

from fairseq_csan.recipes import save_folder
from fairseq_csan.recipes import train as kit
from fairseq_csan.model_folder import sha256
from fairseq_csan.recipes.runner import RUN, Refusal

TRAIN_SH = ["bash", "scripts/train.sh"]


def environment():
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def dry_run(data, *options, check=True):
    done = train_main("--data", data, "--arch", "transformer", "--save-dir", "/ckpt", "--dry-run", *options, check=check)
    return done.stdout.strip(), done.stderr, done.returncode


# ---------------------------------------------------------------- hyper-parameters are data

def test_the_default_hyper_parameters_are_those_of_the_data_file(tmp_path):
    hp = json.loads(kit.HPARAMS.read_text(encoding="utf-8"))
    data = fake_task(tmp_path)
    for size in ("base", "big"):
        command, _, _ = dry_run(data, "--size", size)
        s = hp["sizes"][size]
        lr = s["d_model"] ** -0.5 * s["warmup_updates"] ** -0.5
        assert f"--lr {lr:.3g} --warmup-updates {s['warmup_updates']} " in command
        assert f"--dropout {s['dropout']} " in command and f"--max-update {s['max_update']} " in command
    assert hp["sizes"]["base"]["d_model"] == 512 and hp["sizes"]["big"]["d_model"] == 1024  # Vaswani Table 3


def test_hyper_parameters_come_from_the_file_given(tmp_path):
    hp = json.loads(kit.HPARAMS.read_text(encoding="utf-8"))
    hp["sizes"]["base"].update(d_model=256, dropout="0.2", max_update=1234)
    hp["cpu_tiny"]["model"]["encoder_layers"] = 1
    mine = tmp_path / "hparams.json"
    mine.write_text(json.dumps(hp), encoding="utf-8")
    data = fake_task(tmp_path)
    command, _, _ = dry_run(data, "--hparams", mine)
    assert "--lr 0.000988 " in command and "--dropout 0.2 " in command and "--max-update 1234 " in command
    command, _, _ = dry_run(data, "--hparams", mine, "--cpu-tiny")
    assert "--encoder-layers 1 " in command
    del hp["sizes"]
    mine.write_text(json.dumps(hp), encoding="utf-8")
    _, err, code = dry_run(data, "--hparams", mine, check=False)
    assert code == 2 and f"--hparams {mine} has no 'sizes' part" in err
    _, err, code = dry_run(data, "--hparams", tmp_path / "absent.json", check=False)
    assert code == 2 and f"--hparams {tmp_path / 'absent.json'}: no such file" in err
    mine.write_text("{not json", encoding="utf-8")
    _, err, code = dry_run(data, "--hparams", mine, check=False)
    assert code == 2 and f"{mine} is not a hyper-parameters record" in err


def test_the_command_shown_in_train_sh_is_what_it_runs(tmp_path):
    """The header of scripts/train.sh shows the base 8-GPU command; --dry-run must print it."""
    header = (REPO / "scripts/train.sh").read_text(encoding="utf-8").split("set -euo")[0]
    block = re.search(r"#   (fairseq-train .*?)\n#\n", header, re.S).group(1)
    shown = re.sub(r"\s*\\\n#\s*", " ", block).strip()
    data = tmp_path / "data/wmt14_en_de"
    data.parent.mkdir()
    fake_task(tmp_path).rename(data)
    done = subprocess.run([*TRAIN_SH[:1], REPO / "scripts/train.sh", "--data", "data/wmt14_en_de", "--arch",
                           "transformer_csan2d", "--save-dir", "checkpoints/ende_csan2d", "--dry-run"],
                          capture_output=True, text=True, cwd=tmp_path, env=environment(), timeout=300)
    # nothing on standard error: no warning, and nothing printed while Python and fairseq start (the
    # other --dry-run tests call train.py's main in this process, where that would not show)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    expected = shown.replace("data/wmt14_en_de/data-bin", f"{data}/data-bin", 1)
    expected = expected.replace("--user-dir fairseq_csan", f"--user-dir {REPO}/fairseq_csan", 1)
    assert done.stdout.strip() == expected


def options(*argv):
    return kit.parse(["--data", "d", "--arch", "transformer", "--save-dir", "s", *argv])


def test_parse_types_the_options_and_names_a_bad_one():
    o = options("--gpus", "4", "--", "--lr", "1", "--gpus")
    assert (o.gpus, o.nodes, o.seed, o.share, o.max_tokens, o.tiny, o.dry_run) == (4, 1, 1, "auto", None, False, False)
    assert o.extra == ["--lr", "1", "--gpus"]  # after --: fairseq-train's, unread
    assert kit.parse(["--data=x"]).data == "x"
    # -- ends the options; a value that starts with "-" is given as --option=VALUE
    assert kit.parse(["--save-dir=-odd", "--", "--seed"]).save == "-odd"
    with pytest.raises(Refusal, match="^--save-dir needs DIR$"):
        kit.parse(["--save-dir", "-odd"])
    for argv, message in ((["--gpus"], "--gpus needs N"), (["--gpus", "--", "8"], "--gpus needs N"),
                          (["--data", ""], "--data needs a value"), (["--seed", "-1"], "--seed must be a whole number, got '-1'"),
                          (["--share", "most"], "--share must be auto, all, decoder or none, got 'most'"),
                          (["--dat", "x"], "unknown argument '--dat'"),  # no abbreviations
                          (["--dry-run=1"], "unknown argument '--dry-run=1'"), (["-hx"], "unknown argument '-hx'"),
                          (["--foo", "--gpus", "x"], "unknown argument '--foo'")):  # unknown before bad values
        with pytest.raises(Refusal) as refused:
            kit.parse(argv)
        assert str(refused.value).startswith(message), (argv, str(refused.value))
    with pytest.raises(SystemExit) as stopped:  # the help, wherever it stands among the options
        kit.parse(["--gpus", "x", "--help"])
    assert stopped.value.code == 0


def test_check_options_names_what_is_missing_or_excluded():
    kit.check_options(options())
    with pytest.raises(Refusal, match="^--save-dir is required$"):
        kit.check_options(kit.parse(["--data", "d", "--arch", "a"]))
    with pytest.raises(Refusal, match="^--max-tokens must be a whole number of 1 or more, got '0'$"):
        options("--max-tokens", "0")
    with pytest.raises(Refusal, match="^--cpu-processes and --gpus exclude each other"):
        kit.check_options(options("--cpu-processes", "2", "--gpus", "2"))


def test_process_layout_from_the_options_and_the_gpus_seen():
    def layout(*argv, papers=8, visible=None):
        found = kit.process_layout(options(*argv), papers, visible)
        return (found.launcher, found.nodes, found.procs, found.world, found.update_freq, found.precision)

    assert layout(visible=2) == ("", 1, 2, 2, 4, "fp16")  # 2 GPUs here: 4 batches each per update
    assert layout("--dry-run") == ("", 1, 8, 8, 1, "fp16")  # the papers' 8 GPUs
    assert layout("--gpus", "3", visible=1) == ("", 1, 3, 3, 3, "fp16")  # --gpus, not what is seen
    assert layout("--cpu-processes", "2") == ("torchrun", 1, 2, 2, 4, "fp32")
    assert layout("--cpu-tiny") == ("", 1, None, 1, 1, "fp32")
    assert layout("--cpu-tiny", "--cpu-processes", "2", "--precision", "bf16") == ("torchrun", 1, 2, 2, 1, "bf16")
    assert layout("--nodes", "2", "--gpus", "4", "--launcher", "slurm", "--precision", "bf16") == \
        ("slurm", 2, 4, 8, 1, "bf16")
    many = kit.process_layout(options("--nodes", "2", "--node-rank", "1", "--master-addr", "h", "--gpus", "4"), 8, None)
    assert (many.launcher, many.node_rank, many.master_addr, many.port, many.world) == ("torchrun", 1, "h", 29500, 8)
    with pytest.raises(Refusal, match="^no GPU found"):
        layout(visible=0)
    with pytest.raises(Refusal, match="^--precision fp16 needs a GPU; --cpu-tiny takes"):
        layout("--cpu-tiny", "--precision", "fp16")
    assert kit.batch_warning(kit.process_layout(options("--gpus", "16"), 8, None), 8, 4096) == [
        "warning: 16 GPUs x update-freq 1 = 16 batches per update, not the papers' 8; --max-tokens 2048 keeps 8 x "
        "4096 tokens per update"]


def test_fairseq_arguments_from_the_options_layout_data_and_hyper_parameters():
    hp = kit.read_hparams(kit.HPARAMS)
    joined, two = kit.Data(Path("/bin"), "en", "de", True), kit.Data(Path("/bin"), "en", "de", False)

    def command(*argv, data=joined, visible=2):
        o = options(*argv)
        return kit.fairseq_arguments(o, kit.process_layout(o, 8, visible), data, hp)

    cmd = command()
    assert cmd[:2] == ["fairseq-train", "/bin"] and "--share-all-embeddings" in cmd
    text = " ".join(cmd)
    assert "--source-lang en --target-lang de" in text and "--distributed-world-size 2 --update-freq 4 --fp16" in text
    assert f"--max-update {hp['sizes']['base']['max_update']} " in text and "--save-dir s " in text
    assert "--share-decoder-input-output-embed" in command(data=two)
    assert " ".join(command("--cpu-processes", "2", "--precision", "bf16")).startswith(
        "torchrun --standalone --nproc_per_node 2 -m fairseq_csan.train /bin ")
    tiny = " ".join(command("--cpu-tiny", "--max-update", "8"))
    assert "--cpu --num-workers 0 " in tiny and "--save-interval-updates 2 " in tiny and "--update-freq" not in tiny
    assert command("--", "--lr", "7")[-2:] == ["--lr", "7"] and command("--", "--lr", "7").count("--lr") == 1
    with pytest.raises(Refusal, match="^--share all needs one joined dictionary"):
        command("--share", "all", data=two)


def test_flags_after_the_double_dash_replace_the_recipe_s():
    """The printed command gives each flag once, where it takes effect."""
    command = ["--arch", "a", "--lr", "0.001", "--adam-betas", "(0.9, 0.98)", "--fp16", "--max-tokens", "4096"]
    assert kit.with_overrides(command, ["--lr", "2e-3", "--max-tokens=99", "--fp16"]) == [
        "--arch", "a", "--adam-betas", "(0.9, 0.98)", "--lr", "2e-3", "--max-tokens=99", "--fp16"]
    assert kit.with_overrides(command, []) == command
    assert kit.with_overrides(["--max-epoch", "-1"], ["--seed", "-2"]) == ["--max-epoch", "-1", "--seed", "-2"]


def test_shell_scripts_stay_short():
    for script in ("scripts/train.sh", "scripts/sweep.sh"):
        assert len(lines(REPO / script)) <= 150, script


# ---------------------------------------------------------------- nothing is claimed before it starts

def test_a_misspelt_architecture_stops_before_the_folder_is_claimed(tmp_path):
    data = fake_task(tmp_path)
    save = tmp_path / "ck"
    done = run([*TRAIN_SH, "--data", data, "--arch", "transformer_csan3d", "--save-dir", save, "--cpu-tiny"],
               check=False)
    assert done.returncode == 2
    assert "--arch transformer_csan3d is not a registered architecture; did you mean transformer_csan2d" in done.stderr
    assert not save.exists()  # no run.json (the corrected rerun is not refused), no lock
    _, err, code = dry_run(data, "--arch", "transformer_csan3d", check=False)  # --dry-run checks it too
    assert code == 2 and "is not a registered architecture" in err


def test_a_second_training_on_a_locked_folder_is_refused(tmp_path):
    """A trainer that holds SAVE/.lock (here: this test) keeps every other train.sh out."""
    data = fake_task(tmp_path)
    save = tmp_path / "ck"
    save.mkdir()
    with open(save / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("train.sh (pid 1 on elsewhere), trainer pid 2")
        held.flush()
        done = run([*TRAIN_SH, "--data", data, "--arch", "transformer", "--save-dir", save, "--cpu-tiny"], check=False)
    assert done.returncode == 2
    assert f"{save} is being written by train.sh (pid 1 on elsewhere), trainer pid 2; wait for it to end, or give " \
           "another --save-dir" in done.stderr
    assert not (save / "run.json").exists() and not (save / "train.log").exists()


# ---------------------------------------------------------------- damaged checkpoints (stand-ins)

def stand_in(path, updates, val_loss=None, best=None):
    state = {"model": {"w": torch.full((3,), float(updates))}, "optimizer_history": [{"num_updates": updates}],
             "extra_state": {"val_loss": val_loss, "best": best}}
    torch.save(state, path)
    return path.read_bytes()


def cut(path, fraction=0.4):
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * fraction)])


def test_a_cut_checkpoint_last_is_replaced_by_the_newest_intact_one(tmp_path):
    stand_in(tmp_path / "checkpoint_1_2.pt", 2)
    newest = stand_in(tmp_path / "checkpoint_1_4.pt", 4)
    stand_in(tmp_path / "checkpoint_last.pt", 4)
    cut(tmp_path / "checkpoint_last.pt")
    [message] = save_folder.repair_checkpoints(tmp_path)
    assert "checkpoint_last.pt is damaged" in message and "resuming from checkpoint_1_4.pt" in message
    assert "PytorchStreamReader failed" in message or "bytes" in message
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == newest
    assert save_folder.repair_checkpoints(tmp_path) == []  # now intact and newest: nothing to do
    assert not list(tmp_path.glob(".*.tmp"))


def test_damaged_interval_checkpoints_are_passed_over(tmp_path):
    older = stand_in(tmp_path / "checkpoint_1_2.pt", 2)
    stand_in(tmp_path / "checkpoint_1_4.pt", 4)
    cut(tmp_path / "checkpoint_1_4.pt")
    (tmp_path / "checkpoint_last.pt").write_bytes(b"")  # a copy killed at once
    messages = save_folder.repair_checkpoints(tmp_path)
    assert "resuming from checkpoint_1_2.pt" in messages[0] and "checkpoint_1_4.pt is damaged too" in messages[1]
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == older


def test_an_intact_but_older_checkpoint_last_gives_way_to_a_newer_one(tmp_path):
    """A kill after fairseq wrote checkpoint_1_4.pt and before it copied it over checkpoint_last.pt."""
    stand_in(tmp_path / "checkpoint_last.pt", 2)
    newest = stand_in(tmp_path / "checkpoint_1_4.pt", 4)
    [message] = save_folder.repair_checkpoints(tmp_path)
    assert "checkpoint_1_4.pt (update 4) is newer than checkpoint_last.pt (update 2)" in message
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == newest


def test_nothing_to_resume_from_is_refused_with_the_way_out(tmp_path):
    (tmp_path / "checkpoint_last.pt").write_bytes(b"PK\x03\x04 cut")
    with pytest.raises(Refusal, match="is damaged .* no intact checkpoint_E_U.pt is left to resume from; delete it"):
        save_folder.repair_checkpoints(tmp_path)
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == b"PK\x03\x04 cut"  # left for the user to judge


def test_a_cut_checkpoint_best_is_restored_from_the_checkpoint_it_copied(tmp_path):
    best = stand_in(tmp_path / "checkpoint_1_2.pt", 2, val_loss=1.5, best=1.5)
    stand_in(tmp_path / "checkpoint_1_4.pt", 4, val_loss=1.7, best=1.5)
    stand_in(tmp_path / "checkpoint_last.pt", 4, val_loss=1.7, best=1.5)
    (tmp_path / "checkpoint_best.pt").write_bytes(b"")
    [message] = save_folder.repair_checkpoints(tmp_path)
    assert "checkpoint_best.pt is damaged" in message and "replaced by checkpoint_1_2.pt" in message
    assert (tmp_path / "checkpoint_best.pt").read_bytes() == best
    (tmp_path / "checkpoint_1_2.pt").unlink()  # no longer kept (--keep-interval-updates)
    cut(tmp_path / "checkpoint_best.pt")
    [message] = save_folder.repair_checkpoints(tmp_path)
    assert "removed" in message and not (tmp_path / "checkpoint_best.pt").exists()


# ---------------------------------------------------------------- real training

# data_bin: conftest.py's 200-pair corpus, binarised once per module


def tiny(data, save, updates, *options):
    return [*TRAIN_SH, "--data", data, "--arch", "transformer", "--save-dir", save, "--cpu-tiny",
            "--max-update", updates, *options, "--", "--max-tokens", "256", "--save-interval-updates", "2"]


def weights(path):
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


@pytest.mark.slow
def test_a_run_killed_while_fairseq_copied_checkpoint_last_resumes_and_ends_as_if_uninterrupted(data_bin, tmp_path):
    whole = tmp_path / "whole"
    first = run(tiny(data_bin, whole, 6))
    assert re.search(r"^\[train\] \d\d:\d\d:\d\d update 2 of 6 \(33%\)$", first.stderr, re.M)  # the progress line
    # the interrupted run: killed while fairseq copied checkpoint_1_4.pt over checkpoint_last.pt
    cut_run = tmp_path / "cut"
    cut_run.mkdir()
    for name in ("checkpoint_1_2.pt", "checkpoint_1_4.pt", "run.json", ".written.json"):
        (cut_run / name).write_bytes((whole / name).read_bytes())
    (cut_run / "checkpoint_last.pt").write_bytes((whole / "checkpoint_1_4.pt").read_bytes()[:100_000])
    done = run(tiny(data_bin, cut_run, 6))
    assert f"{cut_run}/checkpoint_last.pt is damaged" in done.stderr
    assert "resuming from checkpoint_1_4.pt, the newest intact checkpoint" in done.stderr
    assert "(epoch 1 @ 4 updates)" in done.stdout and "num_updates=6," in done.stdout
    assert re.search(r" update 6 of 6 \(100%\)$", done.stderr, re.M)  # the resumed run's first count
    resumed, reference = weights(cut_run / "checkpoint_last.pt"), weights(whole / "checkpoint_last.pt")
    assert max((resumed[k] - reference[k]).abs().max().item() for k in reference) <= 1e-6


@pytest.mark.slow
def test_a_trainer_that_fails_ends_train_sh_with_its_error_in_one_line(data_bin, tmp_path):
    """fairseq-train's own fault (here a file-size limit while it saves a checkpoint): its
    traceback is in the log, and train.sh's last line names the error, the log and the way on;
    the same command, the limit lifted, then trains the run to its end. A trainer killed by a
    signal of its own is told as such."""
    save = tmp_path / "ck"
    command = " ".join(f'"{word}"' for word in tiny(data_bin, save, 4))
    done = subprocess.run(["bash", "-c", f"ulimit -f 100; exec {command}"], capture_output=True, text=True, cwd=REPO,
                          env=environment(), timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"[train] error: the trainer ended with exit status 1: OSError: [Errno 27] File too large (its log: "
        f"{save}/train.log); put that right and run train.sh again (it resumes from the newest intact checkpoint, if "
        "one was saved)")
    again = run(tiny(data_bin, save, 4))
    assert "num_updates=4," in again.stdout and (save / "checkpoint_1_4.pt").is_file()

    # killed from outside by its own signal (SIGKILL, as the kernel does when the memory runs
    # out): train.sh names the signal and quotes a line of this run's log, not of the earlier ones
    before = (save / "train.log").stat().st_size
    longer = subprocess.Popen([str(w) for w in tiny(data_bin, save, 100000)], cwd=REPO, env=environment(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: "num_updates=6," in (save / "train.log").read_bytes()[before:].decode(), 240, "update 6")
        os.kill(trainer_pid(save), signal.SIGKILL)
        _, err = longer.communicate(timeout=120)
    finally:
        if longer.poll() is None:
            longer.kill()
    assert longer.returncode == 1, err[-3000:]
    told = "[train] error: the trainer was killed by SIGKILL (the kernel does so when the machine runs out of memory): "
    said = re.fullmatch(re.escape(told) + r"(.+) \(its log: (.+)\); put that right and run train.sh again \(it resumes "
                        r"from the newest intact checkpoint, if one was saved\)", err.strip().splitlines()[-1])
    assert said and said.group(2) == f"{save}/train.log", err[-3000:]
    assert said.group(1) in (save / "train.log").read_bytes()[before:].decode()


def wait_for(condition, seconds, what):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def trainer_pid(save):
    m = re.search(r"trainer pid (\d+)", (save / ".lock").read_text())
    return int(m.group(1)) if m else None


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


@pytest.mark.slow
def test_the_lock_outlives_a_killed_train_sh_and_sigterm_ends_the_trainer(data_bin, tmp_path):
    save = tmp_path / "ck"
    typo = run([*TRAIN_SH, "--data", data_bin, "--arch", "transformer_csan3d", "--save-dir", save, "--cpu-tiny"],
               check=False)
    assert typo.returncode == 2
    long_run = [str(w) for w in tiny(data_bin, save, 100000)]
    started = []
    try:
        # the corrected run into the same folder is not refused
        first = subprocess.Popen(long_run, cwd=REPO, env=environment(), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
        started.append(first)
        wait_for(lambda: (save / "train.log").is_file() and "num_updates=2," in (save / "train.log").read_text(),
                 240, "the first updates")
        orphan = trainer_pid(save)
        started.append(orphan)
        first.kill()  # SIGKILL of train.sh alone: its trainer runs on, orphaned, and keeps the lock
        first.wait(timeout=30)
        time.sleep(1)
        assert alive(orphan)
        refused = run(long_run, check=False)
        assert refused.returncode == 2 and f"{save} is being written by train.sh" in refused.stderr
        assert f"trainer pid {orphan}" in refused.stderr
        os.kill(orphan, signal.SIGTERM)
        wait_for(lambda: not alive(orphan), 60, "the orphaned trainer to end")

        # SIGTERM to train.sh ends its trainer and frees the folder
        second = subprocess.Popen(long_run, cwd=REPO, env=environment(), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        started.append(second)
        wait_for(lambda: trainer_pid(save) not in (None, orphan), 240, "the second trainer")
        trainer = trainer_pid(save)
        time.sleep(3)
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=120)
        assert second.returncode == 130  # interrupted
        assert f"SIGTERM: passed on to the trainer (pid {trainer}); waiting for it to stop" in err
        assert f"the trainer (pid {trainer}) stopped after SIGTERM" in err and "resuming from" in err
        assert not alive(trainer)
        assert not (save / ".lock").exists()  # removed by its holder: free
    finally:
        for p in started:
            if isinstance(p, int):
                if alive(p):
                    os.kill(p, signal.SIGKILL)
            elif p.poll() is None:
                p.kill()


@pytest.mark.slow
def test_sigint_stops_the_trainer_when_the_caller_ignored_it(data_bin, tmp_path):
    """train.sh started in the background of a script inherits "ignore SIGINT"; SIGINT to it
    still stops the trainer (which starts with the default action), and only then does it say
    that the trainer stopped."""
    save = tmp_path / "ck"
    script = tmp_path / "background.sh"
    # a non-interactive shell's background job starts with SIGINT ignored
    script.write_text(" ".join(f"'{w}'" for w in tiny(data_bin, save, 100000)) + " 2> " + str(tmp_path / "err") +
                      " & echo $! > " + str(tmp_path / "pid") + "; wait $!; echo $? > " + str(tmp_path / "rc") + "\n")
    shown = open(tmp_path / "out", "wb")
    shell = subprocess.Popen(["bash", str(script)], cwd=REPO, env=environment(), stdout=shown)
    try:
        wait_for(lambda: (save / "train.log").is_file() and "num_updates=2," in (save / "train.log").read_text(),
                 240, "the first updates")
        kit_pid, trainer = int((tmp_path / "pid").read_text()), trainer_pid(save)
        trainer_ignores = int(re.search(r"SigIgn:\s*(\w+)", Path(f"/proc/{trainer}/status").read_text()).group(1), 16)
        assert not trainer_ignores & (1 << (signal.SIGINT - 1)), "the trainer ignores SIGINT"
        os.kill(kit_pid, signal.SIGINT)
        shell.wait(timeout=60)
        assert (tmp_path / "rc").read_text().strip() == "130"  # interrupted
        assert not alive(trainer)
        err = (tmp_path / "err").read_text()
        assert f"SIGINT: passed on to the trainer (pid {trainer}); waiting for it to stop" in err
        assert f"the trainer (pid {trainer}) stopped after SIGINT (its last lines: {save / 'train.log'})" in err
        assert "num_updates=100000" not in (save / "train.log").read_text()
        # what the trainer says as it stops (a KeyboardInterrupt traceback) stays in its log, off the screen
        assert "fairseq_cli.train" in (tmp_path / "out").read_text() and "Traceback" not in (tmp_path / "out").read_text()
    finally:
        if shell.poll() is None:
            shell.kill()
        pid = trainer_pid(save) if (save / ".lock").exists() else None
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)


# a trainer that loses its first SIGINT, as fairseq-train does now and then when native code
# clears the KeyboardInterrupt that Python raised in it; the second one ends it
LOSES_ONE_SIGINT = """
import time
print("training", flush=True)
try:
    while True:
        time.sleep(0.05)
except KeyboardInterrupt:
    print("lost one SIGINT", flush=True)
while True:
    time.sleep(0.05)
"""
# the kit's run() on a plan for one process, with that trainer in place of fairseq-train
RUN_WITH_TRAINER = """
import sys
from fairseq_csan.recipes import train as kit
from fairseq_csan.recipes.runner import as_command, children
children._RESEND_S = 2
data, save, launcher, trainer = sys.argv[1:]
plan = kit.build(kit.parse(["--data", data, "--arch", "transformer", "--save-dir", save, "--cpu-tiny"]))
plan.update(save_given=save, cmd=[sys.executable, "-c", trainer], launcher=launcher)
as_command(lambda argv: kit.run(plan), [])
"""


@pytest.mark.parametrize("launcher", ["", "torchrun"])
def test_a_signal_the_trainer_lost_is_passed_on_again(tmp_path, launcher):
    """The trainer alone (fairseq-train) still running _RESEND_S seconds after SIGINT gets it
    again, and stops; a launcher (torchrun, srun) that ends its workers itself gets it once."""
    data, save = fake_task(tmp_path), tmp_path / "ck"
    kit_process = subprocess.Popen([sys.executable, "-c", RUN_WITH_TRAINER, data, save, launcher, LOSES_ONE_SIGINT],
                                   cwd=REPO, env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   text=True)
    trainer = None
    try:
        wait_for(lambda: (save / "train.log").is_file() and "training" in (save / "train.log").read_text(), 60,
                 "the trainer to start")
        trainer = trainer_pid(save)
        kit_process.send_signal(signal.SIGINT)
        wait_for(lambda: "lost one SIGINT" in (save / "train.log").read_text(), 30, "the signal to be passed on")
        if launcher:
            with pytest.raises(subprocess.TimeoutExpired):  # the launcher would end it; here nothing does
                kit_process.wait(timeout=5)
            assert alive(trainer)
            return
        _, err = kit_process.communicate(timeout=30)
        assert kit_process.returncode == 130  # interrupted
        assert "lost one SIGINT" in (save / "train.log").read_text() and not alive(trainer)
        assert f"SIGINT: passed on to the trainer (pid {trainer}); waiting for it to stop" in err
        assert f"the trainer (pid {trainer}) still runs 2 s after SIGINT: passed on again" in err
        assert err.index("passed on again") < err.index(f"the trainer (pid {trainer}) stopped after SIGINT")
    finally:
        if kit_process.poll() is None:
            kit_process.kill()
            kit_process.communicate()
        if trainer and alive(trainer):
            os.kill(trainer, signal.SIGKILL)


# ---------------------------------------------------------------- the docs' training commands, as written

FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def doc_commands(text):
    """The commands of a page's bash blocks: continuation lines joined, comments dropped."""
    found = []
    for block in FENCE.findall(text):
        joined = re.sub(r"\s*\\\n\s*", " ", block)
        found += [c.strip() for c in joined.splitlines() if c.strip() and not c.strip().startswith("#")]
    return found


def training_section():
    text = (REPO / "docs/recipes.md").read_text(encoding="utf-8")
    start = text.index("### Training: `scripts/train.sh`")
    return text[start:text.index("\n### ", start + 1)]


@pytest.mark.slow
def test_every_training_command_of_the_docs_runs_as_written(tmp_path):
    """docs/distributed.md and the training section of docs/recipes.md, in a scratch folder with
    the repository's scripts: the Multi30k preparation they start from on a slice of the corpus
    (laid out as the README unpacks it), each command that trains on the CPU run as written, and
    each GPU or multi-machine command with the --dry-run its page offers (the tasks those read
    stand in as prepared folders)."""
    m30k = shared_corpus("multi30k_en_de")
    work = tmp_path / "work"
    for name in ("scripts", "examples", "fairseq_csan"):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).symlink_to(REPO / name)
    for name, size in (("train", 600), ("val", 20), ("test_2016_flickr", 20)):
        for lang in ("en", "de"):
            write(work / f"data/multi30k_raw/{name}.{lang}", lines(m30k / f"{name}.{lang}")[:size])
    env = environment()
    env.pop("MULTI30K", None)
    commands = doc_commands((REPO / "docs/distributed.md").read_text(encoding="utf-8")) + doc_commands(training_section())
    trained = [c for c in commands if ("scripts/train.sh" in c or "fairseq-train" in c) and "--help" not in c]
    assert len(trained) >= 8 and any(c.startswith("torchrun") for c in trained)
    ran = []
    for command in commands:
        words = command.split()
        if "prepare.sh" in command:
            out = words[words.index("--out") + 1]
            if "examples/multi30k/" not in command:  # a download: a prepared folder stands in
                fake_task(tmp_path / "stand-in").rename(work / out)
                continue
        elif command not in trained:
            continue
        elif not any(w in ("--cpu", "--cpu-tiny", "--cpu-processes") for w in words):
            assert words[:2] == ["bash", "scripts/train.sh"], f"a GPU command that cannot be checked here: {command}"
            command += " --dry-run"
        done = subprocess.run(["bash", "-c", f"set -euo pipefail\n{command}"], cwd=work, env=env,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        ran.append((command, done))
    for command, done in ran:
        if "--dry-run" in command or "--save-dir" not in command:
            continue
        save = work / command.split("--save-dir ")[1].split()[0]
        state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
        limit = re.search(r"--max-update (\d+)", command)
        assert state["optimizer_history"][-1]["num_updates"] == (int(limit.group(1)) if limit else 16), command
        two = "--cpu-processes 2" in command or "--nproc_per_node 2" in command or "--distributed-world-size 2" in command
        log = done.stdout + ((save / "train.log").read_text() if (save / "train.log").is_file() else "")
        assert ("training on 2 devices" in log) == two, command


@pytest.mark.slow
def test_ende_training_resumes_and_refuses_another_run(ende):
    save = ende["work"] / "ck_base"
    # --cpu-tiny keeps 8 checkpoints, enough for evaluate.sh's default average of the last 5
    assert sorted(int(p.stem.split("_")[-1]) for p in save.glob("checkpoint_1_*.pt")) == list(range(2, 17, 2))
    from fairseq_csan.recipes.score import train_speed

    speed = train_speed(save / "train.log")
    assert speed["steps_per_s"] > 0 and speed["logged_intervals"] >= 2 and speed["params"] > 0
    # quiet: none of fairseq's known notices (fairseq_csan/quiet.py, tensorboardX installed)
    log = (save / "train.log").read_text(encoding="utf-8")
    assert "Warning" not in log
    if importlib.util.find_spec("tensorboardX"):  # the logging extra; fairseq imports its tasks before our plugin
        assert "tensorboardX" not in log
    other = run(["bash", "scripts/train.sh", "--data", ende["out"], "--arch", "transformer_csan1d",
                 "--save-dir", save, "--cpu-tiny"], check=False)
    assert other.returncode == 2 and "holds another run" in other.stderr


def test_a_run_has_finished_when_its_last_checkpoint_reaches_max_update(tmp_path):
    """train.py's check before a resume: the --max-update that takes effect (the last one, in
    either form) against the updates of checkpoint_last.pt; 0 is fairseq's "no limit"."""
    last = tmp_path / "checkpoint_last.pt"
    torch.save({"optimizer_history": [{"num_updates": 20}]}, last)
    assert kit.flag_value(["fairseq-train", "--max-update", "16", "--max-update=40"], "--max-update") == "40"
    assert kit.flag_value(["fairseq-train", "--max-update=40", "--max-update", "16"], "--max-update") == "16"
    for command, expected in ((["--max-update", "20"], 20), (["--max-update", "16"], 20),
                              (["--max-update", "100", "--max-update=20"], 20), (["--max-update", "21"], None),
                              (["--max-update", "0"], None), (["--max-epoch", "1"], None)):
        assert save_folder.finished(last, kit.flag_value(["fairseq-train", "data", *command], "--max-update")) == expected, command



def test_the_progress_line_reads_fairseq_s_update_counts_in_either_log_format():
    """The updates of train_inner and train lines (simple or json) against --max-update (the last
    one given); with --max-epoch alone (--max-update 0), the epoch instead and no time left."""
    inner = "2026-11-27 10:00:00 | INFO | train_inner | epoch 002:     10 / 50 loss=5.1, ups=2, num_updates={}, lr=1e-4"
    json_line = '2026-11-27 10:00:00 | INFO | train | {{"epoch": 3, "train_loss": "4.9", "num_updates": "{}"}}'
    progress = kit.progress_of(["fairseq-train", "data", "--max-update", "16", "--max-update=600"])

    def seen(line, now):  # what the trainer's log line makes of the progress line (runner.Progress)
        count = progress.count_of(line)
        return None if count is None else progress.at(count, now, progress.note(line))

    assert seen(b"2026-11-27 10:00:00 | INFO | valid | epoch 001 | loss 6.0 | num_updates 100", 0.0) is None
    first = seen(inner.format(100).encode(), 0.0)
    assert re.fullmatch(r"\d\d:\d\d:\d\d update 100 of 600 \(17%\)", first)
    assert seen(json_line.format(160).encode(), 30.0) is None  # within the minute
    assert seen(json_line.format(220).encode(), 60.0).endswith(" update 220 of 600 (37%), 2 updates/s, "
                                                               "about 3 min left")
    progress = kit.progress_of(["fairseq-train", "data", "--max-update", "0", "--max-epoch", "10"])
    assert seen(inner.format(40).encode(), 0.0).endswith(" update 40, epoch 2 of 10")
    assert seen(json_line.format(100).encode(), 120.0).endswith(" update 100, epoch 3 of 10, 0.5 updates/s")


@pytest.mark.slow
def test_ende_resume_continues_from_the_last_checkpoint(ende, tmp_path):
    """A finished run started again is left as it is (fairseq-train would make one update past
    --max-update and save it over checkpoint_last.pt and checkpoint_best.pt); a larger
    --max-update resumes it."""
    save = tmp_path / "ck_csan"  # a copy: the shared run stays at its 16 updates for the other tests
    shutil.copytree(ende["work"] / "ck_csan", save)

    def kept():  # each file's content, and when it was written (run.json is written again as it was)
        return {k: (h, None if k.endswith("run.json") else t) for k, (h, t) in snapshot(save).items()
                if not k.endswith(".lock")}

    before = kept()
    again = train_tiny(ende["out"], save, "transformer_csan2d")
    assert f"{save}/checkpoint_last.pt is at update 16, and --max-update is 16: this run has finished" \
        in again.stderr
    assert "fairseq-train" not in again.stderr and "resuming from" not in again.stderr
    assert kept() == before
    done = train_tiny(ende["out"], save, "transformer_csan2d", "--max-update", 20)
    assert "resuming from" in done.stderr
    assert "loaded checkpoint" in done.stdout.lower() and (save / "checkpoint_1_20.pt").is_file()


@pytest.mark.slow
def test_ende_warm_start_from_another_variant(ende, tmp_path):
    """fairseq-train's --finetune-from-model from a csan2d checkpoint into csan1d and into the
    context-aware model: the shared weights are loaded and the log says so (a resume into a
    folder of other settings stays refused: test_ende_training_resumes_and_refuses_another_run)."""
    pretrained = ende["work"] / "ck_csan/checkpoint_1_4.pt"
    for arch in ("transformer_csan1d", "transformer_ctxaware"):
        save = tmp_path / arch
        done = train_tiny(ende["out"], save, arch, "--max-update", 2, "--", "--finetune-from-model", pretrained)
        assert f"warm start from {pretrained} (--arch transformer_csan2d) into --arch {arch}" in done.stdout
        assert "num_updates=2," in done.stdout
        # the run's record names what it started from (a warm start is its lineage)
        assert RUN.read(save)["finetuned_from"] == {"checkpoint": str(pretrained.resolve()), "sha256": sha256(pretrained)}
    assert "parameters of this model keep their initial values" in done.stdout  # the gates of ctxaware
    # into fairseq's own Transformer: our settings and the variant's own weights are left out
    done = train_tiny(ende["out"], tmp_path / "stock", "transformer", "--max-update", 2, "--",
                      "--finetune-from-model", pretrained)
    assert f"warm start from {pretrained} into fairseq's own --arch transformer: the shared weights are loaded; " \
        in done.stdout and "csan_model_settings" in done.stdout and "num_updates=2," in done.stdout


@pytest.mark.slow
def test_ende_bf16_training_through_our_entry_point(ende, tmp_path):
    """--precision bf16 runs python -m fairseq_csan.train, where stock fairseq-train --bf16
    would ask for a TPU; on the CPU the model trains in bfloat16."""
    import torch

    save = tmp_path / "ck_bf16"
    done = train_tiny(ende["out"], save, "transformer", "--precision", "bf16", "--max-update", 2)
    assert "python -m fairseq_csan.train " in done.stderr
    # fairseq-train's log format, so the speed is found as for the other runs
    assert "| train_inner |" in done.stdout and "training steps/s" in done.stderr
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["cfg"]["common"]["bf16"] is True and state["cfg"]["common"]["tpu"] is False
    assert state["optimizer_history"][-1]["num_updates"] == 2


def test_train_sh_logging_options_and_tiny_checkpoints(tmp_path):
    data = tmp_path / "bin"
    for lang in ("en", "de"):
        write(data / f"dict.{lang}.txt", ["a 1"])
    (data / "train.en-de.en.bin").write_bytes(b"")
    done = run(["bash", "scripts/train.sh", "--data", data, "--arch", "transformer", "--save-dir", tmp_path / "ck",
                "--cpu-tiny", "--max-update", "40", "--tensorboard", tmp_path / "tb", "--wandb", "proj", "--dry-run"])
    command = done.stdout
    assert f"--tensorboard-logdir {tmp_path / 'tb'}" in command and "--wandb-project proj" in command
    assert "--save-interval-updates 5 " in command  # 40 / 8: eight checkpoints, evaluate.sh averages 5
    assert "--save-interval-updates 2 " in run(["bash", "scripts/train.sh", "--data", data, "--arch", "transformer",
                                                "--save-dir", tmp_path / "ck", "--cpu-tiny", "--dry-run"]).stdout


@pytest.fixture
def fake_data(tmp_path):
    """A prepared-task folder with a joined (identical) pair of dictionaries."""
    return fake_task(tmp_path)


def dry_run_arch(data, *extra):
    done = train_main("--data", data, "--save-dir", "/ckpt", "--dry-run", *extra)
    return done.stdout.strip(), done.stderr


def test_dry_run_prints_the_exact_8_gpu_command(fake_data):
    command, _ = dry_run_arch(fake_data, "--arch", "transformer_csan2d")
    assert command == (
        f"fairseq-train {fake_data}/data-bin --user-dir {REPO}/fairseq_csan --arch transformer_csan2d "
        "--source-lang en --target-lang de --share-all-embeddings "
        "--optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 "
        "--lr-scheduler inverse_sqrt --lr 0.000699 --warmup-updates 4000 --warmup-init-lr 1e-07 "
        "--criterion label_smoothed_cross_entropy --label-smoothing 0.1 "
        "--dropout 0.1 --weight-decay 0.0 --clip-norm 0.0 "
        "--max-tokens 4096 --max-update 100000 --distributed-world-size 8 --update-freq 1 --fp16 "
        "--save-dir /ckpt --save-interval-updates 1000 --keep-interval-updates 20 --no-epoch-checkpoints "
        "--log-format simple --log-interval 100 --seed 1")


def test_dry_run_big_settings_fewer_gpus_and_bf16(fake_data):
    command, warning = dry_run_arch(fake_data, "--arch", "transformer_ctxaware_big", "--gpus", "2", "--precision", "bf16")
    assert command.startswith("python -m fairseq_csan.train ")
    assert "--lr 0.000494 " in command and "--dropout 0.3 " in command and "--max-update 300000 " in command
    assert "--distributed-world-size 2 --update-freq 4 --bf16 " in command and "--fp16" not in command
    assert warning == ""
    command, warning = dry_run_arch(fake_data, "--arch", "transformer", "--gpus", "3", "--precision", "fp32")
    assert "--distributed-world-size 3 --update-freq 3 " in command and "16" not in command.split("--update-freq")[1][:4]
    assert "9 batches per update, not the papers' 8" in warning
    command, _ = dry_run_arch(fake_data, "--arch", "transformer", "--", "--max-epoch", "3")
    assert command.endswith("--seed 1 --max-epoch 3")


def test_separate_dictionaries_share_only_the_decoder_embeddings(fake_data):
    command, _ = dry_run_arch(fake_data, "--arch", "transformer", "--share", "none")
    assert "--share-" not in command
    write(fake_data / "data-bin/dict.de.txt", ["c 5"])
    command, _ = dry_run_arch(fake_data, "--arch", "transformer")
    assert "--share-decoder-input-output-embed" in command and "--share-all-embeddings" not in command
    done = train_main("--data", fake_data, "--arch", "transformer", "--save-dir", "/c", "--dry-run", "--share", "all",
                    check=False)
    assert done.returncode == 2 and "--share all needs one joined dictionary" in done.stderr


@pytest.mark.parametrize("args, message", [
    (["--precision", "fp8"], "--precision must be fp16, bf16 or fp32"),
    (["--size", "huge"], "--size must be base or big"),
    (["--share", "some"], "--share must be auto, all, decoder or none"),
    (["--gpus", "two"], "--gpus must be a whole number"),
    (["--fp16"], "unknown argument '--fp16' (fairseq-train arguments go after --)"),
    (["--cpu-tiny", "--precision", "fp16"], "--precision fp16 needs a GPU"),
    # flags that would be accepted and ignored: refused, each with its reason
    (["--cpu-tiny", "--gpus", "4"], "--gpus is for GPU runs; --cpu-tiny runs on the CPU"),
    (["--cpu-tiny", "--size", "big"], "--size picks the base or big model; --cpu-tiny trains its own tiny one"),
    (["--port", "1234"], "--port is the rendezvous port of several machines"),
    (["--cpu-processes", "2", "--port", "1234"], "--port is the rendezvous port of several machines"),
    (["--max-tokens", "0"], "--max-tokens must be a whole number of 1 or more"),
])
def test_train_script_bad_arguments(fake_data, args, message):
    done = train_main("--data", fake_data, "--arch", "transformer", "--save-dir", "/ckpt", "--dry-run", *args,
                    check=False)
    assert done.returncode == 2 and message in done.stderr


def test_max_tokens_takes_effect_with_cpu_tiny(fake_data):
    """--max-tokens changes the tiny run's command (it was once replaced by the tiny default)."""
    def tokens(*extra):
        done = train_main("--data", fake_data, "--arch", "transformer", "--save-dir", "/ckpt", "--dry-run", "--cpu-tiny",
                        *extra)
        words = done.stdout.split()
        return [words[i + 1] for i, w in enumerate(words) if w == "--max-tokens"]

    assert tokens() == ["1024"] and tokens("--max-tokens", "2000") == ["2000"]


def test_train_script_needs_prepared_data(tmp_path):
    done = run(["bash", "scripts/train.sh", "--data", tmp_path / "absent", "--arch", "transformer",
                "--save-dir", "/ckpt", "--dry-run"], check=False)
    assert done.returncode == 2 and "no data folder" in done.stderr


def test_bf16_entry_point_undoes_only_the_tpu_implication():
    from fairseq import options

    from fairseq_csan.patches import bf16_without_tpu

    parse = bf16_without_tpu(options.parse_args_and_arch)
    base = ["/dev/null", "--task", "translation", "-s", "en", "-t", "de", "--arch", "transformer"]
    stock = options.parse_args_and_arch(options.get_training_parser(), base + ["--bf16"])
    assert stock.tpu is True  # the fairseq behaviour this entry point exists for
    ours = parse(options.get_training_parser(), base + ["--bf16"])
    assert ours.bf16 is True and ours.tpu is False
    assert parse(options.get_training_parser(), base + ["--bf16", "--tpu"]).tpu is True
    assert parse(options.get_training_parser(), base).tpu is False


# every option of train.sh, with a value other than its default
EVERY_OPTION = [
    ["--arch", "transformer_csan2d"], ["--save-dir", "/elsewhere"], ["--size", "big"], ["--gpus", "4"],
    ["--cpu-processes", "4"], ["--nodes", "2"], ["--nodes", "2", "--node-rank", "1", "--master-addr", "h"],
    ["--launcher", "slurm"], ["--launcher", "torchrun"], ["--node-rank", "1"], ["--master-addr", "h"],
    ["--port", "29501"], ["--precision", "bf16"], ["--precision", "fp32"], ["--share", "none"],
    ["--share", "decoder"], ["--max-tokens", "2000"], ["--max-update", "7"], ["--seed", "5"],
    ["--tensorboard", "/tb"], ["--wandb", "project"], ["--cpu-tiny"], ["HPARAMS"], ["--", "--dropout", "0.2"],
]


@pytest.mark.parametrize("context", [[], ["--cpu-tiny"], ["--cpu-processes", "2"], ["--cpu-tiny", "--cpu-processes", "2"]],
                         ids=["gpus", "cpu-tiny", "cpu-processes", "cpu-tiny-processes"])
def test_every_option_changes_the_command_or_is_refused(fake_data, tmp_path, context):
    """No option of train.sh is accepted and ignored: with each preset, every option either
    changes the fairseq-train command or is refused with a one-line reason."""
    hparams = json.loads(kit.HPARAMS.read_text())
    hparams["all_sizes"]["max_tokens"] = 3000
    hparams["cpu_tiny"]["max_tokens"] = 700
    (tmp_path / "hp.json").write_text(json.dumps(hparams))

    def command(extra):
        extra = ["--hparams", str(tmp_path / "hp.json")] if extra == ["HPARAMS"] else extra
        argv = ["--data", str(fake_data), "--arch", "transformer", "--save-dir", "/ckpt", "--dry-run", *context, *extra]
        try:
            return kit.build(kit.parse(argv))["cmd"], None
        except Refusal as refusal:
            return None, str(refusal)

    baseline, refused = command([])
    assert refused is None, refused
    for option in EVERY_OPTION:
        cpu = "--cpu-tiny" in context or "--cpu-processes" in context
        if option[0] in context or (option == ["--launcher", "torchrun"] and "--cpu-processes" in context) \
                or (option == ["--precision", "fp32"] and cpu):
            continue  # given already, or the default there
        changed, refused = command(option)
        if refused is not None:
            assert refused and "\n" not in refused, (option, refused)
        else:
            assert changed != baseline, f"{' '.join(option)} with {' '.join(context)} is accepted and changes nothing"


@pytest.mark.parametrize("words,owned", [
    (["--save-dir", "x"], "--save-dir"), (["--save-dir=elsewhere"], "--save-dir"), (["--arch", "x"], "--arch"),
    (["-a", "transformer_csan2d"], "--arch"), (["-atransformer_csan2d"], "--arch"), (["--seed", "2"], "--seed"),
    (["--arc", "transformer"], None), (["--user-dir", "x"], "--user-dir"), (["--log-file", "notes.txt"], "--log-file"),
    (["--restore-file", "OTHER/checkpoint_1_8.pt"], "--restore-file"), (["--tensorboard-logdir", "tb"], "--tensorboard-logdir"),
    (["--continue-once", "OTHER/checkpoint_last.pt"], "--continue-once"), (["-s", "de"], "--source-lang")])
def test_a_setting_the_kit_owns_is_refused_after_the_double_dash_under_any_spelling(words, owned, tmp_path):
    """The run's lock and record follow train.sh's --save-dir, --arch and --seed, and the kit
    keeps where a run logs and starts from: after --, each is resolved by fairseq's own parser
    (its short forms; it takes no abbreviations) and refused, naming the setting and what to give
    instead; a word fairseq-train does not take is refused as fairseq's parser words it. Nothing
    is written."""
    done = train_main("--data", fake_task(tmp_path), "--arch", "transformer", "--save-dir", tmp_path / "s", "--dry-run",
                      "--", *words, check=False)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    if owned:
        assert f"{words[0].split('=')[0]} after -- sets fairseq-train's {owned}, which the kit sets" in done.stderr
    else:
        assert "fairseq-train does not take the words after --: " in done.stderr and "unrecognized arguments: --arc" \
            in done.stderr
    assert not (tmp_path / "s").exists()


def test_a_run_without_end_is_refused(tmp_path):
    """fairseq-train reads --max-update 0 as no limit: after --, without --max-epoch, it is refused;
    with --max-epoch N it is that bound."""
    task = fake_task(tmp_path)
    done = train_main("--data", task, "--arch", "transformer", "--save-dir", tmp_path / "s", "--dry-run", "--",
                      "--max-update", "0", check=False)
    assert done.returncode == 2 and "would train without end" in done.stderr
    done = train_main("--data", task, "--arch", "transformer", "--save-dir", tmp_path / "s", "--dry-run", "--",
                      "--max-update", "0", "--max-epoch", "3")
    assert "--max-update 0" in done.stdout and "--max-epoch 3" in done.stdout


def test_force_removes_only_what_a_training_wrote(tmp_path):
    """train.sh --force starts a run again: the files a training of the kit wrote go (its
    checkpoints, logs and record), the lock it holds stays; a folder with a file of the user's,
    or without the kit's run record, is refused with nothing removed."""
    save = tmp_path / "save"
    save.mkdir()
    ours = ["checkpoint_last.pt", "checkpoint_best.pt", "checkpoint_1_4.pt", "train.log", "train.node1.log",
            "train_command.sh"]
    for name in ours:
        (save / name).write_text(name)
    (save / ".lock").write_text("held")
    (save / ".node1.lock").write_text("another machine's")
    with pytest.raises(Refusal, match="holds no run record of the kit's"):
        save_folder.start_over(save)
    kit.RUN.write(save, {"arch": "transformer", "data": "d", "seed": 1})
    (save / "notes.txt").write_text("a user's notes")
    with pytest.raises(Refusal, match=r"holds what a training did not write \(notes.txt\)"):
        save_folder.start_over(save)
    assert sorted(p.name for p in save.iterdir()) == sorted([*ours, "notes.txt", "run.json", ".written.json", ".lock",
                                                             ".node1.lock"])
    (save / "notes.txt").unlink()
    save_folder.start_over(save)
    assert sorted(p.name for p in save.iterdir()) == [".lock", ".node1.lock"]
    save_folder.start_over(save)  # nothing left to remove


def test_unchecked_without_a_folder_to_take_is_refused(tmp_path):
    """train.sh's --unchecked takes a --finetune-from folder without export.json: alone, it would
    change nothing, and is refused; so is prepare files --unchecked without --like."""
    from fairseq_csan.recipes import prepare
    from recipe_helpers import in_process

    done = train_main("--data", fake_task(tmp_path), "--arch", "transformer", "--save-dir", tmp_path / "s", "--dry-run",
                      "--unchecked", check=False)
    assert done.returncode == 2 and "--unchecked takes a --finetune-from folder" in done.stderr
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            write(tmp_path / "raw" / f"{split}.{lang}", ["a b c"])
    files = ["files", "--src", "en", "--tgt", "de", "--train", tmp_path / "raw/train", "--valid", tmp_path / "raw/valid",
             "--test", tmp_path / "raw/test", "--out", tmp_path / "task2", "--unchecked", "--dry-run"]
    done = in_process(prepare.main, [str(w) for w in files], check=False)
    assert done.returncode == 2 and "--unchecked takes a --like folder" in done.stderr
    assert not (tmp_path / "s").exists() and not (tmp_path / "task2").exists()
