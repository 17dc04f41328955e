"""scripts/install.sh in an environment a user already has: fairseq 0.12.2 with an older torch and
fairseq's own pins (hydra-core 1.0.7, omegaconf 2.0.6) and torchaudio beside it.

Offline and in seconds: every distribution is a stub wheel built here (metadata and an empty
module), pip reads only a local folder (--no-index --find-links) that also offers the newer
torch, hydra-core, omegaconf and numpy that an unconstrained install would take, and the venv
does not see the system's packages. The stubs cannot be imported as torch or fairseq, so the
real run skips only the final import check (IMPORT_CHECK=0); the pin and pip checks still run.
"""

import base64
import hashlib
import json
import importlib.metadata as md
import os
import re
import shutil
import statistics
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import shared_corpus
from recipe_helpers import lines, write

REPO = Path(__file__).resolve().parents[1]

# the user's environment: fairseq 0.12.2's declared requirements, torchaudio pinned to its torch
USER = {
    "torch": ("1.13.1", []),
    "torchaudio": ("0.13.1", ["torch==1.13.1"]),
    "numpy": ("1.24.4", []),
    "omegaconf": ("2.0.6", []),
    "hydra-core": ("1.0.7", ["omegaconf<2.1,>=2.0.5"]),
    "fairseq": ("0.12.2", ["cffi", "cython", "hydra-core<1.1,>=1.0.7", "omegaconf<2.1", "regex",
                           "sacrebleu>=1.4.12", "torch", "tqdm", "bitarray", "torchaudio>=0.8.0", "numpy"]),
}
# what pip would take if nothing held it back
NEWER = {"torch": "2.13.0", "torchaudio": "2.13.0", "numpy": "2.4.6", "omegaconf": "2.3.0", "hydra-core": "1.3.2",
         "fairseq": "0.12.3"}
# what a CUDA image with torch typically has beside it (the node of the offline install)
NODE = ("numpy", "scipy", "scikit-learn", "sacrebleu", "tensorboard", "matplotlib", "pytest", "tqdm", "regex",
        "PyYAML", "cffi", "Cython")
MODULES = {"hydra-core": "hydra", "scikit-learn": "sklearn", "unidic-lite": "unidic_lite", "subword-nmt": "subword_nmt"}


def wheel(folder: Path, name: str, version: str, requires=(), files=None):
    """A minimal valid wheel: METADATA, WHEEL, RECORD and the given files (default: an empty module)."""
    stem = re.sub(r"[-.]+", "_", name)
    info = f"{stem}-{version}.dist-info"
    files = dict(files if files is not None else {f"{MODULES.get(name, stem)}/__init__.py": ""})
    files[f"{info}/METADATA"] = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                                         *(f"Requires-Dist: {r}\n" for r in requires)])
    files[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: test_install\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, text in files.items():
        data = text if isinstance(text, bytes) else text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(folder / f"{stem}-{version}-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)


def repack_installed(folder: Path, name: str):
    """A wheel of a pure-Python distribution installed here (the build backend, setuptools)."""
    dist = md.distribution(name)
    files = {}
    for f in dist.files or []:
        path = str(f)
        if path.startswith("..") or "__pycache__" in path or re.search(r"\.dist-info/(METADATA|WHEEL|RECORD)$", path):
            continue  # wheel() writes those three
        files[path] = Path(dist.locate_file(f)).read_bytes()
    wheel(folder, dist.metadata["Name"], dist.version, files=files)


EXTRAS = ("recipes", "zh", "ja", "analysis", "logging", "gpu-check", "test")  # every extra of setup.py


def plugin_requirements(extras):
    """setup.py's install_requires and the named extras, as setup.py says them today."""
    import setuptools  # noqa: F401  (provides distutils on Python >= 3.12)
    from distutils.core import run_setup

    here = os.getcwd()
    os.chdir(REPO)
    try:
        dist = run_setup("setup.py", stop_after="init")
    finally:
        os.chdir(here)
    reqs = list(dist.install_requires)
    assert set(dist.extras_require) == set(EXTRAS)  # a new extra is looked up below too
    for extra in extras:
        reqs += dist.extras_require[extra]
    return reqs


def satisfying_version(spec: str) -> str:
    from packaging.requirements import Requirement

    req = Requirement(spec)
    mentioned = [s.version for s in req.specifier] + ["1.0", "99.0"]
    for candidate in sorted(mentioned, key=lambda v: tuple(int(x) for x in re.findall(r"\d+", v)), reverse=True):
        if req.specifier.contains(candidate, prereleases=True):
            return candidate
    raise AssertionError(f"no stub version satisfies {spec}")


@pytest.fixture(scope="module")
def user_env(tmp_path_factory):
    setuptools_version = tuple(int(x) for x in md.version("setuptools").split(".")[:2])
    if setuptools_version < (70, 1):
        pytest.skip("needs setuptools >= 70.1 here (bdist_wheel built in) to serve as the offline build backend")
    root = tmp_path_factory.mktemp("install")
    links = root / "links"
    links.mkdir()
    for name, (version, requires) in USER.items():
        wheel(links, name, version, requires)
        wheel(links, name, NEWER[name])
    from packaging.requirements import Requirement

    for spec in plugin_requirements(["test", "logging"]):
        name = Requirement(spec).name
        if name not in USER:
            wheel(links, name, satisfying_version(spec))
    for name in ("cffi", "cython", "regex", "tqdm", "bitarray", "sacrebleu"):  # fairseq's own
        if not list(links.glob(f"{name}-*")):
            wheel(links, name, "2.0")
    repack_installed(links, "setuptools")
    # pip 23 adds `wheel` to the build requirements of a project without pyproject.toml: the copy
    # that setuptools vendors
    vendored = Path(md.distribution("setuptools").locate_file("setuptools/_vendor"))
    (info,) = vendored.glob("wheel-*.dist-info")
    wheel(links, "wheel", info.name[len("wheel-"):-len(".dist-info")],
          files={str(f.relative_to(vendored)): f.read_bytes() for f in (vendored / "wheel").rglob("*.py")})

    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV", "CONDA"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv), PIP_CONFIG_FILE=os.devnull,
               PIP_NO_INDEX="1", PIP_FIND_LINKS=str(links), PIP_DISABLE_PIP_VERSION_CHECK="1", IMPORT_CHECK="0")
    pins = [f"{name}=={version}" for name, (version, _) in USER.items()]
    subprocess.run(["python", "-m", "pip", "install", "-q", *pins], check=True, env=env, timeout=300)
    return venv, env


def freeze(env):
    out = subprocess.run(["python", "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                         env=env, check=True).stdout
    pairs = (line.split("==", 1) for line in out.splitlines() if "==" in line)
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in pairs}


def install(env, *args, **settings):
    return subprocess.run(["bash", str(REPO / "scripts" / "install.sh"), *args], capture_output=True, text=True,
                          env={**env, **settings}, timeout=600)


def test_existing_environment_is_kept(user_env):
    venv, env = user_env
    before = freeze(env)
    assert {k: before[k] for k in USER} == {k: v for k, (v, _) in USER.items()}
    constraints = venv / "fairseq_csan-constraints.txt"

    dry = install(env, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "torch 1.13.1 is installed: kept" in dry.stdout
    assert "fairseq is installed (fairseq==0.12.2): kept" in dry.stdout
    for name, (version, _) in USER.items():
        assert f"\n{name}=={version}\n" in dry.stdout  # the constraints it would write
    planned = [line for line in dry.stdout.splitlines() if line.startswith("python ")]
    pip_installs = [line for line in planned if " -m pip install " in line]
    assert len(pip_installs) == 1 and " -c " in pip_installs[0]  # no torch, no fairseq: the plugin alone
    assert freeze(env) == before and not constraints.exists()  # a dry run changes nothing

    done = install(env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = [line.split("[install] run: ", 1)[1] for line in done.stdout.splitlines() if "[install] run: " in line]
    assert ran == planned[:len(ran)] and len(ran) == len(planned)  # the dry run printed what the run did
    after = freeze(env)
    assert {k: after[k] for k in USER} == {k: before[k] for k in USER}  # torch, fairseq and their pins kept
    assert {k: v for k, v in after.items() if k in before} == before  # nothing installed before changed
    assert {"fairseq-csan", "sacrebleu", "subword-nmt", "sacremoses", "pytest", "tensorboard"} <= set(after)
    assert constraints.read_text().split() == [f"{k}=={v}" for k, v in
                                               [("torch", "1.13.1"), ("torchaudio", "0.13.1"), ("numpy", "1.24.4"),
                                                ("fairseq", "0.12.2"), ("hydra-core", "1.0.7"), ("omegaconf", "2.0.6")]]
    check = subprocess.run(["python", "-m", "pip", "check"], capture_output=True, text=True, env=env)
    assert check.returncode == 0, check.stdout


def test_bad_settings_fail_before_any_change(user_env):
    venv, env = user_env
    before = freeze(env)
    other = install(env, FAIRSEQ_SPEC="fairseq-fixed==0.12.3.1")
    assert other.returncode == 1 and "FAIRSEQ_SPEC=fairseq-fixed==0.12.3.1, but a fairseq is installed" in other.stderr
    bad = install(env, IMPORT_CHECK="yes")
    assert bad.returncode == 2 and "IMPORT_CHECK must be 0 or 1" in bad.stderr
    assert freeze(env) == before


def test_fresh_environment_plan(tmp_path):
    """In a venv without torch or fairseq: torch, numpy and cython, fairseq-fixed, then the plugin (README's path)."""
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CONDA", "TORCH_",
                                                                     "FAIRSEQ_"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv))
    dry = install(env, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    pip = [line.replace("\\", "") for line in dry.stdout.splitlines() if " -m pip install " in line]
    assert pip[0] == "python -m pip install torch==2.13.0"
    assert pip[1].endswith(" numpy cython")
    assert pip[2] == "python -m pip install --no-build-isolation --no-deps fairseq-fixed==0.12.3.1"
    assert pip[3].endswith(f"-e {REPO}[test,logging]") and len(pip) == 4
    assert "torch==2.13.0\nfairseq-fixed==0.12.3.1\nEOF" in dry.stdout


def site_packages(venv: Path) -> Path:
    """The folder of ``venv``'s pure-Python packages."""
    return Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())


def _bare_venv(tmp_path, **dists):
    """A venv without pip holding only metadata of the given distributions (enough for --dry-run)."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = site_packages(venv)
    for name, version in dists.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CONDA", "TORCH_",
                                                                     "FAIRSEQ_"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv))
    return env


def test_torch_kept_and_fairseq_built_against_it(tmp_path):
    env = _bare_venv(tmp_path, torch="2.4.1+cpu", numpy="1.26.4")
    dry = install(env, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    pip = [line.replace("\\", "") for line in dry.stdout.splitlines() if " -m pip install " in line]
    assert not any("torch==" in line for line in pip)  # torch kept
    assert pip[1] == "python -m pip install --no-build-isolation --no-deps fairseq-fixed==0.12.3.1"
    assert "torch==2.4.1+cpu\nnumpy==1.26.4\nfairseq-fixed==0.12.3.1\nEOF" in dry.stdout
    replaced = install(env, "--dry-run", TORCH_SPEC="torch==2.13.0")  # asked for: replaces it
    assert "python -m pip install torch==2.13.0" in replaced.stdout and "replaces torch 2.4.1+cpu" in replaced.stdout


def test_torch_older_than_supported_stops(tmp_path):
    env = _bare_venv(tmp_path, torch="1.12.1")
    dry = install(env, "--dry-run")
    assert dry.returncode == 1 and "torch 1.12.1 is older than the supported 1.13; set TORCH_SPEC" in dry.stderr
    assert " -m pip " not in dry.stdout


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


def _offline_env(venv: Path, home: Path):
    """A machine without network: only the venv's tools, no pip configuration, every index and
    proxy an address where nothing answers (pip fails at once if it tries one)."""
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(home), "VIRTUAL_ENV": str(venv),
           "LANG": "C.UTF-8", "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
           "PIP_RETRIES": "0", "PIP_TIMEOUT": "5", "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}
    if "CSAN_SHARED_DATA" in os.environ:
        env["CSAN_SHARED_DATA"] = os.environ["CSAN_SHARED_DATA"]
    return env


def install_as_here(venv: Path, name: str):
    """Distribution ``name`` and those it requires, as this environment has them installed, into
    ``venv``, as pip would leave them (a version the venv has already, its setuptools, replaced):
    the installed files, compiled bytecode included, hard-linked (copied across file systems).
    A second or two where pip takes about a minute to unpack and compile torch again; a copy
    uncompiled would be compiled again by every process that imports it where
    PYTHONDONTWRITEBYTECODE is set, as on CI. Console scripts (torchrun) are left out."""
    import shutil

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    site = site_packages(venv)
    present = {canonicalize_name(d.metadata["Name"]): d for d in md.distributions(path=[str(site)])}
    todo, done = [name], set()
    while todo:
        dist = md.distribution(todo.pop())
        key = canonicalize_name(dist.metadata["Name"])
        if key in done:
            continue
        done.add(key)
        if key in present:  # replaced, as pip replaces it: its files, its .dist-info folder, and
            # the folders that held only its files (an empty pkg_resources/ left by the venv's own
            # setuptools would import as a namespace package, without setuptools' functions)
            installed = [Path(present[key].locate_file(f)) for f in present[key].files or []]
            for path in installed:
                path.unlink(missing_ok=True)
            for metadata in (path for path in installed if path.name == "METADATA"):
                shutil.rmtree(metadata.parent, ignore_errors=True)
            for folder in sorted({p for path in installed for p in path.parents if site in p.parents},
                                 key=lambda p: len(p.parts), reverse=True):
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
        for f in dist.files or []:
            source, target = Path(dist.locate_file(f)), site / f
            if str(f).startswith("..") or not source.is_file():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
        for spec in dist.requires or []:
            requirement = Requirement(spec)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """--make-wheelhouse on this (connected) machine (twice, and into a user's folder), then
    --wheelhouse into a fresh venv that has torch alone, with every package index unreachable;
    what each command said, for the tests below to check."""
    tmp_path = tmp_path_factory.mktemp("offline")
    # the machine without network: a fresh venv with torch and what a CUDA image has beside it
    # (NODE), whose `pip list --format=freeze` the wheelhouse is made for
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    for name in ("torch", *NODE):
        install_as_here(venv, name)
    freeze = tmp_path / "node-freeze.txt"
    freeze.write_text(subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                                     capture_output=True, text=True, check=True, timeout=120).stdout)
    house = tmp_path / "wheel house"  # a blank in the path: pip splits PIP_FIND_LINKS at blanks
    made = {"freeze": freeze}
    make = ["bash", str(REPO / "scripts" / "install.sh"), "--make-wheelhouse", str(house), "--node-freeze", str(freeze)]
    made["make"] = subprocess.run(make, capture_output=True, text=True, cwd=tmp_path, timeout=900,
                                  env={**os.environ, "PYTHON": sys.executable})
    if made["make"].returncode != 0:
        return dict(made, house=house)
    made["again"] = subprocess.run(make, capture_output=True, text=True, timeout=300,
                                   env={**os.environ, "PYTHON": sys.executable})
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("a user's file\n")
    made["busy"] = busy
    made["refused"] = subprocess.run(["bash", str(REPO / "scripts" / "install.sh"), "--make-wheelhouse", str(busy)],
                                     capture_output=True, text=True, timeout=120,
                                     env={**os.environ, "PYTHON": sys.executable})

    # and a copy of the checkout
    checkout = tmp_path / "checkout"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        if (REPO / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            (checkout / name).write_bytes((REPO / name).read_bytes())
    env = _offline_env(venv, tmp_path / "home")
    made["dry"] = subprocess.run(["bash", "scripts/install.sh", "--wheelhouse", str(house), "--dry-run"], cwd=checkout,
                                 capture_output=True, text=True, env=env, timeout=120)
    made["done"] = subprocess.run(["bash", "scripts/install.sh", "--wheelhouse", str(house)], cwd=checkout,
                                  capture_output=True, text=True, env=env, timeout=900)
    return dict(made, house=house, venv=venv, env=env, checkout=checkout, tmp=tmp_path)


@pytest.mark.slow
def test_an_offline_install_from_a_wheelhouse(offline):
    """The wheelhouse is made for a node with torch and the packages of a CUDA image (NODE):
    what gpu_check.sh needs and the node lacks, under 60 MiB (a rerun is a no-op, a user's
    folder is refused); it installs into the node's venv without network and keeps the node's
    packages: the plugin imports, and its fast tests of the models, the Moses tokeniser and the
    scores pass there; what cannot be installed offline is named."""
    make, house = offline["make"], offline["house"]
    assert make.returncode == 0, make.stdout[-3000:] + make.stderr[-3000:]
    manifest = json.loads((house / "fairseq_csan-wheelhouse.json").read_text())
    here = "%d.%d" % sys.version_info[:2]
    assert manifest["python"] == here and manifest["torch"] is None and manifest["extras"] == "gpu-check"
    assert not list(house.glob("torch-*")) and list(house.glob("fairseq_fixed-0.12.3.1-*.whl"))
    assert sorted(p.name for p in house.iterdir()) == sorted([*manifest["files"], "fairseq_csan-wheelhouse.json"])
    # what the node has is left out, the Chinese and Japanese tokenisers are not asked for
    carried = {p.name.split("-")[0].lower() for p in house.glob("*.whl")}
    assert not carried & {"numpy", "scipy", "scikit_learn", "sacrebleu", "tensorboard", "matplotlib", "pytest",
                          "tqdm", "regex", "pyyaml", "cffi", "cython", "jieba", "unidic_lite", "ipadic"}, carried
    assert {"sacremoses", "hydra_core", "omegaconf", "setuptools"} <= carried
    assert {"numpy", "scipy", "matplotlib"} <= {r.split("==")[0] for r in manifest["left_out_node_has"]}
    size = sum(f["bytes"] for f in manifest["files"].values())
    assert size < 60 * 2**20, f"{size / 2**20:.1f} MiB"
    again = offline["again"]
    assert again.returncode == 0 and "is already this wheelhouse" in again.stdout  # a rerun is a no-op
    refused = offline["refused"]
    assert refused.returncode == 1 and "exists and is not empty" in refused.stderr
    assert [p.name for p in offline["busy"].iterdir()] == ["keep.txt"]

    dry, env, checkout = offline["dry"], offline["env"], offline["checkout"]
    assert dry.returncode == 0, dry.stderr
    planned = [line for line in dry.stdout.splitlines() if line.startswith(("export ", "python "))]
    assert planned[0] == f"export PIP_NO_INDEX=1 PIP_FIND_LINKS={house.as_uri()}"  # before any pip command
    assert "torch 2" in dry.stdout and "is installed: kept" in dry.stdout
    assert "python -m pip install --no-build-isolation --no-deps fairseq-fixed==0.12.3.1" in planned
    done = offline["done"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "offline: every package from the wheelhouse" in done.stdout and "[install] ok: torch" in done.stdout
    after = subprocess.run(["python", "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                           env=env, check=True, timeout=120).stdout.splitlines()
    assert set(offline["freeze"].read_text().splitlines()) <= set(after)  # the node's packages are kept
    # (the tests of jieba and MeCab need the zh and ja extras, which this wheelhouse leaves out)
    tests = subprocess.run(["python", "-m", "pytest", "tests/test_models.py", "tests/test_text.py",
                            "tests/test_score.py", "-m", "not slow", "-q", "-p", "no:cacheprovider", "-k",
                            "not test_tokenizers and not segmented and not by_its_own_rules and not tokenises_as_the_target"],
                           cwd=checkout, capture_output=True, text=True, env=env, timeout=900)
    assert tests.returncode == 0 and " passed" in tests.stdout, tests.stdout[-3000:] + tests.stderr[-3000:]

    # what cannot be installed offline is named before anything changes
    tmp_path = offline["tmp"]
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    no_torch = subprocess.run(["bash", "scripts/install.sh", "--wheelhouse", str(house), "--dry-run"],
                              cwd=checkout, capture_output=True, text=True, env=_offline_env(bare, tmp_path / "home"),
                              timeout=120)
    assert no_torch.returncode == 1
    assert "no torch is installed, and the wheelhouse holds none" in no_torch.stderr
    damaged_house = tmp_path / "damaged house"
    damaged_house.mkdir()
    for wheel in house.iterdir():
        (damaged_house / wheel.name).symlink_to(wheel)
    sorted(damaged_house.glob("sacremoses-*"))[0].unlink()
    damaged = subprocess.run(["bash", "scripts/install.sh", "--wheelhouse", str(damaged_house)], cwd=checkout,
                             capture_output=True, text=True, env=env, timeout=120)
    assert damaged.returncode == 1 and "missing or changed since it was made: sacremoses-" in damaged.stderr


@pytest.mark.slow
def test_the_project_as_a_wheel_runs_its_pipelines_from_an_empty_folder(offline):
    """pip install of the project's wheel (not editable; the clone it was built from removed), then,
    in an empty folder, the toy pipeline (corpus, prepare, train, evaluate, translate) and the
    Multi30k reproduction at a tiny size, each as python -m: the recipes call each other as
    modules of the package, never files of a checkout."""
    done = offline.get("done")
    assert offline["make"].returncode == 0 and done is not None and done.returncode == 0, "the offline install failed"
    env, tmp_path = offline["env"], offline["tmp"]
    python = str(offline["venv"] / "bin" / "python")

    def ok(command, cwd, timeout=600):
        done = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True, env=env,
                              timeout=timeout)
        assert done.returncode == 0, f"{command}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done

    import shutil

    clone = tmp_path / "clone for the wheel"  # a copy: the other test's checkout stays as it is
    shutil.copytree(offline["checkout"], clone)
    dist = tmp_path / "dist"
    ok([python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", dist, clone], tmp_path)
    (wheel,) = dist.glob("fairseq_csan-*.whl")
    ok([python, "-m", "pip", "install", "--no-deps", "--no-index", "--force-reinstall", wheel], tmp_path)
    shutil.rmtree(clone)  # no clone left where the wheel was made
    empty = tmp_path / "empty"
    empty.mkdir()
    where = ok([python, "-c", "import fairseq_csan; print(fairseq_csan.__file__)"], empty).stdout.strip()
    assert where.startswith(str(offline["venv"])) and "site-packages" in where

    ok([python, "-m", "fairseq_csan.recipes.toy_corpus", "raw", "--train", "400", "--valid", "20", "--test", "20"], empty)
    ok([python, "-m", "fairseq_csan.recipes.prepare", "toy_en_de", "--raw-dir", "raw", "--out", "data", "--merges",
        "200", "--no-download"], empty)
    ok([python, "-m", "fairseq_csan.recipes.train", "--data", "data", "--arch", "transformer_csan2d", "--save-dir",
        "checkpoints", "--cpu-tiny", "--max-update", "4"], empty)
    ok([python, "-m", "fairseq_csan.recipes.evaluate", "--data", "data", "--checkpoints", "checkpoints", "--out",
        "results", "--cpu", "--last", "2"], empty)
    assert "BLEU" in (empty / "results" / "results.md").read_text()
    (empty / "mine.en").write_text("a small cat .\n")
    ok([python, "-m", "fairseq_csan.recipes.translate", "--data", "data", "--checkpoint", "checkpoints/checkpoint_last.pt",
        "--input", "mine.en", "--output", "mine.de", "--cpu"], empty)
    assert len((empty / "mine.de").read_text().splitlines()) == 1

    # the Multi30k reproduction at a tiny budget on a slice: two systems, two seeds, one sweep point;
    # its table against each run's evaluation, every plot; a rerun keeps every run; another budget
    # or model in the same folder is refused
    m30k = shared_corpus("multi30k_en_de")
    raw = empty / "m30k_raw"
    for name, n in (("train", 1200), ("val", 40), ("test_2016_flickr", 40)):
        for lang in ("en", "de"):
            write(raw / f"{name}.{lang}", lines(m30k / f"{name}.{lang}")[:n])
    out = empty / "m30k"
    command = [python, "-m", "fairseq_csan.recipes.multi30k", "--raw-dir", "m30k_raw", "--out", "m30k", "--merges", 300,
               "--seeds", "1,2", "--systems", "transformer,ctxaware", "--max-update", 8, "--windows", 3, "--heads", "",
               "--bootstrap-samples", 100]
    done = ok(command, empty, timeout=900)

    records = {r["system"]: r for r in json.loads((out / "results.json").read_text())["records"]}
    assert set(records) == {"transformer", "ctxaware"}
    for system, record in records.items():
        per_run = [json.loads((out / "runs" / system / f"seed{s}" / "eval" / "results.json").read_text())
                   for s in (1, 2)]
        assert record["sacrebleu"] == [r["sacrebleu"] for r in per_run]
        assert record["mean"] == pytest.approx(statistics.fmean(record["sacrebleu"]))
        assert record["sd"] == pytest.approx(statistics.stdev(record["sacrebleu"]))
        assert all(r["sentences"] == 40 for r in per_run)
    test = records["ctxaware"]["bootstrap"]
    assert test["delta"] == pytest.approx(records["ctxaware"]["mean"] - records["transformer"]["mean"])
    assert 0 < test["p_value"] <= 1 and len(records["ctxaware"]["bootstrap_per_seed"]) == 2
    table = (out / "results.md").read_text()
    assert "| ctxaware | transformer_ctxaware |" in table and "test_2016_flickr" in table
    for name in ("results.png", "results.csv", "analysis/ngram_gap.csv", "analysis/ngram_gap.png",
                 "analysis/length_buckets.csv", "analysis/length_buckets.png", "analysis/gate_weights.csv",
                 "analysis/gate_weights.png", "analysis/window_sweep.csv", "analysis/window_sweep.png"):
        assert (out / name).is_file(), name
    # n-gram gap of the pooled seeds: 2 x 40 lines of each system against the reference twice
    assert len(lines(out / "analysis" / "pooled" / "ref.tok")) == 80
    assert len(lines(out / "analysis" / "pooled" / "ctxaware.tok")) == 80
    sweep = lines(out / "analysis" / "window_sweep.csv")
    assert len(sweep) == 2 and sweep[1].startswith("window,3,")
    assert (out / "sweep" / "csan1d_window3" / "eval" / "results.json").is_file()
    assert "5/5 " in done.stderr and "6/5" not in done.stderr
    assert "1 run(s) at a time" in table or "2 run(s) at a time" in table

    checkpoint = out / "runs" / "ctxaware" / "seed1" / "checkpoints" / "checkpoint_last.pt"
    before = checkpoint.stat().st_mtime
    again = ok(command, empty, timeout=900)
    assert checkpoint.stat().st_mtime == before
    assert again.stderr.count("finished before; kept") == 5
    for changed in ([*command[:-2], "--max-update", 16], [*command, "--model", "small"]):
        refused = subprocess.run([str(c) for c in changed], cwd=empty, capture_output=True, text=True, env=env,
                                 timeout=300)
        assert refused.returncode != 0 and "other settings" in refused.stderr, refused.stderr[-2000:]
    # the test set edited: prepared again, and the kept runs evaluated again on it (their training
    # kept); the sweep point, scored on the dev set, is kept
    decoded = sorted(out.glob("runs/*/seed*/eval/generate.txt"))
    stamps = {path: path.stat().st_mtime_ns for path in decoded}
    write(raw / "test_2016_flickr.de", lines(m30k / "test_2016_flickr.de")[1:41])
    rescored = ok(command, empty, timeout=900)
    assert checkpoint.stat().st_mtime == before and rescored.stderr.count("finished before; kept") == 1
    assert len(decoded) == 4 and all(path.stat().st_mtime_ns != stamps[path] for path in decoded)
    # the training data edited: every kept run is refused, naming the file, before anything trains
    write(raw / "train.de", lines(raw / "train.de")[:-1] + ["ein anderer satz ."])
    refused = subprocess.run([str(c) for c in command], cwd=empty, capture_output=True, text=True, env=env, timeout=300)
    assert refused.returncode != 0 and "was trained on other data" in refused.stderr, refused.stderr[-2000:]
    last = refused.stderr.splitlines()[-1]  # names the first task file that differs (BPE learned again: a dictionary)
    assert re.search(r"(dict\.\w+\.txt|train\.\S+) \(sha256 \w+ then, \w+ now\)", last), last
    assert checkpoint.stat().st_mtime == before


def test_a_wheelhouse_that_does_not_fit_is_refused_before_any_change(tmp_path):
    """--wheelhouse checks its manifest first: made for another Python, other extras, another
    fairseq or torch than asked for, a missing file, or no manifest at all (an unfinished one)."""
    env = _bare_venv(tmp_path, torch="2.13.0")
    house = tmp_path / "house"
    house.mkdir()
    (house / "a-1.0-py3-none-any.whl").write_bytes(b"wheel")
    here = "%d.%d" % sys.version_info[:2]
    made = {"python": here, "platform": "linux-x86_64", "torch": None, "fairseq": "fairseq-fixed==0.12.3.1",
            "extras": "test,logging", "constraints": None, "made": "2026-11-26 00:00:00 UTC",
            "files": {"a-1.0-py3-none-any.whl": {"bytes": 5, "sha256": hashlib.sha256(b"wheel").hexdigest()}}}

    def check(manifest, **settings):
        if manifest is None:
            (house / "fairseq_csan-wheelhouse.json").unlink(missing_ok=True)
        else:
            (house / "fairseq_csan-wheelhouse.json").write_text(json.dumps(manifest))
        done = install(env, "--wheelhouse", str(house), "--dry-run", **settings)
        return done.returncode, done.stdout + done.stderr

    code, out = check(made)
    assert code == 0 and f"PIP_FIND_LINKS={house.as_uri()}" in out and "torch 2.13.0 is installed: kept" in out
    assert check({**made, "python": "3.7"}) == (1, f"[install] error: --wheelhouse {house} was made for Python 3.7, "
                                                  f"this is {here}: make one with --make-wheelhouse DIR --python {here}\n")
    code, out = check(made, EXTRAS="recipes,analysis")
    assert code == 1 and "EXTRAS=recipes,analysis, but the wheelhouse holds the packages of the extras test,logging" in out
    code, out = check(made, FAIRSEQ_SPEC="fairseq==0.12.2")
    assert code == 1 and "FAIRSEQ_SPEC=fairseq==0.12.2, but the wheelhouse holds fairseq-fixed==0.12.3.1" in out
    code, out = check(made, TORCH_INDEX="https://example.invalid/whl")
    assert code == 1 and "TORCH_INDEX=https://example.invalid/whl with --wheelhouse" in out
    code, out = check(made, TORCH_SPEC="torch==2.4.1")
    assert code == 1 and "TORCH_SPEC=torch==2.4.1 asks for torch, but the wheelhouse holds none" in out
    code, out = check({**made, "files": {**made["files"], "b-2.0-py3-none-any.whl": {"bytes": 1, "sha256": "0"}}})
    assert code == 1 and "missing or changed since it was made: b-2.0-py3-none-any.whl" in out
    code, out = check(None)
    assert code == 1 and "is not a wheelhouse: no fairseq_csan-wheelhouse.json" in out
    assert install(env, "--make-wheelhouse", str(house), "--dry-run").returncode == 2  # it installs nothing
    assert "goes with --make-wheelhouse" in install(env, "--with-torch").stderr


@pytest.mark.slow
def test_every_requirement_has_a_release_for_each_supported_python():
    """Each requirement of setup.py (install_requires and every extra), its markers evaluated for
    the oldest supported Python (3.8, pyenv's or PATH's) and for this one, has a release there:
    that Python's pip looks each up without its dependencies and installs nothing (a range such
    as pytest-xdist>=3.8, which needs 3.9, fails here rather than at a user's install)."""
    from concurrent.futures import ThreadPoolExecutor

    from packaging.requirements import Requirement

    every = sorted(set(plugin_requirements(EXTRAS)))
    oldest = next((str(c) for c in [shutil.which("python3.8"), *sorted(Path(os.environ.get(
        "PYENV_ROOT", Path.home() / ".pyenv")).glob("versions/3.8.*/bin/python3.8"))]
        if c and subprocess.run([str(c), "-m", "pip", "--version"], capture_output=True).returncode == 0), None)
    if oldest is None:
        pytest.skip("no python3.8 with pip on PATH or in pyenv's versions")

    def lookup(python, spec):
        done = subprocess.run([python, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "-q",
                               "--disable-pip-version-check", spec], capture_output=True, text=True, timeout=300)
        return python, spec, done.returncode, done.stderr

    probe = lookup(sys.executable, "pip==0")
    if "from versions:" not in probe[3]:  # no package index answers here: nothing to look up
        pytest.skip(f"no package index reachable: {probe[3].strip()[-200:]}")
    wanted = []
    for python, version in ((oldest, "3.8"), (sys.executable, "%d.%d" % sys.version_info[:2])):
        for line in every:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"python_version": version,
                                                          "python_full_version": version + ".0"}):
                req.marker = None
                wanted.append((python, str(req)))
    assert any(spec.startswith("pytest-xdist") and python == oldest for python, spec in wanted)
    with ThreadPoolExecutor(4) as pool:
        looked = list(pool.map(lambda job: lookup(*job), wanted))
    missing = [f"{spec} with {python}: {[line for line in said.splitlines() if 'ERROR' in line][:1] or code}"
               for python, spec, code, said in looked if code != 0]
    assert not missing, missing
