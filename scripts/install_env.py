"""scripts/install.sh's Python side, run before this package is installed (standard library only).

    python scripts/install_env.py probe                      # what the environment holds
    python scripts/install_env.py fairseq-deps CONSTRAINTS SPEC  # SPEC's requirements, less torchaudio
    python scripts/install_env.py resolvable CONSTRAINTS SPEC [LIMIT]  # SPEC installs here, or which requirement cannot
    python scripts/install_env.py pins CONSTRAINTS           # every pinned distribution has its version
    python scripts/install_env.py imports                    # torch, fairseq and fairseq_csan import
    python scripts/install_env.py make-wheelhouse DIR X.Y WITH_TORCH [CONSTRAINTS]  # fill DIR for an offline install
    python scripts/install_env.py wheelhouse-check DIR       # DIR is a whole wheelhouse for this Python
"""

import hashlib
import importlib.metadata as md
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = "fairseq_csan-wheelhouse.json"
PARTIAL = ".fairseq_csan-wheelhouse-partial"  # marks a folder make-wheelhouse is still filling


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def probe():
    """Distribution versions from their metadata (nothing is imported), one 'key value' a line."""
    versions, fairseqs = {}, []
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if not name or norm(name) in versions:
            continue  # a later copy of a name is shadowed by the first one on sys.path
        versions[norm(name)] = dist.version
        # a distribution that provides the module fairseq (fairseq, fairseq-fixed, an editable GitHub main, ...)
        top = (dist.read_text("top_level.txt") or "").split()
        files = [str(f) for f in (dist.files or [])]
        if norm(name) != "fairseq-csan" and ("fairseq" in top or norm(name) in ("fairseq", "fairseq-fixed")
                                             or any(f.startswith("fairseq/") for f in files)):
            fairseqs.append(f"{name}=={dist.version}")
    spec = importlib.util.find_spec("fairseq")
    print("python", ".".join(map(str, sys.version_info[:3])))
    print("prefix", sys.prefix)
    print("fairseq_module", spec.origin if spec and spec.origin else ("namespace" if spec else ""))
    print("fairseq_dists", " ".join(fairseqs))
    for name in ("torch", "torchaudio", "hydra-core", "omegaconf", "numpy"):
        print(name, versions.get(name, ""))


def fairseq_deps(constraints, spec):
    """Install the requirements of the fairseq installed with --no-deps, less torchaudio and extras."""
    requires = md.requires(re.match(r"[A-Za-z0-9_.-]+", spec)[0]) or []
    wanted = [r for r in requires if "extra ==" not in r and not re.match(r"torchaudio\b", r)]
    print("[install] its requirements less torchaudio:", " ".join(wanted), flush=True)
    return subprocess.call([sys.executable, "-m", "pip", "install", "-c", constraints, *wanted])


def _pip_dry_run(constraints, *requirements, no_deps=False, limit=None):
    """pip's resolution of REQUIREMENTS in this environment, installing nothing: (exit code or
    None when it ran past LIMIT seconds, pip's report or None, what pip printed)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "-q", "--disable-pip-version-check",
               "--report", str(report), "-c", constraints, *(["--no-deps"] if no_deps else []), *requirements]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired as stopped:
            said = stopped.stderr.decode() if isinstance(stopped.stderr, bytes) else (stopped.stderr or "")
            return None, None, said
        said = "\n".join(line for line in (done.stdout + done.stderr).splitlines()
                         if not line.startswith("WARNING: Location"))  # a find-links folder pip skips
        return done.returncode, json.loads(report.read_text()) if report.is_file() else None, said


def resolvable(constraints, spec, limit="90"):
    """Fail fast, naming the package, where SPEC (the plugin with its extras) cannot be installed
    beside the pinned versions: pip resolves it once, installing nothing, within LIMIT seconds.

    Where it fails or runs out of time (pip's resolver can backtrack for many minutes through every
    release of unrelated packages when one requirement has no release for this Python), each of the
    plugin's requirements is looked up on its own, without its dependencies, which takes a second
    each and names the one that has no release for this Python or platform."""
    here = f"Python {platform.python_version()} on {sys.platform} {platform.machine()}"
    if tuple(int(x) for x in re.findall(r"\d+", md.version("pip"))[:2]) < (22, 2):
        _say(f"warning: pip {md.version('pip')} has no --dry-run: requirements not checked before installing")
        return 0
    start = time.time()
    code, report, said = _pip_dry_run(constraints, spec, limit=float(limit))
    if code == 0:
        names = sorted(item["metadata"]["name"] for item in report["install"])
        _say(f"requirements resolve for {here} in {time.time() - start:.0f}s: {len(names)} to install")
        return 0
    why = "ran past its limit of %s s" % limit if code is None else "failed"
    _say(f"pip's resolution of {spec} {why}; looking up each requirement on its own")
    _, root, root_said = _pip_dry_run(constraints, spec, no_deps=True, limit=float(limit))
    if not root:
        return f"[install] error: {spec} cannot be read for its requirements: {_last_error(root_said)}"
    from pip._vendor.packaging.requirements import Requirement  # pip's copy: this script needs no other package

    extras = set(re.search(r"\[(.*)\]$", spec)[1].split(",")) if spec.endswith("]") else set()
    wanted = []
    for line in root["install"][0]["metadata"].get("requires_dist", []):
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
            req.marker = None
            wanted.append(str(req))
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        looked_up = list(pool.map(lambda r: (r, _pip_dry_run(constraints, r, no_deps=True, limit=120)), wanted))
    missing = [f"{r}: {_last_error(said) if code is not None else 'no answer within 120 s'}"
               for r, (code, _, said) in looked_up if code != 0]
    if missing:
        return "\n".join(f"[install] error: no release for {here} satisfies {m}" for m in missing)
    if code is None:  # slow, not impossible: the install goes on, and pip's own messages follow
        _say(f"warning: every requirement has a release for {here}; pip's resolution takes longer than {limit} s "
             "here (RESOLVE_LIMIT sets the limit)")
        return 0
    return (f"[install] error: every requirement of {spec} has a release for {here}, but they cannot be installed "
            f"together with the pins in {constraints}: {_last_error(said)}")


def _last_error(said):
    errors = [line.strip() for line in said.splitlines() if line.strip().startswith("ERROR")]
    return (errors[0] if errors else (said.strip().splitlines() or ["(pip said nothing)"])[-1])[:400]


def pins(constraints):
    bad = []
    for line in open(constraints):
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*==\s*(\S+)\s*", line)
        if m:
            try:
                have = md.version(m[1])
            except md.PackageNotFoundError:
                have = "missing"
            if have != m[2] and have.split("+")[0] != m[2]:
                bad.append(f"{m[1]} {have} (pinned {m[2]})")
    return f"[install] error: pinned distributions changed: {', '.join(bad)}" if bad else 0


def imports():
    import fairseq_csan  # first: its warning filters (quiet.py) come before fairseq's import

    import fairseq
    import torch

    print(f"[install] ok: torch {torch.__version__} (CUDA: {torch.cuda.is_available()}), "
          f"fairseq {fairseq.__version__}, fairseq_csan {fairseq_csan.__version__}")


# --- the offline install (docs/environments.md, "Without network") ---

def _say(*words):
    print("[install]", *words, flush=True)


def _run(*cmd):
    _say("run:", " ".join(map(str, cmd)))
    subprocess.run([str(c) for c in cmd], check=True)


# run in the build environment: setup.py's requirements, as setup.py states them (torch left out:
# the wheelhouse holds torch only when asked, and the target environment usually has its own)
_SETUP_REQUIREMENTS = """
import json, os, sys
import setuptools
from distutils.core import run_setup
os.chdir(sys.argv[1])
dist = run_setup("setup.py", stop_after="init")
reqs = list(dist.install_requires)
for extra in filter(None, sys.argv[2].split(",")):
    if extra not in dist.extras_require:
        sys.exit(f"EXTRAS: no extra {extra!r} in setup.py (it has {', '.join(sorted(dist.extras_require))})")
    reqs += dist.extras_require[extra]
print(json.dumps(reqs))
"""


def _wheel_requirements(whl):
    """Requires-Dist of a wheel, less extras-only requirements."""
    with zipfile.ZipFile(whl) as z:
        # its own, at the top (setuptools vendors other distributions' METADATA below it)
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
        lines = z.read(meta).decode().splitlines()
    return [line.split(":", 1)[1].strip() for line in lines
            if line.startswith("Requires-Dist:") and "extra ==" not in line]


def _name(requirement):
    return norm(re.match(r"\s*([A-Za-z0-9_.-]+)", requirement)[1])


def _files(folder):
    return {f.name: {"bytes": f.stat().st_size, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()}
            for f in sorted(Path(folder).iterdir()) if f.is_file() and f.name not in (MANIFEST, PARTIAL)}


def make_wheelhouse(out, python, with_torch, freeze=""):
    """Fill OUT with every wheel an offline install needs, for Python X.Y on Linux x86-64.

    The wheels are built or downloaded by a temporary virtual environment of that Python (so
    that pip picks the wheels of its version, and fairseq-fixed is compiled by it, against the
    torch of TORCH_SPEC), in OUT.partial, which becomes OUT when complete."""
    spec = {"python": python, "platform": "linux-x86_64", "torch": os.environ["TORCH_SPEC"] if with_torch == "1" else None,
            "fairseq": os.environ["FAIRSEQ_SPEC"], "extras": os.environ["EXTRAS"],
            "node_freeze": Path(freeze).read_text().split() if freeze else None}
    out = Path(out).resolve()
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return f"[install] error: --make-wheelhouse runs on Linux x86-64 (the wheels are for it); this is {sys.platform} {platform.machine()}"
    if not re.fullmatch(r"3\.(8|9|1[0-3])", python):
        return f"[install] error: --python {python}: the supported versions are 3.8 to 3.13 (as X.Y)"
    if out.exists() and not out.is_dir():
        return f"[install] error: --make-wheelhouse {out}: a file, not a folder"
    if (out / MANIFEST).is_file():
        made = json.loads((out / MANIFEST).read_text())
        if {k: made.get(k) for k in spec} != spec:
            return (f"[install] error: {out} is a wheelhouse made for {({k: made.get(k) for k in spec})}, not {spec}: "
                    "name a new folder, or delete that one first")
        have = _files(out)
        changed = sorted(k for k in set(made["files"]) | set(have) if have.get(k) != made["files"].get(k))
        if changed:
            return (f"[install] error: {out}: missing or changed since it was made: {', '.join(changed)}; "
                    "delete the folder and make it again")
        _say(f"{out} is already this wheelhouse (made {made['made']}): nothing to do")
        return 0
    if out.exists() and any(out.iterdir()):
        return f"[install] error: {out} exists and is not empty: --make-wheelhouse writes a new folder (or completes its own)"
    interpreter = sys.executable if python == "%d.%d" % sys.version_info[:2] else _find_python(python)
    if not interpreter:
        return (f"[install] error: --python {python}: no working python{python} on PATH or in pyenv's versions "
                "to build fairseq-fixed with")
    work = out.with_name(out.name + ".partial")
    if work.exists():
        if not (work / PARTIAL).exists():
            return f"[install] error: {work} exists and was not made by --make-wheelhouse: move it away first"
        _say(f"{work}: left by an interrupted run, started again")
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / PARTIAL).write_text("make-wheelhouse is filling this folder; it becomes " + str(out) + "\n")
    try:
        return _fill(work, out, spec, interpreter, python, freeze)
    except subprocess.CalledProcessError as error:
        shown = " ".join(str(c) if len(str(c)) < 200 else "(a script)" for c in error.cmd)
        why = (error.stderr or "").strip().splitlines()[-1:] if isinstance(error.stderr, str) else []
        return (f"[install] error: this command failed (exit {error.returncode}): {shown}{': ' + why[0] if why else ''}; "
                f"the unfinished {work} is started again by the next run")


def _find_python(version):
    """A python<version> that runs and is that version: on PATH (a pyenv shim may not be), else pyenv's."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    for candidate in [shutil.which(f"python{version}"), *sorted(root.glob(f"versions/{version}.*/bin/python{version}"))]:
        if candidate:
            ran = subprocess.run([str(candidate), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True)
            if ran.returncode == 0 and ran.stdout.strip() == version:
                return str(candidate)
    return None


def _node_versions(freeze):
    """{normalised name: version} of a `pip list --format=freeze` file."""
    found = {}
    for line in Path(freeze).read_text().splitlines():
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*==\s*(\S+)\s*", line)
        if m:
            found[norm(m[1])] = m[2]
    return found


def _wheel_name_version(whl):
    name, version = whl.name.split("-")[:2]
    return norm(name), version


# the build backend of the plugin's install: pip's build isolation takes these and what they
# require from the wheelhouse, never from the node's environment, so they stay even where the
# node has them
_BUILD = ("setuptools", "wheel")


def _fill(work, out, spec, interpreter, python, freeze):
    start = time.time()
    venv = work / PARTIAL.replace("partial", "build-venv")
    _say(f"1/4 a build environment of Python {python} ({interpreter}) with {os.environ['TORCH_SPEC']}, numpy, cython")
    _run(interpreter, "-m", "venv", venv)
    py = venv / "bin" / "python"
    pip = [py, "-m", "pip", "--disable-pip-version-check"]
    held = ["-c", freeze] if freeze else []  # the node's versions (--node-freeze)
    # the build environment is removed at the end: its packages are not compiled to bytecode
    # (torch's compilation took 28 s of a 96 s run on 2 cores)
    _run(*pip, "install", "-q", "--no-compile", *held, "setuptools", "wheel", "numpy", "cython")
    # setup.py's requirements first: a wrong EXTRAS stops here, before anything is compiled
    plugin_reqs = json.loads(subprocess.run([py, "-c", _SETUP_REQUIREMENTS, ROOT, spec["extras"]], check=True,
                                            capture_output=True, text=True).stdout)
    plugin_reqs = [r for r in plugin_reqs if _name(r) != "torch"]
    torch_index = ["--index-url", os.environ["TORCH_INDEX"]] if os.environ.get("TORCH_INDEX") else []
    _run(*pip, "install", "-q", "--no-compile", *torch_index, os.environ["TORCH_SPEC"])
    _say(f"2/4 {spec['fairseq']}, compiled for Python {python} against that torch")
    before = set(work.glob("*.whl"))
    _run(*pip, "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", work, spec["fairseq"])
    (fairseq_whl,) = set(work.glob("*.whl")) - before
    fairseq_reqs = [r for r in _wheel_requirements(fairseq_whl) if _name(r) not in ("torch", "torchaudio")]
    # fairseq's exact pins (hydra-core, omegaconf) hold for everything beside it, as in install.sh
    pins = work / PARTIAL.replace("partial", "pins.txt")
    pins.write_text("".join(r + "\n" for r in fairseq_reqs if "==" in r))
    _say(f"3/4 the wheels of fairseq's requirements (less torch, torchaudio), the plugin's and the extras {spec['extras']}")
    _run(*pip, "wheel", "-q", "--prefer-binary", "-c", pins, *held, "-w", work, "setuptools", "wheel", *fairseq_reqs,
         *plugin_reqs)
    node = _node_versions(freeze) if freeze else {}
    wheels = {_wheel_name_version(whl)[0]: whl for whl in work.glob("*.whl")}
    build, todo = set(), list(_BUILD)  # the build backend and what it requires (wheel: packaging)
    while todo:
        name = todo.pop()
        if name in wheels and name not in build:
            build.add(name)
            todo += [_name(r) for r in _wheel_requirements(wheels[name])]
    node_has = []
    for whl in sorted(set(work.glob("*.whl")) - {fairseq_whl}):
        name, version = _wheel_name_version(whl)
        if name not in build and node.get(name, "").split("+")[0] == version:
            node_has.append(f"{name}=={version}")  # the node has it, at the version these wheels need
            whl.unlink()
    if freeze:
        _say(f"   left out {len(node_has)} the node has already ({', '.join(node_has) or 'none'})")
    without_torch = set(_files(work))
    if spec["torch"]:
        _say(f"4/4 {spec['torch']} and its requirements{' from ' + os.environ['TORCH_INDEX'] if torch_index else ''}")
        _run(*pip, "download", "-q", *torch_index, "-d", work, spec["torch"])
    else:
        _say("4/4 no torch (--with-torch adds TORCH_SPEC): the target environment brings its own")
    shutil.rmtree(venv)
    pins.unlink()
    files = _files(work)
    torch_bytes = sum(v["bytes"] for k, v in files.items() if k not in without_torch)
    manifest = {**spec, "made": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "made_by": "scripts/install.sh --make-wheelhouse",
                "requirements": {"fairseq": fairseq_reqs, "plugin": plugin_reqs},
                "left_out_node_has": node_has, "files": files}
    (work / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    work.rename(out)  # whole: a kill before this leaves DIR.partial (marked), which the next run starts again
    (out / PARTIAL).unlink()
    total = sum(v["bytes"] for v in files.values())
    _say(f"done in {time.time() - start:.0f}s: {out}, {len(files)} files, {total / 2**20:.1f} MiB"
         + (f" ({(total - torch_bytes) / 2**20:.1f} MiB without torch and its requirements)" if spec["torch"] else ""))
    _say(f"on the machine without network: bash scripts/install.sh --wheelhouse {shlex.quote(str(out))}")
    return 0


def wheelhouse_check(folder):
    """Where FOLDER is a complete wheelhouse for this Python and machine, print what it holds
    ('KEY VALUE' lines: torch, fairseq, extras, made, uri) and exit 0; otherwise say what is wrong."""
    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        why = ("its --make-wheelhouse did not finish (" + PARTIAL + " is there)" if (folder / PARTIAL).exists()
               else f"no {MANIFEST}: make one with bash scripts/install.sh --make-wheelhouse DIR")
        return f"[install] error: --wheelhouse {folder} is not a wheelhouse: {why}"
    made = json.loads((folder / MANIFEST).read_text())
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return (f"[install] error: --wheelhouse {folder} holds wheels for {made['platform']}; "
                f"this is {sys.platform} {platform.machine()}")
    here = "%d.%d" % sys.version_info[:2]
    if made["python"] != here:
        return (f"[install] error: --wheelhouse {folder} was made for Python {made['python']}, this is {here}: "
                f"make one with --make-wheelhouse DIR --python {here}")
    have = _files(folder)
    bad = sorted(k for k, v in made["files"].items() if have.get(k) != v)
    if bad:
        return f"[install] error: --wheelhouse {folder}: missing or changed since it was made: {', '.join(bad)}"
    print("torch", made["torch"] or "-")
    print("fairseq", made["fairseq"])
    print("extras", made["extras"])
    print("made", made["made"])
    print("uri", folder.resolve().as_uri())
    return 0


if __name__ == "__main__":
    # (run as a file: sys.path has scripts/, not the current folder and its fairseq_csan.egg-info)
    command, args = sys.argv[1], sys.argv[2:]
    sys.exit({"probe": probe, "fairseq-deps": fairseq_deps, "pins": pins, "imports": imports, "resolvable": resolvable,
              "make-wheelhouse": make_wheelhouse, "wheelhouse-check": wheelhouse_check}[command](*args))
