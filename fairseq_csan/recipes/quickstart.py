"""The quick start: the task recipes' own pipeline at a small size, offline.
  1 corpus    a toy En-De corpus (fairseq_csan.recipes.toy_corpus), or your own from CORPUS
  2 prepare   each language's tokenisation, joint BPE, fairseq-preprocess
              (fairseq_csan.recipes.prepare, as examples/*/prepare.sh)
  3 train     scripts/train.sh: a small ARCH model (fairseq-train --user-dir fairseq_csan)
  4 evaluate  scripts/evaluate.sh: the last 5 checkpoints averaged, beam 4, BLEU and chrF
  5 export    a fairseq model folder (fairseq_csan.recipes.export), and one sentence
              translated with TransformerModel.from_pretrained(folder)
Each step's command is printed ("+ ...") and run; a rerun skips what is done and redoes what was
made from changed inputs. How long it takes, and what it prints: docs/recipes.md (The quick start).

examples/quickstart.sh is its door; docs/recipes.md, "The quick start in detail", says its settings
(:class:`Settings`). Each step runs as a child process (runner.run_child), so it skips, redoes and
refuses exactly as it does on its own.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import List, Optional

from .command_line import LANGUAGE, Parser
from .runner import Failed, Refusal, as_command, run_child, say, shell_words

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the clone's scripts/, examples/
DEFAULT_ARCH = "transformer_csan2d"
# the lines of scripts/train.sh's output the quick start shows: its commands and log's progress and end (its
# own progress lines and messages come on standard error, shown as they are)
TRAINING_PROGRESS = re.compile(rb"^\+ |\| (train_inner|valid) \||done training")

# Each setting: its option, the environment variable that is its default where set and not empty
# (an option given wins), its metavar (None: a switch, whose variable is 0 or 1), its default
# (None: worked out from the corpus) and its help.
SETTINGS = (
    ("--corpus", "CORPUS", "DIR", "", "a folder of line-aligned UTF-8 files in both languages, each may be gzipped "
     "(NAME.gz): train.SRC/.TGT, val, valid or dev, and one or more test* (the first in name order is the test set; "
     "Multi30k's own names work as they "
     "are: en-de with val and test_2016_flickr alone is prepared as examples/multi30k/prepare.sh, any other as your "
     "own files, prepare files). Default: the toy corpus, written to WORK/raw"),
    ("--src", "SRC", "LANG", "en", "the source language, as the files' suffix (default en)"),
    ("--tgt", "TGT", "LANG", "de", "the target language (default de); the toy corpus is English-German (en-de or "
     "de-en)"),
    ("--work", "WORK", "DIR", None, "output folder (default work/quickstart/<toy or the corpus folder's name>, with "
     "_SRC_TGT added for a pair other than en-de)"),
    ("--arch", "ARCH", "ARCH", DEFAULT_ARCH, "architecture (default transformer_csan2d): any registered one, fairseq's "
     "transformer and our baselines included; a variant goes in the lower 2 of 3 encoder layers"),
    ("--model", "MODEL", "DIR", None, "the exported model folder (default WORK/model, WORK/model_ARCH for another "
     "ARCH)"),
    ("--device", "DEVICE", "DEVICE", "auto", "auto (default: the GPU when torch sees one, else the CPU), cpu or cuda"),
    ("--max-update", "MAX_UPDATE", "N", None, "training updates (default 400 for the toy corpus, 600 for a CORPUS; "
     "on 2 CPU cores Multi30k takes 20 to 25 minutes for 600 updates, which score about 31 BLEU, while 160 score "
     "about 11: docs/recipes.md, What a budget buys)"),
    ("--dim", "DIM", "N", None, "model width (default 128 toy, 256 for a CORPUS); FFN width is 2*DIM"),
    ("--max-tokens", "MAX_TOKENS", "N", "4096", "tokens per batch (default 4096)"),
    ("--bpe-merges", "BPE_MERGES", "N", None, "joint BPE merge operations (default 2000 toy, 8000 for a CORPUS, as "
     "for Multi30k)"),
    ("--clean-ratio", "CLEAN_RATIO", "R", None, "drop training pairs whose token-length ratio exceeds R (default 1.5, "
     "9 where one side is zh or ja, as prepare files; docs/recipes.md, Cleaning)"),
    ("--pretokenized", "PRETOKENIZED", None, "0", "the CORPUS is tokenised (or segmented) already: keep its own tokens "
     "and score against its references as given (prepare files --pretokenized)"),
    ("--model-flags", "MODEL_FLAGS", "FLAGS", "", "extra fairseq-train flags, appended last so they win"),
    ("--toy-args", "TOY_ARGS", "ARGS", "", 'options for the toy corpus writer (default: its own, "--train 20000 '
     '--valid 500 --test 500")'),
    ("--force", "FORCE", None, "0", "redo every step, replacing what the kit wrote in WORK (a file of yours there is "
     "named and refused, never removed)"),
    ("--dry-run", "DRY_RUN", None, "0", "print the commands each step would run, and exit (nothing is written)"),
)
MAY_BE_EMPTY = ("--corpus", "--model-flags", "--toy-args")  # "": the toy corpus, no flags, the writer's own


def parser() -> Parser:
    p = Parser(prog="examples/quickstart.sh", unknown_hint=" (--help lists the settings)",
               usage="bash examples/quickstart.sh [options]   (or python -m fairseq_csan.recipes.quickstart [options])",
               description=__doc__.split("\n\n")[0],
               epilog="Each option's environment variable (in capitals before its help) is its default where set and\n"
                      "not empty (SETTING=VALUE bash examples/quickstart.sh); an option given wins. A value that\n"
                      "starts with '-' is given as --option=VALUE.")
    for flag, var, metavar, _default, text in SETTINGS:
        if metavar is None:
            p.add_argument(flag, action="store_const", const="1", default=argparse.SUPPRESS, help=f"{var}=1: {text}")
        else:
            p.add_argument(flag, metavar=metavar, default=argparse.SUPPRESS, help=f"{var}: {text}")
    return p


class Settings:
    """The settings' values (strings), each from its option, else its environment variable, else
    its default; a message names each as it was given (one not given: as the others were)."""

    def __init__(self, argv: List[str]):
        given, after = parser().read(argv)
        if after:
            raise Refusal("nothing goes after --: fairseq-train flags go in --model-flags (MODEL_FLAGS)")
        self.given = {k: v for k, v in vars(given).items() if k != "help"}
        self.flag, self.var, self.value, self.switches = {}, {}, {}, set()
        for flag, var, metavar, default, _text in SETTINGS:
            dest = flag[2:].replace("-", "_")
            self.flag[dest], self.var[dest] = flag, var
            if metavar is None:
                self.switches.add(dest)
            if self.given.get(dest) == "" and flag not in MAY_BE_EMPTY:
                raise Refusal(f"{flag} needs a value")
            self.value[dest] = self.given[dest] if dest in self.given else os.environ.get(var) or default

    def by_option(self, dest: str) -> bool:
        if dest in self.given or os.environ.get(self.var[dest]):
            return dest in self.given
        return bool(self.given)

    def name(self, dest: str) -> str:
        return self.flag[dest] if self.by_option(dest) else self.var[dest]

    def shown(self, dest: str, value: Optional[str] = None) -> str:
        """The setting with its value: ``--src fr`` or ``SRC=fr`` (``--dry-run`` or ``DRY_RUN=1``)."""
        value = self.value[dest] if value is None else value
        if not self.by_option(dest):
            return f"{self.var[dest]}={value}"
        return self.flag[dest] if dest in self.switches else f"{self.flag[dest]} {value}"


def check(s: Settings) -> dict:
    """The settings checked, as the quick start runs them (nothing is written here)."""
    v = s.value
    toy = v["corpus"] == ""
    for dest, default in (dict(max_update="400", bpe_merges="2000", dim="128") if toy else
                          dict(max_update="600", bpe_merges="8000", dim="256")).items():
        v[dest] = v[dest] or default
    name = "toy" if toy else os.path.basename(v["corpus"].rstrip("/")) or "/"
    if f"{v['src']}-{v['tgt']}" != "en-de":
        name = f"{name}_{v['src']}_{v['tgt']}"
    work = v["work"] or f"work/quickstart/{name}"
    if shutil.which("fairseq-train") is None:
        raise Refusal("fairseq-train not found; install first: bash scripts/install.sh")
    if not os.path.isfile(f"{ROOT}/scripts/train.sh"):
        raise Refusal(f"the quick start runs a clone's scripts/train.sh and scripts/evaluate.sh, and {ROOT} has none: "
                      "run it from a clone")
    check_values(s, toy)
    from .prepare import own_corpus_defaults

    joint, clean_ratio = own_corpus_defaults(v["src"], v["tgt"])
    plan = dict(s=s, toy=toy, corpus=f"{work}/raw", src=v["src"], tgt=v["tgt"], arch=v["arch"], work=work, valid="val", tests=["test"],
                model=v["model"] or (f"{work}/model" if v["arch"] == DEFAULT_ARCH else f"{work}/model_{v['arch']}"),
                max_update=int(v["max_update"]), dim=int(v["dim"]), max_tokens=v["max_tokens"], bpe_merges=v["bpe_merges"],
                model_flags=v["model_flags"].split(), toy_args=v["toy_args"].split(), pretokenized=v["pretokenized"] == "1",
                force=["--force"] if v["force"] == "1" else [], dry_run=v["dry_run"] == "1", joint=joint,
                clean_ratio=clean_ratio if v["clean_ratio"] is None else float(v["clean_ratio"]))
    if not toy:
        plan.update(corpus=v["corpus"], **corpus_files(s))
    plan.update(device_and_layers(s))
    return plan


# each setting's values, and how its refusal names them ("SETTING must be WHAT, got 'VALUE'")
RULES = ((("src", "tgt"), LANGUAGE.fullmatch, "a language code as the files' suffix (en, fr, zh, pt_BR)"),
         (("device",), ("auto", "cpu", "cuda").__contains__, "auto, cpu or cuda"),
         (("force", "dry_run", "pretokenized"), ("0", "1").__contains__, "0 or 1"),
         (("max_update", "dim", "max_tokens", "bpe_merges"), re.compile("[1-9][0-9]*").fullmatch, "a positive whole number"),
         (("clean_ratio",), lambda r: r is None or re.fullmatch(r"[0-9]+(\.[0-9]*)?", r) and float(r) >= 1,
          "a number of at least 1"))


def check_values(s: Settings, toy: bool) -> None:
    v = s.value
    for dests, good, what in RULES:
        for dest in dests:
            if not good(v[dest]):
                raise Refusal(f"{s.name(dest)} must be {what}, got '{v[dest]}'")
    if v["src"] == v["tgt"]:
        raise Refusal(f"{s.name('src')} and {s.name('tgt')} are both {v['src']}: give two languages")
    if toy and f"{v['src']}-{v['tgt']}" not in ("en-de", "de-en"):
        raise Refusal(f"{s.shown('src')} {s.shown('tgt')}: the toy corpus is English-German (en-de or de-en); give "
                      f"{s.shown('corpus', 'DIR')} for another pair")
    if toy and v["pretokenized"] == "1":
        raise Refusal(f"{s.shown('pretokenized')} is for a CORPUS tokenised already; the toy corpus is raw text")
    if not toy and v["toy_args"]:
        raise Refusal(f"{s.name('toy_args')} sets the toy corpus, and {s.shown('corpus')} replaces it; leave out one of "
                      "them")


def corpus_files(s: Settings) -> dict:
    """A CORPUS folder's validation and test sets, each file checked (plain or gzipped, not empty)."""
    corpus, src, tgt = s.value["corpus"], s.value["src"], s.value["tgt"]
    if not os.path.isdir(corpus):
        raise Refusal(f"{s.shown('corpus')} is not a folder")

    def file(split, lang):  # the file of a split's side, plain or gzipped; None where neither is
        return next((f for f in (f"{corpus}/{split}.{lang}", f"{corpus}/{split}.{lang}.gz") if os.path.isfile(f)), None)

    held = [name for name in ("val", "valid", "dev") if file(name, src)]
    if len(held) > 1:
        raise Refusal(f"{s.shown('corpus')} holds {' and '.join(f'{n}.{src}' for n in held)}: one validation set, so "
                      "move the others out of the way")
    valid, tests = held[0] if held else "val", []

    def need(*splits):
        for split, lang in ((split, lang) for split in splits for lang in (src, tgt)):
            if not (file(split, lang) and os.path.getsize(file(split, lang))):
                gz = " (or .gz)" if split == "train" else ""
                raise Refusal(f"missing {corpus}/{split}.{lang}{gz}: {s.name('corpus')} holds train, val (or valid, or "
                              f"dev) and test* files, each in {src} and {tgt} ({s.name('src')} and {s.name('tgt')} set "
                              "the languages)")

    need("train", valid)
    found = (re.fullmatch(rf"(test.*)\.{re.escape(src)}(\.gz)?", name, re.S) for name in os.listdir(corpus))
    for stem in sorted({m.group(1) for m in found if m}, key=os.fsencode):  # in byte order; one without TGT left out
        if file(stem, tgt):
            tests.append(stem)
        else:
            say(f"  {file(stem, src)} has no {stem}.{tgt}: not a test set here", stream=sys.stdout)
    if not tests:
        raise Refusal(f"{s.shown('corpus')} holds no test set test*.{src} (with its test*.{tgt})")
    need(*tests)
    return {"valid": valid, "tests": tests}


def device_and_layers(s: Settings) -> dict:
    """The device (auto: the GPU when torch sees one) and where the variant goes: our variants in
    the lower 2 encoder layers; fairseq's architectures and ours without a variant take no --csan-layers."""
    from ..__main__ import variant

    device = s.value["device"]
    try:
        kind = variant(s.value["arch"])
        if device != "cpu":  # auto or cuda: what torch sees
            import torch

            seen = "cuda" if torch.cuda.is_available() else "cpu"
            if device == "cuda" and seen != "cuda":
                raise Refusal(f"{s.shown('device')}: torch sees no CUDA device here; {s.shown('device', 'cpu')} (or "
                              "auto) trains on the CPU")
            device = seen
    except SystemExit as e:  # an architecture nobody registered: its message
        raise Refusal(str(e.code)) from None
    except ImportError as e:  # the environment lacks torch or fairseq
        raise Refusal(f"{type(e).__name__}: {e}") from None
    return {"device": device, "layers": [] if kind in ("none", "standard") else ["--csan-layers", "2"]}


def show(plan: dict, command: List[str], name: str, keep: Optional[re.Pattern] = None) -> None:
    """Print a step's command, then run it (not on a dry run)."""
    print("+ " + shell_words(command), flush=True)
    if not plan["dry_run"]:
        output_of(command, name, keep or True)


def output_of(command: List[str], name: str, show=None) -> str:
    """What ``command`` writes to its standard output, trailing newlines removed (as $(...)); shown
    as it comes where ``show`` says (True: all of it; a pattern: the lines it matches); its errors
    on standard error."""
    with tempfile.NamedTemporaryFile(prefix="quickstart-") as copy:
        run_child(command, Path(copy.name), show=show, errors="stderr", name=name)
        return Path(copy.name).read_text(encoding="utf-8", errors="replace").rstrip("\n")


def head(path: str, n: int = 3) -> List[str]:
    """The first ``n`` lines of a file, as ``sed -n 1,Np`` gives them; '' for each it lacks."""
    try:
        with open(path, "rb") as f:
            lines = [text.rstrip(b"\n").decode("utf-8", errors="replace") for text, _ in zip(f, range(n))]
    except OSError:
        lines = []
    return lines + [""] * (n - len(lines))


def preparation(plan: dict) -> List[str]:
    """Step 1 (the toy corpus, where it is the corpus) and the command of step 2."""
    work, corpus, src, tgt = plan["work"], plan["corpus"], plan["src"], plan["tgt"]
    prepare = ["python", "-m", "fairseq_csan.recipes.prepare"]
    if plan["toy"]:
        written = os.path.exists(f"{corpus}/test.de") and os.path.getsize(f"{corpus}/test.de")
        if written and not plan["force"] and not plan["dry_run"]:
            say(f"  toy corpus already in {corpus}; kept", stream=sys.stdout)
        else:
            show(plan, ["python", "-m", "fairseq_csan.recipes.toy_corpus", corpus, *plan["toy_args"]],
                 "the toy corpus writer")
    if plan["toy"] and src == "en":
        prepare += ["toy_en_de", "--raw-dir", corpus, "--no-download"]
    elif (f"{src}-{tgt}", plan["valid"], plan["tests"], plan["pretokenized"]) == ("en-de", "val", ["test_2016_flickr"], False):
        prepare = ["bash", f"{ROOT}/examples/multi30k/prepare.sh", "--raw-dir", corpus, "--no-download"]  # Multi30k
    else:  # your own files, or the toy corpus German-English
        prepare += ["files", "--src", src, "--tgt", tgt, "--train", f"{corpus}/train",
                    "--valid", f"{corpus}/{plan['valid']}", *[word for test in plan["tests"] for word in ("--test", f"{corpus}/{test}")],
                    *(["--pretokenized"] if plan["pretokenized"] else [])]
    if plan["s"].value["clean_ratio"] is not None:  # given: to the preset (its own setting) or to prepare files
        prepare += ["--clean-ratio", f"{plan['clean_ratio']:g}"]
    return [*prepare, "--out", f"{work}/data", "--merges", plan["bpe_merges"], *plan["force"]]


def training(plan: dict, data: str, ckpt: str) -> List[str]:
    """Step 3's command: a small model, DIM wide, 4 heads, 3+3 layers, a checkpoint every 1/8 of the
    updates (for an average of 5); after --, fairseq-train flags that override train.sh's."""
    updates, dim = plan["max_update"], plan["dim"]
    hardware = ["--gpus", "1"] if plan["device"] == "cuda" else ["--cpu-tiny"]  # one GPU, or one CPU process, fp32
    return ["bash", f"{ROOT}/scripts/train.sh", "--data", data, "--arch", plan["arch"], "--save-dir", ckpt, *hardware,
            "--max-update", str(updates), *plan["force"], "--",
            "--encoder-layers", "3", "--decoder-layers", "3", "--encoder-embed-dim", str(dim), "--decoder-embed-dim",
            str(dim), "--encoder-ffn-embed-dim", str(2 * dim), "--decoder-ffn-embed-dim", str(2 * dim),
            "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", *plan["layers"], "--dropout", "0.1",
            "--lr", "1.5e-3", "--warmup-updates", "100", "--clip-norm", "1.0", "--max-tokens", plan["max_tokens"],
            "--update-freq", "1", "--save-interval-updates", str(max(updates // 8, 2)), "--log-interval", "50",
            *plan["model_flags"]]


def run(plan: dict) -> None:
    s, work, arch = plan["s"], plan["work"], plan["arch"]
    os.environ["PYTHONUNBUFFERED"] = "1"  # the steps' progress lines as they come
    say(f"work folder: {work} (architecture {arch}, {plan['max_update']} updates, on the {plan['device']})", stream=sys.stdout)
    data, ckpt, results = f"{work}/data", f"{work}/checkpoints/{arch}", f"{work}/results/{arch}"
    if plan["force"]:
        check_forced(plan, ckpt, results)
    say("1/5 corpus", stream=sys.stdout)
    prepare = preparation(plan)
    bpe = f"joint BPE for {plan['src']} and {plan['tgt']}" if plan["joint"] else f"BPE for {plan['src']} and for {plan['tgt']} apart"
    say(f"2/5 prepare: {'keep the corpus' + chr(39) + 's own tokens' if plan['pretokenized'] else 'tokenise'}, clean "
        f"(length ratio <= {plan['clean_ratio']:g}), {bpe} (up to {plan['bpe_merges']} merges), fairseq-preprocess",
        stream=sys.stdout)
    try:
        show(plan, prepare, "the preparation")
    except Failed as error:  # a refusal, in the quick start's own words too
        raise Failed(f"{error}; where it names other settings, {s.shown('force', '1')} redoes it in {work}, or give "
                     f"another {s.name('work')}") from None
    say(f"3/5 train {arch} for {plan['max_update']} updates (a rerun resumes from {ckpt})", stream=sys.stdout)
    show(plan, training(plan, data, ckpt), "the training", TRAINING_PROGRESS)
    # the last 5 checkpoints, or all there are (fairseq skips an interval checkpoint at an epoch's end)
    last = 5 if plan["dry_run"] else min(5, len(list(Path(ckpt).glob("checkpoint_*_*.pt"))))
    say(f"4/5 evaluate: average the last {last} checkpoints, decode the test set (beam 4), score", stream=sys.stdout)
    show(plan, ["bash", f"{ROOT}/scripts/evaluate.sh", "--data", data, "--checkpoints", ckpt, "--out", results,
                "--last", str(last), *(["--cpu"] if plan["device"] == "cpu" else []), *plan["force"]], "the evaluation")
    say("5/5 export a fairseq model folder", stream=sys.stdout)
    show(plan, ["python", "-m", "fairseq_csan.recipes.export", "--data", data, "--checkpoint", f"{results}/averaged.pt",
                "--out", plan["model"], *plan["force"]], "the export")
    if plan["dry_run"]:
        say(f"{s.shown('dry_run')}: the commands above were listed, not run", stream=sys.stdout)
    else:
        report(plan, data, results)


def check_forced(plan: dict, ckpt: str, results: str) -> None:
    """With --force, before step 1 writes anything: what a later step would refuse to replace (a
    file of the user's in the save folder, the evaluation's folder or the model folder)."""
    from .evaluate import OUTPUTS
    from .export import MAKERS
    from .runner import EVALUATION, check_owned
    from .save_folder import removable

    try:
        removable(Path(ckpt))
        check_owned([Path(results) / name for name in (*OUTPUTS, EVALUATION.file)], "evaluate", None, "--out", redo=True)
        check_owned([Path(plan["model"])] if Path(plan["model"]).is_dir() else [], MAKERS, None, "the model folder")
    except Refusal as error:
        raise Refusal(f"{plan['s'].shown('force', '1')} would stop at a later step: {error}") from None


def report(plan: dict, data: str, results: str) -> None:
    """A few test sentences, the scores, and the one line that translates with the model folder."""
    src, tgt, model = plan["src"], plan["tgt"], plan["model"]
    print(flush=True)
    say("a few test sentences (source / reference / ours)", stream=sys.stdout)
    sources = head(f"{data}/raw/test.{src}")
    for row in zip(sources, head(f"{data}/raw/test.{tgt}"), head(f"{results}/hyp.detok")):
        print("  SRC: {}\n  REF: {}\n  HYP: {}".format(*row))
    scores = Path(f"{results}/results.md")
    for text in (scores.read_text(encoding="utf-8", errors="replace").split("\n") if scores.is_file() else []):
        if re.match(r"# |- (tokenised BLEU|sacreBLEU|chrF)|  signature: ", text):  # the set scored, with its name
            print(text)
    sentence = re.sub(r"[\"'\\`$]", "", sources[0])  # no quotes to escape below
    one_line = ("python -c 'import fairseq_csan; from fairseq.models.transformer import TransformerModel as T; "
                f"print(T.from_pretrained(\"{model}\").translate(\"{sentence}\"))'")
    say("translate your own sentence with the exported model:", stream=sys.stdout)
    print(f"  {one_line}", flush=True)
    print(f"  -> {output_of(['bash', '-c', one_line + ' 2>/dev/null'], 'the translation')}")
    say(f"done: model folder {model}, scores {results}/results.md, translations {results}/hyp.detok", stream=sys.stdout)


def main(argv=None) -> None:
    run(check(Settings(argv)))


if __name__ == "__main__":
    as_command(main)
