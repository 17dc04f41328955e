"""The words after ``--`` of train.sh, read as fairseq-train reads them (each function says how)."""

import contextlib
import io
from typing import List, Optional

from .runner import Refusal
from .. import user_dir


# fairseq-train settings (their dest) that the kit sets from its own options, which the run's lock
# and record follow, or that would write elsewhere or start from another run's checkpoint: refused
# after -- under any spelling fairseq's parser reads as them (-a ARCH, -aARCH, --save-dir=DIR, ...)
OWNED_AFTER_DASHES = {  # dest -> what to do instead
    "arch": "give train.sh --arch ARCH", "save_dir": "give train.sh --save-dir DIR", "seed": "give train.sh --seed N",
    "data": "give train.sh --data DIR", "source_lang": "leave it out (the task folder's)",
    "target_lang": "leave it out (the task folder's)", "user_dir": "leave it out (the kit gives the plugin's own)",
    "log_file": "leave it out (the kit logs to SAVE/train.log)", "tensorboard_logdir": "give train.sh --tensorboard DIR",
    "wandb_project": "give train.sh --wandb PROJECT",
    "checkpoint_suffix": "leave it out (resume and evaluate read checkpoint_*.pt)",
    "restore_file": "leave it out (a run resumes from its own --save-dir); a warm start is --finetune-from-model "
                    "CHECKPOINT, which the run's record names", "continue_once": "give train.sh --finetune-from FOLDER"}


def check_after_dashes(command: List[str], arch: str, extra: List[str]):
    """The words after -- as fairseq-train reads them (``command``: its arguments, the task folder
    first): each option resolved by fairseq's own parser, a setting of OWNED_AFTER_DASHES refused
    under any spelling, a word fairseq-train does not take refused, and a run without end (fairseq
    reads --max-update 0 with no --max-epoch as no limit) refused. Returns fairseq's arguments
    (a warm start's --finetune-from-model goes into the run's record)."""
    from .. import register

    register()
    from fairseq import options

    parser = options.get_training_parser()
    options.parse_args_and_arch(parser, [command[0], "--user-dir", user_dir(), "--arch", arch], parse_known=True)
    for word in (w for w in extra if w.startswith("-") and len(w) > 1 and not w[1].isdigit()):
        flag = word.split("=", 1)[0]
        actions = parser._option_string_actions  # fairseq's parser: its prefixes and short forms, as argparse reads them
        prefix = parser.allow_abbrev and flag.startswith("--")  # (fairseq's own parser takes no abbreviations)
        found = [actions[flag]] if flag in actions else [actions[flag[:2]]] if flag[:2] in actions and flag[1] != "-" \
            else list({a.dest: a for s, a in actions.items() if prefix and s.startswith(flag)}.values())
        if len(found) == 1 and found[0].dest in OWNED_AFTER_DASHES:
            raise Refusal(f"{flag} after -- sets fairseq-train's {max(found[0].option_strings, key=len)}, which the kit "
                          f"sets or keeps to itself (the run's lock and record follow it): "
                          f"{OWNED_AFTER_DASHES[found[0].dest]}")
    with contextlib.redirect_stderr(io.StringIO()) as said:
        try:
            args = options.parse_args_and_arch(options.get_training_parser(), command)
        except SystemExit:
            why = said.getvalue().strip().splitlines()[-1].split("error: ", 1)[-1]
            raise Refusal(f"fairseq-train does not take the words after --: {why}") from None
    if not args.max_update and not args.max_epoch:
        raise Refusal("--max-update 0 after --: fairseq-train reads 0 as no limit, and no --max-epoch is given, so it "
                      "would train without end; give train.sh --max-update N (or --max-epoch N after --)")
    return args


def with_overrides(command: List[str], extra: List[str]) -> List[str]:
    """``command + extra`` with each flag given once, as it takes effect: fairseq takes a flag's
    last value, so a flag of ``extra`` (the fairseq flags after ``--``) replaces its earlier
    occurrence in ``command``, values and all, and the printed command says what runs."""
    def flag(word):
        return word.split("=", 1)[0] if word.startswith("--") else None

    given = {flag(w) for w in extra if flag(w)}
    kept, dropping = [], False
    for word in command:
        if flag(word):
            dropping = flag(word) in given
        if not dropping:
            kept.append(word)
    return kept + list(extra)


def flag_value(command: List[str], flag: str) -> Optional[str]:
    """The value of ``flag`` in ``command`` as it takes effect (its last occurrence, as
    ``FLAG VALUE`` or ``FLAG=VALUE``), or None."""
    value = None
    for i, word in enumerate(command):
        if word == flag and i + 1 < len(command):
            value = command[i + 1]
        elif word.startswith(flag + "="):
            value = word[len(flag) + 1:]
    return value
