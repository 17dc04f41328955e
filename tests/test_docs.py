"""README.md, docs/ and examples/*/README.md: every error message they quote is one that the
code gives. The messages are collected from the text (a backticked span that reads as an error,
one after "gives", "stops with", "says" and the like, and the first column of
troubleshooting.md's table of errors); each must have an entry below, which runs the command
that gives it, or names the test that asserts it, or (where it cannot happen on this machine)
the source that prints it. A message quoted in the docs without an entry fails the test, so a
new quote comes with its check."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "examples").glob("*/README.md"))]
ERRORISH = re.compile(r"(\w*(Error|Warning)\b|error:)")
TRIGGER = re.compile(r"(gives|stops? with|refused with|fails? with|says|message|error|for example)[^.`|]{0,50}$", re.I)
COMMAND = ("python ", "bash ", "fairseq-", "pip ", "-")


def quoted_messages(path: Path):
    """The error messages that ``path`` quotes (outside its code blocks), whitespace folded."""
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    table = text.find("## Errors and their fixes")
    found = []
    for m in re.finditer(r"(``?)(?!`)(.+?)(?<!`)\1(?!`)", text, flags=re.S):
        span = " ".join(m.group(2).split())
        line = text[text.rfind("\n", 0, m.start()) + 1:m.start()]
        first_cell = 0 <= table < m.start() and line.startswith("|") and line.count("|") == 1
        before = text[max(0, m.start() - 60):m.start()].replace("\n", " ")
        if span.split(" ")[0].endswith(".sh"):
            continue  # a command named beside a message
        flag = span.startswith("-") and len(span.split()) <= 2  # --csan-layers 2, beside a message
        if ERRORISH.search(span) or (first_cell and " " in span and not flag) or (
                TRIGGER.search(before) and " " in span and not span.startswith(COMMAND)):
            found.append(span)
    return found


def test_quoted_messages_are_collected():
    """The collector finds the messages of a table row and of running text, and no command."""
    page = REPO / "docs" / "troubleshooting.md"
    found = quoted_messages(page)
    assert "ValueError: --csan-layers 2 needs a self-attention variant ..." in found
    assert "--last 5 needs 5 numbered checkpoints ... found 3" in found
    assert not any(m.startswith(("evaluate.sh", "bash ")) for m in found)
    assert "optimizer is required!" in quoted_messages(REPO / "docs" / "distributed.md")


# How each quoted message is checked:
#   ("run", ARGS)                 a command (ARGS below, with its placeholders), whose output holds it;
#   ("test", FILE, PHRASE)        a test that asserts it (PHRASE: the part it asserts);
#   ("source", FILE, PHRASE, WHY) where it cannot happen here (WHY): the source that prints it
#                                 (PHRASE), or the page that explains the path that meets it.
# "..." in a quoted message stands for text the message goes on with.
TRAIN = ["fairseq-train", "{data}", "--user-dir", "{plugin}", "--task", "translation", "-s", "en", "-t", "de",
         "--optimizer", "adam", "--lr", "0.001", "--max-update", "1", "--max-tokens", "500", "--cpu",
         "--save-dir", "{tmp}/ck", "--no-save", "--encoder-layers", "3", "--decoder-layers", "1"]
BAD_IMPL = ("import sys, fairseq_csan; from fairseq import options, tasks; "
            "args = options.parse_args_and_arch(options.get_training_parser(), [sys.argv[1], '--task', 'translation', "
            "'-s', 'en', '-t', 'de', '--arch', 'transformer_csan2d']); args.csan_impl = 'fast'; "
            "tasks.setup_task(args).build_model(args)")
CHECKS = {
    "fairseq-train: error: argument --ctx-side: invalid choice: 'decodr' (choose from 'encoder', 'decoder', 'both')":
        ("run", TRAIN + ["--arch", "transformer_ctxaware", "--ctx-side", "decodr"]),
    "ValueError: --csan-heads must be at most the number of attention heads (--encoder-attention-heads 8); got 9":
        ("run", TRAIN + ["--arch", "transformer_csan2d", "--csan-heads", "9"]),
    "ValueError: --csan-window applies only to the csan1d / csan2d variant (--encoder-self-attention, set by "
    "transformer_csan1d*); this model uses 'relpos', which would ignore it":
        ("run", TRAIN + ["--arch", "transformer_relpos", "--csan-window", "5"]),
    "ValueError: --csan-window applies only to the csan1d / csan2d variant ...":
        ("run", TRAIN + ["--arch", "transformer_relpos", "--csan-window", "5"]),
    "training on 2 devices (GPUs/TPUs)": ("test", "test_distributed.py", "training on 2 devices"),
    "[train] error: the trainer ended with exit status 1: OSError: [Errno 27] File too large (its log: ck/train.log); "
    "put that right and run train.sh again (it resumes from the newest intact checkpoint, if one was saved)":
        ("test", "test_train.py", "[train] error: the trainer ended with exit status 1: OSError: [Errno 27] File too large"),
    "[train] error: the trainer was killed by SIGKILL (the kernel does so when the machine runs out of memory): ...":
        ("test", "test_train.py", "[train] error: the trainer was killed by SIGKILL (the kernel does so when the machine runs out of memory): "),
    "training on 1 devices": ("run", TRAIN + ["--arch", "transformer"]),
    "optimizer is required!": ("run", [a for a in TRAIN if a not in ("--optimizer", "adam")] + ["--arch", "transformer"]),
    "fairseq-train: error: argument --csan-impl: invalid choice: 'fast' (choose from 'auto', 'dense', 'banded')":
        ("run", TRAIN + ["--arch", "transformer_csan2d", "--csan-impl", "fast"]),
    "argument --csan-impl: invalid choice: ...": ("run", TRAIN + ["--arch", "transformer_csan2d", "--csan-impl", "x"]),
    "ValueError: --csan-impl must be one of auto, dense, banded; got 'fast'":
        ("run", [sys.executable, "-c", BAD_IMPL, "{data}"]),
    "ValueError: --csan-impl must be one of auto, dense, banded; got ...":
        ("run", [sys.executable, "-c", BAD_IMPL, "{data}"]),
    "model folder results/x/model: bpecodes is not the file that export wrote ...":
        ("test", "test_model_folder.py", "is not the file that export wrote"),
    "2/3 decoding test ... (redone: input results/x/averaged.pt changed since the last run)":
        ("test", "test_evaluate.py", "changed since the last run"),
    "PytorchStreamReader failed":
        ("run", [sys.executable, "-c", "import sys, fairseq_csan, torch; torch.load(sys.argv[1])", "{cut}"]),
    "benchmark: error: --device cuda: no CUDA device here (torch.cuda.is_available() is False); use --device cpu":
        ("test", "test_gpu_check.py", "no CUDA device here (torch.cuda.is_available() is False)"),
    "Weights only load failed ... argparse.Namespace ...":
        ("run", [sys.executable, "-c", "import sys, torch; torch.load(sys.argv[1])", "{checkpoint}"]),
    "FileNotFoundError: .../fairseq_csan":
        ("run", [a if a != "{plugin}" else "fairseq_csan" for a in TRAIN] + ["--arch", "transformer"]),
    "unrecognized arguments: --csan-layers ...": ("run", TRAIN + ["--arch", "transformer", "--csan-layers", "2"]),
    "ValueError: --csan-layers 2 needs a self-attention variant ...":
        ("run", TRAIN + ["--arch", "transformer_ctxaware", "--csan-layers", "2"]),
    "fairseq-train: error: argument --csan-window: --csan-window must be a positive odd integer ...":
        ("run", TRAIN + ["--arch", "transformer_csan1d", "--csan-window", "4"]),
    "argument --ctx-type: invalid choice: ...": ("run", TRAIN + ["--arch", "transformer_csan2d", "--ctx-type", "x"]),
    "ValueError: fairseq_csan: the checkpoint holds a model of --arch transformer_csan2d, this command builds "
    "--arch transformer_csan1d, and they differ in ...":
        ("run", [a for a in TRAIN if a != "--no-save"] + ["--arch", "transformer_csan1d", "--save-dir", "{resume}"]),
    "Cannot load model parameters from checkpoint .../checkpoint_last.pt":
        ("run", [a for a in TRAIN if a != "--no-save"] + ["--arch", "transformer_csan1d", "--save-dir", "{resume}"]),
    "UserWarning: fairseq_csan: cannot tell whether this fairseq needs fix ...":
        ("test", "test_fairseq_compat.py", "cannot tell whether this fairseq needs fix"),
    "RuntimeError: Mask Type should be defined":
        ("source", "docs/implementation.md", "fairseq 0.12.2's fused encoder path",
         "fairseq 0.12.2 with torch 2.x only (torch's C++ kernel prints it; this machine runs fairseq-fixed): "
         "docs/implementation.md explains the path that meets it"),
    "missing CORPUS/train.de: CORPUS holds train, val (or valid) and test* files, each in en and de ...":
        ("test", "test_quickstart.py", "missing {corpus}/train.de"),
    "\"tokenizer_src\": \"moses (no rules for tr: English's, as tokenizer.perl)\"":
        ("test", "test_text.py", "moses (no rules for tr: English's, as tokenizer.perl)"),
    "--last 5 needs 5 numbered checkpoints ... found 3":
        ("test", "test_average_checkpoints.py", "--last 5 needs 5 numbered checkpoints .* found 3"),
    "[train] error: --tensorboard needs TensorBoard":
        ("source", "fairseq_csan/recipes/train.py", "--tensorboard needs TensorBoard",
         "TensorBoard is installed here (the logging extra of scripts/install.sh)"),
    "tensorboard not found":
        ("source", "fairseq/logging/progress_bar.py", "tensorboard not found",
         "TensorBoard is installed here (the logging extra of scripts/install.sh)"),
    "wandb not found": ("run", TRAIN + ["--arch", "transformer", "--wandb-project", "p", "--log-format", "simple"]),
    "multi30k: ... holds runs with other settings": ("test", "test_multi30k.py", "holds runs with other settings"),
    "error: no file ...": ("test", "test_analysis.py", "no file {tmp_path / 'missing.de'}"),
    "AssertionError: --batch-size cannot be larger than --buffer-size":
        ("run", ["fairseq-interactive", "{data}", "--user-dir", "{plugin}", "--path", "{tmp}/none.pt", "--batch-size",
                 "4"]),
}


def test_every_quoted_message_has_a_check():
    quoted = {(path.relative_to(REPO), m) for path in DOCS for m in quoted_messages(path)}
    unchecked = sorted(f"{path}: `{m}`" for path, m in quoted if m not in CHECKS)
    assert not unchecked, "messages quoted without a check in tests/test_docs.py:\n" + "\n".join(unchecked)
    unused = sorted(set(CHECKS) - {m for _, m in quoted})
    assert not unused, f"checks of messages no longer quoted: {unused}"


def holds(output: str, message: str) -> bool:
    """``message`` is in ``output``; its "..." stand for any text (within its line or after)."""
    parts = [re.escape(p.strip()) for p in message.split("...") if p.strip()]
    return re.search(r".*?".join(parts), output, flags=re.S) is not None


def test_holds_reads_the_dots_as_any_text():
    assert holds("ValueError: --csan-layers 2 needs a self-attention variant (x)", "ValueError: --csan-layers 2 needs ...")
    assert not holds("ValueError: --csan-layers 3 needs", "ValueError: --csan-layers 2 needs ...")


@pytest.mark.slow
@pytest.mark.parametrize("message", sorted(CHECKS))
def test_the_quoted_message_is_what_the_code_gives(message, ende, tmp_path):
    kind, *how = CHECKS[message]
    if kind == "test":
        file, phrase = how
        assert phrase in (REPO / "tests" / file).read_text(encoding="utf-8"), f"{file} no longer asserts {phrase!r}"
        assert holds(message, phrase.replace(".*", "...")) or phrase.split("{")[0] in message, (message, phrase)
        return
    if kind == "source":
        file, phrase, why = how
        import fairseq
        import torch

        roots = [REPO, Path(fairseq.__file__).parents[1], Path(torch.__file__).parents[1]]
        assert why
        assert any((root / file).is_file() and phrase in (root / file).read_text(encoding="utf-8") for root in roots), \
            f"no {file} prints {phrase!r}"
        return
    (args,) = how
    if tuple(args) not in OUTPUTS:  # two messages of one command: it runs once
        OUTPUTS[tuple(args)] = output_of(args, ende, tmp_path)
    command, code, output = OUTPUTS[tuple(args)]
    assert holds(output, message), f"{' '.join(command)} (exit {code}) does not give {message!r}:\n{output[-3000:]}"


OUTPUTS = {}  # a command's words (placeholders as written) -> (the command run, its exit status, its output)


def output_of(args, ende, tmp_path):
    resume = tmp_path / "resume"
    resume.mkdir()
    shutil.copy(ende["work"] / "ck_csan/checkpoint_last.pt", resume / "checkpoint_last.pt")
    cut = tmp_path / "cut.pt"  # a checkpoint cut short, as a kill during fairseq's copy leaves it
    data = (resume / "checkpoint_last.pt").read_bytes()
    cut.write_bytes(data[:len(data) // 2])
    places = {"{data}": str(ende["out"] / "data-bin"), "{plugin}": str(REPO / "fairseq_csan"), "{tmp}": str(tmp_path),
              "{resume}": str(resume), "{checkpoint}": str(resume / "checkpoint_last.pt"), "{cut}": str(cut)}
    command = [places.get(a, a.replace("{tmp}", str(tmp_path))) for a in args]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env)
    return command, done.returncode, done.stdout + done.stderr


# a page the code points to, and the section it names where it names one in quotes: docs/recipes.md,
# "How every command ends" (or ('...'), or ("..."))
POINTER = re.compile(r"""((?:docs|examples/\w+)/[\w.-]+\.md)(?:'s)?(?:(?:,\s+|\s+\()(["'])([A-Z][^"'\n]*?)\2)?""")


def sections(page: Path):
    """The headings of ``page`` (outside its code blocks) and the bold names its paragraphs and list
    items start with."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return [*(m.group(1) for m in re.finditer(r"^#+\s+(.+)$", text, flags=re.M)),
            *(m.group(1) for m in re.finditer(r"^\s*(?:[-*]\s+)?\*\*(.+?)\*\*", text, flags=re.M))]


def test_every_docs_section_the_code_points_to_exists():
    """A docstring or message that sends a reader to a docs page names a page that exists, and a
    section of it (quoted) that is the start of one of its headings or bold paragraph names."""
    checked, wrong = 0, []
    for source in sorted([*(REPO / "fairseq_csan").rglob("*.py"), *(REPO / "scripts").glob("*.sh")]):
        text = " ".join(source.read_text(encoding="utf-8").replace('"""', "").split())
        for m in POINTER.finditer(text):
            page, section = REPO / m.group(1), m.group(3)
            checked += 1
            if not page.is_file():
                wrong.append(f"{source.name}: {m.group(1)} does not exist")
            elif section and not any(h.replace("`", "").lower().startswith(section.lower()) for h in sections(page)):
                wrong.append(f"{source.name}: {m.group(1)} has no section {section!r}")
    assert checked > 10 and not wrong, wrong
