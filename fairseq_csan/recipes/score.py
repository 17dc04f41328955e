"""Scores of one evaluated system, as the papers report them (used by scripts/evaluate.sh).

usage:
  python -m fairseq_csan.recipes.score score --generate-log GEN [--decode-log LOG] --ref-tok REF.tok \
      --ref-raw REF --lang L --out DIR [--compound-split] [--train-log LOG] [--baseline DIR] [--name NAME] \
      [--arch ARCH] [--task TASK] [--bootstrap-samples 1000]
  python -m fairseq_csan.recipes.score speed TRAIN_LOG

score reads fairseq-generate's output GEN and writes to DIR:
  hyp.tok      hypotheses in corpus order, BPE removed: the pipeline's tokenisation
  hyp.detok    the same, detokenised in the target language (text.make_detokenizer)
  results.json every figure below, and results.md for people
and prints them. The figures:
  bleu_tok       case-sensitive 4-gram BLEU of hyp.tok against the tokenised reference,
                 with no further tokenisation (what multi-bleu.perl computes; the papers' BLEU)
  bleu_compound  (--compound-split, En-De) the same after splitting hyphenated compounds,
                 "a-b" -> "a ##AT##-##AT## b" on both sides, the customary WMT14 En-De number
  sacrebleu      sacreBLEU of hyp.detok against the raw reference, with its signature; its
                 tokeniser is the one sacreBLEU's documentation prescribes for the target
                 language (SACREBLEU_TOKENIZE: zh, ja-mecab; 13a for every other); with
                 --pretokenized (a task of text tokenised by its makers) hyp.detok is hyp.tok
                 and the tokeniser is none: tokens against the references' own tokens
  chrf           sacreBLEU's chrF (chrF2: character 6-grams, beta 2) of hyp.detok against the
                 raw reference, with its signature
  decode_sent_per_s  from fairseq-generate's own timing line (in LOG, its standard error)
  train_steps_per_s  mean of the 'ups' column of the training log's train_inner lines
  params         the trained parameter count fairseq logged at the start of training
  bootstrap      with --baseline: sacreBLEU's paired bootstrap resampling (--paired-bs) of
                 bleu_tok against the baseline's hyp.tok, its p-value and the mark:
                 ⇑ / ↑ better at p < 0.01 / 0.05, ⇓ / ↓ worse, none otherwise (Koehn 2004;
                 the CSAN paper's Table 2 marks); and the same test of chrF on hyp.detok
                 against the baseline's hyp.detok (sacreBLEU's PairedTest, the same seed)
"""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF

from .text import make_detokenizer, read_lines  # the recipes' one reader of text, one detokeniser

TRANSLATED = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s \(([\d.]+) sentences/s")
UPS = re.compile(r"\| train_inner \|.*?\bups=(\d+(?:\.\d+)?)")
PARAMS = re.compile(r"num\. shared model params: ([\d,]+) \(num\. trained: ([\d,]+)\)")
COMPOUND = re.compile(r"(\S)-(\S)")


def hypotheses(generate_log: Path):
    """The H- lines of fairseq-generate's output, in corpus order (it prints them by batch)."""
    found = {}
    with open(generate_log, encoding="utf-8") as f:
        for line in f:
            if line.startswith("H-"):
                head, _score, *text = line.rstrip("\n").split("\t")
                found[int(head[2:])] = text[0] if text else ""
    if not found:
        raise SystemExit(f"score: no hypotheses (H- lines) in {generate_log}")
    missing = sorted(set(range(max(found) + 1)) - set(found))
    if missing:
        raise SystemExit(f"score: {generate_log} lacks hypotheses for sentences {missing[:10]}")
    return [found[i] for i in range(len(found))]


def decode_speed(generate_log: Path):
    for line in reversed(Path(generate_log).read_text(encoding="utf-8").splitlines()):
        if m := TRANSLATED.search(line):
            return {"sentences": int(m.group(1).replace(",", "")), "seconds": float(m.group(3)),
                    "sent_per_s": float(m.group(4))}
    return None


def train_speed(train_log: Path):
    """Mean training steps/s over the log's train_inner lines (fairseq's 'ups')."""
    if not train_log or not Path(train_log).is_file():
        return None
    text = Path(train_log).read_text(encoding="utf-8", errors="replace")
    ups = [float(v) for v in UPS.findall(text)]
    params = PARAMS.findall(text)
    return {
        "steps_per_s": sum(ups) / len(ups) if ups else None,
        "logged_intervals": len(ups),
        "params": int(params[-1][1].replace(",", "")) if params else None,
    }


SACREBLEU_TOKENIZE = {"zh": "zh", "ja": "ja-mecab"}  # the rest: 13a, sacreBLEU's default


def sacrebleu_tokenize(lang: str) -> str:
    """sacreBLEU's tokeniser for a target language; ja-mecab needs mecab-python3 and ipadic."""
    name = SACREBLEU_TOKENIZE.get(lang.split("_")[0], "13a")  # zh_CN: zh
    if name == "ja-mecab":
        try:
            __import__("MeCab")
            __import__("ipadic")
        except ImportError:
            raise SystemExit("score: sacreBLEU scores Japanese with its ja-mecab tokeniser, which needs "
                             "mecab-python3 and ipadic: bash scripts/install.sh installs them "
                             "(or pip install 'sacrebleu[ja]')") from None
    return name


def split_compounds(line: str) -> str:
    return COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def write_lines(path: Path, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line in lines)


def tokenised_bleu(hyps, refs):
    return BLEU(tokenize="none", force=True).corpus_score(hyps, [refs]).score


def paired_bootstrap(ref_tok: Path, baseline_hyp: Path, system_hyp: Path, samples: int):
    """sacreBLEU's paired bootstrap of tokenised BLEU; the system's p-value against the baseline."""
    command = [sys.executable, "-m", "sacrebleu", str(ref_tok), "-i", str(baseline_hyp), str(system_hyp), "--paired-bs",
               "--paired-bs-n", str(samples), "-m", "bleu", "--tokenize", "none", "--force", "-f", "json"]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"score: sacrebleu --paired-bs failed:\n{run.stderr}")
    rows = json.loads(run.stdout)
    base, system = rows[0]["BLEU"], rows[1]["BLEU"]
    return {"command": " ".join(["sacrebleu", *command[3:]]), "samples": samples, "baseline_bleu": base["score"],
            "bleu": system["score"], "p_value": system["p_value"], "ci": system["ci"]}


def paired_bootstrap_chrf(ref_raw, baseline_detok, system_detok, samples: int):
    """sacreBLEU's paired bootstrap of chrF on detokenised text (its Python API: its command line
    cannot write chrF's bootstrap as JSON); the same resampling and seed as --paired-bs."""
    from sacrebleu.significance import PairedTest

    test = PairedTest([("baseline", baseline_detok), ("system", system_detok)], {"chrF": CHRF()},
                      [ref_raw], test_type="bs", n_samples=samples)
    signatures, scores = test()
    (name,) = [key for key in scores if key != "System"]
    base, system = scores[name]
    return {"samples": samples, "signature": str(signatures[name]), "baseline_chrf": float(base.score),
            "chrf": float(system.score), "p_value": float(system.p_value),
            "mark": mark(float(system.score) - float(base.score), float(system.p_value))}


def mark(delta: float, p_value: float) -> str:
    if p_value is None or p_value >= 0.05 or delta == 0:
        return ""
    if delta > 0:
        return "⇑" if p_value < 0.01 else "↑"
    return "⇓" if p_value < 0.01 else "↓"


def score(args):
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    hyps = hypotheses(args.generate_log)
    refs_tok = read_lines(args.ref_tok)
    refs_raw = read_lines(args.ref_raw)
    if not (len(hyps) == len(refs_tok) == len(refs_raw)):
        raise SystemExit(f"score: {len(hyps)} hypotheses, but {len(refs_tok)} lines in {args.ref_tok} "
                         f"and {len(refs_raw)} in {args.ref_raw}")
    write_lines(out / "hyp.tok", hyps)
    detokenize = make_detokenizer(args.lang, args.pretokenized)
    detoks = [detokenize(h) for h in hyps]
    write_lines(out / "hyp.detok", detoks)

    # text tokenised by its makers: the hypotheses' tokens against the references' own, as given
    sacre = BLEU(tokenize="none" if args.pretokenized else sacrebleu_tokenize(args.lang))
    sacre_score = sacre.corpus_score(detoks, [refs_raw])
    chrf = CHRF()
    chrf_score = chrf.corpus_score(detoks, [refs_raw])
    results = {
        "name": args.name or out.name,
        "arch": args.arch,
        "task": args.task,
        "subset": args.subset,
        "test_set": args.test_name or args.subset,
        "pretokenized": args.pretokenized,
        "lang": args.lang,
        "sentences": len(hyps),
        "bleu_tok": tokenised_bleu(hyps, refs_tok),
        "bleu_compound": None,
        "sacrebleu": sacre_score.score,
        "sacrebleu_signature": str(sacre.get_signature()),
        "sacrebleu_text": str(sacre_score),
        "chrf": chrf_score.score,
        "chrf_signature": str(chrf.get_signature()),
        "chrf_text": str(chrf_score),
        "decode": decode_speed(args.decode_log or args.generate_log),
        "train": train_speed(args.train_log),
        "bootstrap": None,
        "mark": "",
    }
    if args.compound_split:
        results["bleu_compound"] = tokenised_bleu([split_compounds(h) for h in hyps],
                                                  [split_compounds(r) for r in refs_tok])
    if args.baseline:
        baseline_hyp = args.baseline / "hyp.tok"
        if not baseline_hyp.is_file():
            raise SystemExit(f"score: --baseline {args.baseline} has no hyp.tok (evaluate the baseline first)")
        if len(read_lines(baseline_hyp)) != len(hyps):
            raise SystemExit(f"score: the baseline {baseline_hyp} has another number of lines than {len(hyps)}")
        base_results = args.baseline / "results.json"
        base = json.loads(base_results.read_text()) if base_results.is_file() else {}
        for key, ours in (("subset", args.subset), ("test_set", results["test_set"])):
            if base.get(key) and ours and base[key] != ours:  # (a baseline scored before test_set was kept: subset)
                raise SystemExit(f"score: the baseline {args.baseline} is an evaluation of {base[key]}, this one of {ours}")
        test = paired_bootstrap(args.ref_tok, baseline_hyp, out / "hyp.tok", args.bootstrap_samples)
        test["baseline"] = json.loads(base_results.read_text())["name"] if base_results.is_file() else str(args.baseline)
        baseline_detok = args.baseline / "hyp.detok"
        if baseline_detok.is_file():
            test["chrf"] = paired_bootstrap_chrf(refs_raw, read_lines(baseline_detok), detoks, args.bootstrap_samples)
        results["bootstrap"] = test
        results["mark"] = mark(test["bleu"] - test["baseline_bleu"], test["p_value"])
    from .runner import write_atomically

    write_atomically(out / "results.json", json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    write_atomically(out / "results.md", summary(results) + "\n")
    print(summary(results))


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
    lines.append(f"- sacreBLEU ({how}): {r['sacrebleu_text']}")
    lines.append(f"  signature: {r['sacrebleu_signature']}")
    if r.get("chrf") is not None:
        lines.append(f"- chrF ({how}): {r['chrf_text']}")
        lines.append(f"  signature: {r['chrf_signature']}")
    if r["decode"]:
        lines.append(f"- decoding: {r['decode']['sent_per_s']:.2f} sentences/s "
                     f"({r['decode']['sentences']} sentences in {r['decode']['seconds']:.1f}s)")
    if r["train"] and r["train"]["steps_per_s"] is not None:
        lines.append(f"- training: {r['train']['steps_per_s']:.2f} steps/s "
                     f"(mean over {r['train']['logged_intervals']} logged intervals)")
    if r["train"] and r["train"]["params"] is not None:
        lines.append(f"- parameters: {r['train']['params']:,}")
    if b := r["bootstrap"]:
        lines.append(f"- paired bootstrap against {b['baseline']} ({b['samples']} samples, tokenised BLEU): "
                     f"{b['baseline_bleu']:.2f} -> {b['bleu']:.2f}, p = {b['p_value']:.4f} {r['mark']}".rstrip())
        if c := b.get("chrf"):
            lines.append(f"- paired bootstrap of chrF against {b['baseline']}: {c['baseline_chrf']:.2f} -> "
                         f"{c['chrf']:.2f}, p = {c['p_value']:.4f} {c['mark']}".rstrip())
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sc = sub.add_parser("score")
    sc.add_argument("--generate-log", type=Path, required=True, help="fairseq-generate's standard output")
    sc.add_argument("--decode-log", type=Path, help="its standard error, with the timing line (default: GEN)")
    sc.add_argument("--ref-tok", type=Path, required=True)
    sc.add_argument("--ref-raw", type=Path, required=True)
    sc.add_argument("--lang", required=True, help="target language: detokenisation and sacreBLEU's tokeniser")
    sc.add_argument("--out", type=Path, required=True)
    sc.add_argument("--compound-split", action="store_true")
    sc.add_argument("--train-log", type=Path)
    sc.add_argument("--baseline", type=Path)
    sc.add_argument("--bootstrap-samples", type=int, default=1000)
    sc.add_argument("--name")
    sc.add_argument("--arch")
    sc.add_argument("--task")
    sc.add_argument("--subset", help="the split scored (test, valid, test1, ...), recorded in results.json")
    sc.add_argument("--test-name", help="the set's own name (its file's: test_2016_flickr), shown in the reports")
    sc.add_argument("--pretokenized", action="store_true",
                    help="the task keeps its text's own tokens: hyp.detok is hyp.tok, sacreBLEU tokenize none")
    sp = sub.add_parser("speed")
    sp.add_argument("train_log", type=Path)
    args = parser.parse_args(argv)
    if args.command == "speed":
        speed = train_speed(args.train_log)
        if not speed or speed["steps_per_s"] is None:
            print(f"[speed] no train_inner lines with ups in {args.train_log}")
            return
        print(f"[speed] {speed['steps_per_s']:.3f} training steps/s, mean over "
              f"{speed['logged_intervals']} logged intervals of {args.train_log}")
    else:
        score(args)


if __name__ == "__main__":
    from .runner import as_command

    as_command(main)
