"""``python -m fairseq_csan.train``: fairseq-train, with bf16 usable on GPUs.

fairseq 0.12's argument post-processing (``fairseq.options.parse_args_and_arch``) sets
``--tpu`` whenever ``--bf16`` is given, so ``fairseq-train --bf16`` on GPUs asks for
torch_xla and a TPU. This entry point runs the stock fairseq-train with that one implication
undone: an explicit ``--tpu`` is kept, ``--bf16`` alone trains on the GPUs (or the CPU with
``--cpu``) with the model and batches in bfloat16, which is what fairseq's trainer does
for bf16 once ``tpu`` is false. Every other argument behaves as in fairseq-train.
"""

import logging
import os
import sys

from fairseq import options


def bf16_without_tpu(parse_args_and_arch):
    """Wrap fairseq's parser so that --bf16 stops implying --tpu."""

    def parse(parser, input_args=None, *args, **kwargs):
        argv = sys.argv[1:] if input_args is None else input_args
        parsed = parse_args_and_arch(parser, input_args, *args, **kwargs)
        if getattr(parsed, "bf16", False) and "--tpu" not in argv:
            parsed.tpu = False
        return parsed

    return parse


def main():
    options.parse_args_and_arch = bf16_without_tpu(options.parse_args_and_arch)
    from fairseq_cli.train import cli_main

    # fairseq_cli.train configures logging when imported, but importing this package (and
    # fairseq) first has already given the root logger a handler, so its configuration is
    # skipped; set fairseq-train's own format again, so the log (and its 'ups') reads the same
    logging.basicConfig(
        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        level=os.environ.get("LOGLEVEL", "INFO").upper(),
        stream=sys.stdout,
        force=True,
    )
    cli_main()


if __name__ == "__main__":
    main()
