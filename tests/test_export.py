"""fairseq_csan.recipes.export: a fairseq model folder that translates raw text as the recipe does."""

import subprocess
import sys

import pytest

from recipe_helpers import fake_task, lines, recipe_main, refusal_of, run, walk_options, write

EXPORT = [sys.executable, "-m", "fairseq_csan.recipes.export"]


def export(*args):
    return subprocess.run(EXPORT + [str(a) for a in args], capture_output=True, text=True)


def test_refusals_name_the_problem(tmp_path):
    """Refused before anything is written (export's main in this process; its door runs below)."""

    def export(*args):
        return recipe_main("export", *args)

    task = fake_task(tmp_path)
    checkpoint = tmp_path / "ck.pt"
    checkpoint.write_bytes(b"x")
    for args, message in (
        (["--data", tmp_path / "nowhere", "--checkpoint", checkpoint], "is not a prepared task folder"),
        (["--data", task, "--checkpoint", tmp_path / "none.pt"], "none.pt: no such file"),
        (["--data", task, "--checkpoint", checkpoint], "no BPE codes"),
    ):
        done = export(*args, "--out", tmp_path / "model")
        assert done.returncode == 2 and message in done.stderr, done.stderr
    write(task / "bpe/codes", ["#version: 0.2", "a b"])
    done = export("--data", task, "--checkpoint", checkpoint, "--out", task / "model")
    assert done.returncode == 2 and "lies inside --data" in done.stderr
    done = export("--data", task, "--checkpoint", checkpoint, "--out", tmp_path / "model")
    assert done.returncode == 2 and f"cannot read the checkpoint {checkpoint}" in done.stderr
    assert not (tmp_path / "model").exists() and not list(tmp_path.glob(".model*"))


@pytest.mark.slow
def test_exported_folder_translates_as_evaluate(tiny_task, tmp_path):
    """Export a tiny trained model; TransformerModel.from_pretrained(folder).translate() with no
    other argument, translate.py --model and translate.py --data give evaluate.sh's hyp.detok."""
    task, checkpoint = tiny_task["task"], tiny_task["checkpoint"]  # 32 test lines: one batch in fairseq-generate too
    ev = tmp_path / "ev"
    # evaluate.sh's main in this process (its door: test_evaluate.py); export's door, then its main
    recipe_main("evaluate", "--data", task, "--checkpoint", checkpoint, "--out", ev, "--cpu", check=True)
    folder = tmp_path / "model"
    done = export("--data", task, "--checkpoint", checkpoint, "--out", folder)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in folder.iterdir()) == ["bpecodes", "dict.de.txt", "dict.en.txt", "export.json", "model.pt"]

    raw = lines(task / "raw/test.en")
    code = ("import json, sys; import fairseq_csan; from fairseq.models.transformer import TransformerModel; "
            "m = TransformerModel.from_pretrained(sys.argv[1]); raw = json.load(sys.stdin); "
            "print(json.dumps({'translations': m.translate(raw), 'bpe': [m.apply_bpe(m.tokenize(r)) for r in raw], "
            "'beam': m.cfg.generation.beam, 'lenpen': m.cfg.generation.lenpen}))")
    import json

    hub = subprocess.run([sys.executable, "-c", code, str(folder)], input=json.dumps(raw), capture_output=True,
                         text=True, cwd=tmp_path)
    assert hub.returncode == 0, hub.stderr[-3000:]
    got = json.loads(hub.stdout.strip().splitlines()[-1])
    assert got["bpe"] == lines(task / "bpe/test.en")  # the recipe's tokenisation and BPE
    assert (got["beam"], got["lenpen"]) == (4, 0.6)
    assert got["translations"] == lines(ev / "hyp.detok")

    for name, source in (("model", ["--model", folder]), ("task", ["--data", task, "--checkpoint", checkpoint])):
        argv = [*source, "--input", task / "raw/test.en", "--output", tmp_path / f"{name}.de", "--cpu"]
        if name == "model":  # the door, a process of its own
            run([sys.executable, "-m", "fairseq_csan.recipes.translate", *argv])
        else:  # its main in this process
            recipe_main("translate", *argv, check=True)
        assert (tmp_path / f"{name}.de").read_bytes() == (ev / "hyp.detok").read_bytes()
        assert (tmp_path / f"{name}.de.tok").read_bytes() == (ev / "hyp.tok").read_bytes()

    # the same export again changes nothing; another model is refused without --force (export's
    # main in this process, its door having run above)
    before = (folder / "model.pt").read_bytes()
    done = recipe_main("export", "--data", task, "--checkpoint", checkpoint, "--out", folder)
    assert done.returncode == 0 and "unchanged" in done.stderr
    other = sorted(checkpoint.parent.glob("checkpoint_1_*.pt"))[0]
    done = recipe_main("export", "--data", task, "--checkpoint", other, "--out", folder)
    assert done.returncode == 2 and "pass --force to replace it" in done.stderr
    assert (folder / "model.pt").read_bytes() == before
    # a file of the folder changed by hand since is not export's to replace, --force or not
    codes = (folder / "bpecodes").read_bytes()
    (folder / "bpecodes").write_bytes(codes + b"my own merge\n")
    done = recipe_main("export", "--data", task, "--checkpoint", other, "--out", folder, "--force")
    assert done.returncode == 2 and f"it holds {folder / 'bpecodes'}, which they did not write" in done.stderr
    assert (folder / "model.pt").read_bytes() == before
    (folder / "bpecodes").write_bytes(codes)
    done = recipe_main("export", "--data", task, "--checkpoint", other, "--out", folder, "--force")
    assert done.returncode == 0 and "replaced" in done.stderr
    assert (folder / "model.pt").read_bytes() != before


@pytest.mark.slow
def test_every_option_changes_the_model_folder_or_is_refused(tree, tmp_path, capsys):
    """No option of the export is accepted and ignored: each changes the folder written (or
    whether an older export of its own is replaced), or is refused with one line."""
    import itertools
    import json
    from pathlib import Path

    from fairseq_csan.recipes import export as exporter

    runs = itertools.count()
    other = fake_task(tmp_path / "other")
    write(other / "bpe/codes", ["#version: 0.2", "a b"])
    base = ["--data", tree / "task", "--checkpoint", tree / "ev/averaged.pt"]

    def plan(extra):
        out = tmp_path / "walk" / str(next(runs))
        if "--force" in extra:  # what --force is for: an older export in --out
            exporter.main([str(a) for a in (*base, "--checkpoint", tree / "ck/checkpoint_last.pt", "--out", out)])
        argv = [*base, "--out", out, *extra]
        target = Path(argv[len(argv) - 1 - argv[::-1].index("--out") + 1])  # the last --out given
        existed = target.exists()
        refused = refusal_of(exporter.main, argv, capsys)
        files = json.loads((target / "export.json").read_text())["files"] if refused is None else None
        return repr((str(target).replace(str(out), "OUT"), existed, files)), refused

    walk_options(plan, [["--data", other], ["--checkpoint", tree / "ck/checkpoint_last.pt"],
                        ["--out", tmp_path / "elsewhere"], ["--force"]])
