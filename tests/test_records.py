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
