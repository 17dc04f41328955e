"""fairseq_csan/tokenizer.py: --tokenizer csan_recipe in fairseq's registry, and translate()
of an exported hub model with its stored beam."""

import argparse
import subprocess
import sys

import pytest
import torch

import fairseq_csan  # noqa: F401  (registers the tokenizer)
from fairseq import hub_utils, options
from fairseq.data import encoders
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from fairseq_csan.recipes import text

LINES = {
    "en": ["It's “fine” & <ok>\u00a0— 3.5%  \tend.", "  A man\rin red.  ", "", " \x1c ", "Tom's dog-house costs $5."],
    "de": ["Das ist „gut“, oder?", "Ein Mann\u2028läuft.", "Straßen-Bahn & Co."],
    "zh": ["我爱北京天安门。\r好的", "他说：“你好！”", "3.5%的人"],
    "ja": ["東京都に住んでいます。", "「こんにちは」と言った。", "ＡＢＣ　１２３"],
}


def build(src, tgt):
    return encoders.build_tokenizer(argparse.Namespace(tokenizer="csan_recipe", source_lang=src, target_lang=tgt))


@pytest.mark.parametrize("lang", sorted(LINES))
def test_encode_is_the_recipes_tokenisation(lang):
    tok = build(lang, "en")
    recipe = text.make_tokenizer(lang)
    for line in LINES[lang]:
        # preparation collapses blanks in raw/ (corpora.clean_line), then tokenises (text.py)
        clean = " ".join(line.split())
        expected = " ".join(recipe(clean).split()) if clean else ""
        assert tok.encode(line) == expected


def test_encode_examples():
    assert build("en", "de").encode("It's “fine” & <ok>.") == "It 's \" fine \" & < ok > ."  # no &amp; escapes
    assert build("zh", "en").encode("我爱北京天安门。") == "我 爱 北京 天安门 。"
    assert build("ja", "en").encode("東京都に住んでいます。") == "東京 都 に 住ん で い ます 。"
    assert build("en", "de").encode("A\u2028B\rC") == "A B C"  # one line, as preparation reads it


def test_decode_is_the_recipes_detokenisation():
    for lang in ("en", "de"):
        tok = build("zh", lang)
        for line in ["It 's \" fine \" & < ok > .", "Das ist \" gut \" , oder ?", ""]:
            assert tok.decode(line) == text.make_detokenizer(lang)(line)
    assert build("zh", "en").decode("It 's \" fine \" .") == "It's \"fine\"."


def test_languages_are_required_and_targets_checked():
    with pytest.raises(ValueError, match="needs the source and target languages: give -s/--source-lang"):
        build(None, "de")
    assert build("en", "zh").decode("我们 在 北京 学习 。") == "我们在北京学习。"  # any target language


def test_interactive_command_line_takes_the_task_languages():
    parser = options.get_interactive_generation_parser()
    args = options.parse_args_and_arch(parser, ["/dev/null", "-s", "de", "-t", "en", "--tokenizer", "csan_recipe",
                                                "--bpe", "subword_nmt", "--bpe-codes", "/dev/null"])
    cfg = convert_namespace_to_omegaconf(args)
    tok = encoders.build_tokenizer(cfg.tokenizer)
    assert (tok.source_lang, tok.target_lang) == ("de", "en")
    assert tok.encode("Das ist „gut“.") == "Das ist \" gut \" ."


def test_the_plugin_stays_light():
    code = ("import sys, fairseq_csan; from fairseq.data.encoders import TOKENIZER_REGISTRY; "
            "assert 'csan_recipe' in TOKENIZER_REGISTRY; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sacremoses', 'jieba', 'fugashi', "
            "'subword_nmt') or m.startswith('fairseq_csan.recipes')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


class FakeHub:
    """What GeneratorHubInterface.translate reads of itself: its cfg and sample()."""

    def __init__(self, tokenizer, beam):
        from omegaconf import OmegaConf

        self.cfg = OmegaConf.create({"tokenizer": tokenizer, "generation": {"beam": beam}})
        self.device, self.threads = torch.device("cpu"), None

    def sample(self, sentences, beam, verbose=False, **kwargs):
        self.threads = torch.get_num_threads()
        return beam


def test_exported_hub_models_translate_with_their_stored_beam():
    translate = hub_utils.GeneratorHubInterface.translate
    ours = FakeHub({"_name": "csan_recipe", "source_lang": "en", "target_lang": "de"}, beam=4)
    assert translate(ours, "x") == 4  # fairseq's translate() took beam 5 whatever the model folder said
    assert translate(ours, "x", beam=2) == 2
    assert translate(ours, "x", 3) == 3
    # every other hub model keeps fairseq's default
    assert translate(FakeHub({"_name": "moses"}, beam=4), "x") == 5
    assert translate(FakeHub(None, beam=4), "x") == 5


def test_an_exported_hub_model_translates_one_sentence_on_the_cpu_with_one_thread(monkeypatch):
    """decoding.cpu_threads' rule, in the hub: one thread for one sentence, the caller's number
    for more, and OMP_NUM_THREADS as the user set it; the caller's number is put back."""
    translate = hub_utils.GeneratorHubInterface.translate
    ours = FakeHub({"_name": "csan_recipe", "source_lang": "en", "target_lang": "de"}, beam=4)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        translate(ours, "x")
        assert ours.threads == 1 and torch.get_num_threads() == 2
        translate(ours, ["x", "y"])
        assert ours.threads == 2
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        translate(ours, ["x"])
        assert ours.threads == 2
    finally:
        torch.set_num_threads(before)
