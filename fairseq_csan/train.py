"""``python -m fairseq_csan.train``: fairseq-train, with bf16 usable on GPUs and warm starts
across our models' settings.

It runs the stock fairseq-train after two changes, made in its own process and in the workers
fairseq spawns from it (``patches.IN_TRAIN_COMMAND`` says what each relies on):

- fairseq 0.12's argument post-processing (``fairseq.options.parse_args_and_arch``) sets
  ``--tpu`` whenever ``--bf16`` is given, so ``fairseq-train --bf16`` on GPUs asks for
  torch_xla and a TPU. Here that one implication is undone: an explicit ``--tpu`` is kept,
  ``--bf16`` alone trains on the GPUs (or the CPU with ``--cpu``) with the model and batches in
  bfloat16, which is what fairseq's trainer does for bf16 once ``tpu`` is false.
- ``--finetune-from-model CHECKPOINT`` (a warm start, fairseq's condition: no checkpoint_last.pt
  yet) may name a checkpoint of other settings (csan2d into csan1d, into the context-aware model,
  into fairseq's own ``transformer``): the weights both models have are loaded, and the log says
  which were added and left out (models/variant_transformer.py). Stock fairseq-train refuses it,
  as it refuses a resume of other settings.

Every other argument behaves as in fairseq-train.
"""

from . import patches


def main():
    patches.apply_for_training()
    from fairseq_cli.train import cli_main  # (its import sets up fairseq-train's logging, as in fairseq-train)

    cli_main()


if __name__ == "__main__":
    main()
elif __name__ == "__mp_main__":  # a worker that fairseq spawned from this command imports it under this name
    patches.apply_for_training()
