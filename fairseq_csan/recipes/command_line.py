"""The kit's command lines, parsed by argparse alone (train.sh, sweep.sh): every argparse error
becomes one line of the command's own refusal, the words after ``--`` are passed on unread, an
unknown word is refused before any value is checked, and ``-h``/``--help`` prints the help
wherever it stands. Each option is declared once, in the command's parser."""

from __future__ import annotations

import argparse
import re
import sys
from typing import List, Tuple


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are ``refusal`` (the command's exception) of one line. An
    option's action may carry ``what`` its value is ("a number"), for "--X needs a number"."""

    def __init__(self, *args, refusal, unknown_hint: str = "", **kwargs):
        super().__init__(*args, add_help=False, allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
                         **kwargs)
        self.refusal, self.unknown_hint = refusal, unknown_hint
        self.add_argument("-h", "--help", action="store_true", help="show this help and exit")

    def error(self, message):
        found = re.fullmatch(r"argument ([-\w/]+): (.*)", message, re.S)
        if found is None:
            raise self.refusal(message)
        flag, why = found.groups()
        if why == "expected one argument":
            raise self.refusal(f"{flag} needs {getattr(self._option_string_actions[flag], 'what', 'a value')}")
        ignored = re.fullmatch(r"ignored explicit argument '(.*)'", why)
        if ignored:  # --dry-run=1, -hx: a flag given a value
            first = flag.split("/")[0]
            raise self.unknown(f"{first}={ignored.group(1)}" if first.startswith("--") else first + ignored.group(1))
        raise self.refusal(why if why.startswith(flag) else f"{flag}: {why}")

    def unknown(self, word: str) -> Exception:
        return self.refusal(f"unknown argument '{word}'{self.unknown_hint}")

    def read(self, argv: List[str]) -> Tuple[argparse.Namespace, List[str]]:
        """(the options, the words after ``--``)."""
        cut = argv.index("--") if "--" in argv else len(argv)
        options, unknown = self.parse_known_args(list(argv[:cut]))
        if options.help:
            print(self.format_help(), end="")
            raise SystemExit(0)
        if unknown:
            print(self.format_usage(), end="", file=sys.stderr)
            raise self.unknown(unknown[0])
        return options, list(argv[cut + 1:])
