"""Shared fixtures: tiny models built through fairseq's own argument parsing, and the corpora."""

import argparse
import contextlib
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # the suite's workers (pytest -n N, README: Tests) each take one core: one thread in each
    # worker and in every process a test starts, so no core runs two busy thread pools
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

import torch  # noqa: E402

import fairseq_csan  # noqa: F401  (registers the architectures)
from fairseq import options
from fairseq.data import Dictionary
from fairseq.tasks.translation import TranslationTask

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CSAN_SHARED_DATA", REPO.parent / "shared" / "data"))


# The files that take longest, longest first (their share of a full run on 2 cores, 2026-11-28:
# from about 450 s for test_install.py down to about 75 s for test_docs.py); the others follow
# in pytest's order. With `--dist loadfile --no-loadscope-reorder` (README: Tests) pytest-xdist
# hands out whole files in this order, so the short ones fill in at the end instead of one
# process running a long file alone while the other waits (its own order, by number of tests,
# would leave test_readme.py, six tests, one of them five minutes long, for last).
LONGEST_FIRST = ("test_install.py", "test_quickstart.py", "test_evaluate.py", "test_train.py", "test_readme.py",
                 "test_prepare_files.py", "test_gpu_check.py", "test_runner.py", "test_distributed.py",
                 "test_benchmark.py", "test_sweep.py", "test_docs.py")


def pytest_addoption(parser):
    """The README's test command on every supported Python: pytest-xdist 3.8 has
    `--no-loadscope-reorder`; the last release for Python 3.8 (3.6.1) has not, and its scheduler
    hands out files in the collection order anyway, which is what the flag asks for. There it is
    accepted and changes nothing (docs/environments.md)."""
    try:
        parser.addoption("--no-loadscope-reorder", action="store_true", dest="csan_loadscope_order",
                         help="(pytest-xdist < 3.8: files go out in the collection order already)")
    except (ValueError, argparse.ArgumentError):  # pytest-xdist >= 3.8 declares it, and its declaration holds
        pass


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order is kept


# the smallest dimensions at which every setting under test is legal (4 heads, 3 layers)
TINY = [
    "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
    "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
    "--encoder-layers", "3", "--decoder-layers", "2",
]


def make_dictionary(size: int = 50) -> Dictionary:
    d = Dictionary()
    for i in range(size):
        d.add_symbol(f"w{i}")
    return d


def parse_model_args(arch: str, extra=()):
    parser = options.get_training_parser()
    argv = ["/dev/null", "--task", "translation", "-s", "src", "-t", "tgt", "--arch", arch, *extra]
    return options.parse_args_and_arch(parser, argv)


def build_model(arch: str, extra=(), dictionary=None, seed: int = 0, weightless: bool = False):
    """Build ``arch`` as fairseq-train would, from command-line flags. ``weightless``: on torch's
    meta device, which gives every module and parameter its shape but no memory or initial values
    (torch >= 2.0; an older torch builds as usual): parameter counts at full size, in a tenth of
    the time."""
    args = parse_model_args(arch, extra)
    d = dictionary or make_dictionary()
    task = TranslationTask(args, d, d)
    torch.manual_seed(seed)
    meta = weightless and hasattr(torch.device, "__enter__")
    with torch.device("meta") if meta else contextlib.nullcontext():
        return task.build_model(args), args, task


def shared_corpus(name: str) -> Path:
    """A corpus folder under the shared data, or a skip that says why."""
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(
            f"shared corpus {name!r} not found at {path}; set CSAN_SHARED_DATA to the folder "
            "holding the shared corpora"
        )
    return path


def built_once(tmp_path_factory, name: str, build):
    """``build(folder)``, run once per test session however many processes run the tests: under
    pytest-xdist the first worker to ask builds ``folder`` while it holds a lock, and the others
    wait for it, then read the same folder. What ``build`` returns (JSON) is kept beside the
    folder, and every worker gets it. A build that failed (in another worker) is done again, and
    fails here too. The folder is read only: a test that changes files copies them first
    (``read_only`` checks it)."""
    import fcntl
    import json
    import shutil

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder: each worker's basetemp is one below it
    folder, record = base / f"shared-{name}", base / f"shared-{name}.json"
    with open(base / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if not record.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            made = json.dumps(build(folder))
            record.with_suffix(".tmp").write_text(made, encoding="utf-8")
            record.with_suffix(".tmp").rename(record)
    return folder, json.loads(record.read_text(encoding="utf-8"))


@contextlib.contextmanager
def read_only(root):
    """For the life of a shared fixture: at its end, every file under ``root`` must be as it
    was at its start (a writer's lock file, which a refused command may hold for a moment,
    aside)."""

    def files():
        return {k: v for k, v in snapshot(root).items() if not Path(k).name.endswith(".lock")}

    before = files()
    yield
    after = files()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"a test changed the shared fixture {root} (copy it first): {changed[:5]}"


@pytest.fixture(scope="session")
def ende(tmp_path_factory):
    """Multi30k pairs as the three WMT14 training corpora, newstest2013 as plain text and
    newstest2014 as the official SGM files, prepared, then two tiny systems trained: the En-De
    recipe, built once per session (``built_once``) and shared by the tests of each command it
    runs, which only read it. ``first`` is what the preparation printed."""
    from types import SimpleNamespace

    def build(work):
        from recipe_helpers import lay_out_wmt, prepare_task, train_tiny

        m30k, wmt = shared_corpus("multi30k_en_de"), shared_corpus("wmt14_en_de")
        raw = work / "raw"
        lay_out_wmt(raw, ("en", "de"), m30k / "train",
                    ["training/europarl-v7.de-en", "commoncrawl.de-en", "training/news-commentary-v9.de-en"],
                    wmt / "newstest2013", "newstest2013",
                    wmt / "newstest2014", "test-full/newstest2014-deen-src.en.sgm", "test-full/newstest2014-deen-ref.de.sgm")
        first = prepare_task("wmt14_en_de", raw, work / "prepared")
        train_tiny(work / "prepared", work / "ck_base", "transformer")
        train_tiny(work / "prepared", work / "ck_csan", "transformer_csan2d")
        return {"stderr": first.stderr}

    work, printed = built_once(tmp_path_factory, "ende", build)
    with read_only(work):
        yield {"work": work, "raw": work / "raw", "out": work / "prepared", "first": SimpleNamespace(**printed),
               "wmt": shared_corpus("wmt14_en_de")}


def snapshot(*roots):
    """Every file under ``roots``: its content hash and modification time."""
    import hashlib

    found = {}
    for root in roots:
        for path in sorted(Path(root).rglob("*")):
            if path.is_file():
                found[str(path)] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return found


@pytest.fixture(scope="session")
def tiny_task(tmp_path_factory):
    """A small prepared Multi30k task (1,000 pairs, 300 BPE merges, 32 test pairs) and a
    csan2d model trained on it for 4 updates, built once per session (``built_once``) for the
    tests that only read them (tests/test_translate.py, tests/test_export.py); at the end of the
    session it must be as built: a test that changes it fails here, and must take a copy instead."""
    from recipe_helpers import trained_task

    root, _ = built_once(tmp_path_factory, "tiny_task", lambda folder: [str(p) for p in trained_task(folder)])
    with read_only(root):
        yield {"task": root / "task", "checkpoint": root / "ck" / "checkpoint_last.pt"}


@pytest.fixture(scope="session")
def tree(ende, tmp_path_factory):
    """The user's files: a prepared task, a checkpoint folder, its evaluation, and an exported
    model folder (copies of the En-De recipe's, so nothing here touches that fixture), built once
    per session (``built_once``); the tests only read it."""

    def build(root):
        import shutil

        from recipe_helpers import recipe_main

        shutil.copytree(ende["out"], root / "task")
        shutil.copytree(ende["work"] / "ck_csan", root / "ck")
        # evaluate.sh's and export's mains, in this process (their doors: test_evaluate.py, test_export.py)
        recipe_main("evaluate", "--data", root / "task", "--checkpoints", root / "ck", "--out", root / "ev",
                    "--last", 2, "--cpu", check=True)
        recipe_main("export", "--data", root / "task", "--checkpoint", root / "ev/averaged.pt", "--out", root / "model",
                    check=True)

    root, _ = built_once(tmp_path_factory, "tree", build)
    with read_only(root):
        yield root


@pytest.fixture(scope="session")
def transformer_folder(ende, tmp_path_factory):
    """A model folder of fairseq's own Transformer, as a user would start from one: the En-De
    recipe's tiny transformer exported (export's main), with its task; built once per session
    (``built_once``) and only read (tests/test_convert.py)."""

    def build(root):
        from recipe_helpers import recipe_main

        recipe_main("export", "--data", ende["out"], "--checkpoint", ende["work"] / "ck_base/checkpoint_last.pt",
                    "--out", root / "model", check=True)

    root, _ = built_once(tmp_path_factory, "transformer_folder", build)
    with read_only(root):
        yield {"model": root / "model", "task": ende["out"]}


# ---------------------------------------------------------------- every architecture of the plugin

def plugin_archs():
    from fairseq.models import ARCH_MODEL_REGISTRY

    return sorted(a for a, m in ARCH_MODEL_REGISTRY.items() if m.__module__.startswith("fairseq_csan"))


ARCHS = plugin_archs()
BASE_ARCHS = [a for a in ARCHS if not a.endswith("_big")]


def small_window(arch):
    """CSAN windows shorter than the test sentences; other variants take no such flag."""
    return ["--csan-window", "3"] if "csan" in arch else []


# ---------------------------------------------------------------- data-parallel runs on the CPU
# (tests/test_distributed.py, and tests/test_gpu.py on a GPU): tiny fairseq-train runs that two
# launches must bring to the same parameters

VENV_BIN = Path(sys.executable).parent
TIMEOUT = 300  # seconds, for any one launch: nothing here may hang CI
TRAIN_TINY = ["--encoder-embed-dim", "64", "--encoder-ffn-embed-dim", "128", "--encoder-attention-heads", "4",
              "--encoder-layers", "3", "--decoder-embed-dim", "64", "--decoder-ffn-embed-dim", "128",
              "--decoder-attention-heads", "4", "--decoder-layers", "2"]
# fairseq-train's flags for those runs. Plain SGD, not Adam: Adam divides each gradient by its
# own running size, so a gradient that is zero in exact arithmetic but fp32 rounding noise in
# practice (the key projection's bias:
# the softmax is invariant to it) takes a full-size step of random sign, and two exact runs
# differ there by up to lr per update. Under SGD every parameter moves by lr x its gradient,
# and the rounding of a sum taken in another order stays at fp32 size. No dropout: each
# process draws its own masks. --max-tokens 256 gives about 8 batches per epoch.
TRAIN = ["--cpu", "--optimizer", "sgd", "--lr", "0.5", "--dropout", "0", "--max-tokens", "256",
         "--max-update", "4", "--save-interval-updates", "2", "--keep-interval-updates", "5",
         "--no-epoch-checkpoints", "--disable-validation", "--num-workers", "0", "--seed", "1",
         "--log-format", "simple", "--log-interval", "1"]
TOLERANCE = 1e-5  # max |difference| of any parameter after 4 updates (fp32 sums in another order)


def environment():
    # one thread per process: the machine has 2 cores and the tests run 2 processes at once
    return {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}


def launch(command, **kwargs):
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, env=environment(),
                          cwd=REPO, timeout=TIMEOUT, **kwargs)
    return done, done.stdout + done.stderr


def succeed(command):
    done, log = launch(command)
    assert done.returncode == 0, f"{command} failed ({done.returncode}):\n{log[-5000:]}"
    return log


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parameters(checkpoint: Path):
    return torch.load(checkpoint)["model"]


def largest_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    """200 random sentence pairs (3 to 14 words, the target reverses the source), binarised."""
    from recipe_helpers import write

    folder = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    for split, n in (("train", 200), ("valid", 16)):
        pairs = [[rng.choice(words) for _ in range(rng.randint(3, 14))] for _ in range(n)]
        write(folder / f"{split}.src", [" ".join(p) for p in pairs])
        write(folder / f"{split}.tgt", [" ".join(reversed(p)) for p in pairs])
    succeed(["fairseq-preprocess", "-s", "src", "-t", "tgt", "--trainpref", folder / "train",
             "--validpref", folder / "valid", "--destdir", folder / "bin", "--joined-dictionary", "--workers", "1"])
    return folder / "bin"
