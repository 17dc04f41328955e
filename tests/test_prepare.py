"""fairseq_csan.recipes.prepare (examples/<task>/prepare.sh): the En-De recipe's outputs, a rerun
that skips what is current and redoes what changed, other settings and a missing corpus refused;
under changed and bad input nothing stale, nothing misaligned, early errors naming the file and
line."""

import json
import os
import re
from pathlib import Path

import pytest

from conftest import REPO, shared_corpus
from recipe_helpers import (MERGES, N_TEST, aspec_folder, check_prepared, head, in_process, lines, prepare_planner,
                            prepare_task, refusal_of, run, walk_options)

pytestmark = pytest.mark.slow

FILES = {"train": "train", "valid": "val", "test": "test_2016_flickr"}


def raw_folder(folder, n_train=300, n_eval=20):
    m30k = shared_corpus("multi30k_en_de")
    for split, name in FILES.items():
        n = n_train if split == "train" else n_eval
        for lang in ("en", "de"):
            (folder / f"{name}.{lang}").parent.mkdir(parents=True, exist_ok=True)
            (folder / f"{name}.{lang}").write_bytes(b"".join(open(m30k / f"{name}.{lang}", "rb").readlines()[:n]))
    return folder


def prepare(raw, out, check=True):
    return run(["bash", "examples/multi30k/prepare.sh", "--raw-dir", raw, "--out", out, "--merges", 100,
                "--workers", 1], check=check)


def refused(preset, *args):
    """examples/<task>/prepare.sh ARGS (prepare PRESET ARGS) in this process, for a refusal: its
    main, without a Python start and a fairseq import. The other tests take the doors."""
    from recipe_helpers import in_process

    from fairseq_csan.recipes import prepare as recipe

    return in_process(recipe.main, [preset, *args], check=False)


def test_another_raw_folder_into_the_same_out_is_prepared_again(tmp_path):
    out = tmp_path / "out"
    prepare(raw_folder(tmp_path / "small", 300), out)
    assert len(lines(out / "raw/train.en")) == 300
    again = prepare(raw_folder(tmp_path / "large", 600), out)
    assert "1/6 gather train from" in again.stderr and "inputs are other files than last time" in again.stderr
    assert len(lines(out / "raw/train.en")) == 600
    assert len(lines(out / "bpe/train.en")) == len(lines(out / "tok/train.clean.en")) > 300


def test_byte_order_marks_and_odd_line_breaks_keep_every_line(tmp_path):
    raw = raw_folder(tmp_path / "raw")
    ref = raw / "test_2016_flickr.de"
    rows = ref.read_bytes().split(b"\n")
    # a BOM, and inside lines a carriage return, a form feed, NEL and the Unicode line separator
    rows[0] = b"\xef\xbb\xbf" + rows[0]
    for i, odd in enumerate(("\r", "\f", "\x85", "\u2028"), 1):
        rows[i] = rows[i] + f" zwei{odd}drei".encode("utf-8")
    ref.write_bytes(b"\n".join(rows))
    out = tmp_path / "out"
    prepare(raw, out)
    gathered = (out / "raw/test.de").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(gathered) == 20 == len(lines(out / "tok/test.de")) == len(lines(out / "bpe/test.de"))
    assert not gathered[0].startswith("\ufeff") and gathered[0] == " ".join(rows[0][3:].decode().split())
    assert all(gathered[i].endswith(" zwei drei") for i in range(1, 5))


def test_undecodable_bytes_are_named_by_file_and_line_before_any_work(tmp_path):
    raw = raw_folder(tmp_path / "raw")
    rows = (raw / "val.en").read_bytes().split(b"\n")
    rows[6] = rows[6] + b" \xff"
    (raw / "val.en").write_bytes(b"\n".join(rows))
    done = refused("multi30k_en_de", "--raw-dir", raw, "--out", tmp_path / "out", "--merges", 100, "--workers", 1)
    assert done.returncode == 2
    assert f"{raw / 'val.en'}:7: not UTF-8 (byte 0xff" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out/tok").exists()


def test_a_missing_side_is_named(tmp_path):
    raw = raw_folder(tmp_path / "raw")
    (raw / "val.de").unlink()
    done = refused("multi30k_en_de", "--raw-dir", raw, "--out", tmp_path / "out", "--merges", 100, "--workers", 1)
    assert done.returncode == 2
    assert f"found the en side {raw / 'val.en'} but not the de side {raw / 'val.de'}" in done.stderr


def outputs(out):
    """The content of every output (the steps' records, the tool versions and fairseq's own log,
    which carries times, aside), and of each folder's record of what prepare wrote (those aside)."""
    aside = ("tools.txt", "preprocess.log")
    found = {}
    for p in sorted(out.rglob("*")):
        if p.is_file() and ".steps" not in p.parts and p.name not in aside:
            found[p.relative_to(out).as_posix()] = p.read_bytes() if p.name != ".written.json" else {
                name: entry for name, entry in json.loads(p.read_text())["files"].items() if name not in aside}
    return found


@pytest.mark.parametrize("whom", ["group", "parent"])
def test_a_kill_at_any_moment_then_a_rerun_gives_the_uninterrupted_result(tmp_path, whom):
    """SIGKILL on the whole process group, or on the recipe's own process alone (its commands
    then die with it), at random moments; the rerun's outputs equal an uninterrupted run's."""
    import os
    import random
    import signal
    import subprocess
    import sys
    import time

    raw = raw_folder(tmp_path / "raw", n_train=1500, n_eval=50)
    reference = tmp_path / "reference"
    started = time.time()
    prepare(raw, reference)
    duration = time.time() - started
    expected = outputs(reference)
    assert any(k.startswith("data-bin/") for k in expected)

    out = tmp_path / "out"
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    rng = random.Random(f"{whom}-kill")
    delays = sorted(rng.uniform(0.3, duration) for _ in range(3))
    for delay in delays:
        proc = subprocess.Popen(["bash", "examples/multi30k/prepare.sh", "--raw-dir", str(raw), "--out", str(out),
                                 "--merges", "100", "--workers", "1"], cwd=str(REPO), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(delay)
        if whom == "group":
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            proc.kill()
        proc.wait()
    time.sleep(0.5)  # the killed commands' own ends
    prepare(raw, out)
    assert outputs(out) == expected, f"killed after {delays} s"


@pytest.mark.slow
def test_ende_prepare_outputs(ende):
    out = ende["out"]
    check_prepared(out, "en", "de")
    # joint BPE: one codes file, one dictionary for both languages
    assert (out / "bpe/codes").is_file() and not (out / "bpe/codes.en").exists()
    assert (out / "data-bin/dict.en.txt").read_text() == (out / "data-bin/dict.de.txt").read_text()
    # the test set came from the SGM files, segment for segment
    assert lines(out / "raw/test.de") == [" ".join(x.split()) for x in head(ende["wmt"] / "newstest2014.de", N_TEST)]
    assert json.loads((out / "task.json").read_text())["merges"] == 400
    assert "6/6 binarise with fairseq-preprocess" in ende["first"].stderr


@pytest.mark.slow
def test_ende_rerun_skips_every_step_and_keeps_outputs(ende, tmp_path):
    # its own preparation of the recipe's raw files: this test edits one of them and prepares
    # again in place, and the shared fixture is read only
    import shutil

    raw, out = tmp_path / "raw", tmp_path / "prepared"
    shutil.copytree(ende["raw"], raw)
    prepare_task("wmt14_en_de", raw, out)
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name not in ("task.json", "tools.txt")}

    def dry_run():  # prepare.sh --dry-run's main, in this process: the steps it names, each with its verdict
        from fairseq_csan.recipes import prepare

        done = in_process(prepare.main, ["wmt14_en_de", "--raw-dir", raw, "--out", out, "--merges", MERGES,
                                         "--no-download", "--dry-run"])
        return [line.split("] ", 1)[1] for line in done.stderr.splitlines() if re.search(r"\] .*\d/6 ", line)]

    assert all(line.endswith("up to date; would be skipped") for line in dry_run())
    again = prepare_task("wmt14_en_de", raw, out)
    steps = [line for line in again.stderr.splitlines() if re.match(r"\[prepare\] \d/6 ", line)]
    assert {line.split()[1] for line in steps} == {"1/6", "2/6", "3/6", "4/6", "5/6", "6/6"}
    assert all(line.endswith("skipped") for line in steps)
    assert "learn 400" not in again.stderr and "fairseq-preprocess" not in again.stderr
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    # a changed raw file (edited in place, its modification time kept): exactly the steps after
    # it are redone, each saying why; the others are skipped
    sgm = raw / "test-full/newstest2014-deen-ref.de.sgm"
    original = sgm.read_bytes()
    st = sgm.stat()
    sgm.write_bytes(original.replace(b"<seg id=\"1\">", b"<seg id=\"1\">Neu ", 1))
    os.utime(sgm, ns=(st.st_atime_ns, st.st_mtime_ns))
    try:
        # the dry run: the gather for sure, and each step that reads what it writes (test.en comes
        # out the same, so the run then skips its steps)
        planned = [line.split(" (")[0] for line in dry_run() if not line.endswith("would be skipped")]
        assert planned == ["would run: 1/6 gather test from " + str(raw), *[
            f"may run: {step}" for step in ("2/6 tokenise test.en", "2/6 tokenise test.de", "5/6 apply BPE to test.en",
                                            "5/6 apply BPE to test.de", "6/6 binarise with fairseq-preprocess")]], planned
        again = prepare_task("wmt14_en_de", raw, out)
        redone = [line.split("] ")[1].split(" (")[0] for line in again.stderr.splitlines()
                  if re.match(r"\[prepare\] \d/6 ", line) and not line.endswith("skipped")]
        assert redone == ["1/6 gather test from " + str(raw), "2/6 tokenise test.de", "5/6 apply BPE to test.de",
                          "6/6 binarise with fairseq-preprocess"], again.stderr
        assert f"input {sgm} changed since the last run" in again.stderr
        assert lines(out / "raw/test.de")[0].startswith("Neu ")
    finally:
        sgm.write_bytes(original)
        restored = prepare_task("wmt14_en_de", raw, out)
    assert not lines(out / "raw/test.de")[0].startswith("Neu ") and "6/6 binarise with" in restored.stderr


@pytest.mark.slow
def test_ende_other_settings_are_refused(ende):
    done = refused("wmt14_en_de", "--raw-dir", ende["raw"], "--out", ende["out"], "--merges", 500, "--no-download")
    assert done.returncode == 2 and "prepared with other settings" in done.stderr


@pytest.mark.slow
def test_ende_missing_input_stops_with_the_file_and_its_source(ende, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for p in ende["raw"].rglob("*"):
        if p.is_file() and "news-commentary" not in p.name:
            target = raw / p.relative_to(ende["raw"])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(p.read_bytes())
    done = refused("wmt14_en_de", "--raw-dir", raw, "--out", tmp_path / "out", "--no-download")
    assert done.returncode == 2
    assert "missing News Commentary v9" in done.stderr
    assert "training/news-commentary-v9.de-en.en" in done.stderr
    assert "https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz" in done.stderr
    assert not (tmp_path / "out/raw/train.en").exists()


@pytest.mark.slow
def test_jaen_missing_aspec_file(tmp_path):
    kftt = shared_corpus("kftt30k_ja_en")
    aspec = tmp_path / "ASPEC-JE"
    aspec_folder(aspec, kftt)
    (aspec / "test/test.txt").unlink()
    done = refused("wat17_ja_en", "--raw-dir", aspec, "--out", tmp_path / "out")
    assert done.returncode == 2
    assert str(aspec / "test/test.txt") in done.stderr and "ASPEC is licensed" in done.stderr


@pytest.mark.slow
def test_the_commands_shown_in_prepare_sh_are_what_it_runs(ende):
    """The subword-nmt and fairseq-preprocess commands in examples/wmt14_en_de/prepare.sh's header
    are the ones it runs (up to the output folder, the merges and the workers of this test, and the
    --verbose that prepare gives learn-bpe for its progress line)."""
    header = (REPO / "examples/wmt14_en_de/prepare.sh").read_text(encoding="utf-8").split("\nset -euo pipefail")[0]
    steps = {line[4:6]: line[7:] for line in re.sub(r"\s*\\\n#\s*", " ", header).splitlines() if line.startswith("#   ")}
    out = ende["out"]
    ran = [re.sub(r"/\.([^/\s]+)\.\d+-[0-9a-f]+\.tmp", r"/\1.tmp", line.split("$ ", 1)[1])  # (the temporaries' names)
           for line in ende["first"].stderr.splitlines() if "  $ " in line]
    learn = (steps["4."].replace("tok/", f"{out}/tok/").replace("-s 32000", "-s 400 --verbose")
             .replace("> bpe/codes", f"> {out}/bpe/codes.tmp"))
    binarise = (steps["6."].replace("bpe/", f"{out}/bpe/").replace("--destdir data-bin", f"--destdir {out}/data-bin.tmp")
                .replace("--workers N", "--workers 2"))
    assert learn in ran and binarise in ran, "\n".join(ran)


# the presets walked: each takes its settings from corpora.TASKS alone
PRESETS = {"multi30k_en_de": [], "wmt14_en_de": []}


@pytest.mark.parametrize("task", sorted(PRESETS))
def test_every_option_changes_the_preparation_or_is_refused(task, ende, tmp_path, monkeypatch, capsys):
    """No option of prepare.sh is accepted and ignored: with each preset, each option changes
    what is read, written or run, or is refused with one line. (The steps are recorded, not
    run.) --force and --no-download guard what would happen otherwise: each is checked where
    it matters."""
    import shutil

    from fairseq_csan.recipes import prepare as preparer

    raw = raw_folder(tmp_path / "raw") if task == "multi30k_en_de" else ende["raw"]
    shutil.copytree(raw, tmp_path / "raw_copy")
    plan = prepare_planner(monkeypatch, capsys, tmp_path, [task, *PRESETS[task], "--raw-dir", raw, "--workers", "2"])
    walk_options(plan, [["--raw-dir", tmp_path / "raw_copy"], ["--out", tmp_path / "elsewhere"], ["--merges", "50"],
                        ["--workers", "1"], ["--list"]])
    # the guards: --no-download refuses a missing corpus (no download tried); --force redoes
    # a folder prepared with other settings, which is refused without it
    (tmp_path / "raw_copy" / sorted(p.name for p in (tmp_path / "raw_copy").iterdir() if p.is_file())[0]).unlink() \
        if task == "multi30k_en_de" else shutil.rmtree(tmp_path / "raw_copy/test-full")
    monkeypatch.setattr(preparer.corpora, "download", lambda *a, **k: pytest.fail("a download was tried"),
                        raising=False)
    refused = refusal_of(preparer.main, [task, *PRESETS[task], "--raw-dir", tmp_path / "raw_copy", "--out",
                                         tmp_path / "guarded", "--no-download"], capsys)
    assert refused and not (tmp_path / "guarded/raw").exists(), refused
    out = tmp_path / "walk" / "settled"
    assert plan(["--out", out, "--merges", "50"])[1] is None
    refused = plan(["--out", out])[1]
    assert refused and "was prepared with other settings" in refused, refused
    assert plan(["--out", out, "--force"])[1] is None


def test_each_preset_keeps_the_settings_its_prepare_sh_gave():
    """The settings that examples/<task>/prepare.sh passed as flags until they moved into
    corpora.TASKS: the same for every preset, with or without the door."""
    from fairseq_csan.recipes import prepare as preparer

    given = {"wmt14_en_de": (1, 1.5, 32000, None), "wmt17_zh_en": (0, 9.0, 32000, None),
             "wat17_ja_en": (0, 9.0, 32000, None), "toy_en_de": (1, 1.5, 32000, None),
             "multi30k_en_de": (1, 1.5, 8000, Path("data/multi30k_raw"))}
    assert sorted(given) == sorted(preparer.corpora.TASKS)
    for task, (joint, ratio, merges, raw) in given.items():
        args = preparer.parse([task])
        assert (args.joint_bpe, args.clean_ratio, args.clean_max_len, args.default_merges, args.default_raw) == (
            joint, ratio, 250, merges, raw), task
    assert preparer.parse(["wmt14_en_de", "--clean-ratio", "2"]).clean_ratio == 2.0  # still settable


def test_a_dry_run_refuses_what_the_run_refuses(tmp_path):
    """A preset's dry run with a corpus it could not get (none in the raw folder, --no-download):
    refused as the run is, naming it, and nothing written."""
    from fairseq_csan.recipes import prepare

    done = in_process(prepare.main, ["toy_en_de", "--raw-dir", tmp_path / "none", "--out", tmp_path / "out",
                                     "--no-download", "--dry-run"], check=False)
    assert done.returncode == 2 and "error: toy_en_de: missing toy train" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()
