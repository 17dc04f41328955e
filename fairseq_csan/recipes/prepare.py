"""Prepare a task: raw corpora -> tokenised -> cleaned -> BPE -> fairseq-preprocess.

A preset task (``python -m fairseq_csan.recipes.prepare wmt14_en_de``, or its door
``examples/<task>/prepare.sh``) takes its settings (joint BPE or not, the cleaning ratio, the
default merges and raw folder) from ``corpora.TASKS``; ``files`` takes a user's corpus; see
docs/recipes.md. The steps, each recorded in
``OUT/.steps/`` with the settings and content hashes it was made from (the runner's step stamps), so that a
rerun skips what is current and redoes, saying why, what was made from other inputs::

  1 gather   raw corpora -> OUT/raw/{train,valid,test,test1..}.{SRC,TGT}   (corpora.py)
  2 tokenise each language's rules: Moses, jieba (zh), MeCab (ja) -> OUT/tok/  (text.py)
  3 clean    training pairs: empty, > --clean-max-len tokens, ratio > --clean-ratio, a token
             over 100 characters (text.MAX_TOKEN_CHARS; the log counts them)
  4 BPE      subword-nmt learn-bpe -> OUT/bpe/codes (joint) or codes.LANG
  5 BPE      subword-nmt apply-bpe to train, valid and test -> OUT/bpe/
  6 binarise fairseq-preprocess -> OUT/data-bin

The task's settings are kept in OUT/task.json (task.py); a rerun with other settings into the
same OUT is refused unless --force, which deletes what this command wrote there (raw/, tok/,
bpe/, data-bin/, .steps/; never the downloads) first. Before anything is touched: a raw corpus
that lies where this command writes is refused (a rerun would remove it before reading it), so
are files of others in those folders under --force, and so is a second prepare into the same OUT
while one runs (OUT/.lock; runner.py). Options: one argparse parser, a subcommand per task (parser()).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import List

from . import corpora, like, text
from .runner import (TASK, Refusal, Step, WriterLock, call, foreign_files, listing, make, overlap, recorded_outputs,
                     refuse_overlaps, run, write_atomically)
from .task import NotATask, PreparedTask

SPLITS = ("train", "valid", "test")
OWNED_FOLDERS = ("raw", "tok", "bpe", "data-bin", ".steps")  # what prepare writes in OUT, besides two files


TOKENIZER_PACKAGE = {"zh": "jieba", "ja": "fugashi"}  # the rest: sacremoses (text.py)


def suspicious(task, splits, src, tgt, located) -> List[str]:
    """What looks like a mistake in the gathered corpora, one sentence each: one file given for two
    splits, and a validation or test set whose pairs are training pairs too (all of them: the set
    lies inside the training set). The training files are read once, as bytes; only the other
    splits' pairs are held in memory."""
    notes, uses = [], {}
    for split in splits:
        for _, files in located[split]:
            for lang, path in files.items():
                uses.setdefault(os.path.realpath(path), []).append(f"{split}.{lang}")
    for path, where in sorted(uses.items()):
        if len({use.split(".")[0] for use in where}) > 1:
            notes.append(f"one file, {path}, is given for {' and '.join(where)}")
    held = {}  # (source line, target line) -> the splits that hold the pair
    for split in splits:
        if split != "train":
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


def found_as_they_are(spec, split, raw, no_download: bool):
    """A dry run's view of a preset's split: its corpora's files as they lie in the raw folder
    (nothing extracted, nothing downloaded); None where one must be extracted or downloaded
    first. A corpus the run could not get either raises corpora.Missing, as the run does."""
    found, langs = [], (spec.src, spec.tgt)
    for corpus in spec.splits[split]:
        if corpus.folder is not None:  # a folder of pairs: found as it is, or missing
            found += [(corpus, files) for files in corpora.locate(spec.name, corpus, raw, langs, False)]
            continue
        files = corpora.find_layout(corpus, raw, langs)
        if files is None:
            if not (corpus.archive and (raw / corpus.archive).is_file()) and (no_download or not corpus.url):
                raise corpora.Missing(corpora.missing_message(spec.name, corpus, raw, langs))
            return None
        found.append((corpus, files))
    return found


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


def layout(out: Path, src: str, tgt: str, splits) -> list:
    """Every path that prepare's steps write in ``out`` (task.py's layout), fairseq-preprocess's
    files in data-bin/, and the temporary folder of that output (a step's NAME.tmp, all of it),
    which a kill leaves."""
    files = [out / name for name in ("task.json", "recipe.env", "tools.txt", "data-bin.tmp")]
    binary, (s, t) = out / "data-bin", (re.escape(src), re.escape(tgt))
    preprocessed = re.compile(rf"dict\.({s}|{t})\.txt|preprocess\.log|\w+\.{s}-{t}\.({s}|{t})\.(bin|idx)")
    if binary.is_dir():
        files += [p for p in binary.iterdir() if preprocessed.fullmatch(p.name)]
    for split in splits:
        for lang in (src, tgt):
            files += [out / sub / f"{split}.{lang}" for sub in ("raw", "tok", "bpe")]
    files += [out / "tok" / f"train.clean.{lang}" for lang in (src, tgt)]
    files += [out / "bpe" / name for name in ("codes", f"codes.{src}", f"codes.{tgt}")]
    return files


FILES = "files"  # the user's own corpus; the other choices are the presets of examples/<task>/prepare.sh
USAGE = f"""python -m fairseq_csan.recipes.prepare files --src XX --tgt YY --train PREFIX --valid PREFIX
           --test PREFIX [--test PREFIX ...] [--out DIR] [options]   (your own corpus; files --help)
       bash examples/TASK/prepare.sh [options]   (a preset: {', '.join(sorted(corpora.TASKS))}; --help)"""


def _common(p, default_out, merges_help):
    p.add_argument("--out", type=Path, metavar="DIR", help=f"output folder (default: {default_out})")
    p.add_argument("--merges", type=positive("--merges"), metavar="N", help=f"BPE merge operations (default: {merges_help})")
    p.add_argument("--workers", type=positive("--workers"), metavar="N",
                   help="processes for tokenisation, BPE and binarisation (default: all cores)")
    p.add_argument("--force", action="store_true",
                   help="delete what this command wrote in OUT (not the downloads) and redo every step; refused "
                        "when those folders hold files it did not write")
    p.add_argument("--dry-run", action="store_true",
                   help="print the steps a run would take now (each step the run then takes), and exit: nothing is "
                        "written, downloaded or extracted")


def positive(flag):
    def parse(text):
        if not text.lstrip("-").isdigit() or int(text) < 1:
            raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
        return int(text)
    return parse


def parser() -> argparse.ArgumentParser:
    """prepare's options, each declared once: ``files`` (the user's own corpus) and one preset per
    task of corpora.TASKS, each a subcommand with its own defaults."""
    p = argparse.ArgumentParser(prog="python -m fairseq_csan.recipes.prepare", usage=USAGE,
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
    f.add_argument("--src", required=True, metavar="XX", help="source language code (the files' suffix), e.g. fr")
    f.add_argument("--tgt", required=True, metavar="YY", help="target language code, e.g. en")
    f.add_argument("--train", required=True, metavar="PREFIX", help="training set: PREFIX.XX and PREFIX.YY")
    f.add_argument("--valid", required=True, metavar="PREFIX", help="validation set")
    f.add_argument("--test", required=True, action="append", metavar="PREFIX",
                   help="a test set; repeat for more (the first is the subset test, then test1, test2, ...)")
    _common(f, "data/XX_YY", "32000, as the papers; fewer for a small corpus, e.g. 8000 for 30K pairs")
    f.add_argument("--joint-bpe", type=int, choices=(0, 1),
                   help="1: one BPE model and one dictionary for both languages; 0: one each (default: 1, "
                        "and 0 where one side is zh or ja, as the Zh-En and Ja-En presets)")
    f.add_argument("--clean-ratio", type=float, metavar="R",
                   help="drop training pairs whose token-length ratio exceeds R (default: 1.5, and 9 where one "
                        "side is zh or ja, whose words are counted otherwise, as the presets)")
    f.add_argument("--clean-max-len", type=int, default=250, metavar="N",
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


def parse(argv=None):
    p = parser()
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.task is None:
        p.error(f"give a task: files (your own corpus) or a preset ({', '.join(sorted(corpora.TASKS))})")
    if args.task == FILES:
        try:
            args.spec = corpora.files_task(args.src, args.tgt, args.train, args.valid, args.test)
        except ValueError as e:
            p.error(str(e))
        args.default_merges, args.raw_dir, args.default_raw, args.no_download, args.list = 32000, Path(""), None, True, False
        args.like_info = None
        if args.like is not None:
            given = [flag for flag, value in (("--merges", args.merges), ("--joint-bpe", args.joint_bpe),
                                              ("--pretokenized", args.pretokenized)) if value not in (None, False)]
            if given:
                p.error(f"--like {args.like} decides the tokens, the BPE and the dictionaries: leave out {', '.join(given)}")
            try:
                args.like_info = like.read(args.like, args.src, args.tgt)
            except like.LikeError as e:
                p.error(str(e))
            args.merges, args.joint_bpe, args.pretokenized = 0, 1, args.like_info["pretokenized"]
        joint, ratio = own_corpus_defaults(args.src, args.tgt)
        args.joint_bpe = joint if args.joint_bpe is None else args.joint_bpe
        args.clean_ratio = ratio if args.clean_ratio is None else args.clean_ratio
        if args.clean_ratio < 1 or args.clean_max_len < 1:
            p.error(f"--clean-ratio must be at least 1 and --clean-max-len positive, got {args.clean_ratio:g} "
                    f"and {args.clean_max_len}")
        return args
    spec = args.spec = corpora.TASKS[args.task]
    args.default_merges, args.default_raw = spec.merges, Path(spec.default_raw) if spec.default_raw else None
    if args.list:
        given = [flag for flag, value in (("--raw-dir", args.raw_dir), ("--out", args.out), ("--merges", args.merges),
                                          ("--workers", args.workers), ("--no-download", args.no_download),
                                          ("--force", args.force), ("--dry-run", args.dry_run))
                 if value not in (None, False)]
        if given:
            p.error(f"--list prints what the raw folder must hold, and exits: {', '.join(given)} would be ignored; "
                    "give --list alone")
    return args


def main(argv=None) -> None:
    args = parse(argv)
    spec = args.spec
    name, src, tgt, splits = spec.name, spec.src, spec.tgt, list(spec.splits)
    prefix = f"prepare {name}"

    def log(message):
        print(f"[{prefix}] {message}", file=sys.stderr, flush=True)

    def die(message):
        log(f"error: {message}")
        raise SystemExit(2)

    if args.list:
        print(corpora.listing(name))
        return
    out = args.out or Path("data") / name
    raw = args.raw_dir if args.task == FILES else args.raw_dir or (
        Path(os.environ[spec.raw_env]) if os.environ.get(spec.raw_env) else None) or args.default_raw or out / "downloads"
    like_info = getattr(args, "like_info", None)  # prepare files --like FOLDER (like.py)
    merges = 0 if like_info else args.merges or args.default_merges
    # tools, checked before any work
    for tool in ("fairseq-preprocess", "subword-nmt"):
        if shutil.which(tool) is None:
            die(f"{tool} not found: install the project with bash scripts/install.sh")
    for lang in (src, tgt):
        module = TOKENIZER_PACKAGE.get(text.base_language(lang), "sacremoses")
        try:
            __import__(module)
        except ImportError:
            die(f"python module '{module}' (for {lang}) not found: pip install -e '.[recipes]' from the repository")

    pretokenized = bool(getattr(args, "pretokenized", False))
    tokenizers = {lang: text.tokenizer_name(lang, pretokenized) for lang in (src, tgt)}
    if like_info:
        tokenizers = {lang: f"{like_info['tokenizer']} of --like {like_info['folder']}" for lang in (src, tgt)}
    tests = [s for s in splits if s.startswith("test")]
    settings = {"task": name, "src": src, "tgt": tgt, "merges": merges, "joint_bpe": args.joint_bpe,
                "clean_max_len": args.clean_max_len, "clean_ratio": f"{args.clean_ratio:g}",
                "tests": ",".join(tests), "tokenizer_src": tokenizers[src], "tokenizer_tgt": tokenizers[tgt],
                "pretokenized": pretokenized, "test_names": {split: corpora.test_name(spec, split) for split in tests},
                **({"like": like_info} if like_info else {})}
    owned = {sub: out / sub for sub in OWNED_FOLDERS}
    # the raw corpora are inputs: none of them may lie where this command writes (a rerun would
    # remove them before reading them)
    # (a --raw-dir around OUT is fine: only the files found in it are read)
    for sub, path in owned.items() if args.task != FILES else ():  # (files: each checked below)
        if overlap(path, raw) in ("is", "holds"):
            die(f"--out {out}'s {sub}/ {path} {overlap(path, raw)} --raw-dir {raw}, which this command reads; "
                "keep the raw corpora elsewhere (the default is OUT/downloads)")
    if args.task == FILES:  # the user's files, each named: say which one is missing, in one line
        for corpus in (c for cs in spec.splits.values() for c in cs):
            for lang, path in corpus.layouts[0].items():
                if not corpora.present(path):
                    die(f"{corpus.name}: no file {path} (its {lang} side: PREFIX.{src} and PREFIX.{tgt}, "
                        f"line-aligned UTF-8, or PREFIX.{src}.gz and PREFIX.{tgt}.gz)")
    dry = args.dry_run
    try:
        if not dry:
            lock = WriterLock(out, folder=True, what=f"prepare.sh ({name})").acquire()  # noqa: F841  (held to the end)
    except Refusal as e:
        die(str(e))

    # 1 gather: find (or download) every corpus first, then check the files found (a dry run of a
    # preset takes the files as they lie: finding may extract or download)
    try:
        located = {split: corpora.locate_split(spec, split, raw, allow_download=not args.no_download)
                   if args.task == FILES or not dry else found_as_they_are(spec, split, raw, args.no_download)
                   for split in splits}
    except corpora.Missing as e:
        die(str(e))
    inputs = {f"the {split} corpus": f for split in splits for _, files in located[split] or () for f in files.values()}
    try:
        refuse_overlaps({f"--out {out}'s {sub}/": path for sub, path in owned.items()}, inputs)
    except Refusal as e:
        die(str(e))
    # what prepare wrote here: what its step stamps record and, in a folder its task record says
    # it prepared, the names its steps write (a step killed before its stamp leaves outputs, or a
    # temporary, without one). In a folder it never prepared nothing is its own. Any other file
    # where it writes (a data-bin of another pipeline's, a tools.txt or notes of the user's) is
    # refused, --force or not: a step that is redone replaces its folder whole
    mine = [*recorded_outputs(out / ".steps"), out / ".steps"]
    if TASK.exists(out):
        mine += layout(out, src, tgt, splits)
    foreign = [f for f in foreign_files(out, mine)
               if f.relative_to(out).parts[0] in (*OWNED_FOLDERS, "data-bin.tmp", "tools.txt", "task.json")]
    if foreign:
        die(f"{out} holds files that prepare did not write, where it writes ({listing(foreign)}); move them out of "
            "the way or give another --out (nothing was changed)")
    if args.force and out.exists() and not dry:
        log(f"--force: removing what prepare wrote in {out} (raw, tok, bpe, data-bin, .steps; never the downloads)")
        for path in mine:
            if path.is_file():
                path.unlink()
        for sub in OWNED_FOLDERS + ("data-bin.tmp",):  # the folders, now empty of its files
            shutil.rmtree(out / sub, ignore_errors=True)
    try:
        task = PreparedTask.create(out, settings, force=args.force, write=not dry)
    except NotATask as e:
        die(str(e))
    tools = text.versions()
    if not dry:
        write_atomically(out / "tools.txt", "".join(f"{k}\t{v}\n" for k, v in tools.items()))
    stamps, workers, started = task.stamps, args.workers or os.cpu_count() or 4, time.time()
    changing = set()  # a dry run: the outputs of the steps it would run, which redo the steps that read them

    def would(step_, what, short):
        """A dry run's line for a step: what it would do and why, as the run's line says it; a
        step whose outputs are there but which reads what a step above redoes "may run": the run
        redoes it only where that step's new output differs from its old one."""
        missing = [p for p in step_.outputs if not p.exists()]
        if args.force or missing:
            reason = "--force" if args.force else f"no {missing[0]}"
        elif changing & {str(p) for p in step_.inputs}:
            changing.update(str(p) for p in step_.outputs)
            log(f"may run: {what} (where a step above changes what it reads)")
            return True
        else:
            reason = step_.stale()
        if reason is None:
            log(f"{short or what}: up to date; would be skipped")
            return False
        changing.update(str(p) for p in step_.outputs)
        log(f"would run: {what} ({reason})")
        return True

    def step(label, short, step_name, inputs, outputs, action, **settings_):
        step_ = Step(stamps, step_name, inputs, outputs, settings_)
        if dry:
            return would(step_, label, short)
        return make(step_, action, prefix=prefix, what=label, short=short)

    def run_step(step_, command, what, short, **how):
        return would(step_, what, short) if dry else run(step_, command, prefix=prefix, what=what, short=short, **how)

    try:
        gathered = False
        for split in splits:
            if located[split] is None:  # a dry run, and a corpus not there as files
                changing.update(str(task.raw(split, lang)) for lang in (src, tgt))
                log(f"would run: 1/6 gather {split} from {raw} (a corpus to extract or download first)")
                continue
            split_inputs = [f for _, files in located[split] for f in files.values()]
            gathered |= bool(step(f"1/6 gather {split} from {raw}", f"1/6 gather {split}", f"gather.{split}",
                                  split_inputs, [task.raw(split, src), task.raw(split, tgt)],
                                  lambda temps, split=split: corpora.write_split(spec, split, located[split],
                                                                                 {src: temps[0], tgt: temps[1]}),
                                  task=name))
    except corpora.Missing as e:
        die(str(e))
    # what looks like a mistake in the corpora: said once they are gathered, and kept in task.json
    warnings = [] if dry else suspicious(task, splits, src, tgt, located) + tokenised_already(
        task, (src, tgt), pretokenized, args.task == FILES) \
        if gathered or "warnings" not in task.settings else task.settings["warnings"]
    for warning in warnings:
        log(f"warning: {warning}")
    if task.settings.get("warnings") != warnings and not dry:
        task = PreparedTask(out, TASK.write(out, {**task.settings, "warnings": warnings}))

    # 2 tokenise (the tools' versions are a setting: another tokeniser version redoes it)
    for split in splits:
        for lang in (src, tgt):
            if like_info:  # the folder's tokenizer, through fairseq's registry
                step(f"2/6 tokenise {split}.{lang} ({like_info['tokenizer']}, as --like)", f"2/6 tokenise {split}.{lang}",
                     f"tok.{split}.{lang}", [task.raw(split, lang)], [task.tok(split, lang)],
                     lambda temps, lang=lang, split=split: like.tokenize_file(like_info, lang, task.raw(split, lang), temps[0]),
                     lang=lang, like=like_info["model.pt"], tokenizer=like_info["tokenizer"])
                continue
            module = TOKENIZER_PACKAGE.get(text.base_language(lang), "sacremoses")
            step(f"2/6 tokenise {split}.{lang}", f"2/6 tokenise {split}.{lang}", f"tok.{split}.{lang}", [task.raw(split, lang)], [task.tok(split, lang)],
                 lambda temps, lang=lang, split=split: text.tokenize_file(lang, task.raw(split, lang), temps[0], workers,
                                                                          pretokenized),
                 lang=lang, tokenizer=text.AS_GIVEN if pretokenized else f"{module} {tools.get(module, tools.get('sacremoses'))}",
                 **({"rule": tokenizers[lang]} if "no rules" in tokenizers[lang] else {}))

    # 3 clean the training pairs
    clean = [task.root / "tok" / f"train.clean.{lang}" for lang in (src, tgt)]
    step(f"3/6 clean training pairs (1..{args.clean_max_len} tokens, ratio <= {args.clean_ratio:g}, tokens of "
         f"<= {text.MAX_TOKEN_CHARS} characters)", "3/6 clean", "clean",
         [task.tok("train", src), task.tok("train", tgt)], clean,
         lambda temps: text.clean_pair(task.tok("train", src), task.tok("train", tgt), temps[0], temps[1],
                                       args.clean_max_len, args.clean_ratio),
         max_len=args.clean_max_len, ratio=args.clean_ratio, max_token_chars=text.MAX_TOKEN_CHARS)

    # 4 learn BPE: one joint model, or one per language
    bpe_version = tools.get("subword-nmt")
    learn = [((src, tgt), task.codes(src))] if task.joint else [((lang,), task.codes(lang)) for lang in (src, tgt)]
    for langs, codes in learn if not like_info else ():
        inputs = [task.root / "tok" / f"train.clean.{lang}" for lang in langs]
        run_step(Step(stamps, f"learn_bpe.{'+'.join(langs)}", inputs, [codes], {"merges": merges, "subword-nmt": bpe_version}),
                 ["subword-nmt", "learn-bpe", "-s", str(merges)], stdout=True, stdin=inputs,
                 what=f"4/6 learn {merges} {'joint ' if task.joint else ''}BPE merges on {'+'.join(langs)} "
                      "(subword-nmt; long on the full corpus)", short=f"4/6 BPE: {codes}")
        if dry:
            continue
        learnt = sum(1 for row in text.iter_lines(codes) if row and not row.startswith("#version"))
        if learnt < merges:  # subword-nmt stops where no pair of symbols occurs twice
            log(f"4/6 {codes.name}: {learnt} merges learnt, of {merges} asked: after the {learnt}th no pair of "
                "symbols occurs twice in the training text (a small corpus)")

    if like_info:  # the folder's codes, as they are
        codes = Path(like_info["folder"]) / like_info["bpe_file"]
        step(f"4/6 BPE: the codes of --like ({codes})", f"4/6 BPE: {task.codes(src)}", "like_bpe", [codes],
             [task.codes(src)], lambda temps: shutil.copyfile(codes, temps[0]), bpe=like_info["bpe"])

    # 5 apply BPE
    for split in splits:
        for lang in (src, tgt):
            source = clean[(src, tgt).index(lang)] if split == "train" else task.tok(split, lang)
            target = task.root / "bpe" / f"{split}.{lang}"
            if like_info:  # the folder's BPE kind, through fairseq's registry
                step(f"5/6 apply BPE ({like_info['bpe']}, as --like) to {split}.{lang}", f"5/6 apply BPE: {target}",
                     f"apply_bpe.{split}.{lang}", [source, task.codes(src)], [target],
                     lambda temps, lang=lang, source=source: like.bpe_file(like_info, lang, source, temps[0]),
                     bpe=like_info["bpe"])
                continue
            run_step(Step(stamps, f"apply_bpe.{split}.{lang}", [source, task.codes(lang)], [target], {"subword-nmt": bpe_version}),
                     ["subword-nmt", "apply-bpe", "-c", str(task.codes(lang)), "--num-workers", str(workers),
                      "--input", str(source), "--output", "{out}"], what=f"5/6 apply BPE to {split}.{lang}",
                     short=f"5/6 apply BPE: {target}")

    # 6 binarise
    bpe_files = [task.root / "bpe" / f"{split}.{lang}" for split in splits for lang in (src, tgt)]
    tests = ",".join(str(task.root / "bpe" / split) for split in task.test_sets)
    joined = ["--joined-dictionary"] if task.joint else []
    dictionaries = []
    if like_info:  # binarised with the folder's dictionaries, unchanged
        joined = like.dictionary_flags(like_info, src, tgt)
        dictionaries = [Path(like_info["dicts"][lang]["file"]) for lang in (src, tgt)]

    def binarise(temps):
        call(["fairseq-preprocess", "--source-lang", src, "--target-lang", tgt,
              "--trainpref", task.root / "bpe/train", "--validpref", task.root / "bpe/valid",
              "--testpref", tests, "--destdir", temps[0], *joined, "--workers", workers],
             prefix=prefix)

    step("6/6 binarise with fairseq-preprocess", "6/6 binarise", "binarise", [*bpe_files, *dictionaries],
         [task.data_bin], binarise, joined=task.joint and not like_info, src=src, tgt=tgt)

    if dry:
        log(f"--dry-run: the steps above were listed; nothing was written in {out}")
        return
    count = sum(1 for _ in open(clean[0], "rb"))
    log(f"done in {time.time() - started:.0f}s: {count} training pairs")
    log(f"binarised data: {task.data_bin}; train with scripts/train.sh --data {out} --arch ARCH --save-dir DIR")


if __name__ == "__main__":
    from .runner import as_command

    as_command(main)
