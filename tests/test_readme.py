"""Every command in README.md and docs/ runs as written.

- Fast: every fenced shell block of README.md and docs/*.md is read command by command; each
  script it runs must exist, each flag it gives a script must be one that the script's own
  --help lists as an option (fairseq's tools: their --help with our plugin and the command's
  --arch, task, optimizer and criterion), each repository path it names must exist, and each
  data/, checkpoints/ and results/ path it reads (as a flag's value or a positional argument)
  must be one that a command in the docs writes (--out, --save-dir, mkdir, git clone), or lie
  inside one.
- Slow: the README's own path in a scratch copy of the repository (its scripts, linked), with
  the README's paths: the quick start blocks, the CPU train-and-evaluate block, the translation
  block, the commands of docs/translation.md, the fairseq block and the hub example of docs/recipes.md, at a tiny budget given through
  the quick start's documented settings, and with a slice of Multi30k packed as the Multi30k
  repository packs it in place of its `git clone`.
"""

import gzip
import os
import re
import shlex
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from conftest import REPO, shared_corpus
from recipe_helpers import lines

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
# flags whose value a command writes, and flags (and positionals) whose value it reads
WRITES = {"--out", "--save-dir", "--output", "--tensorboard"}
READS = {"--data", "--checkpoints", "--checkpoint", "--baseline", "--path", "--input", "--sweep", "--dir",
         "--model", "--ref", "--src", "--system"}
OUTPUT_ROOTS = ("data/", "checkpoints/", "results/")


def blocks(path: Path, langs=("bash", "sh", "")):
    """(language, text) of each fenced block of a markdown file, in order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(path.read_text(encoding="utf-8")) if m.group(1) in langs]


def commands(text: str):
    """The commands of a shell block: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\s*\\\n\s*", " ", text)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def words(command: str):
    """The words of a command, '$(...)' substitutions and pipes cut off, VAR=value prefixes apart."""
    command = re.sub(r'"\$\(python -m fairseq_csan user-dir\)"', "fairseq_csan", command)
    command = command.split(" | ")[0]
    parts = shlex.split(command)
    env = {}
    while parts and re.match(r"^[A-Z_]+=", parts[0]):
        name, value = parts.pop(0).split("=", 1)
        env[name] = value
    return env, parts


def all_commands():
    for doc in DOCS:
        for _lang, text in blocks(doc):
            for command in commands(text):
                yield doc, command


def kit_module(program: tuple):
    """The module of this package a program runs, and the words it puts before the user's: for
    ``python -m fairseq_csan...``, for a script of scripts/ that calls its module's main, and for
    a door whose last line runs one (``exec python -m MODULE WORDS "$@"``); None for any other
    program."""
    if program[:2] == ("python", "-m") and program[2].startswith("fairseq_csan"):
        return program[2], list(program[3:])  # with its subcommand, if any
    if program[0] == "python" and program[1].startswith("scripts/") and program[1].endswith(".py"):
        script = (REPO / program[1]).read_text(encoding="utf-8")
        found = re.search(r"^from (fairseq_csan[\w.]*) import main$", script, re.M)
        if found:  # a script under its old name: its module's main
            return found.group(1), []
    if program[0] == "bash" and program[1].endswith(".sh"):
        door = (REPO / program[1]).read_text(encoding="utf-8")
        found = re.search(r'^exec python -m (fairseq_csan[\w.]*)((?: [\w-]+)*) "\$@"\Z', door.rstrip(), re.M)
        if found:
            return found.group(1), found.group(2).split()
    return None


@lru_cache(maxsize=None)
def help_text(program: tuple) -> str:
    """What ``PROGRAM --help`` prints. The kit's own commands run in this process (their door's
    module, as ``python -m`` runs it: the same parser, without a Python start and a fairseq import
    each); every other program as a process."""
    module = kit_module(program)
    if module is not None:
        from recipe_helpers import in_process, module_main

        done = in_process(module_main(module[0]), [*module[1], "--help"], check=False)
    else:
        done = subprocess.run([*program, "--help"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, f"{' '.join(program)} --help failed:\n{done.stderr[-2000:]}"
    return done.stdout + done.stderr


@lru_cache(maxsize=None)
def install_dry_run(settings: tuple):
    """scripts/install.sh --dry-run with the settings (VAR=value) a documented command gives it."""
    return subprocess.run(["bash", "scripts/install.sh", "--dry-run"], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **dict(settings)}, timeout=60)


def lists_option(help_text_, flag):
    """Whether a --help text lists ``flag`` as an option (at a line's start, after '[' or ', ',
    or in a second column), not merely mentions it in prose."""
    return re.search(rf"(?:^[ \t]*|\[|, |[ \t]{{2,}}){re.escape(flag)}(?![\w-])", help_text_, re.M) is not None


def fairseq_help_program(tool, args):
    """A fairseq tool's --help with our plugin and the components the command chooses."""
    chosen = []
    for flag in ("--arch", "--task", "--optimizer", "--lr-scheduler", "--criterion"):
        if flag in args:
            chosen += [flag, args[args.index(flag) + 1]]
    return ("python", "-m", "fairseq_csan", "help", tool, *chosen)  # the tool's --help with our model's flags


def flags(parts):
    return [p.split("=", 1)[0] for p in parts if p.startswith("--") and len(p) > 2]


def program_of(parts):
    """The program a command runs and the words after it, or None for a shell built-in."""
    if parts[:1] == ["bash"]:
        return ("bash", parts[1]), parts[2:]
    if parts[:3] == ["python", "-m", "pip"] and len(parts) > 3:  # pip's options are its subcommand's
        return ("python", "-m", "pip", parts[3]), parts[4:]
    if parts[:4] == ["python", "-m", "fairseq_csan", "help"] and len(parts) > 4:  # a fairseq tool's help
        return (parts[4],), parts[5:]
    if parts[:2] == ["python", "-m"]:
        return ("python", "-m", parts[2]), parts[3:]
    if parts[:1] == ["python"] and parts[1].endswith(".py"):
        return ("python", parts[1]), parts[2:]
    if parts and parts[0].startswith("fairseq-"):
        return (parts[0],), parts[1:]
    return None, parts


def test_docs_have_no_duplicate_headings_and_the_readme_is_short():
    for doc in DOCS:
        headings = [line for line in lines(doc) if re.match(r"^#+ ", line)]
        assert len(headings) == len(set(headings)), f"{doc.name} repeats a heading"
    assert len(lines(REPO / "README.md")) <= 250
    for doc in sorted((REPO / "docs").glob("*.md")):
        assert re.search(r"^For ", doc.read_text(encoding="utf-8"), re.M), f"{doc.name} does not say who it is for"


def test_doc_links_point_to_files():
    for doc in [*DOCS, *sorted((REPO / "examples").glob("*/README.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{doc.relative_to(REPO)} links to missing {target}"


def test_every_command_names_real_scripts_flags_and_paths():
    problems, written = [], set()
    seen = list(all_commands())
    assert len(seen) > 30  # the parser found the blocks
    for doc, command in seen:
        for part in command.split("&&"):
            env, parts = words(part.strip())
            for i, word in enumerate(parts[:-1]):
                if word in WRITES:
                    written.add(parts[i + 1].rstrip("/"))
            if parts[:2] in (["mkdir", "-p"], ["git", "clone"]):
                written.add(parts[-1].rstrip("/"))
    for doc, command in seen:
        where = f"{doc.relative_to(REPO)}: {command[:90]}"
        env, parts = words(command)
        program, rest = program_of(parts)
        if program is None:
            continue
        if program[0] in ("bash", "python") and program[-1].endswith((".sh", ".py")):
            if not (REPO / program[-1]).is_file():
                problems.append(f"{where}: no script {program[-1]}")
                continue
        if program == ("bash", "examples/quickstart.sh"):
            header = (REPO / program[1]).read_text(encoding="utf-8").split("set -euo")[0]
            problems += [f"{where}: quickstart.sh has no setting {name}" for name in env if name not in header]
            continue
        if program[0].startswith("fairseq-"):
            program = fairseq_help_program(program[0], rest)
        elif "--" in rest:  # scripts/train.sh ... -- FAIRSEQ-TRAIN ARGS
            arch = rest[rest.index("--arch") + 1] if "--arch" in rest else None
            passed = rest[rest.index("--") + 1:]
            known = help_text(fairseq_help_program("fairseq-train", [*(["--arch", arch] if arch else []), *passed]))
            problems += [f"{where}: fairseq-train does not list {flag} as an option" for flag in flags(passed)
                         if not lists_option(known, flag)]
            rest = rest[:rest.index("--")]
        elif program == ("bash", "scripts/install.sh"):
            dry = install_dry_run(tuple(sorted(env.items())))
            if dry.returncode != 0:
                problems.append(f"{where}: install.sh --dry-run fails: {dry.stderr[-300:]}")
            if "TORCH_INDEX" in env and f"--index-url {env['TORCH_INDEX']}" not in dry.stdout:
                problems.append(f"{where}: TORCH_INDEX does not reach pip")
            continue
        known = help_text(program)
        if kit_module(program) and rest and not rest[0].startswith("-") \
                and re.search(rf"^\s+{re.escape(rest[0])}\s", known, re.M):
            # argparse's subcommand (prepare files, a preset): its own --help lists its options
            program, rest = (*program, rest[0]), rest[1:]
            known = help_text(program)
        problems += [f"{where}: {program[-1]} does not list {flag} as an option" for flag in flags(rest)
                     if not lists_option(known, flag)]
        for i, word in enumerate(rest):
            if word.startswith(OUTPUT_ROOTS) and not (i and rest[i - 1] in WRITES):
                path = word.rstrip("/")
                if not any(path == w or path.startswith(w + "/") for w in written):
                    problems.append(f"{where}: reads {path}, which no documented command writes")
            if re.match(r"^(scripts|examples|fairseq_csan|docs|tests)/", word) and not (REPO / word).exists():
                problems.append(f"{where}: no file {word}")
    assert not problems, "\n".join(problems)


def test_the_walk_below_runs_the_readme_blocks_it_names():
    """The slow walk picks its blocks by their first command: they must still be there."""
    readme = [commands(text) for _lang, text in blocks(REPO / "README.md")]
    firsts = [c[0] for c in readme if c]
    for first in WALK:
        assert first in firsts, f"the README no longer has a block starting with {first!r}"


# the README blocks the walk runs, by their first command
WALK = [
    "bash examples/quickstart.sh",
    "python -c 'import fairseq_csan; from fairseq.models.transformer import TransformerModel as T; "
    "print(T.from_pretrained(\"work/quickstart/toy/model\").translate(\"The small cat carries the child often.\"))'",
    "ARCH=transformer bash examples/quickstart.sh",
    "bash examples/multi30k/prepare.sh --raw-dir data/multi30k_raw --out data/multi30k_en_de",
    "python scripts/translate.py --data data/multi30k_en_de --checkpoint results/m30k_csan2d/averaged.pt "
    "--input data/multi30k_en_de/raw/test.en --output results/m30k_csan2d/test.de --cpu",
    "python -m fairseq_csan help fairseq-train --arch transformer_csan2d | grep -A1 -e --csan-",
]
QUICK_BUDGET = {"MAX_UPDATE": "12", "TOY_ARGS": "--train 400 --valid 20 --test 20", "DIM": "32",
                "BPE_MERGES": "300"}


@pytest.mark.slow
def test_readme_path_end_to_end(tmp_path):
    """Quick start, then train, evaluate and translate, with the README's commands and paths."""
    m30k = shared_corpus("multi30k_en_de")
    clone = tmp_path / "repo"
    # what the README's `git clone` of the Multi30k repository gives: gzipped raw files (a slice)
    packed = clone / "data/multi30k_dataset/data/task1/raw"
    packed.mkdir(parents=True)
    # (test_2017_flickr stands for the repository's other test sets, which the README leaves out)
    for name, source, size in (("train", "train", 1500), ("val", "val", 30), ("test_2016_flickr", "test_2016_flickr", 30),
                               ("test_2017_flickr", "val", 5)):
        for lang in ("en", "de"):
            with gzip.open(packed / f"{name}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in lines(m30k / f"{source}.{lang}")[:size])
    for name in ("scripts", "examples", "fairseq_csan"):
        (clone / name).symlink_to(REPO / name)
    env = {**os.environ, **QUICK_BUDGET, "DEVICE": "cpu", "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
           + os.environ.get("PATH", "")}
    for name in ("MULTI30K", "CORPUS", "ARCH"):
        env.pop(name, None)

    def run_block(first):
        (text,) = [t for _l, t in blocks(REPO / "README.md") if commands(t)[:1] == [first]]
        steps = [c for c in commands(text) if not c.startswith("git clone ")]  # no network here
        # the budget's toy-corpus setting does not apply to a CORPUS run (quickstart refuses the pair)
        steps = [f"TOY_ARGS= {c}" if c.startswith("CORPUS=") else c for c in steps]
        script = "set -euo pipefail\n" + "\n".join(steps) + "\n"
        done = subprocess.run(["bash", "-c", script], cwd=clone, env=env, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, f"README block {first!r} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done

    quick = run_block("bash examples/quickstart.sh")
    assert "BLEU = " in quick.stdout and "chrF2 = " in quick.stdout
    assert (clone / "work/quickstart/toy/results/transformer_csan2d/hyp.detok").is_file()
    translated = run_block(WALK[1])  # the README's line, with the model folder the quick start wrote
    assert len(translated.stdout.splitlines()) == 1 and translated.stdout.strip(), translated.stdout
    assert translated.stderr == "", f"the README's hub line printed more than its translation:\n{translated.stderr[:2000]}"
    others = run_block("ARCH=transformer bash examples/quickstart.sh")
    assert (clone / "work/quickstart/toy/checkpoints/transformer/checkpoint_last.pt").is_file()
    assert (clone / "work/quickstart/toy/model_transformer/model.pt").is_file()
    assert (clone / "work/quickstart/multi30k_raw/results/transformer_csan2d/results.md").is_file()
    assert "on the cpu" in others.stdout

    cpu = run_block(WALK[3])
    results = clone / "results/m30k_csan2d"
    scores = (results / "results.md").read_text(encoding="utf-8")
    assert "tokenised BLEU" in scores and "chrF (detokenised): chrF2" in scores
    assert "decoded 30 of 30 sentences" in cpu.stderr  # evaluate.sh reports decoding progress
    assert "1/3 averaging the last 5 checkpoints" in cpu.stderr  # train.sh --cpu-tiny left enough

    run_block(WALK[4])
    assert (results / "test.de").read_text(encoding="utf-8") == (results / "hyp.detok").read_text(encoding="utf-8")
    assert (results / "test.de.tok").read_text(encoding="utf-8") == (results / "hyp.tok").read_text(encoding="utf-8")
    # its preprocessing is the recipe's: the raw test set becomes the recipe's BPE file
    from fairseq_csan.recipes.translate import preprocess

    data = clone / "data/multi30k_en_de"
    assert preprocess(lines(data / "raw/test.en"), "en", data / "bpe/codes") == lines(data / "bpe/test.en")

    # docs/translation.md on the model that block trained, each command as written: the export,
    # the hub example, translate.py on the exported folder, fairseq-interactive with our tokenizer
    page = blocks(REPO / "docs/translation.md", langs=("bash", "console", "python"))
    assert [lang for lang, _t in page] == ["bash", "python", "bash", "console"]
    for lang, text in page:
        if lang == "python":
            done = subprocess.run([sys.executable, "-c", text], cwd=clone, env=env, capture_output=True, text=True,
                                  timeout=300)
        else:
            done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + text], cwd=clone, env=env,
                                  capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"docs/translation.md: {text}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        if lang == "python":
            assert done.stdout.strip(), "the hub example of docs/translation.md printed no translation"
        elif lang == "console":
            hypotheses = [line for line in done.stdout.splitlines() if line.startswith("H-")]
            assert len(hypotheses) == len(lines(clone / "data/multi30k_en_de/raw/test.en"))
    assert (results / "model/model.pt").is_file() and (results / "model/bpecodes").is_file()
    assert (results / "test.model.de").read_text(encoding="utf-8") == (results / "test.de").read_text(encoding="utf-8")

    helped = run_block(WALK[5])
    assert "--csan-window" in helped.stdout and "--csan-heads" in helped.stdout

    (hub,) = [t for lang, t in blocks(REPO / "docs/recipes.md", langs=("python",)) if "from_pretrained" in t]
    done = subprocess.run([sys.executable, "-c", hub], cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "the hub example printed no translation"

    # TensorBoard logging works out of the box (the logging extra is installed)
    tb = tmp_path / "tb"
    done = subprocess.run(["bash", "scripts/train.sh", "--data", "data/multi30k_en_de", "--arch", "transformer",
                           "--save-dir", tmp_path / "ck_tb", "--cpu-tiny", "--max-update", "4", "--tensorboard", tb],
                          cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(tb.rglob("events.out.tfevents.*")), "no TensorBoard event file"


def test_recipe_outputs_are_ignored_by_git():
    for path in ("data/wmt14_en_de/raw/test.en", "checkpoints/ende_base/checkpoint_last.pt",
                 "results/ende_base/results.json", "work/quickstart/toy/data/data-bin/dict.en.txt", "work/quickstart/toy/model/model.pt"):
        done = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO)
        assert done.returncode == 0, f"{path} is not git-ignored"
