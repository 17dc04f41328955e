"""The kit's one failure path and its one message printer.

Every command runs as ``as_command(main)``: ``main(argv)`` parses, plans and runs, and raises
to end otherwise than done: :class:`Refusal` (exit status 2), :class:`Failed` or an OSError (1),
KeyboardInterrupt (130); docs/recipes.md, "How every command ends", says what each means.
"""

import errno
import sys
from typing import Callable, List, Optional


class Refusal(Exception):
    """The command must not run as asked; the message says why and what to do, in one line."""


class Failed(Exception):
    """A step or child failed; the message names it and where its log is, in one line."""


_NAME = ["kit"]  # the running command's name, as its messages are prefixed ([evaluate] ...)

_ADVICE = {errno.ENOSPC: "free space on its disk", errno.EDQUOT: "free space within your disk quota",
          errno.EFBIG: "raise the file-size limit (ulimit -f)", errno.EACCES: "give a place where you can write",
          errno.EPERM: "give a place where you can write", errno.EROFS: "give a place on a disk that can be written"}


def _command_name() -> str:
    """The running command's name (its module's: evaluate, prepare, ...), which its messages and
    the records of what it wrote name."""
    return _NAME[0]


def say(message: str, stream=None) -> None:
    """The kit's one message printer: ``[command] message`` on standard error (or ``stream``)."""
    print(f"[{_NAME[0]}] {message}", file=stream or sys.stderr, flush=True)


def _fault(error: OSError) -> str:
    where = error.filename or "a file it writes"
    if error.filename2:  # a copy: where it was written, and from what
        where = f"{error.filename2} (a copy of {error.filename})"
    return (f"{where}: {error.strerror or error}; {_ADVICE.get(error.errno, 'see the line above')}, then run the same "
            "command again (no output is left half written)")


def as_command(main: Callable[[Optional[List[str]]], None], argv: Optional[List[str]] = None) -> None:
    """Run a command's ``main(argv)`` and end the process with its status (the module's
    docstring): a refusal, a failure, a fault of the machine or an interruption in one line."""
    spec = getattr(sys.modules.get(main.__module__), "__spec__", None)  # python -m: __main__, its spec the module
    before, _NAME[0] = _NAME[0], (spec.name if spec else main.__module__).rpartition(".")[2]
    try:
        main(argv)
    except (Refusal, Failed, OSError) as error:
        say(f"error: {_fault(error) if isinstance(error, OSError) else error}")
        raise SystemExit(2 if isinstance(error, Refusal) else 1) from None
    except KeyboardInterrupt:
        say("interrupted; run the same command again to go on")
        raise SystemExit(130) from None
    finally:
        _NAME[0] = before  # (a caller's own name again, where a command ran in its process)
    raise SystemExit(0)
