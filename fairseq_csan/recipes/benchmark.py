"""Training or decoding throughput of each architecture against the Transformer, side by side.

docs/speed.md, "How the benchmark measures", says how: the rounds, each --mode, the batches, the
GPU's precisions and the malloc tuning.
"""

import argparse
import os
import platform
import shlex
import sys
from pathlib import Path

from . import decoding
from .command_line import Parser, at_least, positive, whole
from .runner import Refusal, as_command, check_owned

MODULE = "fairseq_csan.recipes.benchmark"  # this module, run again in a child process
# the sentence lengths of newstest2014 En-De (word counts only), shipped so that nothing need be prepared
LENGTH_SAMPLE = Path(__file__).with_name("newstest2014_lengths.tsv")
BASELINE = {"base": "transformer", "big": "transformer_vaswani_wmt_en_de_big"}
TABLE1 = ["transformer_bidirect", "transformer_relpos", "transformer_neighbor", "transformer_local_hard",
          "transformer_local_soft", "transformer_block", "transformer_cnn", "transformer_csan1d", "transformer_csan2d"]
ALL = TABLE1 + ["transformer_ctxaware", "transformer_csan2d_ctxaware"]  # every row of docs/speed.md
PRECISION_TEXT = {"fp32": "fp32 (float32 weights and activations)",
                  "fp16": "fp16 (the model cast to float16, as fairseq's --fp16 does)",
                  "bf16": "bf16 (the model cast to bfloat16, as fairseq's --bf16 does)"}
MALLOC_TUNING = {
    "MALLOC_MMAP_THRESHOLD_": str(4 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(64 << 30),
    "MALLOC_TOP_PAD_": str(1 << 30),
}
LONG_LENGTHS = [256, 512, 1024, 2048, 4096, 8192]
LONG_PARTS = ["attention", "memory", "encoder", "whole"]
CROSSOVER_LENGTHS = [32, 48, 64, 96, 128, 160, 192, 256, 384, 512]


def parse_args(argv=None):
    parser = Parser(prog="python -m fairseq_csan.recipes.benchmark", description=__doc__.split("\n\n")[0])
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--archs", nargs="+",
                        default=["transformer_csan1d", "transformer_csan2d", "transformer_ctxaware"])
    chosen.add_argument("--table1", action="store_true",
                        help="instead of --archs: the CSAN paper's Table 1 (seven baselines, csan1d, csan2d)")
    chosen.add_argument("--all", action="store_true",
                        help="instead of --archs: every row of docs/speed.md (Table 1 and both context-aware models)")
    parser.add_argument("--mode", choices=["train", "decode", "long", "crossover"], default="train")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to time (default cpu)")
    parser.add_argument("--precision", choices=list(PRECISION_TEXT), default="fp32",
                        help="fp32 (default), or the model cast to fp16 / bf16 as fairseq's --fp16 / --bf16 do")
    parser.add_argument("--size", choices=["base", "big"], default="base")
    parser.add_argument("--model-flags", type=shlex.split, default=[], metavar="'FLAGS'",
                        help="fairseq model flags added to every model, in one quoted string")
    parser.add_argument("--max-tokens", type=positive, default=4096, help="training batch size in tokens")
    parser.add_argument("--batch-size", type=positive, default=64, help="decoding batch size in sentences")
    parser.add_argument("--beam", type=positive, default=decoding.BEAM,
                        help=f"decoding beam size (default {decoding.BEAM}, the papers')")
    parser.add_argument("--rounds", type=positive, default=5, help="timed rounds (one batch per model each)")
    parser.add_argument("--warmup", type=whole, default=1,
                        help="untimed rounds first (--mode long: at the first length; on a GPU and in --mode "
                             "crossover: at every length)")
    parser.add_argument("--vocab", type=at_least(5, int), default=32000, help="joined dictionary size")
    parser.add_argument("--lengths-from", type=Path, metavar="PREFIX",
                        help="prefix of an .en/.de pair of files whose word counts give the lengths "
                             f"(default: newstest2014's, shipped as {LENGTH_SAMPLE.name})")
    parser.add_argument("--max-len", type=positive, default=128)
    parser.add_argument("--threads", type=positive, help="CPU threads (default: torch's, all cores)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="also write the markdown table here (a file the benchmark wrote "
                        "is replaced with --force only; anyone else's never)")
    parser.add_argument("--force", action="store_true", help="replace an --out that the benchmark wrote")
    parser.add_argument("--no-malloc-tuning", action="store_true", help="keep glibc malloc's defaults")
    parser.add_argument("--lengths", type=positive, nargs="+",
                        help=f"--mode long / crossover: sequence lengths (default {' '.join(map(str, LONG_LENGTHS))} "
                             f"/ {' '.join(map(str, CROSSOVER_LENGTHS))})")
    parser.add_argument("--tokens", type=positive, default=8192, help="--mode long and crossover: tokens per batch")
    parser.add_argument("--dense-limit-gb", type=float, default=4.0,
                        help="--mode long and crossover: skip a dense attention whose scores alone exceed this")
    parser.add_argument("--whole-max-len", type=int, default=4096,
                        help="--mode long: time the whole model's training step up to this length")
    parser.add_argument("--parts", nargs="+", choices=LONG_PARTS, default=LONG_PARTS,
                        help="--mode long: which of the four measurements to take")
    parser.add_argument("--probe-memory", nargs=4, metavar=("CSAN", "IMPL", "T", "B"), help=argparse.SUPPRESS)
    args, _ = parser.read(argv)
    if args.mode == "crossover":
        args.parts = ["attention"]
    if args.lengths is None:
        args.lengths = CROSSOVER_LENGTHS if args.mode == "crossover" else LONG_LENGTHS
    return args


def plan(args) -> bool:
    """Every check before any measurement; whether the allocator is tuned for the measurements (else this process
    starts again, tuned)."""
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise Refusal("--device cuda: no CUDA device here (torch.cuda.is_available() is False); use --device cpu")
    if args.device == "cuda" and args.precision == "bf16" and not torch.cuda.is_bf16_supported():
        raise Refusal(f"--precision bf16: {torch.cuda.get_device_name()} has no bfloat16 support; use fp16 or fp32")
    if args.out:
        check_owned([args.out], "benchmark", args.force, "--out", writable=True)
    if args.mode in ("train", "decode"):
        architectures(args)  # an unknown one fails here, before any work
        if args.lengths_from and not Path(f"{args.lengths_from}.en").exists():
            raise Refusal(f"--lengths-from: no length source at {args.lengths_from}.en; give --lengths-from PREFIX "
                          "(an .en/.de pair, e.g. newstest2014)")
    tuned = all(os.environ.get(k) == v for k, v in MALLOC_TUNING.items())
    if not args.no_malloc_tuning and not tuned and platform.system() == "Linux":
        os.execve(sys.executable, [sys.executable, "-m", MODULE, *sys.argv[1:]], {**os.environ, **MALLOC_TUNING})
    return tuned


def main(argv=None):
    args = parse_args(argv)
    if args.probe_memory:  # a child of --mode long: one measurement, printed
        from .benchmark_runs import PRECISIONS, probe_memory, torch

        variant, impl, T, B = args.probe_memory
        torch.set_num_threads(1)
        print(probe_memory(variant, impl, int(T), int(B), PRECISIONS[args.precision]))
        return
    tuned = plan(args)  # before fairseq is imported: plan may start this process again
    from .benchmark_runs import run

    run(args, tuned)


def architectures(args):
    """The baseline first, then the chosen architectures, at --size."""
    chosen = ALL if args.all else TABLE1 if args.table1 else args.archs
    archs = [BASELINE[args.size]] + [a if args.size == "base" or a.endswith("_big") else a + "_big" for a in chosen]
    from .. import register

    register()
    from fairseq.models import ARCH_MODEL_REGISTRY

    unknown = [a for a in archs if a not in ARCH_MODEL_REGISTRY]
    if unknown:
        big = ", ".join(a for a in ARCH_MODEL_REGISTRY if a.endswith("_big") and a.startswith("transformer_"))
        raise Refusal(f"--archs/--size: no architecture {', '.join(unknown)} (big variants exist for {big})")
    return archs


if __name__ == "__main__":
    as_command(main)
