"""The kit's one option layer: argparse, with every error a :class:`~.runner.Refusal` of one line
(exit status 2: runner.as_command) and the argument types the commands share, each option declared
once in its command's parser; and :func:`can_import`, whether a module a command needs is there.
"""

import argparse
import re
import sys
from typing import Callable, List, Tuple

from .runner import Refusal


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are Refusals of one line. ``unknown_hint`` follows the
    refusal of an unknown word (where its options go instead)."""

    def __init__(self, *args, unknown_hint: str = "", **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, allow_abbrev=False, **kwargs)
        self.unknown_hint = unknown_hint

    def error(self, message):
        found = re.fullmatch(r"argument ([-\w/]+): (.*)", message, re.S)
        if message.startswith("unrecognized arguments: "):  # a word where no option takes one
            self.unknown(message.split(": ", 1)[1].split()[0])
        if found is None:
            raise Refusal(message)
        flag, why = found.groups()
        if why == "expected one argument":
            action = self._option_string_actions.get(flag.split("/")[0])
            raise Refusal(f"{flag} needs {getattr(action, 'metavar', None) or 'a value'}")
        ignored = re.fullmatch(r"ignored explicit argument '(.*)'", why)
        if ignored:  # --dry-run=1, -hx: a switch given a value
            first = flag.split("/")[0]
            self.unknown(f"{first}={ignored.group(1)}" if first.startswith("--") else first + ignored.group(1))
        choice = re.fullmatch(r"invalid choice: (.*) \(choose from (.*)\)", why)
        if choice:  # --share must be auto, all, decoder or none, got 'most'
            allowed = [c.strip().strip("'") for c in choice.group(2).split(",")]
            why = f"must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {choice.group(1)}"
        raise Refusal(why if why.startswith(flag) else f"{flag} {why}" if why.startswith("must") else f"{flag}: {why}")

    def unknown(self, word: str):
        raise Refusal(f"unknown argument '{word}'{self.unknown_hint}")

    def read(self, argv) -> Tuple[argparse.Namespace, List[str]]:
        """(the options, the words after ``--`` unread: for fairseq-train, or train.sh); ``argv`` None: the
        command line's. A word no option knows is refused before any value is checked."""
        argv = list(sys.argv[1:] if argv is None else argv)
        cut = argv.index("--") if "--" in argv else len(argv)
        words = argv[:cut]
        subcommands = {name: parser for a in self._actions if isinstance(a, argparse._SubParsersAction)
                       for name, parser in a.choices.items()}
        if any(w in ("-h", "--help") for w in words):  # wherever it stands; a subcommand's own where one is named
            ([subcommands[w] for w in words if w in subcommands] or [self])[0].print_help()
            raise SystemExit(0)
        known = {option: action.nargs != 0 for parser in [self, *subcommands.values()]  # option -> takes a value
                 for action in parser._actions for option in action.option_strings}
        for before, word in zip([None, *words], words):
            if word.startswith("-") and len(word) > 1 and not word[1].isdigit() and word.split("=", 1)[0] not in known \
                    and not known.get(before):  # (a value that starts with '-': argparse names the option)
                self.unknown(word)
        return self.parse_args(words), argv[cut + 1:]


# the option of evaluate, export, translate, train and prepare files that takes a checkpoint or
# model folder no record speaks for (records.check_made_from, export.check_sealed)
UNCHECKED = ("--unchecked", "take a checkpoint or model folder that no record of the kit's speaks for (fairseq-train's "
             "own, or a published model): what made it is not checked, only its dictionaries and languages; the "
             "output says so")


def can_import(module: str) -> bool:
    """Whether ``module`` imports: found is not enough (torch.utils.tensorboard is always there,
    and fails on import without TensorBoard)."""
    try:
        __import__(module)
        return True
    except ImportError:
        return False


# ------------------------------------------------------------------------ the shared types

def whole(text: str, least: int = 0) -> int:
    """A whole number of ``least`` (0, or 1: :func:`positive`) or more."""
    if not re.fullmatch(r"[0-9]+", text.strip()) or int(text) < least:
        raise argparse.ArgumentTypeError(f"must be a whole number{' of 1 or more' if least else ''}, got '{text}'")
    return int(text)


def positive(text: str) -> int:
    return whole(text, 1)


def at_least(least: float, kind: Callable = float):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of at least {least:g}, got '{text}'") from None
        if not value >= least:
            raise argparse.ArgumentTypeError(f"must be at least {least:g}, got '{text}'")
        return value
    return parse


LANGUAGE = re.compile(r"[a-z]{2,3}(_[A-Za-z0-9]+)?")  # a language code as a file's suffix: en, fr, pt_BR, yue


def language(text: str) -> str:
    if not LANGUAGE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must be a language code (two or three lower-case letters, optionally with a "
                                         f"_REGION: en, fr, zh, ja, pt_BR), got '{text}'")
    return text


def items(kind: Callable = str, allowed=None, odd: bool = False, empty: bool = True):
    """A list given as one word, its items apart by commas or spaces (``1,2,3``, ``"1 2 3"``; ``""``
    for none, unless not ``empty``), each of ``kind`` (and among ``allowed``, odd), none twice."""
    def parse(text: str) -> list:
        words = text.replace(",", " ").split()
        if not words and not empty:
            raise argparse.ArgumentTypeError("needs at least one" + (f" of {', '.join(allowed)}" if allowed else ""))
        try:
            values = [kind(word) for word in words]
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}': comma-separated whole numbers, e.g. 1,2,3") from None
        wrong = [w for w, v in zip(words, values) if (allowed and v not in allowed) or (odd and (v < 1 or v % 2 == 0))]
        if wrong:
            what = f"one of {', '.join(map(str, allowed))}" if allowed else "a positive odd number"
            raise argparse.ArgumentTypeError(f"each item must be {what}, got '{wrong[0]}'")
        twice = sorted({w for w in words if words.count(w) > 1})
        if twice:
            raise argparse.ArgumentTypeError(f"lists {', '.join(twice)} more than once")
        return values
    return parse
