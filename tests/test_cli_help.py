"""fairseq_csan/cli_help.py: fairseq's tools' --help lists the chosen model's flags, and parsing
is otherwise left alone."""

import subprocess

from conftest import build_model
from recipe_helpers import python_m


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
