"""fairseq_csan/recipes/records.py: every record the kit keeps is one JSON form, typed by its
kind; the KEY=VALUE files of folders made before are read, and the next write replaces them."""

import json

import pytest

from fairseq_csan.recipes import records
from fairseq_csan.recipes.records import EVALUATION, KINDS, RUN, SWEEP, TASK, TIMING, Damaged, Kind
from recipe_helpers import write


def test_a_record_is_written_as_json_and_read_back_typed(tmp_path):
    written = TASK.write(tmp_path, {"task": "en_de", "src": "en", "tgt": "de", "merges": "400", "joint_bpe": 1,
                                    "clean_max_len": 250, "clean_ratio": "1.5", "tests": "test,test1"})
    assert written["merges"] == 400 and written["joint_bpe"] is True and written["tests"] == ["test", "test1"]
    assert json.loads((tmp_path / "task.json").read_text()) == written == TASK.read(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["task.json"]  # atomically: no temporary left
    assert TASK.read(tmp_path / "elsewhere") is None and not TASK.exists(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match=r"unknown task fields \['mergers'\]"):
        TASK.write(tmp_path, {"mergers": 3})


@pytest.mark.parametrize("kind, old_lines, expected", [
    (TASK, ["task=wmt17_zh_en", "src=zh", "tgt=en", "merges=32000", "joint_bpe=0", "clean_ratio=9", "tests=test,test1"],
     {"task": "wmt17_zh_en", "src": "zh", "tgt": "en", "merges": 32000, "joint_bpe": False, "clean_ratio": 9.0,
      "tests": ["test", "test1"]}),
    (RUN, ["arch=transformer_csan2d", "data=/d/data-bin", "size=base", "seed=1", "share=all", "tiny=1"],
     {"arch": "transformer_csan2d", "data": "/d/data-bin", "size": "base", "seed": 1, "share": "all", "tiny": True}),
    (EVALUATION, ["checkpoint=/ck/checkpoint_1_4.pt", "checkpoint=/ck/checkpoint_1_6.pt", "averaged=yes",
                  "subset=test", "beam=4", "lenpen=0.6", "batch_size=128", "decoding=--cpu"],
     {"checkpoints": ["/ck/checkpoint_1_4.pt", "/ck/checkpoint_1_6.pt"], "averaged": True, "subset": "test", "beam": 4,
      "lenpen": 0.6, "batch_size": 128, "decoding": "--cpu"}),
    (SWEEP, ["kind=window", "value=5", "arch=transformer_csan1d", "flags=--csan-window 5"],
     {"kind": "window", "value": 5, "arch": "transformer_csan1d", "flags": "--csan-window 5"}),
])
def test_the_old_file_of_a_folder_made_before_is_read_then_replaced(tmp_path, kind, old_lines, expected):
    write(tmp_path / kind.old, old_lines)
    assert kind.exists(tmp_path) and kind.read(tmp_path) == expected
    kind.write(tmp_path, expected)
    assert [p.name for p in tmp_path.iterdir()] == [kind.file] and kind.read(tmp_path) == expected


def test_the_identity_of_an_old_evaluation_equals_the_one_written_now(tmp_path):
    """An evaluation folder of before, rerun with the same settings: the same record, so nothing
    is redone (evaluate.py compares the typed records)."""
    old = ["checkpoint=/ck/a.pt", "averaged=no", "subset=valid", "beam=5", "lenpen=1", "batch_size=64",
           "decoding=gpu fp32"]
    write(tmp_path / "evaluation.env", old)
    now = EVALUATION.typed(dict(checkpoints=["/ck/a.pt"], averaged=False, subset="valid", beam=5, lenpen=1.0,
                                batch_size=64, decoding="gpu fp32"))
    assert EVALUATION.read(tmp_path) == now


def test_a_damaged_record_is_named(tmp_path):
    (tmp_path / "run.json").write_text('{"arch": "transformer", "seed": "one"}')
    with pytest.raises(Damaged, match=r"run.json is not a run record as this kit writes it"):
        RUN.read(tmp_path)
    (tmp_path / "run.json").write_text('["not", "an", "object"]')
    with pytest.raises(Damaged, match="not a JSON object"):
        RUN.read(tmp_path)
    (tmp_path / "run.json").write_text('{"arch": "transformer", "se')  # cut short
    with pytest.raises(Damaged):
        RUN.read(tmp_path)


def test_timing_keeps_the_fields_it_does_not_declare(tmp_path):
    TIMING.write(tmp_path, {"train_s": 3, "total_s": "4.5", "runs_at_a_time": 2, "threads": 1})
    assert TIMING.read(tmp_path) == {"train_s": 3.0, "total_s": 4.5, "runs_at_a_time": 2, "threads": 1}


def test_every_kind_has_its_own_file_and_known_types():
    assert len({k.file for k in KINDS}) == len(KINDS) and len({k.name for k in KINDS}) == len(KINDS)
    for kind in KINDS:
        assert isinstance(kind, Kind) and set(kind.fields.values()) <= set(records.TYPES), kind.name


def test_a_reader_finds_the_record_that_replaced_the_old_file_meanwhile(tmp_path, monkeypatch):
    """Machines of a multi-node run share a save folder: one may replace run.env by run.json
    between another's look for run.json and its read of run.env."""
    from pathlib import Path

    write(tmp_path / "run.env", ["arch=transformer", "seed=1"])
    record = {"arch": "transformer", "seed": 1}
    read_text = Path.read_text

    def replaced_meanwhile(path, *args, **kwargs):
        if path.name == "run.env":
            RUN.write(tmp_path, record)  # the other machine, just before this read
        return read_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", replaced_meanwhile)
    assert RUN.read_with_form(tmp_path) == (record, False)


# ---- what a model is made from (records.made_from, lineage, check_made_from) -------------------

def test_made_from_hashes_the_dictionaries_and_training_data_only(tmp_path):
    import hashlib

    from fairseq_csan.recipes.records import changed_since, made_from

    for name in ("dict.en.txt", "dict.de.txt", "train.en-de.en.bin", "train.en-de.en.idx", "valid.en-de.de.bin",
                 "test.en-de.en.bin", "preprocess.log"):
        (tmp_path / name).write_text(name)
    found = made_from(tmp_path)
    assert sorted(found) == ["dict.de.txt", "dict.en.txt", "train.en-de.en.bin", "train.en-de.en.idx",
                             "valid.en-de.de.bin"]  # the test set and the log are not what a model is made from
    assert found["dict.en.txt"] == hashlib.sha256(b"dict.en.txt").hexdigest()
    assert changed_since(found, made_from(tmp_path)) is None
    (tmp_path / "dict.de.txt").write_text("w1 1\nw0 1\n")
    assert changed_since(found, made_from(tmp_path)).startswith("dict.de.txt (sha256 ")
    (tmp_path / "valid.en-de.de.bin").unlink()
    assert "now)" in changed_since(found, made_from(tmp_path))


def test_a_checkpoint_is_checked_against_what_its_record_says_it_was_made_from(tmp_path):
    from fairseq_csan.recipes.records import EVALUATION, OtherData, check_made_from, made_from

    data = tmp_path / "data-bin"
    data.mkdir()
    (data / "dict.en.txt").write_text("a 1\nb 1\n")
    run = tmp_path / "ck"
    run.mkdir()
    check_made_from(run / "checkpoint_last.pt", data, "TASK")  # no record of the kit's: not refused here
    RUN.write(run, {"arch": "transformer", "data": str(data), "seed": 1, "made_from": made_from(data)})
    check_made_from(run / "checkpoint_last.pt", data, "TASK")
    (data / "dict.en.txt").write_text("b 1\na 1\n")  # prepared again: a dictionary of the same size
    with pytest.raises(OtherData, match=r"checkpoint_last.pt was made from other data than TASK holds now: "
                                        r"dict.en.txt \(sha256 \w{12} then, \w{12} now\), as .*run.json recorded it"):
        check_made_from(run / "checkpoint_last.pt", data, "TASK")
    RUN.write(run, {"arch": "transformer", "data": str(data), "seed": 1})  # an earlier version's record
    with pytest.raises(OtherData, match="an earlier version of the kit wrote"):
        check_made_from(run / "checkpoint_last.pt", data, "TASK")
    ev = tmp_path / "ev"  # an evaluation's average carries its checkpoints' record on
    ev.mkdir()
    EVALUATION.write(ev, {"checkpoints": ["x"], "made_from": made_from(data)})
    check_made_from(ev / "averaged.pt", data, "TASK")
    EVALUATION.write(ev, {"checkpoints": ["x"], "made_from": None})  # of checkpoints no record spoke for
    check_made_from(ev / "averaged.pt", data, "TASK")


@pytest.mark.slow
def test_a_task_prepared_again_is_refused_by_resume_evaluation_export_and_translation(tree, tmp_path):
    """The En-De tree's task prepared again with a dictionary of the same size (two entries
    swapped): the run's resume, the evaluation of its checkpoints, the export of its average
    and a translation with its checkpoint are each refused in one line naming the file; the same
    commands on the task as it was go through (the tree fixture ran them)."""
    import shutil

    from recipe_helpers import recipe_main, train_main

    task, ck, ev = tmp_path / "task", tmp_path / "ck", tmp_path / "ev"
    for name, copy in (("task", task), ("ck", ck), ("ev", ev)):
        shutil.copytree(tree / name, copy)
    dictionaries = sorted((task / "data-bin").glob("dict.*.txt"))
    for path in dictionaries:
        rows = path.read_text(encoding="utf-8").splitlines(True)
        rows[0], rows[1] = rows[1], rows[0]
        path.write_text("".join(rows), encoding="utf-8")
    name = dictionaries[0].name
    before = {p.name: p.read_bytes() for p in ck.iterdir()}

    resumed = train_main("--data", task, "--arch", "transformer_csan2d", "--save-dir", ck, "--cpu-tiny", check=False)
    assert resumed.returncode == 2 and "holds a run made from other data than" in resumed.stderr
    assert f"{name} (sha256 " in resumed.stderr and "the task was prepared again" in resumed.stderr
    assert {p.name: p.read_bytes() for p in ck.iterdir() if p.name != "train.lock"} == \
        {k: v for k, v in before.items() if k != "train.lock"}  # nothing resumed, nothing rewritten
    evaluated = recipe_main("evaluate", "--data", task, "--checkpoints", ck, "--out", tmp_path / "ev2", "--last", 2,
                            "--cpu")
    assert evaluated.returncode != 0 and "was made from other data than" in evaluated.stderr
    assert f"{name} (sha256 " in evaluated.stderr and not (tmp_path / "ev2" / "results.json").exists()
    exported = recipe_main("export", "--data", task, "--checkpoint", ev / "averaged.pt", "--out", tmp_path / "model")
    assert exported.returncode != 0 and "averaged.pt was made from other data than" in exported.stderr
    assert "evaluation.json recorded it" in exported.stderr and not (tmp_path / "model").exists()
    (tmp_path / "mine.en").write_text("a man .\n")
    translated = recipe_main("translate", "--data", task, "--checkpoint", ck / "checkpoint_last.pt", "--input",
                             tmp_path / "mine.en", "--output", tmp_path / "mine.de", "--cpu")
    assert translated.returncode != 0 and "was made from other data than" in translated.stderr
    assert not (tmp_path / "mine.de").exists()
