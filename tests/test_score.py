"""fairseq_csan.recipes.score on inputs checked by hand: hypotheses back in corpus order, training
and decoding speeds from fairseq's logs, compound splitting, tokenised BLEU, the significance
marks, sacreBLEU's paired bootstrap of BLEU and of chrF."""

import pytest

from fairseq_csan.recipes import score
from fairseq_csan.recipes.runner import Failed
from recipe_helpers import run, write


def test_chrf_scores_and_its_paired_bootstrap():
    from sacrebleu.metrics import CHRF

    refs = ["Der Hund läuft schnell nach Hause .", "Ein kleines Haus am See .", "Sie lesen ein Buch ."] * 4
    base = ["Der Hund rennt nach Hause .", "Ein Haus .", "Sie lesen Bücher ."] * 4
    better = ["Der Hund läuft schnell nach Hause .", "Ein kleines Haus am See .", "Sie lesen ein Buch ."] * 4
    test = score.paired_bootstrap(CHRF(), refs, base, better, 200)
    assert test["baseline_score"] == pytest.approx(CHRF().corpus_score(base, [refs]).score, abs=1e-6)
    assert test["score"] == pytest.approx(100.0) and test["p_value"] < 0.05 and test["mark"] in ("⇑", "↑")
    assert "nc:6" in test["signature"]
    same = score.paired_bootstrap(CHRF(), refs, base, base, 200)
    assert same["score"] == pytest.approx(same["baseline_score"]) and same["mark"] == ""


GENERATE = """S-1\tzweiter satz
T-1\tzweiter satz
H-1\t-0.5\tein zweiter satz
D-1\t-0.5\tein zweiter satz
S-0\terster satz
H-0\t-0.2\tder erste satz
2026-11-22 08:00:00 | INFO | fairseq_cli.generate | Translated 2 sentences (12 tokens) in 0.5s (4.00 sentences/s, 24.00 tokens/s)
"""


def test_sacrebleu_tokenises_as_the_target_needs(tmp_path):
    assert [score.sacrebleu_tokenize(lang) for lang in ("en", "de", "fr", "zh", "ja")] == [
        "13a", "13a", "13a", "zh", "ja-mecab"]
    assert score.sacrebleu_tokenize("zh_CN") == "zh"
    # a Chinese target: 13a would see one word per sentence; zh sees the characters
    write(tmp_path / "gen.txt", ["H-0\t-0.1\t我们 在 北京 学习 。", "H-1\t-0.1\t你 好"])
    write(tmp_path / "ref.tok", ["我们 在 北京 学习 。", "你 好 吗"])
    write(tmp_path / "ref.raw", ["我们在北京学习。", "你好吗"])
    score.score(tmp_path / "out", tmp_path / "gen.txt", tmp_path / "gen.txt", tmp_path / "ref.tok", tmp_path / "ref.raw",
                "zh", name="", arch="", task="", subset="test", test_name="test")
    import json

    results = json.loads((tmp_path / "out/results.json").read_text())
    assert "|tok:zh|" in results["sacrebleu_signature"] and results["bleu_compound"] is None
    assert (tmp_path / "out/hyp.detok").read_text(encoding="utf-8") == "我们在北京学习。\n你好\n"
    assert 40 < results["sacrebleu"] < 100


def test_hypotheses_come_back_in_corpus_order(tmp_path):
    (tmp_path / "gen.txt").write_text(GENERATE)
    assert score.hypotheses(tmp_path / "gen.txt") == ["der erste satz", "ein zweiter satz"]
    assert score.decode_speed(tmp_path / "gen.txt") == {"sentences": 2, "seconds": 0.5, "sent_per_s": 4.0}
    (tmp_path / "gap.txt").write_text("H-0\t-1\ta\nH-2\t-1\tc\n")
    with pytest.raises(Failed, match=r"lacks hypotheses for sentences \[1\]"):
        score.hypotheses(tmp_path / "gap.txt")


def test_train_speed_is_the_mean_of_ups(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "x | INFO | fairseq_cli.train | num. shared model params: 1,234 (num. trained: 1,200)\n"
        "x | INFO | train_inner | epoch 001:  2 / 9 loss=1, ups=1.5, wpb=3\n"
        "x | INFO | train_inner | epoch 001:  4 / 9 loss=1, ups=2.25, wpb=3\n"
        "x | INFO | train | epoch 001 | loss 9.3 | ups 7.81 | wpb 667\n")
    assert score.train_speed(log) == {"steps_per_s": 1.875, "logged_intervals": 2, "params": 1200}


def test_compound_splitting_as_the_wmt14_convention():
    assert score.split_compounds("Vorort-Bereich und Rot-Grün-Koalition") == \
        "Vorort ##AT##-##AT## Bereich und Rot ##AT##-##AT## Grün ##AT##-##AT## Koalition"
    # matches do not overlap, as with perl's s{(\S)-(\S)}{...}g: "b" is taken by the first
    assert score.split_compounds("a-b-c") == "a ##AT##-##AT## b-c"
    # a hyphen between spaces is not a compound
    assert score.split_compounds("a - b") == "a - b"


def test_tokenised_bleu_by_hand():
    def bleu(hyps, refs):
        return score.tokenised_bleu(hyps, refs).score

    # hypothesis = reference: 100; a 4-token hypothesis with 3/4 unigram, 1/3 bigram, 0 trigram
    # matches has BLEU 0 without smoothing (no 3-gram match); sacreBLEU's floor smoothing aside
    assert bleu(["a b c d e"], ["a b c d e"]) == pytest.approx(100.0)
    # tokenize none: punctuation is not split, so "d." does not match "d ."
    assert bleu(["a b c d."], ["a b c d ."]) < bleu(["a b c d ."], ["a b c d ."])
    # compound splitting turns one unmatched token into three, two of them matching
    hyp, ref = ["das Vorort-Gebiet ist groß"], ["das Vorort-Bereich ist groß"]
    assert bleu([score.split_compounds(h) for h in hyp], [score.split_compounds(r) for r in ref]) > bleu(hyp, ref)
    # up to a given order: unigrams only, 4 of 5 matched, hypothesis as long as the reference
    assert score.tokenised_bleu(["a b c d x"], ["a b c d e"], order=1).score == pytest.approx(80.0)


@pytest.mark.parametrize("delta, p, expected", [
    (0.8, 0.001, "⇑"), (0.8, 0.03, "↑"), (0.8, 0.05, ""), (-0.4, 0.002, "⇓"), (-0.4, 0.04, "↓"),
    (0.0, 0.001, ""), (0.5, None, ""),
])
def test_significance_marks(delta, p, expected):
    assert score.mark(delta, p) == expected


def test_paired_bootstrap_is_what_sacrebleu_paired_bs_says(tmp_path):
    """The bootstrap of BLEU in this process gives the figures ``sacrebleu --paired-bs`` prints for
    the same files (the same resampling and seed), and marks a clear gain."""
    import json
    import random
    import sys

    from sacrebleu.metrics import BLEU

    rng = random.Random(3)
    words = "the a cat dog sat stood on near mat rug today now".split()
    refs = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(60)]
    bad = [" ".join(w if rng.random() < 0.5 else rng.choice(words) for w in r.split()) for r in refs]
    good = [" ".join(w if rng.random() < 0.8 else rng.choice(words) for w in r.split()) for r in refs]
    for name, text in (("ref", refs), ("bad", bad), ("good", good)):
        write(tmp_path / name, text)
    test = score.paired_bootstrap(BLEU(tokenize="none", force=True), refs, bad, good, 200)
    cli = json.loads(run([sys.executable, "-m", "sacrebleu", tmp_path / "ref", "-i", tmp_path / "bad", tmp_path / "good", "--paired-bs",
                          "--paired-bs-n", "200", "-m", "bleu", "--tokenize", "none", "--force", "-f", "json"]).stdout)
    assert (test["baseline_score"], test["score"]) == (cli[0]["BLEU"]["score"], cli[1]["BLEU"]["score"])
    assert (test["p_value"], test["ci"]) == (cli[1]["BLEU"]["p_value"], cli[1]["BLEU"]["ci"])
    assert test["score"] > test["baseline_score"] + 10 and test["mark"] == "⇑"
