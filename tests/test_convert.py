"""fairseq_csan.recipes.convert: a fairseq Transformer's model folder as a folder of one of the
plugin's architectures; prepare files --like, train.sh --finetune-from and evaluate.sh --model
after it (docs/recipes.md, Start from a trained Transformer)."""

import json
import shutil
from argparse import Namespace

import pytest
import torch

from recipe_helpers import lines, recipe_main, run

CONVERSIONS = {  # the conversions whose model is its source, exactly, until it is fine-tuned
    "ctxaware": ["--arch", "transformer_ctxaware"],
    "ctxaware, both sides": ["--arch", "transformer_ctxaware", "--ctx-side", "both"],
    "csan1d, a window over every sentence": ["--arch", "transformer_csan1d", "--csan-window", "2049"],
    "csan2d, one head and that window": ["--arch", "transformer_csan2d", "--csan-window", "2049", "--csan-heads", "1"],
    "relpos": ["--arch", "transformer_relpos"],
}


def convert(source, out, *flags, check=True):
    return recipe_main("convert", "--model", source, "--out", out, *flags, check=check)


def hub(folder):
    import fairseq_csan  # noqa: F401
    from fairseq.models.transformer import TransformerModel

    model = TransformerModel.from_pretrained(str(folder))
    return model.eval()


def padded_batch(model, sentences):
    """The source sentences, left-padded as fairseq batches them, and a few target tokens."""
    from fairseq.data import data_utils

    tokens = [model.encode(model.apply_bpe(model.tokenize(s))) for s in sentences]
    src = data_utils.collate_tokens(tokens, model.task.source_dictionary.pad(), left_pad=True)
    prev = torch.randint(4, len(model.task.target_dictionary), (len(tokens), 6), generator=torch.Generator().manual_seed(0))
    prev[:, 0] = model.task.target_dictionary.eos()
    return src, torch.tensor([len(t) for t in tokens]), prev


def logits(model, batch):
    with torch.no_grad():
        return model.models[0](*batch)[0]


@pytest.fixture(scope="module")
def source(transformer_folder):
    raw = transformer_folder["task"] / "raw/test.en"
    sentences = lines(raw)[:12]
    model = hub(transformer_folder["model"])
    batch = padded_batch(model, sentences)
    return {"folder": transformer_folder["model"], "task": transformer_folder["task"], "sentences": sentences,
            "batch": batch, "logits": logits(model, batch), "translations": model.translate(sentences)}


@pytest.mark.slow
@pytest.mark.parametrize("name", CONVERSIONS)
def test_a_conversion_that_can_equal_its_source_translates_exactly_as_it(source, tmp_path, name):
    """Weights copied and the new parameters started as documented: the same scores on a padded
    batch (the longest of its 12 sentences within the window) and the same translations, token for
    token (beam search: incremental decoding, the decoder's gates with --ctx-side both)."""
    out = tmp_path / "converted"
    convert(source["folder"], out, *CONVERSIONS[name])
    model = hub(out)
    assert (logits(model, source["batch"]) - source["logits"]).abs().max().item() <= 1e-5
    assert model.translate(source["sentences"]) == source["translations"]


@pytest.mark.slow
def test_each_family_converts_with_its_record_and_seal(source, tmp_path):
    """csan2d (the papers' window), context-aware and a baseline that keeps its own initial
    values: export.json names the source, the settings and every new parameter; the folder is
    sealed; 2D-CSAN then computes another function than its source (its window is 11)."""
    from fairseq_csan.model_folder import sha256, verify

    source_state = torch.load(source["folder"] / "model.pt", weights_only=False)["model"]
    for arch, flags, start in (("transformer_csan2d", ["--csan-window", "5"], None),
                               ("transformer_ctxaware", ["--ctx-type", "deep"], "U zero"),
                               ("transformer_local_soft", [], None)):
        out = tmp_path / arch
        done = convert(source["folder"], out, "--arch", arch, *flags)
        assert f"{out}: written" in done.stderr
        about = json.loads((out / "export.json").read_text())
        state = torch.load(out / "model.pt", weights_only=False)
        added = sorted(k for k in state["model"] if k not in source_state and not k.endswith("csan_model_settings"))
        assert about["arch"] == arch and about["converted_from"]["arch"] == "transformer"
        assert about["converted_from"]["sha256"] == sha256(source["folder"] / "model.pt")
        assert about["new_parameters"]["names"] == added and about["new_parameters"]["count"] == len(added)
        assert about["sizes"]["encoder_layers"] == 3 and about["sizes"]["encoder_embed_dim"] == 64  # the checkpoint's own
        assert sorted(about["files"]) == ["bpecodes", "dict.de.txt", "dict.en.txt", "model.pt"]
        assert (out / "bpecodes").read_bytes() == (source["folder"] / "bpecodes").read_bytes()
        verify(out)
        if arch == "transformer_csan2d":
            assert not added and about["settings"]["csan_window"] == 5
            assert (logits(hub(out), source["batch"]) - source["logits"]).abs().max().item() > 1e-3
        elif start:
            assert about["settings"]["ctx_type"] == "deep" and start in about["new_parameters"]["start"][0]["how"]
            assert all(not state["model"][k].any() for k in added)  # U and v: zero
        else:
            assert added and isinstance(about["new_parameters"]["start"], str)  # its own initial values, seeded
        assert hub(out).translate(source["sentences"][:2])
    again = convert(source["folder"], tmp_path / "transformer_csan2d", "--arch", "transformer_csan2d", "--csan-window", "5")
    assert "unchanged" in again.stderr


@pytest.mark.slow
def test_a_checkpoint_of_the_older_form_converts_as_its_newer_form(source, tmp_path):
    """fairseq's published models keep an ``args`` Namespace and no ``cfg``: the same model in
    that form converts to the same weights."""
    older = tmp_path / "older"
    older.mkdir()
    for name in ("dict.en.txt", "dict.de.txt", "bpecodes"):
        shutil.copyfile(source["folder"] / name, older / name)
    state = torch.load(source["folder"] / "model.pt", weights_only=False)
    args = Namespace(**vars(state["cfg"]["model"]))
    args.task, args.criterion, args.optimizer, args.lr_scheduler = "translation", "cross_entropy", "adam", "fixed"
    args.tokenizer, args.bpe = None, None  # as the published models: the hub's caller names them
    torch.save({**state, "args": args, "cfg": None}, older / "model.pt")
    convert(older, tmp_path / "from_older", "--arch", "transformer_csan1d", "--tokenizer", "csan_recipe",
            "--bpe", "subword_nmt")
    convert(source["folder"], tmp_path / "from_newer", "--arch", "transformer_csan1d")
    a, b = (torch.load(tmp_path / f / "model.pt", weights_only=False) for f in ("from_older", "from_newer"))
    assert a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert hub(tmp_path / "from_older").translate(source["sentences"][:3]) == hub(tmp_path / "from_newer").translate(
        source["sentences"][:3])


def test_refusals_name_the_problem_and_change_nothing(source, tree, tmp_path, capsys):
    from recipe_helpers import refusal_of

    from fairseq_csan.recipes import convert as command

    damaged = tmp_path / "damaged"
    shutil.copytree(source["folder"], damaged)
    with open(damaged / "bpecodes", "a") as f:
        f.write("x y\n")
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    folder = source["folder"]
    for argv, message in (
        ([folder, "--arch", "transformer_csan3d"], "--arch transformer_csan3d is not one of the plugin's"),
        ([folder, "--arch", "transformer"], "--arch transformer is not one of the plugin's"),
        ([tree / "model", "--arch", "transformer_csan1d"], "a model of the plugin already"),
        ([damaged, "--arch", "transformer_csan1d"], "bpecodes is not the file that export wrote"),
        ([tmp_path / "nowhere", "--arch", "transformer_csan1d"], "is not a folder"),
        ([folder, "--arch", "transformer_ctxaware", "--csan-window", "5"], "--csan-window applies only to"),
        ([folder, "--arch", "transformer_csan1d", "--encoder-layers", "2"], "the model's sizes come from its checkpoint"),
        ([folder, "--arch", "transformer_csan1d", "--csan-window", "4"], "--csan-window"),
        ([folder, "--arch", "transformer_csan1d", "--tokenizer", "moses"], "names --tokenizer csan_recipe"),
    ):
        refusal = refusal_of(command.main, ["--model", *argv, "--out", tmp_path / "out"], capsys)
        assert refusal and message in refusal, (argv, refusal)
        assert not (tmp_path / "out").exists()
    for out, message in ((folder, "--out"), (folder / "inside", "--out"), (folder.parent, "--model"),
                         (user, "is not a model folder that export or convert wrote")):
        refusal = refusal_of(command.main, ["--model", folder, "--arch", "transformer_csan1d", "--out", out], capsys)
        assert refusal and message in refusal, (out, refusal)
    assert [p.name for p in user.iterdir()] == ["notes.txt"] and not (folder / "inside").exists()
    convert(folder, tmp_path / "mine", "--arch", "transformer_csan1d")
    refusal = refusal_of(command.main, ["--model", folder, "--arch", "transformer_csan2d", "--out", tmp_path / "mine"], capsys)
    assert "pass --force to replace it" in refusal
    convert(folder, tmp_path / "mine", "--arch", "transformer_csan2d", "--force")
    assert json.loads((tmp_path / "mine/export.json").read_text())["arch"] == "transformer_csan2d"


def test_the_multi30k_example_plans_the_three_commands_and_refuses_bad_options(tmp_path, capsys):
    """examples/multi30k/convert.sh's plan (fairseq_csan.recipes.from_transformer): the commands in
    order, each seed's bootstrap against the Transformer of that seed, the table of this command's
    evaluations; every option changes the plan or is refused in one line; a dry run writes nothing."""
    from recipe_helpers import refusal_of, walk_options, write

    from fairseq_csan.recipes import from_transformer

    raw, model, work = tmp_path / "raw", tmp_path / "model", tmp_path / "work"
    from fairseq_csan.recipes.corpora import preset_raw

    for name in preset_raw("multi30k_en_de", raw)[1]:
        write(raw / name, ["a b c"])
    write(model / "model.pt", ["not read by the plan"])
    base = ["--model", model, "--raw-dir", raw, "--work", work, "--dry-run"]

    def plan(extra):
        refused = refusal_of(from_transformer.main, [*base, *extra], capsys)
        return (None if refused else capsys.readouterr().err), refused

    shown, refused = plan(["--seeds", "1,2", "--archs", "transformer_csan1d", "--cpu"])
    assert refused is None and not work.exists()
    commands = [line[2:].split() for line in shown.splitlines() if line.startswith("+ ")]
    modules = [words[2].rpartition(".")[2] for words in commands]
    assert modules == ["prepare", "convert", "evaluate", "evaluate", *["train", "evaluate"] * 4, "collect_results",
                       "collect_results"]
    tuned = commands[11]  # seed 2's csan1d evaluation
    assert tuned[tuned.index("--baseline") + 1] == str(work / "eval/transformer.seed2") and "--cpu" in tuned
    assert "--cpu-tiny" in commands[4] and str(work / "models/transformer_csan1d") in commands[10]
    table = commands[-2]
    assert table[3:table.index("--metric")] == [str(work / "eval" / name) for name in (
        "before/transformer", "before/transformer_csan1d", "transformer.seed1", "transformer_csan1d.seed1",
        "transformer.seed2", "transformer_csan1d.seed2")]
    walk_options(plan, [["--updates", "400"], ["--updates", "8"], ["--seeds", "4"], ["--seeds", "one"],
                        ["--archs", "transformer_ctxaware"], ["--archs", "transformer"], ["--cpu"],
                        ["--raw-dir", tmp_path / "nowhere"], ["--work", tmp_path / "other"]])
    assert "at least 16" in plan(["--updates", "8"])[1]
    assert "always trained on" in plan(["--archs", "transformer csan"])[1]
    assert "no model folder there" in refusal_of(from_transformer.main, [*base, "--model", raw], capsys)
    (raw / "val.de").unlink()
    assert plan([])[1].endswith("val.de (Multi30k's raw files, as the README unpacks them)")


@pytest.mark.slow
def test_the_multi30k_example_converts_fine_tunes_and_scores_then_export_and_translation_follow(
        source, tiny_task, tmp_path, capsys):
    """examples/multi30k/convert.sh, the three commands of docs/recipes.md in a row: prepare files
    --like (the corpus cut as the source's own data was: the recipe's own dictionaries and test set,
    byte for byte), convert, evaluate.sh --model before fine-tuning (the context-aware conversion
    gives its source's translations), train.sh --finetune-from (sizes from the folder, its weights
    loaded, 16 updates) and evaluate.sh with the bootstrap, one table; then export and translate.py
    on a fine-tuned model, and the refusals of each command."""
    from recipe_helpers import refusal_of, write

    from fairseq_csan.recipes import evaluate, prepare

    raw, work = tmp_path / "multi30k_raw", tmp_path / "work"
    for ours, theirs in (("train", "train"), ("val", "valid"), ("test_2016_flickr", "test")):
        for lang in ("en", "de"):
            write(raw / f"{ours}.{lang}", lines(source["task"] / "raw" / f"{theirs}.{lang}"))
    task, ctx = work / "task", work / "models/transformer_ctxaware"
    files = ["--src", "en", "--tgt", "de", "--train", raw / "train", "--valid", raw / "val", "--test", raw / "test_2016_flickr"]
    assert refusal_of(prepare.main, ["files", *files, "--out", task, "--like", source["folder"], "--merges", 100],
                      capsys).endswith("leave out --merges")
    bare = tmp_path / "no_codes"  # a folder of weights and dictionaries, no BPE codes
    bare.mkdir()
    for name in ("model.pt", "dict.en.txt", "dict.de.txt"):
        shutil.copyfile(source["folder"] / name, bare / name)
    assert "has no export.json" in refusal_of(prepare.main, ["files", *files, "--out", task, "--like", bare], capsys)
    # taken on purpose (--unchecked): its own refusals
    assert "has no BPE codes" in refusal_of(prepare.main, ["files", *files, "--out", task, "--like", bare, "--unchecked"],
                                            capsys)
    (bare / "sentencepiece.bpe.model").write_bytes(b"a sentencepiece model")  # mBART's and M2M-100's kind
    assert "splits with a sentencepiece model" in refusal_of(
        prepare.main, ["files", *files, "--out", task, "--like", bare, "--unchecked"], capsys)
    assert "translates en-de; this corpus is de-en" in refusal_of(
        prepare.main, ["files", "--src", "de", "--tgt", "en", *files[4:], "--out", task, "--like", source["folder"]], capsys)
    assert not task.exists()

    run(["bash", "examples/multi30k/convert.sh", "--model", source["folder"], "--raw-dir", raw, "--work", work,
         "--updates", 16, "--seeds", 1, "--archs", "transformer_ctxaware", "--cpu"])
    record = json.loads((task / "task.json").read_text())
    assert record["like"]["folder"] == str(source["folder"].resolve()) and record["like"]["tokenizer"] == "csan_recipe"
    for name in ("dict.en.txt", "dict.de.txt", "test.en-de.en.bin", "test.en-de.de.bin"):
        assert (task / "data-bin" / name).read_bytes() == (source["task"] / "data-bin" / name).read_bytes(), name
    before = [(work / "eval/before" / arch / "hyp.detok").read_text() for arch in ("transformer", "transformer_ctxaware")]
    assert before[0] == before[1]
    table = (work / "sacrebleu.md").read_text()
    for arch in ("transformer", "transformer_ctxaware"):
        assert f"| {arch}, before |" in table and f"| {arch}, seed 1 |" in table
    assert "csan1d" not in table  # --archs: the conversions asked for
    save = work / "checkpoints/transformer_ctxaware.seed1"
    log = (save / "train.log").read_text()
    assert "warm start from" in log and "keep their initial values" not in log
    assert "--encoder-layers 3" in (save / "train_command.sh").read_text()  # the folder's, not --cpu-tiny's
    assert json.loads((save / "run.json").read_text())["finetuned_from"]["folder"] == str(ctx.resolve())
    tuned = torch.load(save / "checkpoint_last.pt", weights_only=False)["model"]
    start = torch.load(ctx / "model.pt", weights_only=False)["model"]
    assert tuned.keys() == start.keys() and any(not torch.equal(tuned[k], start[k]) for k in start)  # it trained

    ev = work / "eval/transformer_ctxaware.seed1"
    recipe_main("export", "--data", task, "--checkpoint", ev / "averaged.pt", "--out", tmp_path / "model", check=True)
    recipe_main("translate", "--model", tmp_path / "model", "--input", task / "raw/test.en", "--output",
                tmp_path / "test.de", "--cpu", check=True)
    assert (tmp_path / "test.de").read_text() == (ev / "hyp.detok").read_text()

    # convert.sh converts on every run: the same conversion is kept, another one (a --model trained
    # again since, other settings) is refused, not scored under the old name
    sealed = (ctx / "export.json").read_bytes()
    assert "unchanged" in recipe_main("convert", "--model", source["folder"], "--arch", "transformer_ctxaware",
                                      "--out", ctx, check=True).stderr
    refused = recipe_main("convert", "--model", source["folder"], "--arch", "transformer_ctxaware", "--ctx-type", "global",
                          "--out", ctx)
    assert refused.returncode == 2 and "holds another model folder" in refused.stderr, refused.stderr[-2000:]
    assert (ctx / "export.json").read_bytes() == sealed

    other = refusal_of(evaluate.main, ["--data", tiny_task["task"], "--model", ctx, "--out", tmp_path / "x", "--cpu"], capsys)
    assert "is not the dictionary of --model" in other and not (tmp_path / "x").exists()
    train = ["--save-dir", tmp_path / "ck", "--cpu-tiny", "--finetune-from", ctx]
    for data, arch, extra, message in (
            (task, "transformer_csan2d", [], "holds a model of --arch transformer_ctxaware"),
            (task, "transformer_ctxaware", ["--size", "big"], "--size"),
            (task, "transformer_ctxaware", ["--", "--encoder-layers", "6"], "--encoder-layers 6 (the folder's model: 3) after --"),
            (task, "transformer_ctxaware", ["--", "--encoder-normalize-before"], "--encoder-normalize-before (the folder's model: off)"),
            (tiny_task["task"], "transformer_ctxaware", [], "prepare files ... --like")):
        refused = recipe_main("train", "--data", data, "--arch", arch, *train, *extra)  # its main; its door ran above
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr[-2000:]
    assert not (tmp_path / "ck").exists() or not any((tmp_path / "ck").glob("*.pt"))
