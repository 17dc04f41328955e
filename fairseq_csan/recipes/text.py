"""Tokenisation, segmentation, detokenisation and length cleaning for the task recipes.

Tokenisation, by language (tokenizer_name() names the rule; a prepared task records it; a code with
a region, zh_CN or pt_BR, takes its language's rules):
  zh  jieba word segmentation (accurate mode, with its HMM for unknown words);
  ja  MeCab word segmentation through fugashi with the UniDic-lite dictionary;
  any other language: Moses punctuation normalisation (with control characters removed),
      then the Moses tokenizer (sacremoses; no aggressive hyphen splitting, no XML escaping:
      both are one-to-one on tokens, so tokenised BLEU does not change, and outputs stay
      readable), with the language's own rules (its nonbreaking prefixes) where sacremoses
      has them; a language without them gets English's, as Moses' tokenizer.perl does (named
      "moses (no rules for xx: English's, as tokenizer.perl)").
Detokenisation: the Moses detokeniser of the language (its default rules where it has none); for
zh and ja, the spaces between tokens are removed except between two letters or digits of a
spaced script ("iPhone 6" keeps its space), as the text was before segmentation.
Lines stay aligned: every input line gives one output line, empty or not. Each output is written
whole (runner.atomic), so a half-written file never looks finished.
"""

import gzip
import re
import sys
import zlib
from multiprocessing import Pool
from pathlib import Path

from .runner import Progress, Refusal, atomic, say

_TOKENIZE = None


def iter_lines(path):
    """The lines of a UTF-8 text file (``"-"``: standard input; a name ending in ``.gz``: the
    file gzip-decompressed as it is read), without their ends.

    Lines end at ``"\\n"`` only: a ``"\\r"``, form feed, NEL or U+2028 inside a line stays
    inside it (``str.splitlines()`` would break there and shift every line after it). A
    ``"\\r\\n"`` ending keeps its ``"\\r"``, as ``wc -l`` and fairseq see it. A byte-order mark at
    the start is removed. An undecodable byte is refused (runner.Refusal), naming file and line.
    """
    name = "<stdin>" if str(path) == "-" else str(path)
    if str(path) == "-":
        handle = sys.stdin.buffer
    elif str(path).endswith(".gz"):
        handle = gzip.open(path, "rb")
    else:
        handle = open(path, "rb")
    number = 0
    try:
        for number, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise Refusal(f"{name}:{number}: not UTF-8 (byte 0x{raw[error.start]:02x} at column "
                                f"{error.start + 1}); convert the file to UTF-8") from None
            if number == 1 and line.startswith("\ufeff"):
                line = line[1:]
            yield line[:-1] if line.endswith("\n") else line
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:  # a .gz cut short, or not gzip at all
        raise Refusal(f"{name}: not a whole gzip file after {number:,} lines ({error}); download or "
                        "compress it again") from None
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()


def read_lines(path):
    """:func:`iter_lines` as a list."""
    return list(iter_lines(path))


SEGMENTED = {"zh": "jieba", "ja": "mecab"}  # languages written without spaces, and their segmenters


def base_language(lang: str) -> str:
    """The language of a code with a region or script (zh_CN, pt_BR -> zh, pt): its rules."""
    return lang.split("_")[0]


def moses_has_rules(lang: str) -> bool:
    """Whether sacremoses has nonbreaking prefixes (the Moses tokeniser's rules) for ``lang``."""
    from sacremoses.corpus import NonbreakingPrefixes

    return base_language(lang) in NonbreakingPrefixes().available_langs.values()


AS_GIVEN = "as given (pretokenized)"  # the rule of prepare files --pretokenized: the text's own tokens


def tokenizer_name(lang: str, pretokenized: bool = False) -> str:
    """The tokenisation rule used for ``lang``, as a prepared task records it."""
    if pretokenized:
        return AS_GIVEN
    lang = base_language(lang)
    if lang == "zh":
        return "jieba"
    if lang == "ja":
        return "mecab (fugashi, unidic-lite)"
    return f"moses {lang}" if moses_has_rules(lang) else f"moses (no rules for {lang}: English's, as tokenizer.perl)"


def make_tokenizer(lang: str, pretokenized: bool = False):
    """A function from a raw line to its tokens joined by single spaces; for text tokenised
    already (``pretokenized``), its own tokens."""
    if pretokenized:
        return lambda line: line
    lang = base_language(lang)
    if lang == "zh":
        import jieba

        jieba.setLogLevel(60)
        jieba.initialize()
        from sacremoses import MosesPunctNormalizer

        strip = MosesPunctNormalizer(post_remove_control_chars=True).remove_control_chars
        return lambda line: " ".join(t for t in jieba.cut(strip(line)) if not t.isspace())
    if lang == "ja":
        import fugashi

        tagger = fugashi.Tagger("-Owakati")
        from sacremoses import MosesPunctNormalizer

        strip = MosesPunctNormalizer(post_remove_control_chars=True).remove_control_chars
        return lambda line: " ".join(tagger.parse(strip(line)).split())
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    normalizer = MosesPunctNormalizer(lang, post_remove_control_chars=True)
    tokenizer = MosesTokenizer(lang)
    return lambda line: tokenizer.tokenize(normalizer.normalize(line), return_str=True, escape=False)


def line_tokenizer(lang: str, pretokenized: bool = False):
    """A function from one line of raw text to the recipe's tokens for it: blanks collapsed as
    preparation collapses them in raw/ (corpora.clean_line), the language's tokeniser (none for
    ``pretokenized`` text), single spaces between tokens; a blank line stays empty."""
    tokenize = make_tokenizer(lang, pretokenized)

    def tokenize_line(line: str) -> str:
        line = " ".join(line.split())
        return " ".join(tokenize(line).split()) if line else ""

    return tokenize_line


def make_detokenizer(lang: str, pretokenized: bool = False):
    """A function from tokens joined by spaces to text, as the recipes detokenise hypotheses
    (the Moses detokeniser; score.py writes hyp.detok with it). A model of ``pretokenized`` text
    writes tokens as its references have them: single spaces, nothing else changed."""
    if pretokenized:
        return lambda line: " ".join(line.split())
    lang = base_language(lang)
    if lang in SEGMENTED:
        return join_segmented
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang)
    return lambda line: detok.detokenize(line.split())


_SPACED = re.compile(r"(?<=[^\W_])\s+(?=[^\W_])", re.ASCII)


def join_segmented(line: str) -> str:
    """Chinese or Japanese tokens back to text: no spaces, except between two ASCII letters or
    digits (a Latin word or a number in the sentence keeps its space from the next one)."""
    kept = _SPACED.sub("\0", " ".join(line.split()))
    return kept.replace(" ", "").replace("\0", " ")


_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
_CJK_SPACED = re.compile(f"[{_CJK}](?= [{_CJK}])")  # (lookahead: every pair counts, overlapping ones too)
_CJK_JOINED = re.compile(f"[{_CJK}](?=[{_CJK}])")
_MARK_APART = re.compile(r"(?:^|\s)(?:[.,!?;:]|n't|'[a-z]{1,2})(?=\s|$)")  # "word ." "did n't" "it 's"
_MARK_ATTACHED = re.compile(r"[^\W_](?:[.,!?;:]|n't|'[a-z]{1,2})(?=\s|$)")  # "word." "didn't" "it's"


def looks_tokenized(lines, lang: str, at_least: int = 20):
    """Why ``lines`` (a sample of a corpus) look tokenised already, or None: for zh and ja, a
    quarter or more of the pairs of neighbouring CJK characters have a space between them (raw
    text has next to none; segmented text about one pair in two, its words being short); for any
    other language, most punctuation marks and clitics that end a word stand apart from it
    ("swimming ." "didn 't"), as a tokeniser leaves them. Fewer than ``at_least`` cases: None."""
    lines = list(lines)
    if base_language(lang) in SEGMENTED:
        apart = sum(len(_CJK_SPACED.findall(line)) for line in lines)
        together = sum(len(_CJK_JOINED.findall(line)) for line in lines)
        what, share = "pairs of neighbouring CJK characters are separated by a space (segmented text)", 0.25
    else:
        # (French typography itself sets ? ! : ; apart from their word: only . , and clitics count there)
        marks = (lambda found: [m for m in found if m.strip()[-1:] not in "?!:;"]) if base_language(lang) == "fr" \
            else (lambda found: found)
        apart = sum(len(marks(_MARK_APART.findall(line))) for line in lines)
        together = sum(len(marks(_MARK_ATTACHED.findall(line))) for line in lines)
        what, share = "word-final punctuation marks and clitics stand apart from their word, as after a tokeniser", 0.6
    if apart + together < at_least or apart < share * (apart + together):
        return None
    return f"{apart:,} of {apart + together:,} {what}"


def _init(lang, pretokenized=False):
    global _TOKENIZE
    _TOKENIZE = line_tokenizer(lang, pretokenized)


def _tokenize_chunk(lines):
    return [_TOKENIZE(line) for line in lines]


def _chunks(handle, size=2000):
    chunk = []
    for line in handle:
        chunk.append(line.rstrip("\n"))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _write(path: Path, chunks) -> int:
    """The lines of ``chunks`` (lists of lines) written whole into ``path``; their number."""
    count = 0
    with atomic(path) as (part,), open(part, "w", encoding="utf-8", newline="\n") as out:
        for lines in chunks:
            out.writelines(line + "\n" for line in lines)
            count += len(lines)
    return count


def tokenize_file(lang, source: Path, target: Path, workers=1, pretokenized=False):
    """``source`` tokenised line by line into ``target`` (whole), by ``workers`` processes; a
    progress line every minute."""
    progress = Progress(f"tokenise {lang} {source.name}{' (its own tokens)' if pretokenized else ''}: line", "lines")

    def counted(results):
        done = 0
        for lines in results:
            done += len(lines)
            progress.at(done)
            yield lines

    with open(source, encoding="utf-8", newline="\n") as handle:
        if workers > 1:
            with Pool(workers, initializer=_init, initargs=(lang, pretokenized)) as pool:
                count = _write(target, counted(pool.imap(_tokenize_chunk, _chunks(handle))))
        else:
            _init(lang, pretokenized)
            count = _write(target, counted(map(_tokenize_chunk, _chunks(handle))))
    say(f"tokenised {source.name} ({lang}): {count:,} lines")


def _aligned(a, b):
    """zip(a, b) that raises ValueError when one ends first (zip(strict=True) before Python 3.10)."""
    missing = object()
    for x, y in __import__("itertools").zip_longest(a, b, fillvalue=missing):
        if x is missing or y is missing:
            raise ValueError("one file ends before the other")
        yield x, y


MAX_TOKEN_CHARS = 100  # longer tokens (a URL, a run of symbols, a line without spaces) drop their pair


DROP_WARNING = 0.05  # a cleaning that drops more than this share of the pairs says so, and how to keep them


def clean_pair(src_in, tgt_in, src_out, tgt_out, max_len=250, ratio=1.5, max_token_chars=MAX_TOKEN_CHARS):
    """Drop pairs with an empty side, a side over ``max_len`` tokens, or a token-length ratio
    over ``ratio`` (either way), as Moses' clean-corpus-n.perl does; and pairs with a token of
    more than ``max_token_chars`` characters, which BPE would learn merges from as if it were
    a frequent word (one 100,000-character line reshapes thousands of merges). Returns the pairs
    kept and the pairs dropped for each reason; over DROP_WARNING of the corpus dropped, a warning
    says how many, why, and the option that keeps them."""
    kept, why = 0, {"empty": 0, "long": 0, "ratio": 0, "token": 0}
    try:
        with atomic(src_out, tgt_out) as parts, open(src_in, encoding="utf-8") as fs, \
                open(tgt_in, encoding="utf-8") as ft, open(parts[0], "w", encoding="utf-8", newline="\n") as os_, \
                open(parts[1], "w", encoding="utf-8", newline="\n") as ot:
            for number, (s, t) in enumerate(_aligned(fs, ft), 1):
                ws, wt = s.split(), t.split()
                ls, lt = len(ws), len(wt)
                reason = ("token" if max(map(len, ws + wt), default=0) > max_token_chars else "empty" if not (ls and lt)
                          else "long" if max(ls, lt) > max_len else "ratio" if max(ls, lt) > ratio * min(ls, lt) else "")
                if reason:
                    why[reason] += 1
                else:
                    os_.write(s)
                    ot.write(t)
                    kept += 1
    except UnicodeDecodeError as error:  # (atomic removed the temporaries: no output is touched)
        raise Refusal(f"{src_in} or {tgt_in} is not UTF-8 ({error})") from None
    except ValueError as error:  # _aligned: the files are not line-aligned
        raise Refusal(f"{src_in} and {tgt_in} differ in length ({error})") from None
    dropped, total = sum(why.values()), kept + sum(why.values())
    say(f"clean: kept {kept:,} pairs, dropped {dropped:,}: {why['empty']:,} with an empty side, {why['long']:,} "
          f"over {max_len} tokens, {why['ratio']:,} of a length ratio over {ratio:g}, {why['token']:,} with a token "
          f"over {max_token_chars} characters")
    if total and dropped > DROP_WARNING * total:
        options = {"ratio": f"--clean-ratio R over {ratio:g} keeps more of them", "long":
                   f"--clean-max-len N over {max_len} keeps more of them", "empty": "a pair with an empty side cannot "
                   "be trained on", "token": "such tokens are URLs or text without spaces"}
        reasons = ", ".join(f"{n:,} {options[k]}" for k, n in sorted(why.items(), key=lambda kv: -kv[1]) if n)
        say(f"warning: cleaning dropped {dropped:,} of {total:,} training pairs ({100 * dropped / total:.1f}%): "
              f"{reasons} (docs/recipes.md, Cleaning)")
    return kept, why


def versions():
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("sacremoses", "jieba", "fugashi", "unidic-lite", "subword-nmt", "sacrebleu"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out
