"""What a newcomer meets first: the plugin from any folder, --help (the quick start: tests/test_quickstart.py),
ignored flags refused, errors that name the missing file before any slow work, chrF beside
BLEU, and the install's torch index (the GPU line). The commands' end-to-end runs are in
tests/test_readme.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, build_model
from recipe_helpers import run, write


def python_m(*args, cwd):
    return subprocess.run([sys.executable, "-m", "fairseq_csan", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_user_dir_and_variant_from_any_folder(tmp_path):
    done = python_m("user-dir", cwd=tmp_path)
    assert done.returncode == 0 and Path(done.stdout.strip()) == REPO / "fairseq_csan"
    assert python_m("variant", "transformer_csan2d", cwd=tmp_path).stdout.strip() == "csan2d"
    assert python_m("variant", "transformer_relpos_big", cwd=tmp_path).stdout.strip() == "relpos"
    assert python_m("variant", "transformer_ctxaware", cwd=tmp_path).stdout.strip() == "standard"
    assert python_m("variant", "transformer", cwd=tmp_path).stdout.strip() == "none"
    bad = python_m("variant", "transformer_csan3d", cwd=tmp_path)
    assert bad.returncode != 0 and "unknown architecture 'transformer_csan3d'" in bad.stderr
    assert "transformer_csan2d" in bad.stderr


def test_fairseq_help_lists_the_plugin_flags_from_another_folder(tmp_path):
    user_dir = python_m("user-dir", cwd=tmp_path).stdout.strip()
    done = subprocess.run(["fairseq-train", "--user-dir", user_dir, "--arch", "transformer_csan2d", "--help"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0
    for flag in ("--csan-window", "--csan-heads", "--csan-layers", "--ctx-type", "--ctx-side", "--encoder-layers"):
        assert flag in done.stdout, flag
    # fairseq's own architecture: its flags, none of ours
    plain = subprocess.run(["fairseq-train", "--user-dir", user_dir, "--arch", "transformer", "--help"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert "--encoder-layers" in plain.stdout and "--csan-window" not in plain.stdout


def test_help_wrapper_leaves_parsing_alone():
    from fairseq import options

    assert getattr(options.parse_args_and_arch, "help_lists_model_flags", False)
    _, args, _ = build_model("transformer_csan2d", ["--csan-window", "5"])
    assert args.csan_window == 5


def test_csan_layers_on_a_model_without_a_variant_is_refused():
    with pytest.raises(ValueError, match=r"--csan-layers 2 needs a self-attention variant .* 'standard'"):
        build_model("transformer_ctxaware", ["--csan-layers", "2"])
    build_model("transformer_ctxaware", ["--csan-layers", "0"])  # 0 is what it means anyway
    model, args, _ = build_model("transformer_ctxaware", ["--csan-layers", "2", "--encoder-self-attention", "csan1d"])
    assert args.csan_layers == 2


def test_install_takes_torch_from_its_own_index():
    env = {**os.environ, "TORCH_INDEX": "https://example.invalid/whl/cu128", "TORCH_SPEC": "torch==2.13.0"}
    done = subprocess.run(["bash", "scripts/install.sh", "--dry-run"], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=60)
    assert done.returncode == 0
    pip = [line for line in done.stdout.splitlines() if "pip install" in line]
    assert pip[0].endswith("pip install --index-url https://example.invalid/whl/cu128 torch==2.13.0")
    assert all("example.invalid" not in line for line in pip[1:])  # only torch comes from that index
    assert pip[-1].replace("\\", "").endswith("[test,logging]")  # printed shell-quoted
    bad = subprocess.run(["bash", "scripts/install.sh", "--now"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert bad.returncode == 2 and "allowed: --dry-run" in bad.stderr


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


def test_recipe_outputs_are_ignored_by_git():
    for path in ("data/wmt14_en_de/raw/test.en", "checkpoints/ende_base/checkpoint_last.pt",
                 "results/ende_base/results.json", "work/quickstart/toy/data/data-bin/dict.en.txt", "work/quickstart/toy/model/model.pt"):
        done = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO)
        assert done.returncode == 0, f"{path} is not git-ignored"


# ---- errors before slow work ---------------------------------------------------------------

def test_analysis_commands_name_a_missing_file(tmp_path):
    write(tmp_path / "hyp.txt", ["a b"])
    done = run([sys.executable, "-m", "fairseq_csan.recipes.analysis.ngram_gap", "--ref", tmp_path / "missing.de",
                "--baseline", f"base={tmp_path / 'hyp.txt'}", "--system", f"sys={tmp_path / 'hyp.txt'}",
                "--out", tmp_path / "out"], check=False)
    assert done.returncode != 0 and f"no file {tmp_path / 'missing.de'}" in done.stderr
    assert "Traceback" not in done.stderr


def test_gate_weights_checks_its_data_before_loading_a_model(tmp_path):
    not_a_checkpoint = tmp_path / "model.pt"
    not_a_checkpoint.write_bytes(b"not a checkpoint")  # loading it would fail with a traceback
    (tmp_path / "data").mkdir()
    done = run([sys.executable, "-m", "fairseq_csan.recipes.analysis.gate_weights", "--model", f"m={not_a_checkpoint}",
                "--data", tmp_path / "data", "--out", tmp_path / "out"], check=False)
    assert done.returncode == 2 and "no dict.*.txt there" in done.stderr and "Traceback" not in done.stderr
    for lang in ("en", "de"):
        write(tmp_path / "data" / f"dict.{lang}.txt", ["a 1"])
        (tmp_path / "data" / f"valid.en-de.{lang}.bin").write_bytes(b"")
    done = run([sys.executable, "-m", "fairseq_csan.recipes.analysis.gate_weights", "--model", f"m={not_a_checkpoint}",
                "--data", tmp_path / "data", "--out", tmp_path / "out", "--pos", tmp_path / "tags.txt"], check=False)
    assert done.returncode == 2 and "--pos" in done.stderr and "no such file" in done.stderr


def test_sweep_checks_its_inputs_before_making_run_folders(tmp_path):
    done = run(["bash", "scripts/sweep.sh", "--data", tmp_path / "nothing", "--out", tmp_path / "sweep",
                "--windows", "3", "--heads", ""], check=False)
    assert done.returncode == 2 and "not a prepared task folder" in done.stderr
    assert not (tmp_path / "sweep").exists()


def test_reproduce_a_wrong_raw_dir_does_not_lock_the_output(tmp_path, monkeypatch):
    out = tmp_path / "out"
    done = run([sys.executable, "-m", "fairseq_csan.recipes.multi30k", "--raw-dir", tmp_path / "nowhere", "--out", out], check=False)
    assert done.returncode != 0 and "lacks train.en" in done.stderr
    assert not (out / "settings.json").exists()
    # settings.json from a first run that stopped before training: a corrected rerun replaces it
    raw = tmp_path / "raw"
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("en", "de"):
            write(raw / f"{split}.{lang}", ["a"])
    out.mkdir()
    (out / "settings.json").write_text(json.dumps({"raw_dir": "/elsewhere"}))
    from fairseq_csan.recipes import multi30k as module

    monkeypatch.setattr(module.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1))
    with pytest.raises(SystemExit, match="data preparation failed"):
        module.main(["--raw-dir", str(raw), "--out", str(out)])
    assert json.loads((out / "settings.json").read_text())["raw_dir"] == str(raw.resolve())
    # with a run in it, other settings are still refused
    (out / "runs" / "transformer" / "seed1").mkdir(parents=True)
    with pytest.raises(SystemExit, match="holds runs with other settings"):
        module.main(["--raw-dir", str(raw), "--out", str(out), "--max-update", "7"])


# ---- chrF ------------------------------------------------------------------------------

def test_chrf_scores_and_its_paired_bootstrap():
    from sacrebleu.metrics import CHRF

    from fairseq_csan.recipes import score

    refs = ["Der Hund läuft schnell nach Hause .", "Ein kleines Haus am See .", "Sie lesen ein Buch ."] * 4
    base = ["Der Hund rennt nach Hause .", "Ein Haus .", "Sie lesen Bücher ."] * 4
    better = ["Der Hund läuft schnell nach Hause .", "Ein kleines Haus am See .", "Sie lesen ein Buch ."] * 4
    test = score.paired_bootstrap_chrf(refs, base, better, 200)
    assert test["baseline_chrf"] == pytest.approx(CHRF().corpus_score(base, [refs]).score, abs=1e-6)
    assert test["chrf"] == pytest.approx(100.0) and test["p_value"] < 0.05 and test["mark"] in ("⇑", "↑")
    assert "chrF2" in test["signature"] or "nc:6" in test["signature"]
    same = score.paired_bootstrap_chrf(refs, base, base, 200)
    assert same["chrf"] == pytest.approx(same["baseline_chrf"]) and same["mark"] == ""


def test_collect_results_has_a_chrf_column(tmp_path):
    from fairseq_csan.recipes import collect_results as collect

    runs = []
    for name, chrf, mark in (("Base", 50.0, ""), ("+ CSANs", 52.5, "⇑")):
        runs.append({"name": name, "task": "wmt14_en_de", "bleu_tok": 27.0, "mark": "", "chrf": chrf,
                     "chrf_signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0",
                     "train": None, "bootstrap": None if not mark else
                     {"baseline": "Base", "samples": 1000, "chrf": {"mark": mark}}})
    table = collect.table(runs, "chrf")
    assert "| Base | - | - | 50.00 |" in table and "| + CSANs | - | - | 52.50⇑ |" in table
    assert "paired bootstrap resampling of chrF" in table and "chrF signature: nrefs:1" in table
