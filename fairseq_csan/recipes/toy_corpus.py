"""Write a small English-German toy corpus from a hand-made grammar, offline and deterministic.

It is the quick start's default corpus: real enough to need what a translation model does
(gender and case agreement of articles and adjectives, verb-final subordinate clauses, so
words move locally), small enough to learn in minutes on a CPU. The layout is that of the
shared corpora: train/val/test, one sentence per line, ``.en`` and ``.de``.
"""

import random
from pathlib import Path

from .command_line import Parser, positive
from .runner import Refusal, WriterLock, as_command, check_owned, say, write_file

# English noun -> (German noun, gender)
NOUNS = {
    "dog": ("hund", "m"), "cat": ("katze", "f"), "child": ("kind", "n"), "man": ("mann", "m"),
    "woman": ("frau", "f"), "horse": ("pferd", "n"), "teacher": ("lehrer", "m"),
    "bird": ("vogel", "m"), "house": ("haus", "n"), "car": ("auto", "n"), "ball": ("ball", "m"),
    "book": ("buch", "n"), "street": ("strasse", "f"), "city": ("stadt", "f"),
    "garden": ("garten", "m"), "table": ("tisch", "m"), "flower": ("blume", "f"),
    "apple": ("apfel", "m"), "door": ("tuer", "f"), "window": ("fenster", "n"),
    "girl": ("maedchen", "n"), "boy": ("junge", "m"), "doctor": ("arzt", "m"), "song": ("lied", "n"),
}
# English adjective -> German stem
ADJECTIVES = {
    "red": "rot", "small": "klein", "big": "gross", "old": "alt", "young": "jung", "new": "neu",
    "happy": "froh", "green": "gruen", "fast": "schnell", "quiet": "leise", "black": "schwarz",
    "white": "weiss", "beautiful": "schoen", "tired": "muede", "friendly": "freundlich",
}
# English verb (3rd person singular) -> German verb (3rd person singular)
VERBS = {
    "sees": "sieht", "finds": "findet", "likes": "mag", "buys": "kauft", "paints": "malt",
    "hears": "hoert", "visits": "besucht", "carries": "traegt", "knows": "kennt",
    "follows": "folgt", "draws": "zeichnet", "needs": "braucht", "watches": "beobachtet",
}
SAYERS = {"thinks": "denkt", "says": "sagt", "knows": "weiss", "believes": "glaubt"}
PLACES = {"today": "heute", "again": "wieder", "often": "oft", "now": "jetzt"}

# German article and strong/weak adjective endings by (definite?, case, gender)
ARTICLE = {
    (True, "nom", "m"): "der", (True, "nom", "f"): "die", (True, "nom", "n"): "das",
    (True, "acc", "m"): "den", (True, "acc", "f"): "die", (True, "acc", "n"): "das",
    (False, "nom", "m"): "ein", (False, "nom", "f"): "eine", (False, "nom", "n"): "ein",
    (False, "acc", "m"): "einen", (False, "acc", "f"): "eine", (False, "acc", "n"): "ein",
}
ENDING = {
    (True, "nom", "m"): "e", (True, "nom", "f"): "e", (True, "nom", "n"): "e",
    (True, "acc", "m"): "en", (True, "acc", "f"): "e", (True, "acc", "n"): "e",
    (False, "nom", "m"): "er", (False, "nom", "f"): "e", (False, "nom", "n"): "es",
    (False, "acc", "m"): "en", (False, "acc", "f"): "e", (False, "acc", "n"): "es",
}


def inflect(stem, ending):
    return stem + (ending[1:] if stem.endswith("e") else ending)  # muede + en -> mueden


def noun_phrase(rng, case):
    """An English noun phrase and its German translation in ``case``."""
    noun = rng.choice(sorted(NOUNS))
    de_noun, gender = NOUNS[noun]
    definite = rng.random() < 0.6
    adjectives = rng.sample(sorted(ADJECTIVES), k=rng.choice([0, 0, 1, 1, 2]))
    en = ["the" if definite else ("an" if (adjectives or [noun])[0][0] in "aeiou" else "a")]
    en += adjectives + [noun]
    key = (definite, case, gender)
    de = [ARTICLE[key]] + [inflect(ADJECTIVES[a], ENDING[key]) for a in adjectives] + [de_noun]
    return en, de


def simple_clause(rng):
    """(English words, German main-clause words, German verb-final words)."""
    subj_en, subj_de = noun_phrase(rng, "nom")
    obj_en, obj_de = noun_phrase(rng, "acc")
    verb = rng.choice(sorted(VERBS))
    adverb = rng.choice(sorted(PLACES)) if rng.random() < 0.3 else None
    en = subj_en + [verb] + obj_en + ([adverb] if adverb else [])
    extra = [PLACES[adverb]] if adverb else []
    main = subj_de + [VERBS[verb]] + extra + obj_de
    final = subj_de + extra + obj_de + [VERBS[verb]]
    return en, main, final


def sentence_pair(rng):
    if rng.random() < 0.35:  # "X thinks that S": the German verb goes to the end
        sayer_en, sayer_de = noun_phrase(rng, "nom")
        say = rng.choice(sorted(SAYERS))
        en, _main, final = simple_clause(rng)
        en = sayer_en + [say, "that"] + en
        de = sayer_de + [SAYERS[say], ",", "dass"] + final
    else:
        en, de, _final = simple_clause(rng)
    def text(words):  # detokenised, as raw corpora are: "Der hund sagt, dass ... sieht."
        return (" ".join(words) + ".").replace(" ,", ",").capitalize()

    return text(en), text(de)


def splits_of(args) -> dict:
    """The pairs of each split (train, val, test), drawn from the grammar, no sentence in two."""
    rng, drawn = random.Random(args.seed), {}  # English sentence -> its pair, the first drawn: none in two splits
    total = args.train + args.valid + args.test
    for _ in range(100 * total):
        if len(drawn) == total:
            break
        pair = sentence_pair(rng)
        drawn.setdefault(pair[0], pair)
    if len(drawn) < total:
        raise Refusal(f"the grammar gave only {len(drawn)} distinct sentences; ask for fewer")
    pairs = list(drawn.values())
    return {"train": pairs[: args.train], "val": pairs[args.train: args.train + args.valid],
            "test": pairs[args.train + args.valid:]}


def main(argv=None):
    p = Parser(prog="python -m fairseq_csan.recipes.toy_corpus", description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", type=Path, help="the folder of train, val and test .en and .de")
    p.add_argument("--train", type=positive, default=20000, help="training pairs (default 20000)")
    p.add_argument("--valid", type=positive, default=500, help="validation pairs (default 500)")
    p.add_argument("--test", type=positive, default=500, help="test pairs (default 500)")
    p.add_argument("--seed", type=int, default=1, help="the grammar's random seed (default 1)")
    args, _ = p.read(argv)
    splits = splits_of(args)
    files = {args.out_dir / f"{split}.{lang}": "".join(r[side] + "\n" for r in rows)
             for split, rows in splits.items() for side, lang in ((0, "en"), (1, "de"))}
    with WriterLock(args.out_dir, folder=True, what="toy_corpus"):  # a file of the user's there is refused, not replaced
        check_owned(files, "toy_corpus", None, "OUT_DIR")
        for path, text in files.items():
            write_file(path, text, "toy_corpus")
    say(f"wrote {', '.join(f'{k} {len(v)}' for k, v in splits.items())} pairs to {args.out_dir}")


if __name__ == "__main__":
    as_command(main)
