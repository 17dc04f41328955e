"""The raw corpora of the task recipes (the three WMT/WAT tasks and Multi30k), and how to
gather them (step 1 of prepare.py).

For each task this file lists every corpus: the files it needs in the raw folder, the archive
they come in and the archive's official location. :func:`locate_split` finds each corpus in the
raw folder (plain text, an official SGM file, or an ``A ||| B`` ASPEC file), extracts a downloaded
archive when only the archive is there, and downloads a public archive when neither is there
(unless told not to); :func:`write_split` writes the split's two sides, every corpus
concatenated. A missing corpus is refused with the file that is missing and where to get it.
"""

import re
import tarfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from .runner import Refusal, atomic, say
from .text import iter_lines

WMT17 = "https://data.statmt.org/wmt17/translation-task"
WMT17_PAGE = "https://www.statmt.org/wmt17/translation-task.html"


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
    # a preset's preparation (prepare.py): BPE learnt on both languages together (1) or on each
    # (0, for the segmented languages, whose scripts share little with English); training
    # pairs whose length ratio exceeds clean_ratio are dropped (9 where one side is segmented
    # into characters' worth of words); the BPE merges and raw folder unless given
    joint_bpe: int = 1
    clean_ratio: float = 1.5
    merges: int = 32000
    merges_why: str = ", as the papers"
    default_raw: str = ""  # "": OUT/downloads


def _aspec(name, path, ja_field, en_field):
    return Corpus(
        name=name,
        layouts=[{"ja": path, "en": path}],
        fields={"ja": ja_field, "en": en_field},
        where="ASPEC is licensed: request it at https://jipsti.jst.go.jp/aspec/ and give its "
        "ASPEC-JE folder as --raw-dir (or $ASPEC_JE)",
    )


def _en_de_files(label, names, where):
    """train, valid and test as one corpus each: the files NAME.en and NAME.de in the raw folder."""
    return {split: [Corpus(f"{label} {name}", [{"en": f"{name}.en", "de": f"{name}.de"}], where=where(name), label=name)]
            for split, name in zip(("train", "valid", "test"), names)}


TASKS = {
    "wmt14_en_de": Task(
        src="en",
        tgt="de",
        raw_env="WMT14_RAW",
        splits={
            "train": [
                Corpus(
                    "Europarl v7",
                    [{"en": "training/europarl-v7.de-en.en", "de": "training/europarl-v7.de-en.de"}],
                    "training-parallel-europarl-v7.tgz",
                    "https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
                ),
                Corpus(
                    "Common Crawl",
                    [{"en": "commoncrawl.de-en.en", "de": "commoncrawl.de-en.de"}],
                    "training-parallel-commoncrawl.tgz",
                    "https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
                ),
                Corpus(
                    "News Commentary v9",
                    [{"en": "training/news-commentary-v9.de-en.en", "de": "training/news-commentary-v9.de-en.de"}],
                    "training-parallel-nc-v9.tgz",
                    "https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz",
                ),
            ],
            "valid": [
                Corpus(
                    "newstest2013",
                    [{"en": "newstest2013.en", "de": "newstest2013.de"},
                     {"en": "dev/newstest2013.en", "de": "dev/newstest2013.de"}],
                    "dev.tgz",
                    "https://www.statmt.org/wmt14/dev.tgz",
                ),
            ],
            "test": [
                Corpus(
                    "newstest2014 (full)",
                    [{"en": "newstest2014.en", "de": "newstest2014.de"},
                     {"en": "test-full/newstest2014-deen-src.en.sgm", "de": "test-full/newstest2014-deen-ref.de.sgm"}],
                    "test-full.tgz",
                    "https://www.statmt.org/wmt14/test-full.tgz",
                ),
            ],
        },
    ),
    "wmt17_zh_en": Task(
        src="zh",
        tgt="en",
        raw_env="WMT17_RAW",
        joint_bpe=0,
        clean_ratio=9.0,
        note="WMT17 Zh-En: News Commentary v12 downloads by itself; the UN and CWMT corpora "
        "need a registration or a manual download (see " + WMT17_PAGE + ").",
        splits={
            "train": [
                Corpus(
                    "News Commentary v12",
                    [{"zh": "training/news-commentary-v12.zh-en.zh", "en": "training/news-commentary-v12.zh-en.en"}],
                    "training-parallel-nc-v12.tgz",
                    f"{WMT17}/training-parallel-nc-v12.tgz",
                ),
                Corpus(
                    "UN Parallel Corpus v1.0",
                    [{"zh": "en-zh/UNv1.0.en-zh.zh", "en": "en-zh/UNv1.0.en-zh.en"}],
                    "UNv1.0.en-zh.tar.gz",
                    None,
                    "download UNv1.0.en-zh.tar.gz.00 and .01 from https://conferences.unite.un.org/UNCorpus "
                    "(linked from " + WMT17_PAGE + "), then `cat UNv1.0.en-zh.tar.gz.0* > "
                    "UNv1.0.en-zh.tar.gz` in the raw folder",
                ),
                Corpus(
                    "CWMT",
                    folder="cwmt",
                    where="get the CWMT corpora of WMT17 (casia2015, casict2011, casict2015, datum2015, "
                    "datum2017, neu2017; see " + WMT17_PAGE + ") and put each as a line-aligned pair "
                    "NAME.zh / NAME.en in the raw folder's cwmt/",
                ),
            ],
            "valid": [
                Corpus(
                    "newsdev2017",
                    [{"zh": "newsdev2017.zh", "en": "newsdev2017.en"},
                     {"zh": "dev/newsdev2017-zhen-src.zh.sgm", "en": "dev/newsdev2017-zhen-ref.en.sgm"}],
                    "dev.tgz",
                    f"{WMT17}/dev.tgz",
                ),
            ],
            "test": [
                Corpus(
                    "newstest2017",
                    [{"zh": "newstest2017-zhen.zh", "en": "newstest2017-zhen.en"},
                     {"zh": "test/newstest2017-zhen-src.zh.sgm", "en": "test/newstest2017-zhen-ref.en.sgm"}],
                    "test.tgz",
                    f"{WMT17}/test.tgz",
                ),
            ],
        },
    ),
    "multi30k_en_de": Task(
        src="en",
        tgt="de",
        raw_env="MULTI30K",
        merges=8000,
        merges_why=", for 29K training pairs",
        default_raw="data/multi30k_raw",
        note="Multi30k En-De (Elliott et al. 2016), task 1: the raw, untokenised files of "
        "github.com/multi30k/dataset, data/task1/raw, gunzipped; a small task for the "
        "examples/multi30k reproduction.",
        splits=_en_de_files("Multi30k", ("train", "val", "test_2016_flickr"),
                            lambda name: f"gunzip data/task1/raw/{name}.en.gz and {name}.de.gz of "
                            "https://github.com/multi30k/dataset into the raw folder"),
    ),
    "toy_en_de": Task(
        src="en",
        tgt="de",
        raw_env="TOY_RAW",
        note="The quick start's toy En-De corpus (examples/quickstart.sh), written by "
        "python -m fairseq_csan.recipes.toy_corpus RAW.",
        splits=_en_de_files("toy", ("train", "val", "test"),
                            lambda name: "write it with python -m fairseq_csan.recipes.toy_corpus RAW "
                            "(examples/quickstart.sh does)"),
    ),
    "wat17_ja_en": Task(
        src="ja",
        tgt="en",
        raw_env="ASPEC_JE",
        joint_bpe=0,
        clean_ratio=9.0,
        note="WAT17 Ja-En: ASPEC-JE train-1 + train-2 (2M pairs, as Morishita et al. 2017), "
        "dev and test, from the user's licensed copy.",
        splits={
            # train-N.txt: score ||| document id ||| sentence id ||| Japanese ||| English
            "train": [_aspec("ASPEC-JE train-1", "train/train-1.txt", 3, 4),
                      _aspec("ASPEC-JE train-2", "train/train-2.txt", 3, 4)],
            # dev.txt / test.txt: document id ||| sentence id ||| Japanese ||| English
            "valid": [_aspec("ASPEC-JE dev", "dev/dev.txt", 2, 3)],
            "test": [_aspec("ASPEC-JE test", "test/test.txt", 2, 3)],
        },
    ),
}

for _name, _task in TASKS.items():
    _task.name = _name


def files_task(src: str, tgt: str, train: str, valid: str, tests: List[str]) -> Task:
    """The user's own corpus: each split one pair of line-aligned files PREFIX.SRC and PREFIX.TGT;
    the first test set is the split ``test``, further ones ``test1``, ``test2``, ..."""
    if src == tgt:
        raise Refusal(f"--src and --tgt are both {src}: give two languages")

    def corpus(label, prefix):
        return [Corpus(f"{label} {prefix}", [{src: f"{prefix}.{src}", tgt: f"{prefix}.{tgt}"}],
                       where=f"give line-aligned UTF-8 files {prefix}.{src} and {prefix}.{tgt}", label=Path(prefix).name)]

    splits = {"train": corpus("--train", train), "valid": corpus("--valid", valid)}
    for number, prefix in enumerate(tests):
        splits[f"test{number or ''}"] = corpus("--test", prefix)
    return Task(src=src, tgt=tgt, splits=splits, name=f"{src}_{tgt}",
                note=f"your own {src}-{tgt} corpus")


def test_name(task: Task, split: str) -> str:
    """A test split's own name, as reports show it: its files' name (test_2016_flickr,
    newstest2014; for your own files, the PREFIX's last part), corpora concatenated joined by +."""
    return "+".join(corpus.label or corpus.name.split()[0] for corpus in task.splits[split])


def task_of(task) -> Task:
    return task if isinstance(task, Task) else TASKS[task]


SEG = re.compile(r"<seg[^>]*>(.*)</seg>")


def clean_line(line: str) -> str:
    """One segment per line: no surrounding blanks, single spaces inside."""
    return " ".join(line.split())


def read_side(path: Path, column: Optional[int] = None) -> List[str]:
    """The segments of one side: a plain text file, a WMT SGM file or an ASPEC column."""
    lines = iter_lines(path)
    if path.name.endswith((".sgm", ".sgm.gz")):
        # as sacreBLEU reads SGM: the text between the <seg> tags, not unescaped
        return [clean_line(m.group(1)) for line in lines if (m := SEG.search(line))]
    if column is None:
        return [clean_line(line) for line in lines]
    out = []
    for number, line in enumerate(lines, 1):
        parts = line.split(" ||| ")
        if len(parts) <= column:
            raise Refusal(f"{path}:{number}: expected at least {column + 1} "
                          f"' ||| '-separated fields, found {len(parts)}")
        out.append(clean_line(parts[column]))
    return out


def present(path: Path) -> Optional[Path]:
    """``path`` where it is a file, else ``path.gz`` where that is (read as it is: text.iter_lines)."""
    path = Path(path)
    return path if path.is_file() else path.with_name(path.name + ".gz") if Path(f"{path}.gz").is_file() else None


def find_layout(corpus: Corpus, raw: Path, langs) -> Optional[Dict[str, Path]]:
    for layout in corpus.layouts:
        paths = {lang: present(raw / layout[lang]) for lang in langs}
        if all(paths.values()):
            return paths
    return None


def missing_message(task_name: str, corpus: Corpus, raw: Path, langs) -> str:
    if corpus.folder is not None:
        wanted = f"{raw / corpus.folder}/NAME.{langs[0]} + NAME.{langs[1]} pairs"
    else:
        wanted = " or ".join(" + ".join(str(raw / layout[lang]) for lang in langs) for layout in corpus.layouts)
    lines = [f"{task_name}: missing {corpus.name}: expected {wanted} (each may be gzipped, NAME.gz)"]
    for layout in corpus.layouts:
        found = {lang: present(raw / layout[lang]) for lang in langs}
        if len([lang for lang in langs if found[lang]]) == 1:
            have = next(lang for lang in langs if found[lang])
            other = langs[1 - langs.index(have)]
            lines.insert(0, f"{task_name}: {corpus.name}: found the {have} side "
                            f"{found[have]} but not the {other} side {raw / layout[other]}")
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
                    of = f" of {total >> 20} MiB" if total else ""
                    say(f"  {done >> 20} MiB{of}")
    except Exception as error:  # urllib raises several kinds; all mean the same to the user (nothing was kept)
        raise Refusal(f"download of {url} failed ({error}): download it yourself and put it at {dest}, then run "
                      "again") from error


def extract(archive: Path, into: Path):
    say(f"extracting {archive}")
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # refuse absolute paths and links out of the folder
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)


def locate(task_name: str, corpus: Corpus, raw: Path, langs, allow_download: bool):
    """The files of one corpus in ``raw``: found, extracted from its archive, or downloaded."""
    if corpus.folder is not None:
        folder = raw / corpus.folder
        first = [*folder.glob(f"*.{langs[0]}"), *folder.glob(f"*.{langs[0]}.gz")] if folder.is_dir() else []
        stems = sorted({p.parent / re.sub(rf"\.{re.escape(langs[0])}(\.gz)?$", "", p.name) for p in first})
        pairs = [{lang: present(stem.with_name(f"{stem.name}.{lang}")) or stem.with_name(f"{stem.name}.{lang}")
                  for lang in langs} for stem in stems]
        for pair in pairs:
            if not pair[langs[1]].is_file():
                raise Refusal(f"{task_name}: {pair[langs[0]]} has no partner {pair[langs[1]]}")
        if not pairs:
            raise Refusal(missing_message(task_name, corpus, raw, langs))
        return pairs
    found = find_layout(corpus, raw, langs)
    if found is None and corpus.archive:
        archive = raw / corpus.archive
        if not archive.is_file() and corpus.url and allow_download:
            raw.mkdir(parents=True, exist_ok=True)
            download(corpus.url, archive)
        if archive.is_file():
            extract(archive, raw)
            found = find_layout(corpus, raw, langs)
            if found is None:
                raise Refusal(f"{task_name}: {archive} did not hold the files of {corpus.name}; "
                              + missing_message(task_name, corpus, raw, langs))
    if found is None:
        raise Refusal(missing_message(task_name, corpus, raw, langs))
    return [found]


def locate_split(task, split: str, raw: Path, allow_download=True):
    """[(corpus, {lang: file})] of one split, in order; downloads and extracts what is missing."""
    task = task_of(task)
    task_name = task.name
    langs = (task.src, task.tgt)
    return [(corpus, files) for corpus in task.splits[split]
            for files in locate(task_name, corpus, raw, langs, allow_download)]


def write_split(task, split: str, located, targets: Dict[str, Path]) -> int:
    """Write the split's two sides (every corpus concatenated) to ``targets``; the pair count."""
    task = task_of(task)
    task_name = task.name
    langs = (task.src, task.tgt)
    total = 0
    with open(targets[langs[0]], "w", encoding="utf-8", newline="\n") as out_src, \
            open(targets[langs[1]], "w", encoding="utf-8", newline="\n") as out_tgt:
        for corpus, files in located:
            sides = {lang: read_side(files[lang], corpus.fields[lang] if corpus.fields else None) for lang in langs}
            if len(sides[langs[0]]) != len(sides[langs[1]]):
                raise Refusal(f"{task_name}: {corpus.name} is not line-aligned: "
                              f"{files[langs[0]]} has {len(sides[langs[0]])} segments, "
                              f"{files[langs[1]]} has {len(sides[langs[1]])}")
            out_src.writelines(line + "\n" for line in sides[langs[0]])
            out_tgt.writelines(line + "\n" for line in sides[langs[1]])
            total += len(sides[langs[0]])
            say(f"{split}: {corpus.name} ({files[langs[0]].name}): {len(sides[langs[0]]):,} pairs")
    return total


def listing(task_name: str) -> str:
    task = TASKS[task_name]
    langs = (task.src, task.tgt)
    rows = [f"# {task_name}: raw folder from --raw-dir or ${task.raw_env}"]
    if task.note:
        rows.append(f"# {task.note}")
    for split, corpora in task.splits.items():
        for corpus in corpora:
            if corpus.folder:
                rows.append(f"{split}\t{corpus.name}\t{corpus.folder}/NAME.{langs[0]} + NAME.{langs[1]}")
                continue
            for layout in corpus.layouts:
                paths = " + ".join(layout[lang] for lang in langs)
                source = corpus.url or corpus.where or ""
                rows.append(f"{split}\t{corpus.name}\t{paths}\t{corpus.archive or ''}\t{source}")
    return "\n".join(rows)
