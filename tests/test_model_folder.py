"""fairseq_csan/model_folder.py: an exported model folder is sealed. export.json lists every
file's hash and seals itself; from_pretrained (with the plugin imported) and translate.py --model name a file
that is missing or differs, where a damaged folder once translated wrongly with exit 0."""

import json
import shutil
import subprocess
import sys

import pytest

from recipe_helpers import lines, run, write

FROM_PRETRAINED = ("import sys; import fairseq_csan; from fairseq.models.transformer import TransformerModel; "
                   "print(TransformerModel.from_pretrained(sys.argv[1]).translate('A man is riding a bicycle.'))")


def load(folder, cwd):
    return subprocess.run([sys.executable, "-c", FROM_PRETRAINED, str(folder)], capture_output=True, text=True,
                          cwd=cwd)


def load_here(folder, cwd, monkeypatch):
    """What the one-liner's from_pretrained raises in this process (its run as a process: ``load``),
    from ``cwd``; None if it loads."""
    from fairseq.models.transformer import TransformerModel

    monkeypatch.chdir(cwd)
    try:
        TransformerModel.from_pretrained(str(folder))
    except Exception as error:  # the one-liner's process would end with it, exit 1
        return error
    return None


def interactive(folder, source):
    """fairseq-interactive with the recipe's tokenizer on a model folder, as docs/translation.md shows."""
    from conftest import REPO

    return run(["fairseq-interactive", folder, "--user-dir", REPO / "fairseq_csan", "--path", folder / "model.pt",
                "-s", "en", "-t", "de", "--tokenizer", "csan_recipe", "--bpe", "subword_nmt", "--bpe-codes",
                folder / "bpecodes", "--remove-bpe", "--beam", "4", "--cpu", "--input", source], check=False)


def translate(folder, source, out):
    """translate.py --model FOLDER, for its refusal: its main in this process (``recipe_main``;
    translate.py's door runs in tests/test_translate.py and tests/test_runner.py)."""
    from recipe_helpers import recipe_main

    return recipe_main("translate", "--model", folder, "--input", source, "--output", out, "--cpu")


@pytest.mark.slow
def test_a_damaged_model_folder_is_named_not_translated(tree, tmp_path, monkeypatch):
    model, source = tree / "model", tree / "task/raw/test.en"
    record = json.loads((model / "export.json").read_text())
    assert sorted(record["files"]) == sorted(p.name for p in model.iterdir() if p.name != "export.json")
    intact = load(model, tmp_path)
    assert intact.returncode == 0 and intact.stdout.strip(), intact.stderr[-2000:]
    write(tmp_path / "two.en", lines(source)[:2])
    source_two = tmp_path / "two.en"
    done = interactive(model, source_two)
    assert done.returncode == 0 and done.stdout.count("\nH-") + done.stdout.startswith("H-") == 2, done.stderr[-2000:]

    def damaged(name, change):
        copy = tmp_path / name
        shutil.copytree(model, copy)
        change(copy)
        return copy

    cut = damaged("cut", lambda f: write(f / "bpecodes", lines(f / "bpecodes")[:len(lines(f / "bpecodes")) // 2]))
    swapped = damaged("swapped", lambda f: write(f / "dict.de.txt", [*reversed(lines(f / "dict.de.txt")[:2]),
                                                                     *lines(f / "dict.de.txt")[2:]]))
    missing = damaged("missing", lambda f: (f / "bpecodes").unlink())
    edited = damaged("edited", lambda f: (f / "export.json").write_text(json.dumps({**record, "target_lang": "fr"})))
    shutil.copy(model / "bpecodes", tmp_path / "bpecodes")  # another bpecodes where fairseq once looked
    for folder, name, message in ((cut, "bpecodes", "is not the file that export wrote"),
                                  (swapped, "dict.de.txt", "is not the file that export wrote"),
                                  (missing, "bpecodes", "is missing"),
                                  (edited, "export.json", "is not the record that export wrote (its seal of itself")):
        error = load_here(folder, tmp_path, monkeypatch)  # the intact folder's load ran as a process, above
        assert type(error).__name__ == "DamagedModelFolder" and f"model folder {folder}: {name} {message}" in str(error)
        out = tmp_path / f"{folder.name}.de"
        done = translate(folder, source, out)
        assert done.returncode != 0 and f"[translate] error: model folder {folder}: {name} {message}" in done.stderr
        assert "Traceback" not in done.stderr and not out.exists()
        if name != "bpecodes" or folder == cut:  # fairseq's own tools: the folder is checked as the model loads
            done = interactive(folder, source_two)
            assert done.returncode != 0 and f"model folder {folder}: {name} {message}" in done.stderr
            assert "H-0" not in done.stdout
