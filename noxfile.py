"""The supported environments, one nox session each (docs/environments.md has the table and results).

Each session builds the environment as a user has it (their torch and fairseq first), installs
this package the documented way (scripts/install.sh, which keeps what it finds), runs the fast
tests and a tiny train + generate on the toy corpus. nox is not a dependency of the package:

    pip install nox
    nox -l                                   # the sessions
    nox -s "py3.8-torch1.13.1-fairseq0.12.2" # one of them; arguments after -- go to pytest
    FAIRSEQ_SRC=~/src/fairseq nox -s fairseq-main   # fairseq GitHub main from a local clone

Sessions download torch (up to about 2.5 GB with its CUDA libraries); pip's cache is shared.
"""

import os
from pathlib import Path

import nox

nox.options.error_on_missing_interpreters = True
# the standard library's venv, as the README makes one (virtualenv no longer seeds Python 3.8)
nox.options.default_venv_backend = "venv"

# pyenv's Pythons, found by version (python3.8, ...) without pyenv's shims on PATH
_pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
if _pyenv.is_dir():
    _bins = [str(p / "bin") for p in sorted(_pyenv.glob("3.*")) if (p / "bin").is_dir()]
    os.environ["PATH"] = os.pathsep.join([os.environ.get("PATH", ""), *_bins])

TOY = {"train": "2000", "valid": "100", "test": "50"}


def _install_and_check(session, *user_packages, pip_check=True):
    """The user's packages first, then scripts/install.sh, the fast tests and a tiny train + generate.

    install.sh fails on any problem pip check did not list before it ran; an environment of the
    user's must moreover be left with none at all (pip_check). The README's path is not: it
    leaves out fairseq-fixed's torchaudio on purpose (docs/troubleshooting.md).
    """
    if user_packages:
        session.install(*user_packages)
    session.run("bash", "scripts/install.sh", external=True)
    if pip_check:
        session.run("python", "-m", "pip", "check")
    session.run("python", "-m", "pytest", "tests", "-m", "not slow", "-q", "-p", "no:cacheprovider",
                *session.posargs)
    _tiny_train_generate(session)


def _tiny_train_generate(session):
    work = Path(session.create_tmp()) / "tiny"
    raw, data, ckpt = work / "raw", work / "data-bin", work / "checkpoints"
    session.run("rm", "-rf", str(work), external=True)
    session.run("python", "-m", "fairseq_csan.recipes.toy_corpus", str(raw),
                *[f"--{k}={v}" for k, v in TOY.items()])
    session.run("fairseq-preprocess", "--source-lang", "en", "--target-lang", "de", "--joined-dictionary",
                "--trainpref", str(raw / "train"), "--validpref", str(raw / "val"), "--testpref", str(raw / "test"),
                "--destdir", str(data), "--workers", "1", silent=True)
    session.run("bash", "scripts/train.sh", "--data", str(data), "--arch", "transformer_csan2d",
                "--save-dir", str(ckpt), "--cpu-tiny", external=True)
    out = session.run("fairseq-generate", str(data), "--user-dir", "fairseq_csan",
                      "--path", str(ckpt / "checkpoint_last.pt"), "--cpu", "--gen-subset", "test",
                      "--beam", "2", "--batch-size", "16", silent=True)
    hypotheses = [line for line in out.splitlines() if line.startswith("H-")]
    if len(hypotheses) != int(TOY["test"]):
        session.error(f"fairseq-generate wrote {len(hypotheses)} translations for {TOY['test']} test sentences")
    session.log(f"tiny train + generate: {len(hypotheses)} translations, e.g. {hypotheses[0]!r}")


@nox.session(python="3.8", name="py3.8-torch1.13.1-fairseq0.12.2")
def py38_fairseq0122(session):
    """fairseq 0.12.2 from PyPI (its Python 3.8 wheel) with torch 1.13.1 and torchaudio 0.13.1."""
    _install_and_check(session, "torch==1.13.1", "torchaudio==0.13.1", "fairseq==0.12.2")


@nox.session(python="3.10", name="py3.10-torch2.4.1-fairseq0.12.2")
def py310_fairseq0122(session):
    """fairseq 0.12.2 from PyPI with torch 2.4.1 and torchaudio 2.4.1."""
    _install_and_check(session, "torch==2.4.1", "torchaudio==2.4.1", "fairseq==0.12.2")


@nox.session(python=["3.11", "3.12", "3.13"], name="readme")
def readme(session):
    """The README's path in a fresh venv: install.sh installs torch 2.13.0 and fairseq-fixed 0.12.3.1
    (the default environment on 3.11; 3.13 builds fairseq-fixed from source, about 9 minutes)."""
    _install_and_check(session, pip_check=False)


@nox.session(python="3.10", name="fairseq-main")
def fairseq_main(session):
    """fairseq GitHub main, built from the local clone in FAIRSEQ_SRC, with torch 2.4.1."""
    src = os.environ.get("FAIRSEQ_SRC", "")
    if not src:
        session.skip("FAIRSEQ_SRC is not set: give it a local clone of https://github.com/facebookresearch/fairseq")
    if not (Path(src) / "setup.py").is_file():
        session.error(f"FAIRSEQ_SRC={src} holds no setup.py: give it a clone of fairseq's repository")
    session.install("torch==2.4.1", "torchaudio==2.4.1", "numpy<2", "cython", "setuptools", "wheel")
    # as fairseq's README installs it: editable, built against the torch above (without build
    # isolation its build needs setuptools and wheel here)
    session.install("--no-build-isolation", "-e", src)
    _install_and_check(session)
