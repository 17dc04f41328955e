"""scripts/install.sh's Python side, run before this package is installed (standard library only).

    python scripts/install_env.py probe                      # what the environment holds
    python scripts/install_env.py fairseq-deps CONSTRAINTS SPEC  # SPEC's requirements, less torchaudio
    python scripts/install_env.py pins CONSTRAINTS           # every pinned distribution has its version
    python scripts/install_env.py imports                    # torch, fairseq and fairseq_csan import
"""

import importlib.metadata as md
import importlib.util
import re
import subprocess
import sys


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
    import fairseq_csan  # first: it quiets fairseq's start-up message about tensorboardX

    import fairseq
    import torch

    print(f"[install] ok: torch {torch.__version__} (CUDA: {torch.cuda.is_available()}), "
          f"fairseq {fairseq.__version__}, fairseq_csan {fairseq_csan.__version__}")


if __name__ == "__main__":
    # (run as a file: sys.path has scripts/, not the current folder and its fairseq_csan.egg-info)
    command, args = sys.argv[1], sys.argv[2:]
    sys.exit({"probe": probe, "fairseq-deps": fairseq_deps, "pins": pins, "imports": imports}[command](*args))
