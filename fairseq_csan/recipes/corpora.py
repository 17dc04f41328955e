"""The raw corpora of the task recipes (the three WMT/WAT tasks, Multi30k and the toy corpus), and how
to gather them (step 1 of prepare.py: :func:`locate_split`, then :func:`write_split`).
"""

import os
import re
import tarfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from .runner import Refusal, atomic, say
from .text import iter_lines

WMT13, WMT14 = "https://www.statmt.org/wmt13", "https://www.statmt.org/wmt14"
WMT17 = "https://data.statmt.org/wmt17/translation-task"
WMT17_PAGE = "https://www.statmt.org/wmt17/translation-task.html"
EN_DE, ZH_EN = ("en", "de"), ("zh", "en")


@dataclass
class Corpus:
    """One parallel corpus in the raw folder.

    ``layouts`` are alternative ways of finding it, tried in order; each maps a language to
    a path relative to the raw folder. A path ending in ``.sgm`` is read as WMT SGML. With
    ``fields`` set, both languages are columns of one ``|||``-separated file (ASPEC).
    ``folder`` instead names a folder of line-aligned ``NAME.SRC``/``NAME.TGT`` pairs (CWMT).
    """

    name: str
    layouts: List[Dict[str, str]] = field(default_factory=list)
    archive: Optional[str] = None  # file name of the archive in the raw folder
    url: Optional[str] = None  # its official download location; None: the user must fetch it
    where: str = ""  # where to get it, for the error message
    fields: Optional[Dict[str, int]] = None
    folder: Optional[str] = None
    label: str = ""  # its short name in reports (a test set's); "": the name's first word


@dataclass
class Task:
    """A task's corpora: ``splits`` maps train, valid, test (and test1, test2, ... for further
    test sets, as fairseq-preprocess names them) to the corpora concatenated into each."""

    src: str
    tgt: str
    splits: Dict[str, List[Corpus]]
    raw_env: str = ""  # the environment variable that may name the raw folder (presets)
    note: str = ""
    name: str = ""
    # a preset's preparation (prepare.py; docs/recipes.md, 'Recipe choices where the papers are silent'):
    # joint BPE or not, the cleaning ratio, and the BPE merges and raw folder unless given
    joint_bpe: int = 1
    clean_ratio: float = 1.5
    merges: int = 32000
    merges_why: str = ", as the papers"
    default_raw: str = ""  # "": OUT/downloads


def _corpus(langs, name, stems, archive=None, site=None, **kw) -> Corpus:
    """A corpus in the files STEM.SRC + STEM.TGT of the first of ``stems`` that has them; a stem ending in
    ``.sgm`` names WMT's SGM pair STEM-src.SRC.sgm + STEM-ref.TGT.sgm. A public archive is at SITE/ARCHIVE."""
    src, tgt = langs
    return Corpus(name, [{src: f"{s[:-4]}-src.{src}.sgm", tgt: f"{s[:-4]}-ref.{tgt}.sgm"} if s.endswith(".sgm")
                         else {src: f"{s}.{src}", tgt: f"{s}.{tgt}"} for s in stems],
                  archive, site and f"{site}/{archive}", **kw)


def _aspec(name, path, ja_field):
    return Corpus(name, [{"ja": path, "en": path}], fields={"ja": ja_field, "en": ja_field + 1},
                  where="ASPEC is licensed: request it at https://jipsti.jst.go.jp/aspec/ and give its "
                  "ASPEC-JE folder as --raw-dir (or $ASPEC_JE)")


def _en_de_files(label, names, where):
    """train, valid and test as one corpus each: the files NAME.en and NAME.de in the raw folder."""
    return {split: [_corpus(EN_DE, f"{label} {name}", [name], where=where(name), label=name)]
            for split, name in zip(("train", "valid", "test"), names)}


TASKS = {
    "wmt14_en_de": Task("en", "de", raw_env="WMT14_RAW", splits={
        "train": [
            _corpus(EN_DE, "Europarl v7", ["training/europarl-v7.de-en"], "training-parallel-europarl-v7.tgz", WMT13),
            _corpus(EN_DE, "Common Crawl", ["commoncrawl.de-en"], "training-parallel-commoncrawl.tgz", WMT13),
            _corpus(EN_DE, "News Commentary v9", ["training/news-commentary-v9.de-en"], "training-parallel-nc-v9.tgz",
                    WMT14),
        ],
        "valid": [_corpus(EN_DE, "newstest2013", ["newstest2013", "dev/newstest2013"], "dev.tgz", WMT14)],
        "test": [_corpus(EN_DE, "newstest2014 (full)", ["newstest2014", "test-full/newstest2014-deen.sgm"],
                         "test-full.tgz", WMT14)],
    }),
    "wmt17_zh_en": Task("zh", "en", raw_env="WMT17_RAW", joint_bpe=0, clean_ratio=9.0, splits={
        "train": [
            _corpus(ZH_EN, "News Commentary v12", ["training/news-commentary-v12.zh-en"],
                    "training-parallel-nc-v12.tgz", WMT17),
            _corpus(ZH_EN, "UN Parallel Corpus v1.0", ["en-zh/UNv1.0.en-zh"], "UNv1.0.en-zh.tar.gz",
                    where="download UNv1.0.en-zh.tar.gz.00 and .01 from https://conferences.unite.un.org/UNCorpus "
                    f"(linked from {WMT17_PAGE}), then `cat UNv1.0.en-zh.tar.gz.0* > UNv1.0.en-zh.tar.gz` in the "
                    "raw folder"),
            Corpus("CWMT", folder="cwmt", where="get the CWMT corpora of WMT17 (casia2015, casict2011, casict2015, "
                   f"datum2015, datum2017, neu2017; see {WMT17_PAGE}) and put each as a line-aligned pair "
                   "NAME.zh / NAME.en in the raw folder's cwmt/"),
        ],
        "valid": [_corpus(ZH_EN, "newsdev2017", ["newsdev2017", "dev/newsdev2017-zhen.sgm"], "dev.tgz", WMT17)],
        "test": [_corpus(ZH_EN, "newstest2017", ["newstest2017-zhen", "test/newstest2017-zhen.sgm"], "test.tgz",
                         WMT17)],
    }, note="WMT17 Zh-En: News Commentary v12 downloads by itself; the UN and CWMT corpora need a registration "
       f"or a manual download (see {WMT17_PAGE})."),
    "multi30k_en_de": Task(
        "en", "de", raw_env="MULTI30K", merges=8000, merges_why=", for 29K training pairs",
        default_raw="data/multi30k_raw",
        note="Multi30k En-De (Elliott et al. 2016), task 1: the raw, untokenised files of "
        "github.com/multi30k/dataset, data/task1/raw, gunzipped; a small task for the "
        "examples/multi30k reproduction.",
        splits=_en_de_files("Multi30k", ("train", "val", "test_2016_flickr"),
                            lambda name: f"gunzip data/task1/raw/{name}.en.gz and {name}.de.gz of "
                            "https://github.com/multi30k/dataset into the raw folder"),
    ),
    "toy_en_de": Task(
        "en", "de", raw_env="TOY_RAW",
        note="The quick start's toy En-De corpus (examples/quickstart.sh), written by "
        "python -m fairseq_csan.recipes.toy_corpus RAW.",
        splits=_en_de_files("toy", ("train", "val", "test"),
                            lambda name: "write it with python -m fairseq_csan.recipes.toy_corpus RAW "
                            "(examples/quickstart.sh does)"),
    ),
    "wat17_ja_en": Task("ja", "en", raw_env="ASPEC_JE", joint_bpe=0, clean_ratio=9.0, splits={
        # train-N.txt: score ||| document id ||| sentence id ||| Japanese ||| English
        "train": [_aspec(f"ASPEC-JE train-{n}", f"train/train-{n}.txt", 3) for n in (1, 2)],
        # dev.txt / test.txt: document id ||| sentence id ||| Japanese ||| English
        "valid": [_aspec("ASPEC-JE dev", "dev/dev.txt", 2)],
        "test": [_aspec("ASPEC-JE test", "test/test.txt", 2)],
    }, note="WAT17 Ja-En: ASPEC-JE train-1 + train-2 (2M pairs, as Morishita et al. 2017), dev and test, "
       "from the user's licensed copy."),
}

for _name, _task in TASKS.items():
    _task.name = _name


def preset_raw(task_name: str, given=None):
    """Where a preset's raw files are (``given``: --raw-dir; else its environment variable's folder;
    else its default) and the files it reads there (each corpus's first layout)."""
    spec = TASKS[task_name]
    folder = Path(given or os.environ.get(spec.raw_env) or spec.default_raw)
    return folder, [name for split in spec.splits.values() for corpus in split for name in corpus.layouts[0].values()]


def files_task(src: str, tgt: str, train: str, valid: str, tests: List[str]) -> Task:
    """The user's own corpus: each split one pair of line-aligned files PREFIX.SRC and PREFIX.TGT;
    the first test set is the split ``test``, further ones ``test1``, ``test2``, ..."""
    if src == tgt:
        raise Refusal(f"--src and --tgt are both {src}: give two languages")

    def corpus(label, prefix):
        return [_corpus((src, tgt), f"{label} {prefix}", [prefix], label=Path(prefix).name,
                        where=f"give line-aligned UTF-8 files {prefix}.{src} and {prefix}.{tgt}")]

    splits = {"train": corpus("--train", train), "valid": corpus("--valid", valid)}
    for number, prefix in enumerate(tests):
        splits[f"test{number or ''}"] = corpus("--test", prefix)
    return Task(src, tgt, splits, name=f"{src}_{tgt}", note=f"your own {src}-{tgt} corpus")


def test_name(task: Task, split: str) -> str:
    """A test split's own name, as reports show it: its files' name (test_2016_flickr,
    newstest2014; for your own files, the PREFIX's last part), corpora concatenated joined by +."""
    return "+".join(corpus.label or corpus.name.split()[0] for corpus in task.splits[split])


SEG = re.compile(r"<seg[^>]*>(.*)</seg>")


def clean_line(line: str) -> str:
    """One segment per line: no surrounding blanks, single spaces inside."""
    return " ".join(line.split())


def read_side(path: Path, column: Optional[int] = None) -> List[str]:
    """The segments of one side: a plain text file, a WMT SGM file (the text between the <seg> tags,
    not unescaped, as sacreBLEU reads it) or an ASPEC column."""
    sgm, out = path.name.endswith((".sgm", ".sgm.gz")), []
    for number, line in enumerate(iter_lines(path), 1):
        if sgm:
            if not (match := SEG.search(line)):
                continue
            line = match.group(1)
        elif column is not None:
            parts = line.split(" ||| ")
            if len(parts) <= column:
                raise Refusal(f"{path}:{number}: expected at least {column + 1} "
                              f"' ||| '-separated fields, found {len(parts)}")
            line = parts[column]
        out.append(clean_line(line))
    return out


def present(path: Path) -> Optional[Path]:
    """``path`` where it is a file, else ``path.gz`` where that is (read as it is: text.iter_lines)."""
    return next((p for p in (Path(path), Path(f"{path}.gz")) if p.is_file()), None)


def find_layout(corpus: Corpus, raw: Path, langs) -> Optional[Dict[str, Path]]:
    for layout in corpus.layouts:
        paths = {lang: present(raw / layout[lang]) for lang in langs}
        if all(paths.values()):
            return paths
    return None


def _wanted(corpus: Corpus, langs, base: Path) -> List[str]:
    """The files of each of the corpus' layouts, "A + B", under ``base``."""
    if corpus.folder is not None:
        return [f"{base / corpus.folder}/NAME.{langs[0]} + NAME.{langs[1]}"]
    return [" + ".join(str(base / layout[lang]) for lang in langs) for layout in corpus.layouts]


def missing_message(task_name: str, corpus: Corpus, raw: Path, langs) -> str:
    wanted = " or ".join(_wanted(corpus, langs, raw)) + (" pairs" if corpus.folder is not None else "")
    lines = [f"{task_name}: missing {corpus.name}: expected {wanted} (each may be gzipped, NAME.gz)"]
    for layout in corpus.layouts:
        found = [present(raw / layout[lang]) for lang in langs]
        if any(found) and not all(found):
            have, other = (0, 1) if found[0] else (1, 0)
            lines.insert(0, f"{task_name}: {corpus.name}: found the {langs[have]} side {found[have]} "
                            f"but not the {langs[other]} side {raw / layout[langs[other]]}")
    if corpus.url:
        lines.append(f"it comes in {corpus.archive} from {corpus.url}: put the archive or the extracted files in "
                     f"{raw}, or run without --no-download to fetch it")
    elif corpus.archive:
        lines.append(f"put {corpus.archive} (or the extracted files) in {raw}: {corpus.where}")
    else:
        lines.append(corpus.where)
    return "; ".join(lines)


def download(url: str, dest: Path):
    """Fetch ``url`` to ``dest`` whole (a temporary of this process's, runner.atomic), reporting
    progress to stderr."""
    say(f"downloading {url}")
    try:
        with atomic(dest) as (part,), urllib.request.urlopen(url, timeout=60) as response, open(part, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0)
            done, shown = 0, 0
            while chunk := response.read(1 << 20):
                out.write(chunk)
                done += len(chunk)
                if done - shown >= 100 << 20:
                    shown = done
                    say(f"  {done >> 20} MiB" + (f" of {total >> 20} MiB" if total else ""))
    except Exception as error:  # urllib raises several kinds; all mean the same to the user (nothing was kept)
        raise Refusal(f"download of {url} failed ({error}): download it yourself and put it at {dest}, then run "
                      "again") from error


def locate(task_name: str, corpus: Corpus, raw: Path, langs, allow_download: bool, look_only: bool = False):
    """The files of one corpus in ``raw``: found, extracted from its archive, or downloaded. With
    ``look_only`` (a dry run), found as they lie: None where they would be extracted or downloaded
    first (nothing is); a corpus the run could not get either is refused as the run refuses it."""
    if corpus.folder is not None:
        suffixes = (f".{langs[0]}", f".{langs[0]}.gz")
        stems = sorted({str(p)[:-len(end)] for end in suffixes for p in (raw / corpus.folder).glob(f"*{end}")})
        pairs = [{lang: present(f"{stem}.{lang}") for lang in langs} for stem in stems]
        for stem, pair in zip(stems, pairs):
            if not pair[langs[1]]:
                raise Refusal(f"{task_name}: {pair[langs[0]]} has no partner {stem}.{langs[1]}")
        if not pairs:
            raise Refusal(missing_message(task_name, corpus, raw, langs))
        return pairs
    found = find_layout(corpus, raw, langs)
    if found is None and corpus.archive:
        archive = raw / corpus.archive
        if look_only and (archive.is_file() or corpus.url and allow_download):
            return None
        if not archive.is_file() and corpus.url and allow_download:
            raw.mkdir(parents=True, exist_ok=True)
            download(corpus.url, archive)
        if archive.is_file():
            say(f"extracting {archive}")
            with tarfile.open(archive) as tar:
                tar.extraction_filter = getattr(tarfile, "data_filter", None)  # no absolute paths, no links out
                tar.extractall(raw)
            found = find_layout(corpus, raw, langs)
            if found is None:
                raise Refusal(f"{task_name}: {archive} did not hold the files of {corpus.name}; "
                              + missing_message(task_name, corpus, raw, langs))
    if found is None:
        raise Refusal(missing_message(task_name, corpus, raw, langs))
    return [found]


def locate_split(task, split: str, raw: Path, allow_download=True, look_only=False):
    """[(corpus, {lang: file})] of one split, in order; downloads and extracts what is missing
    (with ``look_only``: None where a corpus would be extracted or downloaded first, :func:`locate`)."""
    task = TASKS[task] if isinstance(task, str) else task
    located = []
    for corpus in task.splits[split]:
        found = locate(task.name, corpus, raw, (task.src, task.tgt), allow_download, look_only)
        if found is None:
            return None
        located += [(corpus, files) for files in found]
    return located


def write_split(task, split: str, located, targets: Dict[str, Path]) -> int:
    """Write the split's two sides (every corpus concatenated) to ``targets``; the pair count."""
    task = TASKS[task] if isinstance(task, str) else task
    src, tgt = task.src, task.tgt
    total = 0
    with open(targets[src], "w", encoding="utf-8", newline="\n") as out_src, \
            open(targets[tgt], "w", encoding="utf-8", newline="\n") as out_tgt:
        for corpus, files in located:
            a, b = (read_side(files[lang], corpus.fields[lang] if corpus.fields else None) for lang in (src, tgt))
            if len(a) != len(b):
                raise Refusal(f"{task.name}: {corpus.name} is not line-aligned: "
                              f"{files[src]} has {len(a)} segments, {files[tgt]} has {len(b)}")
            out_src.writelines(line + "\n" for line in a)
            out_tgt.writelines(line + "\n" for line in b)
            total += len(a)
            say(f"{split}: {corpus.name} ({files[src].name}): {len(a):,} pairs")
    return total


def listing(task_name: str) -> str:
    task = TASKS[task_name]
    rows = [f"# {task_name}: raw folder from --raw-dir or ${task.raw_env}"] + [f"# {task.note}"] * bool(task.note)
    for split, corpora in task.splits.items():
        for corpus in corpora:
            source = "" if corpus.folder else f"\t{corpus.archive or ''}\t{corpus.url or corpus.where}"
            rows += [f"{split}\t{corpus.name}\t{files}{source}"
                     for files in _wanted(corpus, (task.src, task.tgt), Path())]
    return "\n".join(rows)
