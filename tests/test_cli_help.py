"""fairseq_csan/cli_help.py: python -m fairseq_csan help TOOL lists the tool's flags with those of
the chosen model and components; importing the plugin leaves fairseq's parsing alone."""

from conftest import build_model
from recipe_helpers import python_m


def test_help_lists_the_plugin_flags_from_another_folder(tmp_path):
    done = python_m("help", "fairseq-train", "--arch", "transformer_csan2d", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("usage: fairseq-train "), done.stderr[-2000:]
    for flag in ("--csan-window", "--csan-heads", "--csan-layers", "--ctx-type", "--ctx-side", "--encoder-layers"):
        assert flag in done.stdout, flag
    # fairseq's own architecture: its flags, none of ours
    plain = python_m("help", "fairseq-train", "--arch", "transformer", cwd=tmp_path)
    assert "--encoder-layers" in plain.stdout and "--csan-window" not in plain.stdout
    # the components a command chooses: the task's languages, our tokenizer's BPE's codes
    interactive = python_m("help", "fairseq-interactive", "--tokenizer", "csan_recipe", "--bpe", "subword_nmt",
                           cwd=tmp_path)
    assert "--source-lang" in interactive.stdout and "--bpe-codes" in interactive.stdout


def test_importing_leaves_parsing_alone():
    from fairseq import options

    assert options.parse_args_and_arch.__module__ == "fairseq.options"
    assert not hasattr(options.parse_args_and_arch, "__wrapped__")
    _, args, _ = build_model("transformer_csan2d", ["--csan-window", "5"])
    assert args.csan_window == 5
