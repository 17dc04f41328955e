"""Every recipe step knows what it was made from.

A step (tokenising a file, learning BPE, averaging checkpoints, decoding a test set, ...) has
input files, settings and output files. When it finishes, its stamp records the settings and a
SHA-256 of every input and output's content. A rerun redoes a step, and says why, when its
settings differ, an input's content changed (a corpus edited in place, a checkpoint replaced
with its modification time kept), an output is missing or was changed by hand, or the stamp is
missing (a step that was killed); otherwise it skips it. Nothing is reused that was built from
other inputs. A step writes its outputs under temporary names and renames them once complete,
so a kill at any moment leaves either the old outputs or the new ones, never half of one.

Hashing a large file costs a read of it, so a stamp keeps each file's identity (device, inode,
size, modification and change time) beside its hash, and a file whose identity is unchanged is
not read again. The change time cannot be set by hand, and a copy (``cp -p``, ``rsync -a``) gets
a new one, so a replaced file is always read again.

Stamps live in ``STAMPS/NAME.json`` (the recipes use ``OUT/.steps/``). Shell recipes use the
command line::

    python -m fairseq_csan.recipes.steps run --stamps OUT/.steps --name tok.train.en \\
        --in OUT/raw/train.en --out OUT/tok/train.en --set lang=en -- COMMAND ARGS...

which runs COMMAND (with ``{out}`` / ``{out:N}`` in its arguments replaced by the temporary
name of output N; ``--stdout`` sends its standard output to the first output instead) only
when the step is not current, then renames the outputs and writes the stamp. ``--force``
redoes it whatever the stamp says.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

from .runner import run_child, shell_words, write_atomically

CHUNK = 1 << 20


def _identity(path: Path) -> list:
    st = path.stat()
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def fingerprint(path: Path, known: Optional[dict] = None) -> dict:
    """{"sha256", "identity"} of a file or folder (a folder: the hash of its files' names and
    hashes). ``known`` is an earlier fingerprint: its hash is reused when the identity matches."""
    path = Path(path)
    if path.is_dir():
        h = hashlib.sha256()
        known_files = (known or {}).get("files", {})
        files = {}
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            rel = f.relative_to(path).as_posix()
            files[rel] = fingerprint(f, known_files.get(rel))
            h.update(f"{rel}\0{files[rel]['sha256']}\n".encode("utf-8"))
        return {"sha256": h.hexdigest(), "files": files}
    identity = _identity(path)
    if known and known.get("identity") == identity and "sha256" in known:
        return known
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return {"sha256": h.hexdigest(), "identity": identity}


class Step:
    """One step: its name, input and output paths and settings; see the module docstring."""

    def __init__(self, stamps: Path, name: str, inputs: Sequence = (), outputs: Sequence = (),
                 settings: Optional[Dict[str, str]] = None):
        if not outputs:
            raise ValueError(f"step {name}: no outputs")
        self.stamp = Path(stamps) / f"{name}.json"
        self.name = name
        self.inputs = [Path(p) for p in inputs]
        self.outputs = [Path(p) for p in outputs]
        self.settings = {k: str(v) for k, v in (settings or {}).items()}

    def _load(self) -> Optional[dict]:
        try:
            return json.loads(self.stamp.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def stale(self) -> Optional[str]:
        """None when the outputs were made from these inputs and settings; else the reason."""
        for p in self.inputs:
            if not p.exists():
                raise FileNotFoundError(f"step {self.name}: input {p} does not exist")
        missing = [str(p) for p in self.outputs if not p.exists()]
        if missing:
            return f"no {missing[0]}"
        stamp = self._load()
        if stamp is None:
            return "no record of what its outputs were made from (a step that did not finish)"
        if stamp.get("settings") != self.settings:
            old = stamp.get("settings", {})
            diff = sorted(k for k in set(old) | set(self.settings) if old.get(k) != self.settings.get(k))
            return "settings changed: " + ", ".join(f"{k} {old.get(k)!r} -> {self.settings.get(k)!r}" for k in diff)
        for kind, paths in (("inputs", self.inputs), ("outputs", self.outputs)):
            recorded = stamp.get(kind, {})
            if sorted(recorded) != sorted(str(p) for p in paths):
                return f"its {kind} are other files than last time"
            for p in paths:
                if fingerprint(p, recorded[str(p)])["sha256"] != recorded[str(p)]["sha256"]:
                    what = "input" if kind == "inputs" else "output"
                    return f"{what} {p} changed since the last run"
        return None

    def record(self) -> None:
        old = self._load() or {}
        stamp = {"settings": self.settings}
        for kind, paths in (("inputs", self.inputs), ("outputs", self.outputs)):
            known = old.get(kind, {})
            stamp[kind] = {str(p): fingerprint(p, known.get(str(p))) for p in paths}
        self.stamp.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.stamp, json.dumps(stamp, indent=1, sort_keys=True) + "\n")

    def forget(self) -> None:
        """Remove the stamp and the outputs (before redoing the step)."""
        self.stamp.unlink(missing_ok=True)
        for p in self.outputs:
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()

    def temporary(self, path: Path) -> Path:
        return path.with_name(path.name + ".tmp")

    def commit(self) -> None:
        """Rename every temporary output to its name, then record the stamp."""
        for p in self.outputs:
            tmp = self.temporary(p)
            if not tmp.exists():
                raise RuntimeError(f"step {self.name}: the command made no {tmp}")
            if p.is_dir():
                shutil.rmtree(p)
            os.replace(tmp, p)
        self.record()


def recorded_outputs(stamps: Path) -> List[Path]:
    """Every file that the steps stamped in ``stamps`` wrote, as their stamps name them (a folder
    output: each file of it, as recorded): what a command may replace or remove again."""
    found = []
    for stamp in sorted(Path(stamps).glob("*.json")):
        try:
            outputs = json.loads(stamp.read_text(encoding="utf-8")).get("outputs", {})
        except (OSError, ValueError, AttributeError):
            continue  # a damaged stamp: its step is redone, its outputs are nobody's yet
        for path, fp in outputs.items():
            files = fp.get("files") if isinstance(fp, dict) else None
            found += [Path(path) / rel for rel in files] if files is not None else [Path(path)]
    return found


def _log(prefix: str, message: str) -> None:
    print(f"[{prefix}] {message}", file=sys.stderr, flush=True)


def make(step: Step, action: Callable[[List[Path]], None], force: bool = False, prefix: str = "step",
         what: str = "", short: str = "") -> bool:
    """Unless ``step`` is current, run ``action(temporary output paths)`` and commit the outputs;
    True when it ran. The log line says why it ran, or that it was skipped."""
    what = what or step.name
    reason = "--force" if force else step.stale()
    if reason is None:
        _log(prefix, f"{short or what}: up to date; skipped")
        return False
    _log(prefix, f"{what} ({'redone: ' if step.stamp.exists() else ''}{reason})")
    step.forget()
    temps = [step.temporary(p) for p in step.outputs]
    for t in temps:
        if t.is_dir():
            shutil.rmtree(t)
        elif t.exists():
            t.unlink()
        t.parent.mkdir(parents=True, exist_ok=True)
    action(temps)
    step.commit()
    return True


EVERY_S = 60.0  # seconds between two progress lines of a long command


def duration(seconds: float) -> str:
    """A time left, rounded: ``40 s``, ``3 min``, ``2 h 05 min``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60:02d} min"


class Progress:
    """How far a long command is, in one line now and then:
    ``[PREFIX HH:MM:SS] WHAT COUNT of TOTAL (P%), R UNIT/s, about T left``.

    :meth:`at` takes each count the command reports with the time it was seen, and returns a
    line for the first count and then for the first count after ``every`` seconds since the last
    line (else None). The speed is over the counts seen here (a resumed training's from where it
    resumed), so the first line has none; without a total there is no time left."""

    def __init__(self, prefix: str, what: str, unit: str, total: Optional[int] = None, every: float = EVERY_S):
        self.prefix, self.what, self.unit, self.total, self.every = prefix, what, unit, total, every
        self.first = None  # (count, time) of the first count seen
        self.said = None  # the time of the last line

    def at(self, count: int, now: float, note: str = "") -> Optional[str]:
        if self.first is None:
            self.first = (count, now)
        if self.said is not None and now - self.said < self.every:
            return None
        self.said = now
        words = [f"{self.what} {count}" + (f" of {self.total} ({100 * count / self.total:.0f}%)" if self.total else "")]
        words += [note] if note else []
        done, spent = count - self.first[0], now - self.first[1]
        if done > 0 and spent > 0:
            rate = done / spent
            words.append(f"{rate:.0f}" if rate >= 100 else f"{rate:.3g}")
            words[-1] += f" {self.unit}/s"
            if self.total:
                words.append(f"about {duration(max(self.total - count, 0) / rate)} left")
        return f"[{self.prefix} {time.strftime('%H:%M:%S', time.localtime(now))}] " + ", ".join(words)


MERGE = re.compile(rb"pair (\d+): ")  # subword-nmt learn-bpe --verbose: "pair K: a b -> ab (frequency F)", K from 0


def bpe_merges(argv: Sequence[str]) -> Optional[int]:
    """The merges that a ``subword-nmt learn-bpe -s N`` command learns (N); None for another command."""
    if list(argv[:2]) != ["subword-nmt", "learn-bpe"]:
        return None
    for i, word in enumerate(argv[:-1]):
        if word in ("-s", "--symbols") and argv[i + 1].isdigit():
            return int(argv[i + 1])
    return None


def merges_seen(progress: Progress, line: bytes, now: float) -> Optional[str]:
    """What stderr shows for a line of learn-bpe --verbose's errors: a merge ("pair K: ...")
    counts towards ``progress`` (its line now and then); any other line is shown as it is."""
    found = MERGE.match(line)
    if found is None:
        return line.decode("utf-8", "replace")
    return progress.at(int(found.group(1)) + 1, now)


def call(argv: Sequence, stdout: Optional[Path] = None, stdin: Iterable[Path] = (), prefix: str = "step") -> None:
    """Run a command (logged as a shell line), its output to ``stdout`` and ``stdin`` files fed
    to its input; a failure stops the recipe with the command's status."""
    argv = [str(w) for w in argv]
    merges, errors = bpe_merges(argv), None
    if merges is not None and stdout:  # its merges, a line each with --verbose (the same codes): a progress line
        argv.append("--verbose")
        progress = Progress(prefix, "learn BPE: merge", "merges", merges)

        def errors(line):
            return merges_seen(progress, line, time.time())
    stdin = list(stdin)
    shown = shell_words(argv)
    if stdin:
        shown = f"cat {shell_words(stdin)} | {shown}"
    if stdout:
        shown += f" > {shlex.quote(str(stdout))}"
    _log(prefix, f"  $ {shown}")
    # a progress bar (tqdm's, as subword-nmt learn-bpe draws) only where someone watches and no
    # progress line is made: in a log file its carriage returns make one line of hundreds of updates
    env = None if sys.stderr.isatty() and errors is None else {**os.environ, "TQDM_DISABLE": "1"}
    code = run_child(argv, stdout, stdin=stdin, errors_to_out=False, env=env, with_parent=True, name=argv[0],
                     say=lambda message: _log(prefix, message), errors=errors).code
    if code != 0:
        _log(prefix, f"error: {argv[0]} exited with status {code}")
        raise SystemExit(code if 0 < code < 126 or code > 128 else 1)


def run(step: Step, command: List[str], stdout: bool = False, stdin: Iterable[Path] = (),
        force: bool = False, prefix: str = "step", what: str = "", short: str = "") -> bool:
    """Run ``command`` for ``step`` unless it is current ({out}, {out:N} name the temporary outputs)."""

    def action(temps):
        argv = []
        for word in command:
            for i, t in enumerate(temps):
                word = word.replace("{out:%d}" % i, str(t))
            argv.append(word.replace("{out}", str(temps[0])))
        call(argv, stdout=temps[0] if stdout else None, stdin=stdin, prefix=prefix)

    return make(step, action, force=force, prefix=prefix, what=what, short=short)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m fairseq_csan.recipes.steps", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("run", "check", "record"):
        s = sub.add_parser(name)
        s.add_argument("--stamps", type=Path, required=True, help="the folder of the stamps")
        s.add_argument("--name", required=True, help="the step's name (its stamp's file name)")
        s.add_argument("--in", dest="inputs", type=Path, action="append", default=[], help="an input (repeat)")
        s.add_argument("--out", dest="outputs", type=Path, action="append", default=[], help="an output (repeat)")
        s.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE")
        s.add_argument("--log-prefix", default="step")
        s.add_argument("--what", default="", help="how the log names the step")
        if name == "run":
            s.add_argument("--stdout", action="store_true", help="the command's standard output is the first output")
            s.add_argument("--stdin", type=Path, action="append", default=[], help="files fed to its standard input")
            s.add_argument("--force", action="store_true")
            s.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    settings = {}
    for item in args.settings:
        if "=" not in item:
            p.error(f"--set takes KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        settings[k] = v
    try:
        step = Step(args.stamps, args.name, args.inputs, args.outputs, settings)
        if args.cmd == "check":  # exit 0 when current, 1 (with the reason) when not
            reason = step.stale()
            if reason:
                print(reason)
            raise SystemExit(1 if reason else 0)
        if args.cmd == "record":
            step.record()
            return
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            p.error("run needs a command after --")
        run(step, command, stdout=args.stdout, stdin=args.stdin, force=args.force,
            prefix=args.log_prefix, what=args.what)
    except (FileNotFoundError, ValueError) as e:
        _log(args.log_prefix, f"error: {e}")
        raise SystemExit(2)


if __name__ == "__main__":
    from .runner import as_command

    as_command(main)
