"""Prepare a task: raw corpora -> tokenised -> cleaned -> BPE -> fairseq-preprocess.

A preset task (``python -m fairseq_csan.recipes.prepare wmt14_en_de``, or its door
``examples/<task>/prepare.sh``) takes its settings (joint BPE or not, the cleaning ratio, the
default merges and raw folder) from ``corpora.TASKS``; ``files`` takes a user's corpus. The six
steps (1 gather: corpora.py; 2 tokenise: text.py; 3 clean; 4 learn BPE; 5 apply BPE; 6 binarise)
write the folder that task.py describes. docs/recipes.md says what each step does ('Preparation',
'Cleaning'), and what is refused before the first step writes and what a rerun skips or redoes
('What each command owns, reuses and redoes').
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import time
from functools import partial
from pathlib import Path
from typing import List, Optional

from . import corpora, like, text
from .command_line import UNCHECKED, Parser, at_least, can_import, language, positive
from .runner import (Progress, Refusal, Step, WriterLock, as_command, check_owned, forget_written, refuse_overlaps,
                     run_child, say, shell_words, write_file)
from .task import TASK, PreparedTask

OWNED = ("raw", "tok", "bpe", "data-bin", ".steps", "task.json", "tools.txt")  # what prepare writes in OUT
TOKENIZER_PACKAGE = {"zh": "jieba", "ja": "fugashi"}  # the rest: sacremoses (text.py)


def suspicious(task, splits, src, tgt, located) -> List[str]:
    """What looks like a mistake in the gathered corpora, one sentence each: one file given for two
    splits, and a validation or test set whose pairs are training pairs too (all of them: the set
    lies inside the training set). The training files are read once, as bytes; only the other
    splits' pairs are held in memory."""
    uses = {}
    for split in splits:
        for _, files in located[split]:
            for lang, path in files.items():
                uses.setdefault(os.path.realpath(path), []).append(f"{split}.{lang}")
    notes = [f"one file, {path}, is given for {' and '.join(where)}" for path, where in sorted(uses.items())
             if len({use.split(".")[0] for use in where}) > 1]
    held = {}  # (source line, target line) -> the splits that hold the pair
    for split in (split for split in splits if split != "train"):
        with open(task.raw(split, src), "rb") as a, open(task.raw(split, tgt), "rb") as b:
            for pair in zip(a, b):
                held.setdefault(pair, set()).add(split)
    found = {}
    with open(task.raw("train", src), "rb") as a, open(task.raw("train", tgt), "rb") as b:
        for pair in zip(a, b):
            for split in held.get(pair, ()):
                found.setdefault(split, set()).add(pair)
    for split in splits:
        if found.get(split):
            total = sum(1 for splits_of in held.values() if split in splits_of)
            inside = f": the {split} set lies inside the training set" if len(found[split]) == total else ""
            notes.append(f"{len(found[split])} of the {total} distinct {split} pairs are training pairs too{inside}; "
                         "scores on it would overstate the model")
    return notes


def tokenised_already(task, langs, pretokenized: bool, own_files: bool) -> List[str]:
    """For each language whose training text looks tokenised already (text.looks_tokenized, on its
    first 5,000 lines), a sentence saying so: it is tokenised again unless --pretokenized (of
    prepare files: a preset's corpora are raw text as published)."""
    how = "prepare it with --pretokenized" if own_files else "prepare its files with prepare files --pretokenized"
    notes = []
    for lang in langs if not pretokenized else ():
        with open(task.raw("train", lang), encoding="utf-8", errors="replace") as f:
            why = text.looks_tokenized((line for _, line in zip(range(5000), f)), lang)
        if why:
            notes.append(f"train.{lang} looks tokenised already ({why}); it is tokenised again, which splits its "
                         f"tokens further (didn 't -> didn ' t); to keep its own tokens, {how} "
                         "(PRETOKENIZED=1 in the quick start; docs/recipes.md, Pre-tokenised corpora)")
    return notes


FILES = "files"  # the user's own corpus; the other choices are the presets of examples/<task>/prepare.sh
USAGE = f"""python -m fairseq_csan.recipes.prepare files --src XX --tgt YY --train PREFIX --valid PREFIX
           --test PREFIX [--test PREFIX ...] [--out DIR] [options]   (your own corpus; files --help)
       bash examples/TASK/prepare.sh [options]   (a preset: {', '.join(sorted(corpora.TASKS))}; --help)"""


def _common(p, default_out, merges_help):
    p.add_argument("--out", type=Path, metavar="DIR", help=f"output folder (default: {default_out})")
    p.add_argument("--merges", type=positive, metavar="N", help=f"BPE merge operations (default: {merges_help})")
    p.add_argument("--workers", type=positive, metavar="N",
                   help="processes for tokenisation, BPE and binarisation (default: all cores)")
    p.add_argument("--force", action="store_true",
                   help="delete what this command wrote in OUT (not the downloads) and redo every step; refused "
                        "when those folders hold files it did not write")
    p.add_argument("--dry-run", action="store_true",
                   help="print the steps a run would take now (each step the run then takes), and exit: nothing is "
                        "written, downloaded or extracted")


def parser() -> argparse.ArgumentParser:
    """prepare's options, each declared once: ``files`` (the user's own corpus) and one preset per
    task of corpora.TASKS, each a subcommand with its own defaults."""
    p = Parser(prog="python -m fairseq_csan.recipes.prepare", usage=USAGE,
               description="Prepare a parallel corpus for fairseq (docs/recipes.md).")
    tasks = p.add_subparsers(dest="task", metavar="TASK", title="tasks")
    f = tasks.add_parser(
        FILES, prog="python -m fairseq_csan.recipes.prepare files", help="your own corpus, any language pair",
        description="Prepare your own parallel corpus, any language pair, either direction (docs/recipes.md, "
                    "Your own corpus). Each split is a pair of line-aligned UTF-8 files PREFIX.SRC and PREFIX.TGT; "
                    "the first --test is the test set (fairseq's subset test), further ones are test1, test2, ... "
                    "Each language is tokenised by its own rules: Moses with the language's nonbreaking prefixes "
                    "where sacremoses has them (else English's, as Moses' tokenizer.perl), jieba for zh, MeCab for ja; "
                    "task.json names the rule. Then the steps of every task: cleaning, BPE, fairseq-preprocess.")
    f.add_argument("--src", required=True, type=language, metavar="XX", help="source language code (the files' suffix), "
                   "e.g. fr")
    f.add_argument("--tgt", required=True, type=language, metavar="YY", help="target language code, e.g. en")
    f.add_argument("--train", required=True, metavar="PREFIX", help="training set: PREFIX.XX and PREFIX.YY")
    f.add_argument("--valid", required=True, metavar="PREFIX", help="validation set")
    f.add_argument("--test", required=True, action="append", metavar="PREFIX",
                   help="a test set; repeat for more (the first is the subset test, then test1, test2, ...)")
    _common(f, "data/XX_YY", "32000, as the papers; fewer for a small corpus, e.g. 8000 for 30K pairs")
    f.add_argument("--joint-bpe", type=int, choices=(0, 1),
                   help="1: one BPE model and one dictionary for both languages; 0: one each (default: 1, "
                        "and 0 where one side is zh or ja, as the Zh-En and Ja-En presets)")
    f.add_argument("--clean-ratio", type=at_least(1), metavar="R",
                   help="drop training pairs whose token-length ratio exceeds R (default: 1.5, and 9 where one "
                        "side is zh or ja, whose words are counted otherwise, as the presets)")
    f.add_argument("--clean-max-len", type=positive, default=250, metavar="N",
                   help="drop training pairs with a side over N tokens (default 250)")
    f.add_argument("--pretokenized", action="store_true",
                   help="the files are tokenised (or segmented) already: keep their own tokens, and score against "
                        "the references as given (sacreBLEU tokenize none); the model folder translates tokens to "
                        "tokens (docs/recipes.md, Pre-tokenised corpora)")
    f.add_argument("--like", type=Path, metavar="FOLDER",
                   help="cut the corpus as a trained model's data was, to fine-tune it: tokenise with the model "
                        "folder's tokenizer, split with its BPE codes and binarise with its dictionaries unchanged "
                        "(docs/recipes.md, Start from a trained Transformer); not with --merges, --joint-bpe or "
                        "--pretokenized, which the folder decides")
    f.add_argument(UNCHECKED[0], action="store_true", help=UNCHECKED[1] + " (of --like FOLDER)")
    for name, spec in sorted(corpora.TASKS.items()):
        t = tasks.add_parser(name, prog=f"prepare.sh ({name})", help=f"the {name} preset (examples/*/prepare.sh)",
                             description="Prepare the task's corpora for fairseq (docs/recipes.md).")
        default_raw = f"${spec.raw_env} if set, else {spec.default_raw or 'OUT/downloads'}"
        t.add_argument("--raw-dir", type=Path, metavar="DIR",
                       help=f"folder holding the raw corpora, or receiving the downloads (default: {default_raw})")
        _common(t, f"data/{name}", f"{spec.merges}{spec.merges_why}")
        t.add_argument("--no-download", action="store_true",
                       help="never download; stop with a message when a corpus is missing")
        t.add_argument("--list", action="store_true", help="print what the raw folder must hold, and exit")
        # the task's own settings (corpora.TASKS), which these hidden flags may override
        t.add_argument("--joint-bpe", type=int, choices=(0, 1), default=spec.joint_bpe, help=argparse.SUPPRESS)
        t.add_argument("--clean-ratio", type=float, default=spec.clean_ratio, help=argparse.SUPPRESS)
        t.add_argument("--clean-max-len", type=int, default=250, help=argparse.SUPPRESS)
    return p


def own_corpus_defaults(src: str, tgt: str):
    """``prepare files``' joint BPE (1 or 0) and cleaning ratio for a pair, as the presets have them:
    separate BPE and a ratio of 9 where one side is zh or ja (segmented: words counted otherwise)."""
    segmented = {text.base_language(lang) for lang in (src, tgt)} & set(text.SEGMENTED)
    return (0, 9.0) if segmented else (1, 1.5)


def flags_given(args, *flags) -> str:
    """Those of ``flags`` given on the command line (a value other than None or False), as a list."""
    return ", ".join(flag for flag in flags if getattr(args, flag[2:].replace("-", "_")) not in (None, False))


def parse(argv=None):
    args, _ = parser().read(argv)
    if args.task is None:
        raise Refusal(f"give a task: files (your own corpus) or a preset ({', '.join(sorted(corpora.TASKS))})")
    args.like_info = None
    if args.task != FILES:
        spec = args.spec = corpora.TASKS[args.task]
        args.default_merges, args.default_raw = spec.merges, Path(spec.default_raw) if spec.default_raw else None
        ignored = flags_given(args, "--raw-dir", "--out", "--merges", "--workers", "--no-download", "--force",
                              "--dry-run")
        if args.list and ignored:
            raise Refusal(f"--list prints what the raw folder must hold, and exits: {ignored} would be ignored; give "
                          "--list alone")
        return args
    args.spec = corpora.files_task(args.src, args.tgt, args.train, args.valid, args.test)
    args.default_merges, args.raw_dir, args.default_raw, args.no_download, args.list = 32000, Path(""), None, True, False
    if args.unchecked and args.like is None:
        raise Refusal("--unchecked takes a --like folder without export.json; give --like FOLDER too, or leave it out")
    if args.like is not None:
        decided = flags_given(args, "--merges", "--joint-bpe", "--pretokenized")
        if decided:
            raise Refusal(f"--like {args.like} decides the tokens, the BPE and the dictionaries: leave out {decided}")
        args.like_info = like.read(args.like, args.src, args.tgt, args.unchecked)
        args.merges, args.joint_bpe, args.pretokenized = 0, 1, args.like_info["pretokenized"]
    joint, ratio = own_corpus_defaults(args.src, args.tgt)
    args.joint_bpe = joint if args.joint_bpe is None else args.joint_bpe
    args.clean_ratio = ratio if args.clean_ratio is None else args.clean_ratio
    return args


def check_tools(src: str, tgt: str) -> None:
    for tool in ("fairseq-preprocess", "subword-nmt"):
        if shutil.which(tool) is None:
            raise Refusal(f"{tool} not found: install the project with bash scripts/install.sh")
    for lang in (src, tgt):
        module = TOKENIZER_PACKAGE.get(text.base_language(lang), "sacremoses")
        if not can_import(module):
            raise Refusal(f"python module '{module}' (for {lang}) not found: pip install -e '.[recipes]' from the "
                          "repository")


def settings_of(args, spec) -> dict:
    """What task.json records: the task, its languages and the settings that make it."""
    src, tgt, like_info = spec.src, spec.tgt, args.like_info
    pretokenized = bool(getattr(args, "pretokenized", False))
    tokenizers = {lang: f"{like_info['tokenizer']} of --like {like_info['folder']}" if like_info else
                  text.tokenizer_name(lang, pretokenized) for lang in (src, tgt)}
    tests = [s for s in spec.splits if s.startswith("test")]
    return {"task": spec.name, "src": src, "tgt": tgt, "merges": 0 if like_info else args.merges or args.default_merges,
            "joint_bpe": args.joint_bpe, "clean_max_len": args.clean_max_len, "clean_ratio": f"{args.clean_ratio:g}",
            "tests": ",".join(tests), "tokenizer_src": tokenizers[src], "tokenizer_tgt": tokenizers[tgt],
            "pretokenized": pretokenized, "test_names": {split: corpora.test_name(spec, split) for split in tests},
            **({"like": like_info} if like_info else {})}


def plan(args) -> dict:
    """Every check before the first step writes (a raw corpus where this command writes would be
    removed before it is read), the raw corpora found (or downloaded and extracted: not on a dry
    run); the task as it will be."""
    spec = args.spec
    out = args.out or Path("data") / spec.name
    raw = args.raw_dir or Path(os.environ.get(spec.raw_env) or args.default_raw or out / "downloads")
    check_tools(spec.src, spec.tgt)
    owned = {sub: out / sub for sub in OWNED}
    writes = {f"--out {out}'s {sub}/": path for sub, path in owned.items()}
    real_raw = Path(os.path.realpath(raw))
    for sub, path in owned.items() if args.task != FILES else ():  # (a --raw-dir around OUT is fine)
        if Path(os.path.realpath(path)) in (real_raw, *real_raw.parents):
            raise Refusal(f"--out {out}'s {sub}/ {path} is or holds --raw-dir {raw}, which this command reads; keep the "
                          "raw corpora elsewhere (the default is OUT/downloads)")
    given = {}  # prepare files: the user's files, each named
    for corpus in (c for cs in spec.splits.values() for c in cs) if args.task == FILES else ():
        for lang, path in corpus.layouts[0].items():
            if not corpora.present(path):
                raise Refusal(f"{corpus.name}: no file {path} (its {lang} side: PREFIX.{spec.src} and PREFIX.{spec.tgt}, "
                              f"line-aligned UTF-8, or PREFIX.{spec.src}.gz and PREFIX.{spec.tgt}.gz)")
            given[f"{corpus.name}'s {lang} side"] = path
    refuse_overlaps(writes, given)
    if not args.dry_run:
        WriterLock(out, folder=True, what=f"prepare.sh ({spec.name})").acquire()  # held to the end
    check_owned(owned.values(), "prepare", None, "--out", redo=True)  # before any download: nothing of the user's is replaced
    located = {split: corpora.locate_split(spec, split, raw, not args.no_download, look_only=args.dry_run)
               for split in spec.splits}
    inputs = {f"the {split} corpus": f for split in spec.splits for _, files in located[split] or () for f in files.values()}
    refuse_overlaps(writes, inputs)
    task = PreparedTask.create(out, settings_of(args, spec), force=args.force, write=False)
    return dict(args=args, spec=spec, out=out, raw=raw, located=located, task=task, owned=owned,
                workers=args.workers or os.cpu_count() or 4, changing=set())


def begin(p: dict) -> PreparedTask:
    """--force's removal, then the task record and the tools' versions written."""
    out, args = p["out"], p["args"]
    if args.force and out.exists():
        say(f"--force: removing what prepare wrote in {out} (raw, tok, bpe, data-bin, .steps; never the downloads)")
        forget_written(p["owned"].values())
    task = PreparedTask.create(out, p["task"].settings, force=args.force)
    write_file(out / "tools.txt", "".join(f"{k}\t{v}\n" for k, v in text.versions().items()))
    return task


def step(p: dict, name: str, inputs, outputs, action, what: str, short: str = "", why: Optional[str] = None,
         **settings) -> bool:
    """One step of the plan, run where it is not current (runner.make), ``action`` given the
    outputs' temporaries, one argument each; on a dry run, a line of what it would do and why
    (``why``, or the step's own verdict, Step.stale, told the outputs of the steps listed above it)."""
    s = Step(p["task"].root, name, inputs, outputs, settings)
    if not p["args"].dry_run:
        return s.make(lambda temps: action(*temps), what=what, short=short)
    reason = why or s.stale(p["args"].force, p["changing"])
    if reason is None:
        say(f"{short or what}: up to date; would be skipped")
        return False
    p["changing"].update(s.outputs)
    say(f"{'may' if reason == Step.MAY_RUN else 'would'} run: {what} ({reason})")
    return True


def call(argv, stdout=None, stdin=(), progress=None) -> None:
    """A step's command, shown as a shell line that can be pasted, then run (its output to
    ``stdout``, ``stdin`` files fed to it). No progress bar of tqdm's (subword-nmt's) where no one
    watches: in a log file its carriage returns make one line of hundreds of updates."""
    argv, stdin = [str(w) for w in argv], list(stdin)
    shown = (f"cat {shell_words(stdin)} | " if stdin else "") + shell_words(argv)
    say(f"  $ {shown}" + (f" > {stdout}" if stdout else ""))
    env = None if progress is None and os.isatty(2) else {**os.environ, "TQDM_DISABLE": "1"}
    run_child(argv, stdout, stdin=stdin, env=env, progress=progress, name=argv[0])


def learn_bpe(merges: int, inputs, codes, named: Path) -> None:
    """subword-nmt learn-bpe into ``codes`` (the temporary of ``named``), its merges as they come
    (``--verbose``: "pair K: a b -> ab", the same codes) counted into a progress line; its other
    error lines shown as they are."""
    def merge(line: bytes):
        found = re.match(rb"pair (\d+): ", line)
        return int(found.group(1)) + 1 if found else None

    call(["subword-nmt", "learn-bpe", "-s", merges, "--verbose"], stdout=codes, stdin=inputs,
         progress=Progress("learn BPE: merge", "merges", merges, count_of=merge, stream="err"))
    learnt = sum(1 for row in text.iter_lines(codes) if row and not row.startswith("#version"))
    if learnt < merges:  # subword-nmt stops where no pair of symbols occurs twice
        say(f"4/6 {named}: {learnt} merges learnt, of {merges} asked: after the {learnt}th no pair of symbols "
            "occurs twice in the training text (a small corpus)")


def apply_bpe(codes: Path, workers: int, source: Path, target: Path) -> None:
    call(["subword-nmt", "apply-bpe", "-c", codes, "--num-workers", workers, "--input", source, "--output", target])


def gather(p: dict, task: PreparedTask) -> None:
    """Step 1, each split; then what looks like a mistake in the corpora said (and kept in task.json)."""
    spec, raw, located, (src, tgt) = p["spec"], p["raw"], p["located"], (p["spec"].src, p["spec"].tgt)
    gathered = False
    for split in spec.splits:  # (located None: a dry run, and a corpus not there as files)
        gathered |= step(p, f"gather.{split}", [f for _, files in located[split] or () for f in files.values()],
                         [task.raw(split, src), task.raw(split, tgt)],
                         lambda a, b, split=split: corpora.write_split(spec, split, located[split], {src: a, tgt: b}),
                         f"1/6 gather {split} from {raw}", f"1/6 gather {split}", task=spec.name,
                         why=None if located[split] is not None else "a corpus to extract or download first")
    if p["args"].dry_run:
        return
    found = task.settings.get("warnings")
    if gathered or found is None:
        found = suspicious(task, list(spec.splits), src, tgt, located) + tokenised_already(
            task, (src, tgt), task.pretokenized, p["args"].task == FILES)
    for warning in found:
        say(f"warning: {warning}")
    if task.settings.get("warnings") != found:
        task.settings = TASK.write(task.root, {**task.settings, "warnings": found})


def tokenise(p: dict, task: PreparedTask) -> None:
    """Step 2: each split and language, by its rule (or the --like folder's tokenizer, through
    fairseq's registry)."""
    like_info, tools = p["args"].like_info, text.versions()
    for split in task.splits:
        for lang in (task.src, task.tgt):
            source, label = task.raw(split, lang), f"2/6 tokenise {split}.{lang}"
            if like_info:
                action = partial(like.encode_file, like_info, "tokenizer", lang, source)
                what, how = f"{label} ({like_info['tokenizer']}, as --like)", {"like": like_info["model.pt"],
                                                                               "tokenizer": like_info["tokenizer"]}
            else:
                module = TOKENIZER_PACKAGE.get(text.base_language(lang), "sacremoses")
                rule = task.settings[f"tokenizer_{'src' if lang == task.src else 'tgt'}"]
                action = partial(text.tokenize_file, lang, source, workers=p["workers"], pretokenized=task.pretokenized)
                what, how = label, {"tokenizer": text.AS_GIVEN if task.pretokenized else
                                    f"{module} {tools.get(module, tools.get('sacremoses'))}",
                                    **({"rule": rule} if "no rules" in rule else {})}
            step(p, f"tok.{split}.{lang}", [source], [task.tok(split, lang)], action, what, label, lang=lang, **how)


def segment(p: dict, task: PreparedTask) -> List[Path]:
    """Steps 3 to 5: the training pairs cleaned, BPE learnt (or the --like folder's codes) and
    applied (or the folder's BPE kind, through fairseq's registry); the segmented files."""
    args, like_info, (src, tgt) = p["args"], p["args"].like_info, (task.src, task.tgt)
    tok = [task.tok("train", lang) for lang in (src, tgt)]
    clean = {lang: task.root / "tok" / f"train.clean.{lang}" for lang in (src, tgt)}
    step(p, "clean", tok, list(clean.values()),
         partial(text.clean_pair, *tok, max_len=args.clean_max_len, ratio=args.clean_ratio),
         f"3/6 clean training pairs (1..{args.clean_max_len} tokens, ratio <= {args.clean_ratio:g}, tokens of "
         f"<= {text.MAX_TOKEN_CHARS} characters)", "3/6 clean", max_len=args.clean_max_len, ratio=args.clean_ratio,
         max_token_chars=text.MAX_TOKEN_CHARS)
    bpe_version, merges = text.versions().get("subword-nmt"), task.merges
    for langs in () if like_info else [(src, tgt)] if task.joint else [(src,), (tgt,)]:
        inputs, codes = [clean[lang] for lang in langs], task.codes(langs[0])
        step(p, f"learn_bpe.{'+'.join(langs)}", inputs, [codes], partial(learn_bpe, merges, inputs, named=codes),
             f"4/6 learn {merges} {'joint ' if task.joint else ''}BPE merges on {'+'.join(langs)} (subword-nmt; long "
             "on the full corpus)", f"4/6 BPE: {codes}", merges=merges, **{"subword-nmt": bpe_version})
    if like_info:  # the folder's codes, as they are
        codes = Path(like_info["folder"]) / like_info["bpe_file"]
        step(p, "like_bpe", [codes], [task.codes(src)], partial(shutil.copyfile, codes),
             f"4/6 BPE: the codes of --like ({codes})", f"4/6 BPE: {task.codes(src)}", bpe=like_info["bpe"])
    for split in task.splits:
        for lang in (src, tgt):
            source = clean[lang] if split == "train" else task.tok(split, lang)
            target, what = task.root / "bpe" / f"{split}.{lang}", f"5/6 apply BPE to {split}.{lang}"
            action, how = partial(apply_bpe, task.codes(lang), p["workers"], source), {"subword-nmt": bpe_version}
            if like_info:
                action, how = partial(like.encode_file, like_info, "bpe", lang, source), {"bpe": like_info["bpe"]}
                what += f" ({like_info['bpe']}, as --like)"
            step(p, f"apply_bpe.{split}.{lang}", [source, task.codes(lang)], [target], action, what,
                 f"5/6 apply BPE: {target}", **how)
    return [task.root / "bpe" / f"{split}.{lang}" for split in task.splits for lang in (src, tgt)]


def binarise(p: dict, task: PreparedTask, bpe_files: List[Path]) -> None:
    """Step 6: fairseq-preprocess, with one joined dictionary, or the --like folder's dictionaries unchanged."""
    like_info, (src, tgt) = p["args"].like_info, (task.src, task.tgt)
    dictionaries = [Path(like_info["dicts"][lang]["file"]) for lang in (src, tgt)] if like_info else []
    joined = ["--srcdict", dictionaries[0], "--tgtdict", dictionaries[1]] if like_info else (
        ["--joined-dictionary"] if task.joint else [])
    tests = ",".join(str(task.root / "bpe" / split) for split in task.test_sets)
    step(p, "binarise", [*bpe_files, *dictionaries], [task.data_bin],
         lambda temp: call(["fairseq-preprocess", "--source-lang", src, "--target-lang", tgt, "--trainpref",
                            task.root / "bpe/train", "--validpref", task.root / "bpe/valid", "--testpref", tests,
                            "--destdir", temp, *joined, "--workers", p["workers"]]),
         "6/6 binarise with fairseq-preprocess", "6/6 binarise", joined=task.joint and not like_info, src=src, tgt=tgt)


def unknown_tokens(task: PreparedTask, limit: float = 5.0) -> List[str]:
    """A warning for each split whose binarised tokens are over ``limit`` % ``<unk>``, as
    fairseq-preprocess's log counts them: text the dictionary does not fit (raw text given as
    --pretokenized, or a corpus cut --like a folder of another kind of text)."""
    log = task.data_bin / "preprocess.log"
    found = re.findall(r"\] (\S+): \d+ sents, \d+ tokens, ([\d.]+)% replaced", log.read_text(encoding="utf-8",
                       errors="replace")) if log.is_file() else []
    return [f"{rate}% of the tokens of {name} are <unk> (not in the dictionary): the model will not see them; check the "
            "text is what --pretokenized or --like expects" for name, rate in found if float(rate) > limit]


def run(p: dict) -> None:
    started, out = time.time(), p["out"]
    task = p["task"] if p["args"].dry_run else begin(p)
    gather(p, task)
    tokenise(p, task)
    binarise(p, task, segment(p, task))
    if p["args"].dry_run:
        say(f"--dry-run: the steps above were listed; nothing was written in {out}")
        return
    for warning in unknown_tokens(task):
        say(f"warning: {warning}")
    count = sum(1 for _ in open(task.root / "tok" / f"train.clean.{task.src}", "rb"))
    say(f"done in {time.time() - started:.0f}s: {count} training pairs")
    say(f"binarised data: {task.data_bin}; train with scripts/train.sh --data {out} --arch ARCH --save-dir DIR")


def main(argv=None) -> None:
    args = parse(argv)
    if args.list:
        print(corpora.listing(args.spec.name))
        return
    run(plan(args))


if __name__ == "__main__":
    as_command(main)
