"""Child processes and progress: every command the kit starts (:func:`run_child`), and how far a
long one is (:class:`Progress`). docs/recipes.md says what a user meets of them: the signals passed
on ("Training: scripts/train.sh", one training at a time) and how a failed child ends a command ("How
every command ends").
"""

import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Sequence

from .failure import Failed, _command_name, say
from .records import _record_written

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_RESEND_S = 10  # seconds after a signal passed on before it is passed on again (run_child's resend)
_RUNNING = set()  # the children running now (stop_children)
_STOPPING = threading.Event()
_STARTING = threading.Lock()  # a child starts, or children are stopped: one at a time


def shell_words(argv: Sequence) -> str:
    """A command as one line that can be pasted into a shell."""
    return " ".join(shlex.quote(str(w)) for w in argv)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60:02d} min"


class Progress:
    """How far a long piece of work is, said now and then (:func:`~.failure.say`):
    ``HH:MM:SS WHAT COUNT of TOTAL (P%), R UNIT/s, about T left``.

    :meth:`at` takes each count with the time it was seen, and says a line for the first count
    and then for the first after ``every`` seconds since the last line. The speed is over the
    counts seen here (a resumed training's from where it resumed). ``count_of(line)`` turns a
    line of a child's output (``stream`` "out" or "err") into a count, or None: :func:`run_child`
    feeds it each line as it comes; any other line of "err" is shown as it is."""

    def __init__(self, what: str, unit: str, total: Optional[int] = None, every: float = 60.0,
                 count_of: Callable[[bytes], Optional[int]] = None, stream: str = "out",
                 note: Callable[[bytes], str] = lambda line: ""):
        self.what, self.unit, self.total, self.every = what, unit, total, every
        self.count_of, self.stream, self.note = count_of, stream, note
        self.first = self.said = None  # (count, time) of the first count; the time of the last line

    def at(self, count: int, now: Optional[float] = None, note: str = "") -> Optional[str]:
        """Say the line where it is due; the line, else None."""
        now = time.time() if now is None else now
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
            words.append(f"{rate:.0f} {self.unit}/s" if rate >= 100 else f"{rate:.3g} {self.unit}/s")
            if self.total:
                words.append(f"about {_duration(max(self.total - count, 0) / rate)} left")
        line = f"{time.strftime('%H:%M:%S', time.localtime(now))} " + ", ".join(words)
        say(line)
        return line

    def line(self, line: bytes) -> None:
        count = self.count_of(line) if self.count_of else None
        if count is not None:
            self.at(count, note=self.note(line))
        elif self.stream == "err":
            print(line.decode("utf-8", "replace"), file=sys.stderr, flush=True)


def _start(orphan: bool) -> None:
    """In the child before it runs: the default action for the signals, whatever the caller ignored (a
    script's background job ignores SIGINT and SIGQUIT), and a process group of its own: a terminal's
    Ctrl-C reaches the kit's process alone, which passes it on once; killed when the kit's process dies,
    even by SIGKILL (Linux), unless it is to go on (an orphan: a trainer that holds its lock itself)."""
    for sig in (*_SIGNALS, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    os.setpgrp()
    if not orphan and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _lines(pipe, each: Callable[[bytes], None]) -> None:
    with pipe:
        for line in pipe:
            each(line.rstrip(b"\n"))


class _Signals:
    """SIGINT, SIGTERM and SIGHUP to this process (its main thread), passed on to the child, each one
    (``group``: to its process group), again every _RESEND_S seconds with ``resend``, and its group
    killed ``kill_after`` seconds after the first; the handlers put back at the end."""

    def __init__(self, name, group, resend, kill_after):
        self.name, self.group, self.resend, self.kill_after = name, group, resend, kill_after
        self.received, self.passed, self.child, self.previous = [], [], None, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = {sig: signal.signal(sig, self._caught) for sig in _SIGNALS}
        return self

    def __exit__(self, *_):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _caught(self, signum, _frame):
        self.received.append(signum)
        if self.child is not None:
            self.deliver(signum)

    def deliver(self, signum):
        say(f"{signal.Signals(signum).name}: passed on to {self.name} (pid {self.child.pid}); waiting for it to stop")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.child.pid, signum) if self.group else self.child.send_signal(signum)
        self.passed.append(time.monotonic())

    def started(self, child):
        self.child = child
        if self.received and not self.passed:  # it came before the child ran
            self.deliver(self.received[0])

    def tend(self):
        """While the child runs: kill or resend, where due."""
        if not self.passed:
            return
        first, last = (signal.Signals(self.received[i]).name for i in (0, -1))
        if self.kill_after is not None and time.monotonic() - self.passed[0] >= self.kill_after:
            say(f"{self.name} (pid {self.child.pid}) still runs {self.kill_after:g} s after {first}: killed")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.child.pid, signal.SIGKILL)
        elif self.resend and time.monotonic() - self.passed[-1] >= _RESEND_S:
            say(f"{self.name} (pid {self.child.pid}) still runs {_RESEND_S} s after {last}: passed on again")
            self.deliver(self.received[-1])


def _exit_status(code: int) -> str:
    """A child's exit status in words: killed by a signal of its own (a negative returncode, or a
    status above 128 from a shell or launcher that passes its child's on), or its own exit status."""
    names = {int(s): s.name for s in signal.Signals}  # (a real-time signal has no name)
    signum = -code if code < 0 else code - 128 if code > 128 else None
    if signum in names:
        cause = " (the kernel does so when the machine runs out of memory)" if signum == signal.SIGKILL else ""
        return f"was killed by {names[signum]}{cause}"
    return f"ended with exit status {code if code >= 0 else 128 - code}"


def _last_line(path: Path, start: int = 0) -> str:
    """The last line of a log written after byte ``start`` that says something (the error a
    traceback ends with; not a rule of ``=`` or ``-``, as torchrun's report ends with)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(start, f.seek(0, os.SEEK_END) - 65536))
            text = f.read().decode("utf-8", "replace")
    except OSError as error:
        return f"(its log could not be read: {error.strerror})"
    lines = [line.strip() for line in text.splitlines() if line.strip(" \t=-")]
    return lines[-1] if lines else "(no output)"


def run_child(command: Sequence, log: Optional[Path] = None, *, append: bool = False, show=None,
              progress: Optional[Progress] = None, errors: Optional[Path] = None, stdin: Iterable[Path] = (),
              env: Optional[dict] = None, cwd=None, hold=(), orphan: bool = False, group: bool = False,
              resend: bool = False, kill_after: Optional[float] = None, name: Optional[str] = None,
              record: bool = False) -> None:
    """Run ``command`` to its end in a process group of its own, SIGINT, SIGTERM and SIGHUP to this
    process passed on to it; return when it succeeded, else raise :class:`~.failure.Failed` naming
    it, its exit status and its log, or KeyboardInterrupt where a signal passed on stopped it.

    - ``log``: the file its output goes to (``append``: added to its end), its errors too unless
      ``errors`` names another file (or is "stderr": this process's); without it, this process's
      standard error. ``record``: the log is recorded as the running command's (runner.records),
      before the child starts and when it ends (a log the kit writes is its own).
    - ``show``: its output's lines shown on this standard output as they come (True: all of them;
      a compiled bytes pattern: those it matches); ``progress`` is fed each line of its stream.
    - ``stdin``: files fed to its input, one after the other.
    - ``hold``: the :class:`~.files.WriterLock` (or locks) it holds with this process: while it runs,
      even when this process is killed, the output stays locked, the holder line naming it.
    - ``orphan``: it goes on when this process dies (else it is killed with it, even by SIGKILL);
      ``group``, ``resend``, ``kill_after``: how a signal is passed on (:class:`_Signals`).
    """
    argv, name = [str(w) for w in command], name or os.path.basename(str(command[0]))
    hold, stdin = [hold] if hasattr(hold, "fd") else list(hold), list(stdin)

    with _Signals(name, group, resend, kill_after) as signals:
        with contextlib.ExitStack() as opened:  # the logs, closed here once the child has them
            out = opened.enter_context(open(log, "ab" if append else "wb")) if log is not None else None
            start = out.tell() if out is not None else 0
            err = opened.enter_context(open(errors, "wb")) if errors not in (None, "stderr") else None
            written = [f for f in (log, err and errors) if f is not None] if record else []
            _record_written(written, _command_name())  # its logs are the kit's, while it writes them too
            with _STARTING:  # not while stop_children stops the others
                if _STOPPING.is_set():  # stop_children: start nothing more
                    raise KeyboardInterrupt
                child = subprocess.Popen(
                    argv, stdout=out or sys.stderr, stderr=subprocess.PIPE if progress is not None and progress.stream == "err"
                    else None if errors == "stderr" else err or subprocess.STDOUT if out is not None else None,
                    stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, env=env, cwd=cwd,
                    pass_fds=tuple(lock.fd for lock in hold), preexec_fn=lambda: _start(orphan))
                _RUNNING.add(child)
        try:
            for lock in hold:
                lock.note(f"{name} pid {child.pid}")
            signals.started(child)
            reader = None
            if child.stderr is not None:  # read from the start: a child that writes errors while it is fed never waits
                reader = threading.Thread(target=_lines, args=(child.stderr, progress.line), daemon=True)
                reader.start()
            _feed(child, stdin, signals)
            _follow(child, log, start, show, progress, signals)
            if reader is not None:
                reader.join()
        finally:
            _RUNNING.discard(child)
            _record_written([f for f in written if Path(f).is_file()], _command_name())
    _ended(child, name, signals, errors if errors not in (None, "stderr") else log if errors is None else None,
           0 if errors else start)


def _ended(child, name: str, signals: _Signals, written: Optional[Path], start: int) -> None:
    """How the child ended, raised: KeyboardInterrupt where it was stopped (a signal passed on, or
    stop_children), Failed, with the last line of ``written`` (its log, from ``start``) and its exit
    status as ``code``, where it failed."""
    if signals.received or _STOPPING.is_set():
        why = signal.Signals(signals.received[0]).name if signals.received else "a failure beside it"
        say(f"{name} (pid {child.pid}) stopped after {why}" + (f" (its last lines: {written})" if written else ""))
        raise KeyboardInterrupt
    if child.returncode != 0:
        said = f": {_last_line(written, start)} (its log: {written})" if written else " (its errors are above)"
        error = Failed(f"{name} {_exit_status(child.returncode)}{said}")
        error.code = child.returncode if child.returncode > 0 else 128 - child.returncode  # (a shell's status)
        raise error


def _feed(child, stdin: List[Path], signals: _Signals) -> None:
    try:
        for path in stdin:
            with open(path, "rb") as f:
                while not signals.received and (block := f.read(1 << 20)):
                    child.stdin.write(block)
    except BrokenPipeError:
        pass
    finally:
        if child.stdin:
            with contextlib.suppress(BrokenPipeError):
                child.stdin.close()


def _follow(child, log, start: int, show, progress: Optional[Progress], signals: _Signals) -> None:
    """Wait for the child; meanwhile, show and count the lines it adds to ``log``."""
    counted = progress is not None and progress.stream == "out"
    with open(log, "rb") if log is not None and (show is not None or counted) else contextlib.nullcontext() as shown:
        rest = b""
        if shown is not None:
            shown.seek(start)
        while True:
            ended = child.poll() is not None
            if not ended:
                signals.tend()
            if shown is not None:
                lines = (rest + shown.read()).split(b"\n")
                rest = lines.pop()
                if ended and rest:
                    lines.append(rest)
                for line in lines:  # (once stopped, what it says as it stops, a traceback, stays in its log)
                    if not signals.received and (show is True or (show is not None and show.search(line))):
                        sys.stdout.buffer.write(line + b"\n")
                        sys.stdout.flush()
                    if counted:
                        progress.line(line)
            if ended:
                return
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=0.2)


def stop_children(stop: bool = True) -> None:
    """Stop every child running now (SIGTERM), and let none start (a run failed beside them: each
    stopped one raises KeyboardInterrupt); ``stop`` False lets children start again."""
    if not stop:
        _STOPPING.clear()
        return
    with _STARTING:
        _STOPPING.set()
        for child in list(_RUNNING):
            with contextlib.suppress(OSError):
                child.terminate()
