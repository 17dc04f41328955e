"""Tokenisation, segmentation, detokenisation and length cleaning for the task recipes.

docs/recipes.md says each language's rule ('Your own corpus'; 'Recipe choices where the papers are
silent': no aggressive hyphen splitting, no XML escaping) and the cleaning ('Cleaning'). Beyond it:
Moses' punctuation normalisation also removes control characters, and every input line gives one
output line, empty or not, so that the two sides stay aligned.
"""

import gzip
import re
import sys
import zlib
from contextlib import nullcontext
from itertools import islice, zip_longest
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
    stdin = str(path) == "-"
    name = "<stdin>" if stdin else str(path)
    handle = sys.stdin.buffer if stdin else gzip.open(path, "rb") if name.endswith(".gz") else open(path, "rb")
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
        if not stdin:
            handle.close()


def read_lines(path):
    """:func:`iter_lines` as a list."""
    return list(iter_lines(path))


# languages written without spaces, and the rule that segments each (as a prepared task records it)
SEGMENTED = {"zh": "jieba", "ja": "mecab (fugashi, unidic-lite)"}
AS_GIVEN = "as given (pretokenized)"  # the rule of prepare files --pretokenized: the text's own tokens


def base_language(lang: str) -> str:
    """The language of a code with a region or script (zh_CN, pt_BR -> zh, pt): its rules."""
    return lang.split("_")[0]


def tokenizer_name(lang: str, pretokenized: bool = False) -> str:
    """The tokenisation rule used for ``lang``, as a prepared task records it."""
    lang = base_language(lang)
    if pretokenized or lang in SEGMENTED:
        return AS_GIVEN if pretokenized else SEGMENTED[lang]
    from sacremoses.corpus import NonbreakingPrefixes

    if lang in NonbreakingPrefixes().available_langs.values():
        return f"moses {lang}"
    return f"moses (no rules for {lang}: English's, as tokenizer.perl)"


def make_tokenizer(lang: str, pretokenized: bool = False):
    """A function from a raw line to its tokens joined by single spaces; for text tokenised
    already (``pretokenized``), its own tokens."""
    if pretokenized:
        return lambda line: line
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    lang = base_language(lang)
    if lang not in SEGMENTED:
        normalizer, tokenizer = MosesPunctNormalizer(lang, post_remove_control_chars=True), MosesTokenizer(lang)
        return lambda line: tokenizer.tokenize(normalizer.normalize(line), return_str=True, escape=False)
    if lang == "zh":
        import jieba

        jieba.setLogLevel(60)
        jieba.initialize()
        segment = jieba.cut  # (accurate mode, with its HMM for unknown words)
    else:
        import fugashi

        tagger = fugashi.Tagger("-Owakati")
        segment = lambda line: tagger.parse(line).split()  # noqa: E731
    strip = MosesPunctNormalizer(post_remove_control_chars=True).remove_control_chars
    return lambda line: " ".join(token for token in segment(strip(line)) if not token.isspace())


def line_tokenizer(lang: str, pretokenized: bool = False):
    """A function from one line of raw text to the recipe's tokens for it: blanks collapsed as
    preparation collapses them in raw/ (corpora.clean_line), the language's tokeniser (none for
    ``pretokenized`` text), single spaces between tokens; a blank line stays empty."""
    tokenize = make_tokenizer(lang, pretokenized)
    return lambda line: " ".join(tokenize(" ".join(line.split())).split()) if line.split() else ""


def make_detokenizer(lang: str, pretokenized: bool = False):
    """A function from tokens joined by spaces to text, as the recipes detokenise hypotheses
    (score.py writes hyp.detok with it). A model of ``pretokenized`` text writes tokens as its
    references have them: single spaces, nothing else changed."""
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
    """Why ``lines`` (a sample of a corpus) look tokenised already, or None (the rule: docs/recipes.md,
    'Pre-tokenised corpora'). Fewer than ``at_least`` cases: None."""
    lines = list(lines)
    if base_language(lang) in SEGMENTED:
        patterns, share = (_CJK_SPACED, _CJK_JOINED), 0.25
        what = "pairs of neighbouring CJK characters are separated by a space (segmented text)"
    else:
        patterns, share = (_MARK_APART, _MARK_ATTACHED), 0.6
        what = "word-final punctuation marks and clitics stand apart from their word, as after a tokeniser"
    # (French typography itself sets ? ! : ; apart from their word: only . , and clitics count there)
    uncounted = "?!:;" if base_language(lang) == "fr" else ""
    apart, together = (sum(1 for line in lines for found in pattern.findall(line) if found.strip()[-1] not in uncounted)
                       for pattern in patterns)
    if apart + together < at_least or apart < share * (apart + together):
        return None
    return f"{apart:,} of {apart + together:,} {what}"


def _init(lang, pretokenized=False):
    global _TOKENIZE
    _TOKENIZE = line_tokenizer(lang, pretokenized)


def _tokenize_chunk(lines):
    return [_TOKENIZE(line) for line in lines]


def tokenize_file(lang, source: Path, target: Path, workers=1, pretokenized=False):
    """``source`` tokenised line by line into ``target`` (whole), 2,000 lines at a time by ``workers``
    processes; a progress line every minute."""
    progress = Progress(f"tokenise {lang} {source.name}{' (its own tokens)' if pretokenized else ''}: line", "lines")
    count = 0
    with open(source, encoding="utf-8", newline="\n") as handle, \
            (Pool(workers, _init, (lang, pretokenized)) if workers > 1 else nullcontext()) as pool, \
            atomic(target) as (part,), open(part, "w", encoding="utf-8", newline="\n") as out:
        if pool is None:
            _init(lang, pretokenized)
        chunks = iter(lambda: [line.rstrip("\n") for line in islice(handle, 2000)], [])
        for lines in (pool.imap if pool else map)(_tokenize_chunk, chunks):
            count += len(lines)
            progress.at(count)
            out.writelines(line + "\n" for line in lines)
    say(f"tokenised {source.name} ({lang}): {count:,} lines")


MAX_TOKEN_CHARS = 100  # longer tokens (a URL, a run of symbols, a line without spaces) drop their pair
DROP_WARNING = 0.05  # a cleaning that drops more than this share of the pairs says so, and how to keep them


def clean_pair(src_in, tgt_in, src_out, tgt_out, max_len=250, ratio=1.5, max_token_chars=MAX_TOKEN_CHARS):
    """Drop the pairs that docs/recipes.md ('Preparation', 'Cleaning') says, and why (``max_len``,
    ``ratio`` either way, ``max_token_chars``); the pairs kept and the pairs dropped for each reason
    (over DROP_WARNING of the corpus dropped, a warning says how many, why, and what keeps them)."""
    kept, why = 0, {"empty": 0, "long": 0, "ratio": 0, "token": 0}
    try:
        with atomic(src_out, tgt_out) as parts, open(src_in, encoding="utf-8") as fs, \
                open(tgt_in, encoding="utf-8") as ft, open(parts[0], "w", encoding="utf-8", newline="\n") as os_, \
                open(parts[1], "w", encoding="utf-8", newline="\n") as ot:
            for s, t in zip_longest(fs, ft):  # (zip(strict=True) before Python 3.10)
                if s is None or t is None:  # (atomic removes the temporaries: no output is touched)
                    raise Refusal(f"{src_in} and {tgt_in} differ in length (one file ends before the other)")
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
    except UnicodeDecodeError as error:
        raise Refusal(f"{src_in} or {tgt_in} is not UTF-8 ({error})") from None
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
