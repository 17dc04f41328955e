"""examples/quickstart.sh, the door of fairseq_csan/recipes/quickstart.py: the task recipes'
pipeline at a small size (toy corpus or Multi30k -> fairseq_csan.recipes.prepare ->
scripts/train.sh -> scripts/evaluate.sh -> export.py); its settings, environment variables or
the options of the same names, checked before anything is written; then fairseq-interactive and
the hub interface on what it wrote. Its training, evaluation and export for every architecture
family, on one Multi30k subset prepared once."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, shared_corpus
from recipe_helpers import in_process, run
from fairseq_csan.modules import SELF_ATTENTION_VARIANTS

QUICKSTART = REPO / "examples" / "quickstart.sh"


def run_quickstart(work: Path, **env):
    full_env = {**os.environ, "WORK": str(work), "MAX_TOKENS": "2048", "DIM": "32", **env}
    done = subprocess.run(["bash", str(QUICKSTART)], env=full_env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"quick start failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + "\n" + done.stderr  # the steps' own logs go to stderr


def lines_of(path: Path):
    return path.read_text(encoding="utf-8").splitlines()


def check_outputs(work: Path, arch: str, n_test: int, stdout: str, model: Path = None, trained: bool = True):
    results = work / "results" / arch
    hyp = (results / "hyp.detok").read_text(encoding="utf-8").splitlines()
    assert len(hyp) == n_test
    assert "@@" not in " ".join(hyp)  # BPE was removed
    scores = (results / "results.md").read_text()
    assert re.search(r"^- sacreBLEU \(detokenised\): BLEU = \d+\.\d+ ", scores, re.M), scores
    assert re.search(r"^- chrF \(detokenised\): chrF2 = \d+\.\d+", scores, re.M), scores
    assert "chrF2 = " in stdout and "BLEU = " in stdout  # both printed
    assert (work / "checkpoints" / arch / "checkpoint_last.pt").is_file()
    for step in ("1/5", "2/5", "3/5", "4/5", "5/5"):
        assert f"] {step} " in stdout
    if trained:
        assert "done training" in stdout and "| valid |" in stdout  # training progress was shown
    else:  # a rerun: the run had finished, and is kept as it was
        assert "this run has finished, nothing to train" in stdout and "done training" not in stdout
    model = model or work / ("model" if arch == "transformer_csan2d" else f"model_{arch}")
    assert (model / "model.pt").is_file() and (model / "bpecodes").is_file()
    # the printed one-liner runs as printed and gives the translation shown under it (equality
    # with evaluate.sh's hyp.detok needs a trained model: tests/test_export.py)
    lines = stdout.splitlines()
    (at,) = [i for i, l in enumerate(lines) if "from_pretrained(" in l]
    done = subprocess.run(["bash", "-c", lines[at].strip()], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-2000:]
    assert lines[at + 1].strip() == f"-> {done.stdout.strip()}"


def door(args, env, tmp_path):
    """bash examples/quickstart.sh ARGS, with WORK in tmp_path and the settings ``env``."""
    full = {**os.environ, "WORK": str(tmp_path / "work"), **env,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "examples/quickstart.sh", *args], capture_output=True, text=True, cwd=REPO,
                          env=full, timeout=120)


def quickstart(env, tmp_path, argv=()):
    """The quick start's main (python -m fairseq_csan.recipes.quickstart ARGV, which the door
    runs) in this process, with WORK in tmp_path and the settings ``env`` as environment
    variables: for refusals and dry runs, which start nothing (the door itself: door())."""
    from fairseq_csan.recipes import quickstart as module

    with pytest.MonkeyPatch.context() as patch:
        for name, value in {"WORK": str(tmp_path / "work"), **env}.items():
            patch.setenv(name, value)
        return in_process(module.main, list(argv), check=False)


def refused(done, message):
    """Refused with exit 2, in one line that holds ``message`` (after the usage line, for a word
    that is no option)."""
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("usage: ")]
    return done.returncode == 2 and len(lines) == 1 and message in lines[0]


@pytest.mark.parametrize("corpus", [False, True], ids=["toy", "multi30k"])
def test_every_setting_changes_the_commands_or_is_refused(tmp_path, corpus):
    """No setting of the quick start is accepted and ignored: with the toy corpus and with
    Multi30k, each changes the commands it runs (DRY_RUN=1 lists them) or is refused with one
    line."""
    import shutil

    import torch

    from recipe_helpers import walk_options

    # on the CPU, as DEVICE=cpu (no torch import to look for a GPU); auto is the other tests' default
    context = {"DEVICE": "cpu", **({"CORPUS": str(shared_corpus("multi30k_en_de"))} if corpus else {})}
    other = tmp_path / "m30k_copy"
    shutil.copytree(shared_corpus("multi30k_en_de"), other)

    def plan(extra):
        done = quickstart({**context, "DRY_RUN": "1", **dict(extra)}, tmp_path)
        refusal = done.stderr.strip() or f"exit {done.returncode}"
        return re.sub(r"\d\d:\d\d:\d\d", "TIME", done.stdout), refusal if done.returncode else None

    settings = [{"CORPUS": str(other)}, {"WORK": str(tmp_path / "elsewhere")}, {"ARCH": "transformer"},
                {"MODEL": str(tmp_path / "model")}, {"DEVICE": "gpu"}, {"MAX_UPDATE": "7"},
                {"DIM": "64"}, {"MAX_TOKENS": "1000"}, {"BPE_MERGES": "100"}, {"MODEL_FLAGS": "--dropout 0.2"},
                {"TOY_ARGS": "--train 100"}, {"FORCE": "1"}, {"FORCE": "yes"}, {"DRY_RUN": "2"},
                {"SRC": "de", "TGT": "en"}, {"SRC": "fr"}, {"TGT": "fr"}, {"CLEAN_RATIO": "3"}, {"CLEAN_RATIO": "0.5"},
                {"PRETOKENIZED": "1"}]
    settings.append({"DEVICE": "auto" if torch.cuda.is_available() else "cuda"})  # the one that is not the CPU
    walk_options(plan, [setting.items() for setting in settings])
    assert not (tmp_path / "work").exists()  # a dry run writes nothing


def test_quickstart_errors_name_the_fix(tmp_path):
    corpus = tmp_path / "zh_en"
    for split in ("train", "val", "test"):
        for lang in ("zh", "en"):
            (corpus / f"{split}.{lang}").parent.mkdir(parents=True, exist_ok=True)
            (corpus / f"{split}.{lang}").write_text("x\n", encoding="utf-8")
    done = quickstart({"CORPUS": str(corpus)}, tmp_path)
    assert refused(done, f"missing {corpus}/train.de") and "SRC and TGT set the languages" in done.stderr
    done = quickstart({"CORPUS": str(corpus), "SRC": "zh", "TGT": "fr"}, tmp_path)
    assert refused(done, f"missing {corpus}/train.fr")
    (corpus / "test.zh").rename(corpus / "eval.zh")
    done = quickstart({"CORPUS": str(corpus), "SRC": "zh", "TGT": "en"}, tmp_path)
    assert refused(done, f"CORPUS={corpus} holds no test set test*.zh")
    for lang in ("zh", "en"):
        (corpus / f"valid.{lang}").write_text("x\n", encoding="utf-8")
    done = quickstart({"CORPUS": str(corpus), "SRC": "zh", "TGT": "en"}, tmp_path)
    assert refused(done, "holds val.zh and valid.zh: one validation set")
    for lang in ("zh", "en"):
        (corpus / f"valid.{lang}").unlink()
    (corpus / "eval.zh").rename(corpus / "test.zh")
    (corpus / "test_b.zh").write_text("x\n", encoding="utf-8")  # no English side: left out, saying so
    done = quickstart({"CORPUS": str(corpus), "SRC": "zh", "TGT": "en", "DRY_RUN": "1"}, tmp_path)
    assert done.returncode == 0 and "test_b.zh has no test_b.en: not a test set here" in done.stdout
    assert f"--test {corpus}/test --out" in done.stdout and "--src zh --tgt en" in done.stdout
    assert "BPE for zh and for en apart" in done.stdout  # prepare's own rule for a segmented side
    # dev for val, gzipped files, the cleaning ratio and text tokenised already, as prepare files takes them
    import gzip

    for lang in ("zh", "en"):
        (corpus / f"val.{lang}").rename(corpus / f"dev.{lang}")
        with gzip.open(corpus / f"train.{lang}.gz", "wb") as f:
            f.write(b"x\n")
        (corpus / f"train.{lang}").unlink()
    done = quickstart({"CORPUS": str(corpus), "SRC": "zh", "TGT": "en", "DRY_RUN": "1", "CLEAN_RATIO": "3",
                       "PRETOKENIZED": "1"}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (f"--train {corpus}/train --valid {corpus}/dev --test {corpus}/test --pretokenized --clean-ratio 3 --out"
            in done.stdout) and "keep the corpus's own tokens, clean (length ratio <= 3)" in done.stdout
    assert refused(quickstart({"CLEAN_RATIO": "0.5"}, tmp_path), "CLEAN_RATIO must be a number of at least 1, got '0.5'")
    assert refused(quickstart({"PRETOKENIZED": "1"}, tmp_path), "PRETOKENIZED=1 is for a CORPUS tokenised already")
    m30k = quickstart({"CORPUS": str(shared_corpus("multi30k_en_de")), "DRY_RUN": "1"}, tmp_path)
    assert m30k.returncode == 0 and "examples/multi30k/prepare.sh --raw-dir" in m30k.stdout  # as before: the preset
    assert "joint BPE for en and de" in m30k.stdout
    for env, message in (({"SRC": "fr", "TGT": "en"}, "the toy corpus is English-German (en-de or de-en)"),
                         ({"SRC": "en", "TGT": "en"}, "SRC and TGT are both en"),
                         ({"CORPUS": str(corpus), "SRC": "Chinese"}, "SRC must be a language code")):
        done = quickstart(env, tmp_path)
        assert refused(done, message), (env, done.stderr)
    done = quickstart({"ARCH": "transformer_csan3d"}, tmp_path)
    assert refused(done, "unknown architecture 'transformer_csan3d'")
    done = quickstart({"DEVICE": "tpu"}, tmp_path)
    assert refused(done, "DEVICE must be auto, cpu or cuda")
    done = door([], {"MAX_UPDATE": "ten"}, tmp_path)  # the door refuses as its module does
    assert refused(done, "MAX_UPDATE must be a positive whole number, got 'ten'"), done.stderr
    assert not (tmp_path / "work").exists()  # nothing written before the settings are checked
    helped = subprocess.run(["bash", "examples/quickstart.sh", "--help"], capture_output=True, text=True, cwd=REPO)
    assert helped.returncode == 0 and "ARCH" in helped.stdout and "DEVICE" in helped.stdout
    assert "1/5" not in helped.stdout  # it printed its settings and started nothing


@pytest.mark.parametrize("corpus", [False, True], ids=["toy", "multi30k"])
def test_every_option_changes_the_commands_or_is_refused(tmp_path, corpus):
    """The settings as options (python -m fairseq_csan.recipes.quickstart --dim 64 ...): each
    changes the commands (--dry-run lists them) or is refused with one line, as do words that are
    no option."""
    import shutil

    import torch

    from recipe_helpers import walk_options

    base = ["--dry-run", "--device", "cpu", *(["--corpus", str(shared_corpus("multi30k_en_de"))] if corpus else [])]
    other = tmp_path / "m30k_copy"
    shutil.copytree(shared_corpus("multi30k_en_de"), other)

    def plan(extra):
        done = quickstart({}, tmp_path, [*base, *extra])
        refusal = done.stderr.strip() or f"exit {done.returncode}"
        return re.sub(r"\d\d:\d\d:\d\d", "TIME", done.stdout), refusal if done.returncode else None

    options = [["--corpus", other], ["--work", tmp_path / "elsewhere"], ["--arch", "transformer"],
               ["--model", tmp_path / "model"], ["--device", "gpu"], ["--max-update", "7"], ["--dim", "64"],
               ["--max-tokens", "1000"], ["--bpe-merges", "100"], ["--model-flags=--dropout 0.2"],
               ["--toy-args", "--train 100"], ["--force"], ["--src", "de", "--tgt", "en"], ["--src", "fr"],
               ["--tgt", "fr"], ["--device", "auto" if torch.cuda.is_available() else "cuda"],
               ["--dim", ""], ["--dim"], ["--max-update", "0"], ["--force=1"], ["--", "--fp16"], ["--clean-ratio", "2"],
               ["--pretokenized"]]
    walk_options(plan, options)
    assert not (tmp_path / "work").exists()  # a dry run writes nothing


def test_each_option_is_its_environment_variable(tmp_path):
    """An option and its variable give the same commands; an option given wins over its variable;
    a refusal names the setting as it was given."""
    m30k = str(shared_corpus("multi30k_en_de"))
    same = [("CORPUS", "--corpus", m30k), ("WORK", "--work", str(tmp_path / "w2")), ("ARCH", "--arch", "transformer"),
            ("MODEL", "--model", str(tmp_path / "m")), ("DEVICE", "--device", "auto"),
            ("MAX_UPDATE", "--max-update", "7"), ("DIM", "--dim", "64"), ("MAX_TOKENS", "--max-tokens", "1000"),
            ("BPE_MERGES", "--bpe-merges", "100"), ("MODEL_FLAGS", "--model-flags", "--dropout 0.2"),
            ("TOY_ARGS", "--toy-args", "--train 100"), ("FORCE", "--force", "1"), ("SRC", "--src", "de")]
    listed = "[quickstart] DRY_RUN=1: the commands above were listed, not run"

    def commands(done):
        assert done.returncode == 0, done.stderr
        return done.stdout.replace("[quickstart] --dry-run:", "[quickstart] DRY_RUN=1:")

    for var, flag, value in same:
        other = {"TGT": "en"} if var == "SRC" else {}  # de-en, the toy corpus's other direction
        env = {"DRY_RUN": "1", "DEVICE": "cpu", var: value, **other}
        argv = ["--dry-run", "--device", "cpu", flag, *([value] if var != "FORCE" else []),
                *[word for name, v in other.items() for word in (f"--{name.lower()}", v)]]
        by_variable, by_option = commands(quickstart(env, tmp_path)), commands(quickstart({}, tmp_path, argv))
        assert by_option == by_variable and listed in by_option, (var, by_option)
    # the option wins; the variable is its default
    done = quickstart({"DIM": "64", "MAX_UPDATE": "ten"}, tmp_path, ["--dim", "48", "--max-update", "9", "--dry-run",
                                                                      "--device", "cpu"])
    assert "--encoder-embed-dim 48 " in done.stdout and "--max-update 9 " in done.stdout, done.stderr
    assert "--dry-run: the commands above were listed, not run" in done.stdout
    assert "--encoder-embed-dim 64 " in quickstart({"DIM": "64"}, tmp_path, ["--dry-run", "--device", "cpu"]).stdout
    for argv, message in ((["--max-update", "ten"], "--max-update must be a positive whole number, got 'ten'"),
                          (["--device", "tpu"], "--device must be auto, cpu or cuda, got 'tpu'"),
                          (["--src", "Chinese"], "--src must be a language code"),
                          (["--src", "fr", "--tgt", "en"], "--src fr --tgt en: the toy corpus is English-German "
                           "(en-de or de-en); give --corpus DIR for another pair"),
                          (["--src", "en", "--tgt", "en"], "--src and --tgt are both en"),
                          (["--corpus", str(tmp_path / "none")], f"--corpus {tmp_path / 'none'} is not a folder"),
                          (["--corpus", m30k, "--toy-args", "--train 9"], f"--toy-args sets the toy corpus, and "
                           f"--corpus {m30k} replaces it"),
                          (["--arch", "transformer_csan3d"], "unknown architecture 'transformer_csan3d'"),
                          (["--dim", ""], "--dim needs a value"), (["--dim"], "--dim needs N"),
                          (["--bogus"], "unknown argument '--bogus' (--help lists the settings)"),
                          (["extra"], "unknown argument 'extra'"),
                          (["--", "--fp16"], "fairseq-train flags go in --model-flags (MODEL_FLAGS)")):
        done = quickstart({}, tmp_path, argv)
        assert refused(done, message), (argv, done.stderr)
    assert not (tmp_path / "work").exists()  # nothing written before the settings are checked


def test_the_door_passes_options_on(tmp_path):
    """bash examples/quickstart.sh --dim 48 ...: the module's options through the door, and its
    help lists every option with its variable (python -m fairseq_csan.recipes.quickstart --help
    prints the same)."""
    done = door(["--dim", "48", "--dry-run", "--device", "cpu"], {}, tmp_path)
    assert done.returncode == 0 and "--encoder-embed-dim 48 " in done.stdout, done.stderr[-2000:]
    assert "--dry-run: the commands above were listed, not run" in done.stdout and not (tmp_path / "work").exists()
    helped = subprocess.run([sys.executable, "-m", "fairseq_csan.recipes.quickstart", "--help"], capture_output=True,
                            text=True, cwd=tmp_path)
    assert helped.returncode == 0 and helped.stdout == door(["--help"], {}, tmp_path).stdout
    for flag, var in (("--corpus DIR", "CORPUS"), ("--src", "SRC"), ("--tgt", "TGT"), ("--work", "WORK"),
                      ("--arch", "ARCH"), ("--model DIR", "MODEL"), ("--device", "DEVICE"),
                      ("--max-update", "MAX_UPDATE"), ("--dim", "DIM"), ("--max-tokens", "MAX_TOKENS"),
                      ("--bpe-merges", "BPE_MERGES"), ("--model-flags", "MODEL_FLAGS"), ("--toy-args", "TOY_ARGS"),
                      ("--force", "FORCE=1"), ("--dry-run", "DRY_RUN=1")):
        assert re.search(rf"^  {re.escape(flag)}\b.*\s+{re.escape(var)}:", helped.stdout, re.M), (flag, helped.stdout)


@pytest.mark.slow
def test_quickstart_takes_any_pair(tmp_path):
    """CORPUS=DIR SRC=fr TGT=en: Multi30k's own file names, two test sets (the first in name
    order is the test set), a model folder that names French and English."""
    from recipe_helpers import lines, write

    corpus = tmp_path / "m30k_fr"
    source = shared_corpus("multi30k_en_fr")
    for name, n in (("train", 600), ("val", 20), ("test_2016_flickr", 12), ("test_b", 8)):
        for lang in ("en", "fr"):
            write(corpus / f"{name}.{lang}", lines(source / f"{name if name != 'test_b' else 'val'}.{lang}")[-n:])
    work = tmp_path / "work"
    out = run_quickstart(work, CORPUS=str(corpus), SRC="fr", TGT="en", MAX_UPDATE="16", BPE_MERGES="200")
    check_outputs(work, "transformer_csan2d", 12, out)
    assert "--src fr --tgt en" in out and f"--test {corpus}/test_2016_flickr --test {corpus}/test_b" in out
    recorded = json.loads((work / "data/task.json").read_text())
    assert (recorded["src"], recorded["tgt"], recorded["tests"]) == ("fr", "en", ["test", "test1"])
    assert recorded["tokenizer_src"] == "moses fr"
    about = json.loads((work / "model/export.json").read_text())
    assert (about["source_lang"], about["target_lang"]) == ("fr", "en")
    assert sorted(p.name for p in (work / "model").glob("dict.*")) == ["dict.en.txt", "dict.fr.txt"]
    assert lines(work / "data/raw/test.fr") == lines(corpus / "test_2016_flickr.fr")
    assert "SRC: " + lines(corpus / "test_2016_flickr.fr")[0] in out


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """The default corpus (written by the quick start itself), trained for a few updates."""
    work = tmp_path_factory.mktemp("toy")
    out = run_quickstart(work, MAX_UPDATE="20", TOY_ARGS="--train 1500 --valid 40 --test 30")
    return work, out


@pytest.mark.slow
def test_quickstart_on_its_own_toy_corpus(toy_run):
    work, out = toy_run
    check_outputs(work, "transformer_csan2d", 30, out)
    assert (work / "raw" / "train.en").read_text().count("\n") == 1500
    # the toy grammar's few words run out of pairs to merge: the log says how many were learnt
    learnt = re.search(r"codes: (\d+) merges learnt, of 2000 asked", out)
    assert learnt and int(learnt.group(1)) == len(lines_of(work / "data/bpe/codes")) - 1, out[-2000:]
    assert "\r" not in out


@pytest.mark.slow
def test_quickstart_rerun_skips_finished_steps(toy_run):
    work, _ = toy_run
    checkpoints = work / "checkpoints" / "transformer_csan2d"
    written = {p.name: p.stat().st_mtime_ns for p in checkpoints.glob("*.pt")}
    out = run_quickstart(work, MAX_UPDATE="20", TOY_ARGS="--train 1500 --valid 40 --test 30")
    assert "toy corpus already in" in out
    assert {p.name: p.stat().st_mtime_ns for p in checkpoints.glob("*.pt")} == written  # no update past 20
    for step in ("1/6 gather train", "2/6 tokenise train.en", "4/6 BPE", "6/6 binarise"):
        assert re.search(rf"\[prepare\] {step}.*: up to date; skipped", out), out
    assert re.search(r"\[evaluate\] 1/3 .*: up to date; skipped", out), out
    assert "export] " in out
    check_outputs(work, "transformer_csan2d", 30, out, trained=False)


@pytest.fixture(scope="module")
def multi30k_subset(tmp_path_factory):
    source = shared_corpus("multi30k_en_de")
    corpus = tmp_path_factory.mktemp("multi30k_subset")
    for split, n in (("train", 2000), ("val", 50), ("test_2016_flickr", 10)):
        for lang in ("en", "de"):
            lines = (source / f"{split}.{lang}").read_text(encoding="utf-8").splitlines(keepends=True)[:n]
            (corpus / f"{split}.{lang}").write_text("".join(lines), encoding="utf-8")
    return corpus


@pytest.fixture(scope="module")
def multi30k_task(multi30k_subset, tmp_path_factory):
    """The subset prepared once, as the quick start prepares a Multi30k folder (its step 2:
    examples/multi30k/prepare.sh, 1000 merges), for every variant below."""
    data = tmp_path_factory.mktemp("multi30k_task") / "data"
    run(["bash", "examples/multi30k/prepare.sh", "--raw-dir", multi30k_subset, "--out", data, "--merges", 1000,
         "--no-download"])
    return data


# the quick start's small model (32 wide, a variant in the lower 2 of 3 encoder layers), as it
# passes it to scripts/train.sh after "--"
QUICK_MODEL = ["--encoder-layers", 3, "--decoder-layers", 3, "--encoder-embed-dim", 32, "--decoder-embed-dim", 32,
               "--encoder-ffn-embed-dim", 64, "--decoder-ffn-embed-dim", 64, "--encoder-attention-heads", 4,
               "--decoder-attention-heads", 4]
QUICK_TRAINING = ["--dropout", 0.1, "--lr", 1.5e-3, "--warmup-updates", 100, "--clip-norm", 1.0, "--max-tokens", 2048,
                  "--update-freq", 1, "--save-interval-updates", 2, "--log-interval", 50]


def quick_train_argv(data: Path, save: Path, arch: str, flags=()):
    """scripts/train.sh's arguments for ``arch`` as the quick start gives them: its small model
    trained for 15 updates on the CPU."""
    from fairseq_csan.__main__ import variant

    layers = [] if variant(arch) in ("none", "standard") else ["--csan-layers", 2]
    return [str(a) for a in ["--data", data, "--arch", arch, "--save-dir", save, "--cpu-tiny", "--max-update", 15,
                             "--", *QUICK_MODEL, *layers, *QUICK_TRAINING, *flags]]


def train_evaluate_export(data: Path, work: Path, arch: str, flags=()):
    """The quick start's steps 3 to 5 for ``arch`` on a prepared task: its small model trained by
    scripts/train.sh (fairseq-train --user-dir), the last checkpoints averaged and the test set
    decoded with beam 4 by the evaluation (fairseq-generate --user-dir), the model folder
    exported, and one sentence translated through fairseq's hub interface of that folder. The
    quick start itself, its output and its one-liner: the toy-corpus tests above. Returns the
    training log and fairseq-generate's output."""
    from fairseq.models.transformer import TransformerModel

    from fairseq_csan.recipes import evaluate, export

    ckpt, results, model = work / "checkpoints", work / "results", work / "model"
    run(["bash", "scripts/train.sh", *quick_train_argv(data, ckpt, arch, flags)])
    assert (ckpt / "checkpoint_last.pt").is_file()
    last = min(5, len(list(ckpt.glob("checkpoint_*_*.pt"))))
    evaluate.main(["--data", str(data), "--checkpoints", str(ckpt), "--out", str(results), "--last", str(last), "--cpu"])
    hyp = lines_of(results / "hyp.detok")
    assert len(hyp) == len(lines_of(data / "raw" / "test.en")) and "@@" not in " ".join(hyp)  # BPE was removed
    scores = (results / "results.md").read_text()
    assert re.search(r"^- sacreBLEU \(detokenised\): BLEU = \d+\.\d+ ", scores, re.M), scores
    assert re.search(r"^- chrF \(detokenised\): chrF2 = \d+\.\d+", scores, re.M), scores
    export.main(["--data", str(data), "--checkpoint", str(results / "averaged.pt"), "--out", str(model)])
    assert (model / "model.pt").is_file() and (model / "bpecodes").is_file()
    sentence = lines_of(data / "raw" / "test.en")[0]
    assert TransformerModel.from_pretrained(str(model)).translate(sentence).strip()
    train_log = (ckpt / "train.log").read_text()
    assert "done training" in train_log and "| valid |" in train_log  # trained, and validated on the way
    return train_log, (results / "generate.txt").read_text()


def one_per_mechanism():
    """One registered variant of each mechanism (the module that implements it; the last by name,
    so 2D-CSAN for the local windows): the quick start's whole path runs for these, and every
    variant's settings reach fairseq's parser below."""
    from fairseq_csan.modules import get_self_attention

    chosen = {}
    for name in sorted(set(SELF_ATTENTION_VARIANTS) - {"standard"}):
        chosen[get_self_attention(name).__module__] = name
    return sorted(chosen.values())


def test_one_variant_of_each_mechanism_runs_the_whole_path():
    """The ones docs/development.md names."""
    assert one_per_mechanism() == ["bidirect", "block", "cnn", "csan2d", "neighbor", "relpos"]


def quick_fairseq_args(tmp_path, arch, flags=()):
    """The fairseq-train command scripts/train.sh builds from the quick start's arguments for
    ``arch``, read by fairseq's own parser (with --user-dir), in this process."""
    from fairseq import options

    from fairseq_csan.recipes import train as kit
    from recipe_helpers import fake_task

    command = kit.build(kit.parse(quick_train_argv(fake_task(tmp_path), tmp_path / "ck", arch, flags)))["cmd"]
    assert command[0] == "fairseq-train" and "--user-dir" in command
    return options.parse_args_and_arch(options.get_training_parser(), command[1:])


@pytest.mark.parametrize("variant", sorted(set(SELF_ATTENTION_VARIANTS) - {"standard"}))
def test_every_variant_gets_the_quick_starts_settings(variant, tmp_path):
    """The variant, in the lower 2 encoder layers of the quick start's small model."""
    args = quick_fairseq_args(tmp_path, f"transformer_{variant}")
    assert (args.arch, args.encoder_self_attention, args.csan_layers) == (f"transformer_{variant}", variant, 2)
    assert (args.encoder_embed_dim, args.encoder_layers, args.max_update) == (32, 3, 15)


@pytest.mark.slow
@pytest.mark.parametrize("variant", one_per_mechanism())
def test_one_variant_of_each_mechanism_trains_and_translates_multi30k(variant, multi30k_task, tmp_path):
    """scripts/train.sh and the evaluation (fairseq-train, fairseq-generate --user-dir), averaging,
    the model folder and the hub interface, as the quick start runs them, for one variant of each
    mechanism (one tiny checkpoint per family; every variant's settings: the test above)."""
    train_log, gen = train_evaluate_export(multi30k_task, tmp_path, f"transformer_{variant}")
    assert f"encoder_self_attention='{variant}'" in train_log and "csan_layers=2" in train_log  # the quick start's
    assert "Generate test with beam=4" in gen


@pytest.mark.slow
def test_context_aware_on_both_sides_trains_and_translates_multi30k(multi30k_task, tmp_path):
    """Context gating on the encoder and the decoder side (incremental decoding in fairseq-generate)."""
    train_log, gen = train_evaluate_export(multi30k_task, tmp_path, "transformer_ctxaware", ["--ctx-side", "both"])
    assert "ctx_side='both'" in train_log
    assert "Generate test with beam=4" in gen


@pytest.mark.parametrize("side", ["encoder", "decoder", "both"])
def test_every_context_side_gets_the_quick_starts_settings(side, tmp_path):
    args = quick_fairseq_args(tmp_path, "transformer_ctxaware", [] if side == "encoder" else ["--ctx-side", side])
    assert (args.arch, args.ctx_side, args.encoder_embed_dim) == ("transformer_ctxaware", side, 32)


def test_quickstart_reports_a_missing_corpus_file(tmp_path):
    corpus = tmp_path / "broken"
    corpus.mkdir()
    (corpus / "train.en").write_text("a\n")
    full_env = {**os.environ, "WORK": str(tmp_path / "w"), "CORPUS": str(corpus)}
    done = subprocess.run(["bash", str(QUICKSTART)], env=full_env, capture_output=True, text=True)
    assert done.returncode != 0
    assert f"missing {corpus}/train.de" in done.stderr


@pytest.mark.slow
def test_interactive_and_hub_interface_agree(toy_run):
    """fairseq-interactive and TransformerModel-style from_pretrained on the same checkpoint."""
    work, _ = toy_run
    arch = "transformer_csan2d"
    ckpt_dir = work / "checkpoints" / arch
    sentences = (work / "raw" / "test.en").read_text(encoding="utf-8").splitlines()[:3]
    bpe = ["--bpe", "subword_nmt", "--bpe-codes", str(work / "data" / "bpe" / "codes")]
    done = subprocess.run(
        ["fairseq-interactive", str(work / "data" / "data-bin"), "--user-dir", str(REPO / "fairseq_csan"),
         "--path", str(ckpt_dir / "checkpoint_last.pt"), "--cpu", "--beam", "5", *bpe],
        input="\n".join(sentences) + "\n", capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    interactive = [line.split("\t")[2] for line in done.stdout.splitlines() if line.startswith("D-")]
    assert len(interactive) == 3

    from fairseq_csan.models import VariantTransformerModel

    hub = VariantTransformerModel.from_pretrained(
        str(ckpt_dir), checkpoint_file="checkpoint_last.pt", data_name_or_path=str(work / "data" / "data-bin"),
        bpe="subword_nmt", bpe_codes=str(work / "data" / "bpe" / "codes"), cpu=True,
    )
    assert type(hub.models[0]).__name__ == "VariantTransformerModel"
    assert hub.translate(sentences, beam=5) == interactive


@pytest.mark.slow
def test_quickstart_force_redoes_only_what_the_kit_wrote(toy_run):
    """FORCE=1 once ran rm -rf on WORK/checkpoints/ARCH: a file of the user's there is now named
    and refused before the first step redoes anything (what train.sh --force would refuse), and
    kept with the run's checkpoints; without it, FORCE=1
    trains the run again from nothing. (Last in the file: it trains the toy run again.)"""
    work, _ = toy_run
    checkpoints = work / "checkpoints" / "transformer_csan2d"
    # another setting of the preparation: refused by prepare, naming the change, then in the quick start's words
    env = {**os.environ, "WORK": str(work), "MAX_TOKENS": "2048", "DIM": "32", "MAX_UPDATE": "20",
           "TOY_ARGS": "--train 1500 --valid 40 --test 30", "CLEAN_RATIO": "3"}
    other = subprocess.run(["bash", str(QUICKSTART)], env=env, capture_output=True, text=True, timeout=300)
    assert other.returncode == 1 and "clean_ratio 1.5 then, 3.0 now" in other.stderr, other.stderr[-2000:]
    assert f"FORCE=1 redoes it in {work}, or give another WORK" in other.stderr
    (checkpoints / "my_notes.txt").write_text("mine\n")
    written = {p.name: p.stat().st_mtime_ns for p in checkpoints.glob("*.pt")}
    full_env = {**os.environ, "WORK": str(work), "MAX_TOKENS": "2048", "DIM": "32", "MAX_UPDATE": "20",
                "TOY_ARGS": "--train 1500 --valid 40 --test 30", "FORCE": "1"}
    data = {p: p.stat().st_mtime_ns for p in (work / "data").rglob("*") if p.is_file()}
    done = subprocess.run(["bash", str(QUICKSTART)], env=full_env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 2 and "FORCE=1 would stop at a later step: " in done.stderr and \
        "holds what a training did not write (my_notes.txt)" in done.stderr, done.stderr[-3000:]
    assert "1/5" not in done.stdout  # refused before the first step redid anything
    assert {p: p.stat().st_mtime_ns for p in (work / "data").rglob("*") if p.is_file()} == data
    assert (checkpoints / "my_notes.txt").read_text() == "mine\n"
    assert {p.name: p.stat().st_mtime_ns for p in checkpoints.glob("*.pt")} == written
    (checkpoints / "my_notes.txt").unlink()
    out = run_quickstart(work, MAX_UPDATE="20", TOY_ARGS="--train 1500 --valid 40 --test 30", FORCE="1")
    assert "--force: removed" in out and "done training" in out
    assert all(p.stat().st_mtime_ns != written.get(p.name) for p in checkpoints.glob("*.pt"))
