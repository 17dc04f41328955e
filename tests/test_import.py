"""fairseq_csan/__init__.py: importing the plugin registers everything and changes nothing of
fairseq, torch or logging beyond what patches.py lists; the kit's commands start without
importing fairseq, and register only when they call fairseq_csan.register()."""

import subprocess
import sys

import pytest

import fairseq_csan
from conftest import REPO
from recipe_helpers import lines, write

REGISTERED = ("from fairseq.models import ARCH_MODEL_REGISTRY; from fairseq.data.encoders import TOKENIZER_REGISTRY; "
              "from fairseq import hub_utils, options; "
              "assert 'transformer_csan2d' in ARCH_MODEL_REGISTRY and 'transformer_ctxaware' in ARCH_MODEL_REGISTRY; "
              "assert 'csan_recipe' in TOKENIZER_REGISTRY; "
              "assert hasattr(hub_utils.from_pretrained, '__wrapped__'); "  # patches.py's changes are made
              "assert not hasattr(options.parse_args_and_arch, '__wrapped__'); print('registered')")


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
    done = python("import fairseq_csan; from fairseq_csan import record_gates, register; "
                  f"{REGISTERED}")
    assert done.returncode == 0 and done.stdout.strip() == "registered", done.stderr[-2000:]


# In a process that has imported fairseq (and the modules whose functions patches.py replaces,
# and fairseq's commands), what importing the plugin changes: every function, class or value of a
# fairseq or torch module (and of a fairseq class) that it rebinds, the loggers, sys.meta_path
# and the warning filters.
CHANGES = r"""
import json, logging, sys, warnings
import fairseq, fairseq.checkpoint_utils, fairseq.hub_utils, fairseq.options, fairseq.trainer
import fairseq.data.data_utils, fairseq.distributed.utils, fairseq.models.distributed_fairseq_model
import fairseq_cli.generate, fairseq_cli.interactive, fairseq_cli.train

def bindings():
    seen, modules = {}, {id(m): m for n, m in list(sys.modules.items()) if m is not None and n.split(".")[0] in
                         ("fairseq", "fairseq_cli", "torch")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecated names warn when read
        for module in modules.values():
            for name, value in list(vars(module).items()):
                seen[f"{module.__name__}:{name}"] = value
                defined_here = isinstance(value, type) and value.__module__ == module.__name__
                if defined_here and module.__name__.startswith("fairseq"):
                    seen.update({f"{module.__name__}:{name}.{k}": v for k, v in list(vars(value).items())})
    return seen

def loggers():
    return {name: (l.level, list(l.handlers), l.disabled) for name, l in
            [("", logging.root), *logging.root.manager.loggerDict.items()] if isinstance(l, logging.Logger)}

before, logs, finders, filters = bindings(), loggers(), list(sys.meta_path), list(warnings.filters)
import fairseq_csan
after, logs_after = bindings(), loggers()
print(json.dumps({
    "rebound": sorted(k for k in before if after.get(k) is not before[k]),
    "loggers": sorted(n for n in logs_after if logs_after[n] != logs.get(n, (logging.NOTSET, [], False))),
    "finders": sys.meta_path != finders,
    "filters": [f[1].pattern if f[1] else None for f in warnings.filters if f not in filters],
}))
"""


def test_importing_the_plugin_changes_only_what_patches_lists():
    import json

    from fairseq_csan import fairseq_compat, patches, quiet

    done = python(CHANGES)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    listed = {p.target for p in patches.AT_IMPORT}
    # torch keeps its allow-list (fix 1, which add_safe_globals extends) in this module
    allow_list = {k for k in seen["rebound"] if k.startswith("torch._weights_only_unpickler:")}
    assert not set(seen["rebound"]) - listed - allow_list
    assert not allow_list or fairseq_compat.APPLIED["1 checkpoints"]
    applied = {p.target for p in patches.AT_IMPORT if not p.fix or fairseq_compat.APPLIED[p.fix]}
    # (fix 8 rebinds nothing: it puts back what fairseq's import configured, where the plugin imported fairseq)
    assert applied - {"torch.serialization:add_safe_globals", "warnings:filters", "logging:root"} <= set(seen["rebound"])
    assert seen["loggers"] == [] and not seen["finders"]
    assert len(seen["filters"]) == len(quiet.HARMLESS) + len(quiet.HARMLESS_IN_MODULE)


def kit_commands():
    """``python -m fairseq_csan`` and every module of the recipe kit that runs as a command."""
    found = sorted(".".join(p.relative_to(REPO).with_suffix("").parts) for p in (REPO / "fairseq_csan/recipes").rglob("*.py")
                   if 'if __name__ == "__main__":' in p.read_text(encoding="utf-8"))
    return ["fairseq_csan", *found]


def imports_of(argv):
    """(the process, the modules it imported) of ``python -X importtime -m ARGV``."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    return done, {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("module", kit_commands())
def test_every_kit_command_answers_help_and_refuses_before_fairseq(module):
    """python -X importtime -m MODULE --help, and the same command with an option it does not
    know (a refusal), import neither fairseq nor torch: they answer at once."""
    assert fairseq_csan.is_kit_command(module)
    done, imported = imports_of([module, "--help"])
    assert done.returncode == 0 and "usage" in done.stdout.lower(), done.stderr[-2000:]
    assert "fairseq_csan" in imported and not imported & {"fairseq", "torch"}, module
    done, imported = imports_of([module, "--no-such-option"])
    assert done.returncode == 2 and "error" in done.stderr, done.stderr[-2000:]
    assert not imported & {"fairseq", "torch"}, module


LATER = ("import sys; sys.orig_argv = [sys.executable, '-m', 'fairseq_csan.recipes.prepare', 'files']; "
         "import fairseq_csan; assert 'fairseq' not in sys.modules, 'fairseq imported at once'; ")


NOTHING_OF_OURS = ("from fairseq.data.encoders import TOKENIZER_REGISTRY; from fairseq import hub_utils; "
                   "assert 'csan_recipe' not in TOKENIZER_REGISTRY; "
                   "assert not hasattr(hub_utils.from_pretrained, '__wrapped__'); "
                   "assert not any(type(f).__module__.startswith('fairseq_csan') for f in sys.meta_path); ")


@pytest.mark.parametrize("first", [
    "from fairseq.models.transformer import TransformerModel",  # fairseq first, as a script would
    "from fairseq_csan.modules import get_self_attention",  # a module of ours that imports fairseq midway
])
def test_such_a_command_registers_when_it_calls_register(first):
    """Such a process, started as python -m fairseq_csan.recipes.prepare (sys.orig_argv as it
    would be), that imports fairseq after all: fairseq is as it is without the plugin (no import
    hook registers behind its back) until the command calls fairseq_csan.register(), which
    registers everything, once."""
    done = python(f"{LATER}{first}; {NOTHING_OF_OURS}"
                  "fairseq_csan.register(); fairseq_csan.register(); from fairseq_csan import record_gates; "
                  f"assert not hasattr(hub_utils.from_pretrained.__wrapped__, '__wrapped__'); {REGISTERED}")
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
