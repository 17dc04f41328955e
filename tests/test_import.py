"""fairseq_csan/__init__.py: importing the plugin registers everything, and the kit's commands
that need no model in their own process start without importing fairseq, yet register
everything the moment fairseq is imported in them after all."""

import subprocess
import sys

import pytest

import fairseq_csan
from conftest import REPO
from recipe_helpers import lines, write

REGISTERED = ("from fairseq.models import ARCH_MODEL_REGISTRY; from fairseq.data.encoders import TOKENIZER_REGISTRY; "
              "from fairseq import options; "
              "assert 'transformer_csan2d' in ARCH_MODEL_REGISTRY and 'transformer_ctxaware' in ARCH_MODEL_REGISTRY; "
              "assert 'csan_recipe' in TOKENIZER_REGISTRY; "
              "assert getattr(options.parse_args_and_arch, 'help_lists_model_flags', False); print('registered')")


def python(code, *args, **kwargs):
    return subprocess.run([sys.executable, *args, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                          **kwargs)


@pytest.mark.parametrize("argv, module", [
    (["python", "-m", "fairseq_csan.recipes.prepare", "files"], "fairseq_csan.recipes.prepare"),
    (["python", "-u", "-X", "importtime", "-W", "default", "-m", "fairseq_csan.recipes.sweep"],
     "fairseq_csan.recipes.sweep"),
    (["python", "-mfairseq_csan.recipes.multi30k", "--out", "x"], "fairseq_csan.recipes.multi30k"),
    (["python", "script.py", "-m", "fairseq_csan.recipes.prepare"], ""),  # a script's own -m
    (["python", "-c", "pass", "-m", "fairseq_csan.recipes.prepare"], ""),
    (["/venv/bin/fairseq-train", "data-bin", "--user-dir", "fairseq_csan"], ""),
    (["python"], ""),
])
def test_the_module_python_was_started_with(argv, module):
    assert fairseq_csan._started_as(argv) == module


def test_importing_the_plugin_registers_everything():
    done = python("import fairseq_csan; from fairseq_csan import record_gates, help_lists_model_flags; "
                  f"{REGISTERED}")
    assert done.returncode == 0 and done.stdout.strip() == "registered", done.stderr[-2000:]


@pytest.mark.parametrize("module", fairseq_csan.WITHOUT_FAIRSEQ)
def test_the_kit_s_commands_that_need_no_model_start_without_fairseq(module):
    """python -X importtime -m MODULE --help lists no import of fairseq (or torch)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", module, "--help"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0 and "usage" in done.stdout, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "fairseq_csan" in imported and not imported & {"fairseq", "torch"}


LATER = ("import sys; sys.orig_argv = [sys.executable, '-m', 'fairseq_csan.recipes.prepare', 'files']; "
         "import fairseq_csan; assert 'fairseq' not in sys.modules, 'fairseq imported at once'; ")


@pytest.mark.parametrize("first", [
    "from fairseq.models.transformer import TransformerModel",  # fairseq first, as a script would
    "import fairseq_csan.models",  # our models first: they import fairseq before anything of ours
])
def test_fairseq_imported_later_in_such_a_command_registers_everything(first):
    """Such a process, started as python -m fairseq_csan.recipes.prepare (sys.orig_argv as it
    would be), that imports fairseq after all: everything is registered the moment it is."""
    done = python(f"{LATER}{first}; {REGISTERED}; from fairseq_csan import record_gates, help_lists_model_flags")
    assert done.returncode == 0 and done.stdout.strip() == "registered", done.stderr[-3000:]


def test_a_plugin_module_that_cannot_come_first_there_says_so():
    """fairseq_csan.modules imports fairseq midway, before the names our models take from it:
    in such a process the import fails naming the way out, not with a bare circular import
    (none of those commands imports it; this guards a future one)."""
    done = python(f"{LATER}from fairseq_csan.modules import get_self_attention")
    assert done.returncode != 0
    assert ("fairseq_csan: fairseq_csan.recipes.prepare starts without fairseq, and fairseq was first imported "
            "inside one of the plugin's modules") in done.stderr
    assert "import fairseq (or fairseq_csan's models) before it" in done.stderr
    done = python(f"{LATER}import fairseq; from fairseq_csan.modules import get_self_attention; {REGISTERED}")
    assert done.returncode == 0 and done.stdout.strip() == "registered", done.stderr[-3000:]


@pytest.mark.slow
def test_a_preparation_runs_without_fairseq_in_its_own_process(tmp_path):
    """toy_corpus and prepare, run to the end: neither process imports fairseq (its child
    fairseq-preprocess does), and the task is prepared."""
    probe = tmp_path / "probe"
    write(probe / "sitecustomize.py", [
        "import atexit, os, sys",
        "atexit.register(lambda: open(os.path.join(os.environ['PROBE_OUT'], str(os.getpid())), 'w').write(",
        "    ' '.join(sys.orig_argv[1:4]) + ' ' + str('fairseq' in sys.modules)))"])
    out = tmp_path / "seen"
    out.mkdir()
    env = {"PYTHONPATH": str(probe), "PROBE_OUT": str(out),
           "PATH": f"{sys.executable.rsplit('/', 1)[0]}:/usr/bin:/bin"}
    import os

    env = {**os.environ, **env}
    for command in (["-m", "fairseq_csan.recipes.toy_corpus", tmp_path / "raw", "--train", 300, "--valid", 20, "--test",
                     20],
                    ["-m", "fairseq_csan.recipes.prepare", "toy_en_de", "--raw-dir", tmp_path / "raw", "--out",
                     tmp_path / "data", "--merges", 50, "--no-download"]):
        done = subprocess.run([sys.executable, *map(str, command)], capture_output=True, text=True, cwd=tmp_path,
                              env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "data/data-bin/dict.en.txt").is_file() and len(lines(tmp_path / "data/raw/test.en")) == 20
    seen = [p.read_text() for p in out.iterdir()]
    ours = [s for s in seen if s.startswith("-m fairseq_csan.recipes.")]
    assert len(ours) == 2 and all(s.endswith(" False") for s in ours), seen
    assert any("fairseq-preprocess" in s or s.endswith(" True") for s in seen if s not in ours), seen
