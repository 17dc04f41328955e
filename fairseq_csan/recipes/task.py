"""The prepared task folder: its one reader and writer.

``examples/<task>/prepare.sh`` makes a folder that every later command reads::

    task.json      what was prepared, and what it found (TASK's fields; docs/recipes.md, 'Your
                   own corpus' and 'Pre-tokenised corpora', says what each holds)
    tools.txt      the versions of the tokenisers and subword-nmt that made it
    raw/           {train,valid,test,test1,...}.{src,tgt}: the gathered corpora (the references of sacreBLEU)
    tok/           the same, tokenised (test.tgt is the reference of tokenised BLEU)
    bpe/           codes (joint BPE) or codes.LANG, and the segmented files
    data-bin/      fairseq-preprocess's output: dict.LANG.txt and the binarised splits
    .steps/        what each file was made from (the runner's step stamps)
"""

from pathlib import Path

from .runner import Kind, Refusal

TASK = Kind("task", "task.json", {
    "task": "text", "src": "text", "tgt": "text", "merges": "int", "joint_bpe": "flag", "clean_max_len": "int",
    "clean_ratio": "float", "tests": "list", "tokenizer_src": "text", "tokenizer_tgt": "text",
    "pretokenized": "flag", "test_names": "json", "warnings": "json", "like": "json"}, earlier=("recipe.env",))

FINDINGS = ("warnings", "test_names")  # what a preparation found or named, not a setting that makes another task


def complete(settings: dict) -> dict:
    """The settings of a folder prepared before ``tests`` and the tokenisers were recorded: one
    test set, and each language's rule (the rules have not changed since)."""
    settings = dict(settings)
    if settings.get("src") and settings.get("tgt"):
        from .text import tokenizer_name

        settings.setdefault("tests", ["test"])
        settings.setdefault("pretokenized", False)
        for side in ("src", "tgt"):
            settings.setdefault(f"tokenizer_{side}", tokenizer_name(settings[side]))
    return settings


class PreparedTask:
    def __init__(self, root: Path, settings: dict):
        self.root, self.settings = Path(root), dict(settings)

    @classmethod
    def open(cls, root, flag: str = "--data") -> "PreparedTask":
        root = Path(root)
        if not is_task(root):
            raise Refusal(f"{flag} {root} is not a prepared task folder (no task.json or data-bin/; make one with "
                          "examples/<task>/prepare.sh or python -m fairseq_csan.recipes.prepare files)")
        settings = complete(TASK.read(root) or {})
        for key in ("task", "src", "tgt"):
            if not settings.get(key):
                raise Refusal(f"{TASK.path(root)} names no {key} (prepare {root} again with the command that made it)")
        return cls(root, settings)

    def __getattr__(self, key):
        if key in TASK.fields:
            return self.settings.get(key, "")
        raise AttributeError(key)

    @property
    def data_bin(self) -> Path:
        return self.root / "data-bin"

    @property
    def test_sets(self):
        """The test splits: test, and test1, test2, ... for further test sets."""
        return list(self.settings.get("tests", ["test"]))

    def test_name(self, split: str) -> str:
        """A split's own name in reports: a test set's file name (test_2016_flickr), else the split."""
        return (self.settings.get("test_names") or {}).get(split, split)

    @property
    def splits(self):
        return ["train", "valid", *self.test_sets]

    @property
    def joint(self) -> bool:
        return self.settings.get("joint_bpe", True)

    def codes(self, lang: str) -> Path:
        """The BPE codes that segment ``lang``."""
        return self.root / "bpe" / ("codes" if self.joint else f"codes.{lang}")

    def raw(self, split: str, lang: str) -> Path:
        return self.root / "raw" / f"{split}.{lang}"

    def tok(self, split: str, lang: str) -> Path:
        return self.root / "tok" / f"{split}.{lang}"

    @classmethod
    def create(cls, root, settings: dict, force: bool = False, write: bool = True) -> "PreparedTask":
        """Write the task record; a folder prepared with other settings is refused unless ``force``.
        Not ``write`` (a dry run): the task as it would be, nothing written."""
        root, settings = Path(root), TASK.typed(settings)
        try:
            before = TASK.read(root) or {}
        except Refusal:  # damaged, or an earlier version's: --force prepares it again
            if not force:
                raise
            before = {}
        held, asked = ({k: v for k, v in d.items() if k not in FINDINGS} for d in (complete(before), settings))
        if before and not force and held != asked:
            changed = "; ".join(f"{key} {held.get(key)!r} then, {asked.get(key)!r} now"
                                for key in sorted(set(held) | set(asked)) if held.get(key) != asked.get(key))
            raise Refusal(f"{root} was prepared with other settings ({changed}; see {TASK.path(root)}); use --force "
                          "to redo it or another --out")
        kept = {"warnings": before["warnings"]} if not force and "warnings" in before else {}
        settings = {**settings, **kept}
        return cls(root, TASK.write(root, settings) if write else settings)


def is_task(root) -> bool:
    """Whether ``root`` is a prepared task folder: its task record and data-bin/."""
    return TASK.exists(root) and (Path(root) / "data-bin").is_dir()
