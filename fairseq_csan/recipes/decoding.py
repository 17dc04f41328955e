"""The papers' decoding settings: their one owner.

Both papers decode with beam size 4 and length penalty 0.6 (Vaswani et al. 2017, section 6.1,
whose setup they follow), outputs at most 50 tokens longer than the input (fairseq's
``--max-len-a 1 --max-len-b 50``). evaluate.sh, translate.py and the exported model folders
(export.py) take them from here.

    python -m fairseq_csan.recipes.decoding [--beam N] [--lenpen X]   # as fairseq-generate arguments
"""

import argparse

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


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m fairseq_csan.recipes.decoding", description=__doc__.split("\n\n")[0])
    p.add_argument("--beam", type=int, default=BEAM)
    p.add_argument("--lenpen", type=float, default=LENPEN)
    args = p.parse_args(argv)
    if args.beam < 1:
        p.error(f"--beam must be a positive whole number, got {args.beam}")
    print(" ".join(generate_args(args.beam, args.lenpen)))


if __name__ == "__main__":
    from .runner import as_command

    as_command(main)
