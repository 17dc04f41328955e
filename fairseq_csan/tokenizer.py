"""The recipes' tokenisation in fairseq's tokenizer registry: ``--tokenizer csan_recipe``.

It tokenises the source language and detokenises the target language exactly as the task
recipes do (fairseq_csan/recipes/text.py): punctuation normalisation and the Moses tokenizer
without escaping for En, De and other languages, jieba for Zh, MeCab (fugashi) for Ja; the
Moses detokenizer for the output (for Zh and Ja, the tokens joined without spaces); with
``pretokenized`` (a model of text tokenised by its makers: prepare files --pretokenized, which
export records), neither: input is taken as tokens and the output stays tokens. The languages are the task's ``-s``/``-t`` (or
``source_lang``/``target_lang`` in a model folder's configuration). Its tokeniser packages
are imported only when it is built, so ``--user-dir fairseq_csan`` stays light.

With it, the recipe's processing of raw text is fairseq's own::

    fairseq-interactive DATA-BIN --user-dir fairseq_csan --path CKPT -s en -t de \\
        --tokenizer csan_recipe --bpe subword_nmt --bpe-codes CODES --remove-bpe ...

This file also has what makes ``translate()`` of a hub model exported with this tokenizer
(fairseq_csan/recipes/export.py) decode with the beam stored in its folder
(:func:`translate_with_stored_beam`, which patches.py puts over fairseq's
``GeneratorHubInterface.translate``). That is a matter of correctness, not convenience: the hub
decodes with every generation setting of the folder (length penalty, length limits) except the
beam, which ``translate()`` takes from its own default, 5, so an exported folder would silently
translate with neither the papers' setting (beam 4) nor fairseq's defaults, and not as
evaluate.sh and translate.py do, which export promises. An explicit beam still wins, and every
other hub model keeps fairseq's default. Such a folder also translates one sentence on the CPU
with one thread, as translate.py does (recipes/decoding.py says why; OMP_NUM_THREADS wins).
"""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.data.encoders import register_tokenizer
from fairseq.dataclass import FairseqDataclass

NAME = "csan_recipe"


@dataclass
class RecipeTokenizerConfig(FairseqDataclass):
    source_lang: Optional[str] = field(default=None, metadata={"help": "source language"})
    target_lang: Optional[str] = field(default=None, metadata={"help": "target language"})
    pretokenized: bool = field(default=False, metadata={
        "help": "the model was trained on text tokenised by its makers (prepare files --pretokenized): input is "
                "taken as tokens, output is tokens"})


@register_tokenizer(NAME, dataclass=RecipeTokenizerConfig)
class RecipeTokenizer:
    """encode: a raw source line -> the recipe's tokens; decode: target tokens -> text."""

    def __init__(self, cfg: RecipeTokenizerConfig):
        src, tgt = getattr(cfg, "source_lang", None), getattr(cfg, "target_lang", None)
        if not src or not tgt:
            raise ValueError(f"--tokenizer {NAME} needs the source and target languages: give "
                             "-s/--source-lang and -t/--target-lang")
        from .recipes import text  # the tokenisers' packages load here, not with the plugin

        pretokenized = bool(getattr(cfg, "pretokenized", False))
        try:
            self._detokenize = text.make_detokenizer(tgt, pretokenized)
        except ValueError as error:
            raise ValueError(f"--tokenizer {NAME}: -t {tgt}: {error}") from None
        self._tokenize = text.line_tokenizer(src, pretokenized)
        self.source_lang, self.target_lang = src, tgt

    def encode(self, x: str) -> str:
        return self._tokenize(x)

    def decode(self, x: str) -> str:
        return self._detokenize(x)


def _uses_our_tokenizer(hub) -> bool:
    tokenizer = getattr(hub.cfg, "tokenizer", None)
    return tokenizer is not None and getattr(tokenizer, "_name", None) == NAME


def translate_with_stored_beam(translate):
    """fairseq's ``GeneratorHubInterface.translate``; without a beam, a model folder with our
    tokenizer decodes with its own (fairseq's default, 5, for every other model), and one
    sentence on the CPU with one thread (recipes/decoding.py's rule; OMP_NUM_THREADS wins)."""
    def wrapped(self, sentences, beam=None, verbose=False, **kwargs):
        if not _uses_our_tokenizer(self):
            return translate(self, sentences, 5 if beam is None else beam, verbose, **kwargs)  # 5: fairseq's default
        import torch

        from .recipes.decoding import cpu_threads

        beam = self.cfg.generation.beam if beam is None else beam
        one = isinstance(sentences, str) or len(sentences) == 1
        threads = cpu_threads(1 if one else 2) if self.device.type == "cpu" else None
        if not threads:
            return translate(self, sentences, beam, verbose, **kwargs)
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return translate(self, sentences, beam, verbose, **kwargs)
        finally:
            torch.set_num_threads(before)

    wrapped.__wrapped__ = translate
    wrapped.__doc__ = translate.__doc__
    return wrapped

