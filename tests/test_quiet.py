"""fairseq_csan/quiet.py: once the plugin is loaded, fairseq's known harmless warnings (hydra's and
torch's deprecation notices about fairseq's calls) are ignored, every other warning stays
visible, and PYTHONWARNINGS=default shows them all again; logging is left as fairseq sets it."""

import os
import subprocess
import sys

from conftest import REPO

# as hydra, torch and fairseq word them (hydra's begin with a newline), and warnings that must show
EMIT = r'''
import warnings
import fairseq_csan
warnings.warn("\n'config' is validated against ConfigStore schema with the same name.\nThis behavior is "
              "deprecated in Hydra 1.1 and will be removed in Hydra 1.2.", UserWarning)
warnings.warn("\nThe version_base parameter is not specified.\nPlease specify a compatability version level, "
              "or None.\nWill assume defaults for version 1.1", UserWarning)
warnings.warn("hydra.experimental.compose() is no longer experimental. Use hydra.compose()", UserWarning)
warnings.warn("In 'config': Usage of deprecated keyword in package header '# @package _group_'.\nSee "
              "https://hydra.cc/docs/1.2/upgrades/1.0_to_1.1/changes_to_package_header", UserWarning)
warnings.warn("\nThe strict flag in the compose API is deprecated.\nSee https://hydra.cc/docs/1.2/upgrades/"
              "0.11_to_1.0/strict_mode_flag_deprecated for more info.\n", UserWarning)
warnings.warn("Support for mismatched key_padding_mask and attn_mask is deprecated. Use same type for both "
              "instead.", UserWarning)
warnings.warn("`torch.cuda.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cuda', "
              "args...)` instead.", FutureWarning)
warnings.warn("'pin_memory' argument is set as true but no accelerator is found, then device pinned memory "
              "won't be used.", UserWarning)
warnings.warn("a warning of the user's own", UserWarning)
warnings.warn("a model whose mask says: Support for mismatched key_padding_mask and attn_mask", UserWarning)
warnings.warn("`torch.cuda.amp.autocast(args...)` is deprecated, as a RuntimeWarning", RuntimeWarning)
'''
SHOWN = ["a warning of the user's own", "a model whose mask says", "as a RuntimeWarning"]
HIDDEN = ["ConfigStore schema", "version_base", "hydra.experimental.compose", "UserWarning: Support for mismatched",
          "deprecated keyword in package header", "strict flag",
          "torch.amp.autocast('cuda'", "pin_memory"]


def emit(**env):
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    done = subprocess.run([sys.executable, "-c", EMIT], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**environment, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


def test_known_warnings_are_ignored_and_others_shown():
    shown = emit()
    assert all(text in shown for text in SHOWN), shown
    assert not [text for text in HIDDEN if text in shown], shown


def test_pythonwarnings_default_shows_them_all():
    shown = emit(PYTHONWARNINGS="default")
    assert all(text in shown for text in SHOWN + HIDDEN), shown


def test_fairseq_mains_syntax_warning_is_ignored_there_only(tmp_path):
    """fairseq GitHub main's speech task compares with `is not ""`: the SyntaxWarning of its first
    compile is ignored in that file, and shown for the same code anywhere else."""
    code = 'label = "a"\nfound = label is not ""\n'
    theirs = tmp_path / "fairseq" / "tasks" / "multires_hubert_pretraining.py"
    theirs.parent.mkdir(parents=True)
    theirs.write_text(code)
    (tmp_path / "mine.py").write_text(code)
    script = ("import fairseq_csan\n"
              f"for path in ({str(theirs)!r}, {str(tmp_path / 'mine.py')!r}):\n"
              "    compile(open(path).read(), path, 'exec')\n")
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env=environment)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{tmp_path / 'mine.py'}:2: SyntaxWarning" in done.stderr and "multires_hubert" not in done.stderr


def test_importing_the_plugin_leaves_the_logging_of_a_script_as_it_was():
    """fairseq configures logging while it is imported (a wav2vec module calls basicConfig); a
    script that imports the plugin first logs as one that imports neither (fix 8 of
    fairseq_compat: fairseq's INFO lines are not printed, its warnings are), with LOGLEVEL set
    or not (the plugin once read it: fairseq's logging is fairseq's)."""
    code = ("import {} logging; logging.getLogger('fairseq.x').info('an info line'); "
            "logging.getLogger('fairseq.x').warning('a warning line'); "
            "print(logging.root.level, [type(h).__name__ for h in logging.root.handlers])")
    for env in ({}, {"LOGLEVEL": "WARNING"}):
        seen = [subprocess.run([sys.executable, "-c", code.format(first)], capture_output=True, text=True, cwd=REPO,
                               env={**os.environ, **env}, timeout=120) for first in ("", "fairseq_csan,")]
        assert all(done.returncode == 0 for done in seen), seen[1].stderr[-2000:]
        assert seen[0].stdout == seen[1].stdout == "30 []\n" and seen[0].stderr == seen[1].stderr == "a warning line\n"