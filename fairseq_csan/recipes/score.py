"""Scores of one evaluated system, as the papers report them (step 3 of evaluate.py).

:func:`score` reads fairseq-generate's output and writes hyp.tok (BPE removed), hyp.detok
(text.make_detokenizer), results.json (runner.RESULTS) and results.md into the evaluation's folder.
docs/recipes.md, "Evaluation: scripts/evaluate.sh", step 3, says what each figure is and its key.
"""

import re
from pathlib import Path
from typing import Optional

from sacrebleu.metrics import BLEU, CHRF

from .runner import RESULTS, Failed, Refusal, write_file
from .text import base_language, make_detokenizer, read_lines  # the recipes' one reader of text, one detokeniser

TRANSLATED = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s \(([\d.]+) sentences/s")
UPS = re.compile(r"\| train_inner \|.*?\bups=(\d+(?:\.\d+)?)")
PARAMS = re.compile(r"num\. shared model params: ([\d,]+) \(num\. trained: ([\d,]+)\)")
COMPOUND = re.compile(r"(\S)-(\S)")
SACREBLEU_TOKENIZE = {"zh": "zh", "ja": "ja-mecab"}  # the rest: 13a, sacreBLEU's default


def hypotheses(generate_log: Path):
    """The H- lines of fairseq-generate's output, in corpus order (it prints them by batch)."""
    found = {}
    with open(generate_log, encoding="utf-8") as f:
        for line in f:
            if line.startswith("H-"):
                head, _score, *text = line.rstrip("\n").split("\t")
                found[int(head[2:])] = text[0] if text else ""
    if not found:
        raise Failed(f"no hypotheses (H- lines) in {generate_log}")
    missing = sorted(set(range(max(found) + 1)) - set(found))
    if missing:
        raise Failed(f"{generate_log} lacks hypotheses for sentences {missing[:10]}")
    return [found[i] for i in range(len(found))]


def decode_speed(generate_log: Path):
    for line in reversed(Path(generate_log).read_text(encoding="utf-8").splitlines()):
        found = TRANSLATED.search(line)
        if found:
            return {"sentences": int(found.group(1).replace(",", "")), "seconds": float(found.group(3)),
                    "sent_per_s": float(found.group(4))}
    return None


def train_speed(train_log: Optional[Path]):
    """Mean training steps/s over the log's train_inner lines (fairseq's 'ups')."""
    if not train_log or not Path(train_log).is_file():
        return None
    text = Path(train_log).read_text(encoding="utf-8", errors="replace")
    ups = [float(v) for v in UPS.findall(text)]
    params = PARAMS.findall(text)
    return {"steps_per_s": sum(ups) / len(ups) if ups else None, "logged_intervals": len(ups),
            "params": int(params[-1][1].replace(",", "")) if params else None}


def sacrebleu_tokenize(lang: str) -> str:
    """sacreBLEU's tokeniser for a target language; ja-mecab needs mecab-python3 and ipadic."""
    name = SACREBLEU_TOKENIZE.get(base_language(lang), "13a")
    if name == "ja-mecab":
        try:
            __import__("MeCab")
            __import__("ipadic")
        except ImportError:
            raise Refusal("sacreBLEU scores Japanese with its ja-mecab tokeniser, which needs mecab-python3 and ipadic: "
                          "bash scripts/install.sh installs them (or pip install 'sacrebleu[ja]')") from None
    return name


def split_compounds(line: str) -> str:
    return COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def tokenised_bleu(hyps, refs, order: int = 4):
    """Tokenised case-sensitive corpus BLEU (no further tokenisation) up to ``order``, with its statistics."""
    return BLEU(tokenize="none", force=True, max_ngram_order=order).corpus_score(hyps, [refs])


def mark(delta: float, p_value: float) -> str:
    if p_value is None or p_value >= 0.05 or delta == 0:
        return ""
    if delta > 0:
        return "⇑" if p_value < 0.01 else "↑"
    return "⇓" if p_value < 0.01 else "↓"


def paired_bootstrap(metric, refs, baseline, system, samples: int) -> dict:
    """sacreBLEU's paired bootstrap (``PairedTest``, as ``sacrebleu --paired-bs``) of ``metric`` of ``system``
    against ``baseline`` (lists of lines) on ``refs``: both scores, the p-value, mean, 95% interval and mark."""
    from sacrebleu.significance import PairedTest

    test = PairedTest([("baseline", baseline), ("system", system)], {"metric": metric}, [refs], test_type="bs",
                      n_samples=samples)
    signatures, scores = test()
    (key,) = [k for k in scores if k != "System"]  # (keyed by the metric's own name: BLEU, chrF2)
    base, found = scores[key]
    return {"samples": samples, "signature": str(signatures[key]), "baseline_score": float(base.score),
            "score": float(found.score), "p_value": float(found.p_value), "mean": float(found.mean),
            "ci": float(found.ci), "mark": mark(float(found.score) - float(base.score), float(found.p_value))}


def check_baseline(baseline: Path, subset: str, test_name: str) -> dict:
    """The results of the evaluation in ``baseline``, refused unless it is one of this test set:
    checked before decoding (evaluate), and again here when scoring (it may have been redone since)."""
    if not (baseline / "hyp.tok").is_file():
        raise Refusal(f"--baseline {baseline} has no hyp.tok: evaluate the baseline first, with the same --subset")
    base = RESULTS.read(baseline) or {}
    if base.get("subset") and base["subset"] != subset:
        raise Refusal(f"--baseline {baseline} is an evaluation of {base['subset']}; evaluate the baseline on "
                      f"--subset {subset} too")
    if base.get("test_set") and base["test_set"] != test_name:
        raise Refusal(f"--baseline {baseline} is an evaluation of {base['test_set']}, and --subset {subset} is now "
                      f"{test_name}: evaluate the baseline on it too")
    return base


def _bootstrap(baseline: Path, subset, test_name, hyps, detoks, refs_tok, refs_raw, samples: int) -> dict:
    """The paired bootstrap of tokenised BLEU (and of chrF, where the baseline has its hyp.detok)
    against the evaluation in ``baseline``, which must be of the same test set."""
    base = check_baseline(baseline, subset, test_name)
    base_hyps = read_lines(baseline / "hyp.tok")
    if len(base_hyps) != len(hyps):
        raise Refusal(f"--baseline {baseline}'s hyp.tok has {len(base_hyps)} lines, this evaluation {len(hyps)}")
    bleu = paired_bootstrap(BLEU(tokenize="none", force=True), refs_tok, base_hyps, hyps, samples)
    test = {"samples": samples, "baseline": base.get("name", str(baseline)), "baseline_bleu": bleu["baseline_score"],
            "bleu": bleu["score"], "p_value": bleu["p_value"], "ci": bleu["ci"], "mark": bleu["mark"]}
    if (baseline / "hyp.detok").is_file():
        chrf = paired_bootstrap(CHRF(), refs_raw, read_lines(baseline / "hyp.detok"), detoks, samples)
        test["chrf"] = {"samples": samples, "signature": chrf["signature"], "baseline_chrf": chrf["baseline_score"],
                        "chrf": chrf["score"], "p_value": chrf["p_value"], "mark": chrf["mark"]}
    return test


def score(out: Path, generated: Path, decode_log: Path, ref_tok: Path, ref_raw: Path, lang: str, *, name: str,
          arch: str, task: str, subset: str, test_name: str, pretokenized: bool = False, train_log=None,
          baseline: Optional[Path] = None, samples: int = 1000) -> dict:
    """Score one evaluation (the module's docstring) into ``out``; the results, also printed."""
    hyps, refs_tok, refs_raw = hypotheses(generated), read_lines(ref_tok), read_lines(ref_raw)
    if not (len(hyps) == len(refs_tok) == len(refs_raw)):
        raise Failed(f"{len(hyps)} hypotheses, but {len(refs_tok)} lines in {ref_tok} and {len(refs_raw)} in {ref_raw}")
    detokenize = make_detokenizer(lang, pretokenized)
    detoks = [detokenize(h) for h in hyps]
    # text tokenised by its makers: the hypotheses' tokens against the references' own, as given
    sacre, chrf = BLEU(tokenize="none" if pretokenized else sacrebleu_tokenize(lang)), CHRF()
    sacre_score, chrf_score = sacre.corpus_score(detoks, [refs_raw]), chrf.corpus_score(detoks, [refs_raw])
    results = {
        "name": name or out.name, "arch": arch, "task": task, "subset": subset, "test_set": test_name or subset,
        "pretokenized": pretokenized, "lang": lang, "sentences": len(hyps), "bleu_tok": tokenised_bleu(hyps, refs_tok).score,
        "bleu_compound": None, "sacrebleu": sacre_score.score, "sacrebleu_signature": str(sacre.get_signature()),
        "sacrebleu_text": str(sacre_score), "chrf": chrf_score.score, "chrf_signature": str(chrf.get_signature()),
        "chrf_text": str(chrf_score), "decode": decode_speed(decode_log), "train": train_speed(train_log),
        "bootstrap": None, "mark": ""}
    if base_language(lang) == "de":  # the customary En-De number
        compounds = [[split_compounds(line) for line in lines] for lines in (hyps, refs_tok)]
        results["bleu_compound"] = tokenised_bleu(*compounds).score
    if baseline is not None:
        results["bootstrap"] = _bootstrap(baseline, subset, results["test_set"], hyps, detoks, refs_tok, refs_raw,
                                          samples)
        results["mark"] = results["bootstrap"]["mark"]
    write_file(out / "hyp.tok", "".join(h + "\n" for h in hyps))
    write_file(out / "hyp.detok", "".join(d + "\n" for d in detoks))
    write_file(out / "results.md", summary(results) + "\n")
    RESULTS.write(out, results)  # last: while it is there, the evaluation finished
    print(summary(results))
    return results


def test_set(r) -> str:
    """The set an evaluation scored, as reports name it: its file's name (test_2016_flickr), with
    the split where they differ and it is not the first test set (test_2018_flickr, test1)."""
    name, subset = r.get("test_set") or r.get("subset") or "", r.get("subset") or ""
    return name if subset in ("", "test", name) else f"{name}, {subset}"


def summary(r):
    shown = f" {test_set(r)}" if test_set(r) not in ("", "test") else ""
    how = "as given (pretokenized), tokenize none" if r.get("pretokenized") else "detokenised"
    lines = [f"# {r['name']} ({r['arch'] or 'arch unknown'}, {r['task'] or 'task unknown'}{shown}), {r['sentences']} sentences",
             f"- tokenised BLEU (case-sensitive, 4-gram): {r['bleu_tok']:.2f} {r['mark']}".rstrip()]
    if r["bleu_compound"] is not None:
        lines.append(f"- compound-split BLEU: {r['bleu_compound']:.2f}")
    lines += [f"- sacreBLEU ({how}): {r['sacrebleu_text']}", f"  signature: {r['sacrebleu_signature']}"]
    if r.get("chrf") is not None:
        lines += [f"- chrF ({how}): {r['chrf_text']}", f"  signature: {r['chrf_signature']}"]
    if r["decode"]:
        lines.append(f"- decoding: {r['decode']['sent_per_s']:.2f} sentences/s "
                     f"({r['decode']['sentences']} sentences in {r['decode']['seconds']:.1f}s)")
    if r["train"] and r["train"]["steps_per_s"] is not None:
        lines.append(f"- training: {r['train']['steps_per_s']:.2f} steps/s "
                     f"(mean over {r['train']['logged_intervals']} logged intervals)")
    if r["train"] and r["train"]["params"] is not None:
        lines.append(f"- parameters: {r['train']['params']:,}")
    if r["bootstrap"]:
        b = r["bootstrap"]
        lines.append(f"- paired bootstrap against {b['baseline']} ({b['samples']} samples, tokenised BLEU): "
                     f"{b['baseline_bleu']:.2f} -> {b['bleu']:.2f}, p = {b['p_value']:.4f} {r['mark']}".rstrip())
        if b.get("chrf"):
            c = b["chrf"]
            lines.append(f"- paired bootstrap of chrF against {b['baseline']}: {c['baseline_chrf']:.2f} -> "
                         f"{c['chrf']:.2f}, p = {c['p_value']:.4f} {c['mark']}".rstrip())
    return "\n".join(lines)
