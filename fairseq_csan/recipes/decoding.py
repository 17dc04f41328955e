"""The papers' decoding settings, and the threads of decoding on the CPU: their one owner.

Both papers decode with beam size 4 and length penalty 0.6 (Vaswani et al. 2017, section 6.1,
whose setup they follow), outputs at most 50 tokens longer than the input. docs/speed.md,
"Threads", says why decoding on the CPU takes one thread for a batch of one sentence and all cores
for larger ones.
"""

import os
from typing import Optional

BEAM = 4
LENPEN = 0.6
MAX_LEN_A = 1
MAX_LEN_B = 50
# sentences per batch when decoding a test set (evaluate.sh's default); it matters beyond speed:
# fairseq caps an output at MAX_LEN_A x the longest source of its batch + MAX_LEN_B
BATCH_SIZE = 128


def generate_args(beam: int = BEAM, lenpen: float = LENPEN):
    """The settings as fairseq-generate / fairseq-interactive arguments."""
    return ["--beam", str(beam), "--lenpen", f"{lenpen:g}", "--max-len-a", str(MAX_LEN_A), "--max-len-b", str(MAX_LEN_B)]


def generation_overrides(beam: int = BEAM, lenpen: float = LENPEN) -> dict:
    """The same, as the fields of fairseq's generation config (the hub interface's overrides)."""
    return {"beam": beam, "lenpen": lenpen, "max_len_a": MAX_LEN_A, "max_len_b": MAX_LEN_B}


def add_options(p) -> None:
    """The decoding options of evaluate.sh and translate.py, declared once, with these defaults."""
    from .command_line import positive

    p.add_argument("--beam", type=positive, default=BEAM, metavar="N", help=f"beam size (default {BEAM})")
    p.add_argument("--lenpen", type=float, default=LENPEN, metavar="X", help=f"length penalty (default {LENPEN})")
    p.add_argument("--batch-size", type=positive, default=BATCH_SIZE, metavar="N",
                   help=f"sentences per batch (default {BATCH_SIZE})")
    p.add_argument("--cpu", action="store_true",
                   help="decode on the CPU even where there is a GPU (default: the GPU when torch sees one)")
    p.add_argument("--fp16", action="store_true", help="decode in fp16 (GPU; not with --cpu)")
    p.add_argument("--threads", type=positive, metavar="N",
                   help="CPU threads (default: 1 for a batch of one sentence, else all cores; OMP_NUM_THREADS "
                        "where set): docs/speed.md, 'Threads'")


def cpu_threads(sentences_a_batch: int, given: Optional[int] = None) -> Optional[int]:
    """The threads for decoding batches of ``sentences_a_batch`` sentences on the CPU: ``given``
    (--threads N) where given; None (torch's own number) where OMP_NUM_THREADS is set, or for a
    batch of more than one sentence; else 1."""
    if given is not None:
        return given
    if os.environ.get("OMP_NUM_THREADS") or sentences_a_batch > 1:
        return None
    return 1
