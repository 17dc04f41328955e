"""prepare files: the user's own corpus in any language pair, either direction, through training,
evaluation, export and translation; the presets are the same path (fairseq_csan.recipes.prepare,
corpora.files_task, text's per-language rules, score's sacreBLEU tokeniser)."""

import json
import re
import sys

import pytest

from conftest import shared_corpus
from recipe_helpers import in_process, lines, prepare_planner, refusal_of, run, walk_options, write

from fairseq_csan.recipes import evaluate, export, text, translate
from fairseq_csan.recipes.task import TASK

PREPARE = [sys.executable, "-m", "fairseq_csan.recipes.prepare"]
# the shared corpora of three pairs: folder, (src, tgt) as stored, and their train/valid/test names
CORPORA = {
    "multi30k_en_fr": (("en", "fr"), ("train", "val", "test_2016_flickr")),
    "tatoeba_zh_en": (("zh", "en"), ("train", "valid", "test")),
    "kftt30k_ja_en": (("ja", "en"), ("train", "dev", "tune")),
}
TOKENIZER = {"en": "moses en", "fr": "moses fr", "zh": "jieba", "ja": "mecab (fugashi, unidic-lite)"}
SACREBLEU_TOK = {"zh": "tok:zh", "ja": "tok:ja-mecab-"}  # every other target: 13a


def own_files(corpus, folder, n_train=400, n_eval=16):
    """The first lines of a shared corpus as the user's files: folder/{train,valid,test}.LANG."""
    source = shared_corpus(corpus)
    langs, names = CORPORA[corpus]
    for split, name in zip(("train", "valid", "test"), names):
        for lang in langs:
            write(folder / f"{split}.{lang}", lines(source / f"{name}.{lang}")[:n_train if split == "train" else n_eval])
    return folder


def prepare_files(src, tgt, raw, out, *extra):
    return run([*PREPARE, "files", "--src", src, "--tgt", tgt, "--train", raw / "train", "--valid", raw / "valid",
                "--test", raw / "test", "--out", out, "--merges", 200, "--workers", 2, *extra])


# ------------------------------------------------------------------- without training

def test_refusals_name_the_flag(tmp_path, capsys):
    from fairseq_csan.recipes import prepare

    raw = own_files("multi30k_en_fr", tmp_path / "raw", n_train=20, n_eval=4)
    base = ["files", "--train", raw / "train", "--valid", raw / "valid", "--test", raw / "test",
            "--out", tmp_path / "out"]
    refused = refusal_of(prepare.main, [*base, "--src", "en", "--tgt", "de", "--out", tmp_path / "elsewhere"], capsys)
    assert refused and "no file" in refused
    inside = tmp_path / "out" / "raw" / "mine"  # a corpus where prepare writes: a rerun would remove it
    write(inside.with_suffix(".en"), ["a"])
    write(inside.with_suffix(".fr"), ["b"])
    for extra, message in (
        (["--src", "en", "--tgt", "fr", "--test", inside], "which this command reads"),
        (["--src", "en", "--tgt", "en"], "--src and --tgt are both en"),
        (["--src", "EN", "--tgt", "fr"], "--src must be a language code"),
        (["--src", "en", "--tgt", "de"], f"--train {raw / 'train'}: no file {raw / 'train.de'} (its de side"),
        (["--src", "en", "--tgt", "fr", "--raw-dir", raw], "unknown argument '--raw-dir'"),
        (["--src", "en", "--tgt", "fr", "--clean-ratio", "0.5"], "--clean-ratio must be at least 1"),
    ):
        refused = refusal_of(prepare.main, [*base, *extra], capsys)
        assert refused and message in refused, (extra, refused)
    assert sorted(p.name for p in (tmp_path / "out").rglob("*") if p.name != ".lock") == ["mine.en", "mine.fr", "raw"]
    assert not (tmp_path / "elsewhere").exists()  # a missing file is named before the output folder is made


def test_a_folder_prepared_before_the_languages_were_recorded_reads_as_it_was(tmp_path):
    """A task.json without tests or tokenisers: read as one test set and the rules its languages
    have always had, and a rerun with the same settings is not refused. A folder of an earlier
    version of the kit (recipe.env alone) is refused, and --force prepares it again."""
    from fairseq_csan.recipes.runner import Refusal
    from fairseq_csan.recipes.task import PreparedTask

    old = {"task": "wmt17_zh_en", "src": "zh", "tgt": "en", "merges": 32000, "joint_bpe": False, "clean_max_len": 250,
           "clean_ratio": 9.0}
    TASK.write(tmp_path, old)
    (tmp_path / "data-bin").mkdir()
    task = PreparedTask.open(tmp_path)
    assert task.test_sets == ["test"] and task.splits == ["train", "valid", "test"]
    assert (task.tokenizer_src, task.tokenizer_tgt) == ("jieba", "moses en")
    again = PreparedTask.create(tmp_path, dict(task.settings))
    assert again.settings == task.settings

    earlier = tmp_path / "earlier"
    (earlier / "data-bin").mkdir(parents=True)
    write(earlier / "recipe.env", ["task=wmt17_zh_en", "src=zh", "tgt=en"])
    with pytest.raises(Refusal, match="recipe.env was written by an earlier version of the kit"):
        PreparedTask.open(earlier)
    with pytest.raises(Refusal, match="earlier version"):
        PreparedTask.create(earlier, dict(task.settings))
    assert PreparedTask.create(earlier, dict(task.settings), force=True).settings == again.settings


def test_help_without_a_task_is_help(capsys):
    from fairseq_csan.recipes import prepare

    with pytest.raises(SystemExit) as stop:
        prepare.main(["--help"])
    assert stop.value.code == 0 and "prepare files --src XX --tgt YY" in capsys.readouterr().out
    assert "give a task: files (your own corpus) or a preset" in refusal_of(prepare.main, [], capsys)


def test_every_option_changes_the_preparation_or_is_refused(tmp_path, monkeypatch, capsys):
    raw = own_files("multi30k_en_fr", tmp_path / "raw", n_train=20, n_eval=4)
    write(tmp_path / "raw/second.en", lines(raw / "test.en"))
    write(tmp_path / "raw/second.fr", lines(raw / "test.fr"))
    base = ["files", "--src", "en", "--tgt", "fr", "--train", raw / "train", "--valid", raw / "valid",
            "--test", raw / "test", "--workers", "2"]
    plan = prepare_planner(monkeypatch, capsys, tmp_path, base)
    walk_options(plan, [["--src", "fr", "--tgt", "en"], ["--train", raw / "valid"], ["--valid", raw / "test"],
                        ["--test", raw / "second"], ["--out", tmp_path / "elsewhere"], ["--merges", "50"],
                        ["--workers", "1"], ["--joint-bpe", "0"], ["--clean-ratio", "2"], ["--clean-max-len", "9"]])
    recorded, _ = plan(["--test", raw / "second"])
    assert "--testpref" in recorded and "OUT/bpe/test,OUT/bpe/test1" in recorded  # two test sets


def test_the_user_files_and_the_preset_are_one_path(tmp_path):
    """Multi30k En-De through its preset and through prepare files: the same files, byte for
    byte, everywhere but task.json's task name."""
    m30k = shared_corpus("multi30k_en_de")
    raw = tmp_path / "raw"
    for name, n in (("train", 300), ("val", 16), ("test_2016_flickr", 16)):
        for lang in ("en", "de"):
            write(raw / f"{name}.{lang}", lines(m30k / f"{name}.{lang}")[:n])
    run(["bash", "examples/multi30k/prepare.sh", "--raw-dir", raw, "--out", tmp_path / "preset", "--merges", 200,
         "--workers", 2, "--no-download"])
    run([*PREPARE, "files", "--src", "en", "--tgt", "de", "--train", raw / "train", "--valid", raw / "val",
         "--test", raw / "test_2016_flickr", "--out", tmp_path / "files", "--merges", 200, "--workers", 2,
         "--clean-ratio", "1.5"])
    compared = 0
    for path in sorted((tmp_path / "preset").rglob("*")):
        rel = path.relative_to(tmp_path / "preset")
        if path.is_file() and rel.parts[0] not in (".steps", ".lock") and rel.name not in ("task.json", "preprocess.log", ".written.json"):
            assert (tmp_path / "files" / rel).read_bytes() == path.read_bytes(), rel
            compared += 1
    assert compared >= 30
    preset, files = (json.loads((tmp_path / f / "task.json").read_text()) for f in ("preset", "files"))
    assert (preset.pop("task"), files.pop("task")) == ("multi30k_en_de", "en_de") and preset == files


# --------------------------------------------------------------- the whole path, per pair

DIRECTIONS = [("multi30k_en_fr", "en", "fr"), ("multi30k_en_fr", "fr", "en"), ("tatoeba_zh_en", "zh", "en"),
              ("tatoeba_zh_en", "en", "zh"), ("kftt30k_ja_en", "ja", "en"), ("kftt30k_ja_en", "en", "ja")]


@pytest.mark.slow
@pytest.mark.parametrize("corpus,src,tgt", DIRECTIONS, ids=[f"{s}-{t}" for _, s, t in DIRECTIONS])
def test_own_corpus_trains_evaluates_exports_and_translates(corpus, src, tgt, tmp_path):
    """prepare files, a tiny training, evaluate.sh, export and translate.py, with the languages
    checked at each step: recorded, tokenised by their own rules, scored as the target needs. The
    dry run names each step the run then takes. KFTT comes tokenised: Japanese-English keeps its
    tokens (--pretokenized) through scoring, export and translation; English-Japanese tokenises
    it again, with a warning that says so."""
    from fairseq_csan.recipes import prepare

    raw = own_files(corpus, tmp_path / "raw")
    task = tmp_path / "task"
    pretokenized = ["--pretokenized"] if (src, tgt) == ("ja", "en") else []
    planned = in_process(prepare.main, ["files", "--src", src, "--tgt", tgt, "--train", raw / "train", "--valid",
                                        raw / "valid", "--test", raw / "test", "--out", task, "--merges", 200,
                                        *pretokenized, "--dry-run"])
    assert not task.exists()  # a dry run writes nothing
    prepared = prepare_files(src, tgt, raw, task, *pretokenized)
    step_line = re.compile(r"^\[prepare\] (?:would run: )?(\d/6 .*) \([^()]*\)$")
    steps = [[m.group(1) for m in map(step_line.match, done.stderr.splitlines()) if m and " merges learnt, of " not in
              m.group(1)] for done in (planned, prepared)]  # (a step's lines, not what it found: few merges learnt)
    learnt = 2 if {src, tgt} & {"zh", "ja"} else 1  # BPE on each language, or joint
    assert steps[0] == steps[1] and len(steps[0]) == 3 + 6 + 1 + learnt + 6 + 1, steps  # gather ... binarise
    assert "\r" not in prepared.stderr  # no progress bar drawn into a log
    settings = json.loads((task / "task.json").read_text())
    assert (settings["src"], settings["tgt"], settings["task"]) == (src, tgt, f"{src}_{tgt}")
    segmented = {src, tgt} & {"zh", "ja"}  # the Zh-En and Ja-En presets' defaults: one BPE each, ratio 9
    assert (settings["joint_bpe"], settings["clean_ratio"]) == ((False, 9.0) if segmented else (True, 1.5))
    rules = (text.AS_GIVEN,) * 2 if pretokenized else (TOKENIZER[src], TOKENIZER[tgt])
    assert (settings["tokenizer_src"], settings["tokenizer_tgt"], settings["pretokenized"]) == (*rules, bool(pretokenized))
    said = "ja looks tokenised already" in prepared.stderr
    assert said == (corpus == "kftt30k_ja_en" and not pretokenized) and said == any(
        "looks tokenised already" in warning for warning in settings["warnings"])
    if pretokenized:  # its own tokens, blanks collapsed
        assert lines(task / "tok/train.ja") == [" ".join(line.split()) for line in lines(task / "raw/train.ja")]
    assert sorted(p.name for p in (task / "data-bin").glob("dict.*.txt")) == sorted([f"dict.{src}.txt", f"dict.{tgt}.txt"])
    if "fr" in (src, tgt):  # French rules keep the elision on its word ("l' homme"), German's would not
        assert any(token.endswith("'") and len(token) > 1 for row in lines(task / "tok/train.fr") for token in row.split())

    save = tmp_path / "ck"
    run(["bash", "scripts/train.sh", "--data", task, "--arch", "transformer_csan2d", "--save-dir", save, "--cpu-tiny",
         "--max-update", 3])
    # scripts/evaluate.sh's main, export's and translate.py's, in this process (their doors: other tests)
    ev = tmp_path / "ev"
    in_process(evaluate.main, ["--data", task, "--checkpoint", save / "checkpoint_last.pt", "--out", ev, "--cpu"])
    results = json.loads((ev / "results.json").read_text())
    assert results["task"] == f"{src}_{tgt}" and results["sentences"] == 16
    assert ("tok:none" if pretokenized else SACREBLEU_TOK.get(tgt, "tok:13a")) in results["sacrebleu_signature"]
    shown = (ev / "results.md").read_text()
    assert f"  signature: {results['sacrebleu_signature']}" in shown and f"  signature: {results['chrf_signature']}" in shown
    if pretokenized:  # scored against the references as given: nothing detokenised
        assert lines(ev / "hyp.detok") == lines(ev / "hyp.tok") and "as given (pretokenized)" in shown
    assert results["bleu_compound"] is None  # German targets only
    hyps = lines(ev / "hyp.detok")
    if tgt in ("zh", "ja"):  # segmented scripts are joined back: no space between two of their characters
        assert not [h for h in hyps if re.search(r"[^\x00-\x7f] [^\x00-\x7f]", h)]
        assert [h for h in lines(ev / "hyp.tok") if re.search(r"[^\x00-\x7f] [^\x00-\x7f]", h)]  # they were spaced

    model = tmp_path / "model"
    in_process(export.main, ["--data", task, "--checkpoint", save / "checkpoint_last.pt", "--out", model])
    about = json.loads((model / "export.json").read_text())
    assert (about["source_lang"], about["target_lang"], about["task"]) == (src, tgt, f"{src}_{tgt}")
    assert about["pretokenized"] == bool(pretokenized)
    assert sorted(p.name for p in model.glob("dict.*.txt")) == sorted([f"dict.{src}.txt", f"dict.{tgt}.txt"])
    # translate.py agrees with evaluate.sh
    in_process(translate.main, ["--model", model, "--input", task / f"raw/test.{src}",
                                "--output", tmp_path / f"out.{tgt}", "--cpu"])
    assert lines(tmp_path / f"out.{tgt}") == hyps


@pytest.mark.slow
def test_a_second_test_set_is_evaluated_on_its_own(tmp_path):
    """A test set added later (--test twice, docs/recipes.md: Scoring further test sets): the
    rerun with --force keeps the checkpoints trained before it valid; evaluate.sh --subset test1
    scores the second, names it by its file, and refuses a baseline evaluated on the other one."""
    raw = own_files("multi30k_en_fr", tmp_path / "raw", n_train=300, n_eval=12)
    for lang in ("en", "fr"):
        write(raw / f"second.{lang}", lines(shared_corpus("multi30k_en_fr") / f"val.{lang}")[-9:])
    task = tmp_path / "task"
    prepare_files("fr", "en", raw, task)
    save = tmp_path / "ck"
    run(["bash", "scripts/train.sh", "--data", task, "--arch", "transformer", "--save-dir", save, "--cpu-tiny",
         "--max-update", 2])
    prepare_files("fr", "en", raw, task, "--test", raw / "second", "--force")
    options = ["--data", task, "--checkpoint", save / "checkpoint_last.pt", "--cpu"]  # scripts/evaluate.sh's main
    in_process(evaluate.main, [*options, "--out", tmp_path / "ev1", "--subset", "test1"])
    results = json.loads((tmp_path / "ev1/results.json").read_text())
    assert (results["subset"], results["sentences"], results["test_set"]) == ("test1", 9, "second")
    assert (tmp_path / "ev1/results.md").read_text().startswith("# transformer (transformer, fr_en second, test1)")
    assert lines(tmp_path / "ev1/hyp.tok") != [] and len(lines(task / "raw/test1.en")) == 9
    refused = in_process(evaluate.main, [*options, "--out", tmp_path / "ev0", "--baseline", tmp_path / "ev1"],
                         check=False)
    assert refused.returncode == 2 and "is an evaluation of test1; evaluate the baseline on --subset test" in refused.stderr
    refused = in_process(evaluate.main, [*options, "--out", tmp_path / "ev2", "--subset", "test2"], check=False)
    assert refused.returncode == 2 and "--subset test2: " in refused.stderr and "valid, test, test1" in refused.stderr


def test_a_test_set_inside_the_training_set_is_said_and_recorded(tmp_path):
    """prepare.suspicious: one file given for two splits, and a test set whose pairs are training
    pairs too, are said in the log and kept in task.json ("warnings"); a corpus without either
    records none."""
    raw = own_files("multi30k_en_fr", tmp_path / "raw", n_train=120, n_eval=8)
    clean = run([*PREPARE, "files", "--src", "en", "--tgt", "fr", "--train", raw / "train", "--valid", raw / "valid",
                 "--test", raw / "test", "--out", tmp_path / "clean", "--merges", 50, "--workers", 1])
    assert "warning:" not in clean.stderr
    assert json.loads((tmp_path / "clean/task.json").read_text())["warnings"] == []
    done = run([*PREPARE, "files", "--src", "en", "--tgt", "fr", "--train", raw / "train", "--valid", raw / "valid",
                "--test", raw / "train", "--out", tmp_path / "out", "--merges", 50, "--workers", 1])
    pairs = len(set(zip(lines(raw / "train.en"), lines(raw / "train.fr"))))
    said = [line for line in done.stderr.splitlines() if "warning:" in line]
    assert any(f"one file, {raw / 'train.en'}, is given for train.en and test.en" in line for line in said), said
    assert any(f"{pairs} of the {pairs} distinct test pairs are training pairs too: the test set lies inside the "
               "training set" in line for line in said), said
    recorded = json.loads((tmp_path / "out/task.json").read_text())["warnings"]
    assert len(recorded) == 3 and all(any(r in line for line in said) for r in recorded)
    again = run([*PREPARE, "files", "--src", "en", "--tgt", "fr", "--train", raw / "train", "--valid", raw / "valid",
                 "--test", raw / "train", "--out", tmp_path / "out", "--merges", 50, "--workers", 1])
    assert "up to date; skipped" in again.stderr and "lies inside the training set" in again.stderr  # said again


def test_a_split_mostly_unknown_to_its_dictionary_is_warned_of(tmp_path):
    """fairseq-preprocess's count of tokens replaced by <unk> over 5% (raw text given as
    --pretokenized, a corpus cut --like a folder of other text) is a warning naming the file."""
    from fairseq_csan.recipes.prepare import unknown_tokens
    from fairseq_csan.recipes.task import PreparedTask

    task = PreparedTask(tmp_path, {"src": "en", "tgt": "de"})
    assert unknown_tokens(task) == []  # no log: nothing to say
    write(tmp_path / "data-bin/preprocess.log", [
        "[en] Dictionary: 144 types", "[en] out/bpe/train.en: 200 sents, 4467 tokens, 0.0% replaced (by <unk>)",
        "[de] out/bpe/valid.de: 10 sents, 210 tokens, 4.9% replaced (by <unk>)",
        "[de] out/bpe/test.de: 10 sents, 237 tokens, 36.3% replaced (by <unk>)"])
    (warning,) = unknown_tokens(task)
    assert warning.startswith("36.3% of the tokens of out/bpe/test.de are <unk>")
