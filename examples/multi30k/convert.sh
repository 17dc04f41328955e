#!/usr/bin/env bash
# Start from a trained Transformer (docs/recipes.md, Start from a trained Transformer), measured on
# Multi30k En-De: the Transformer's model folder trained on for N updates, and the same folder
# converted to 1D-CSAN, 2D-CSAN and context-aware and fine-tuned the same N updates, each with
# every seed; all scored on test_2016_flickr, before fine-tuning too, with the paired bootstrap of
# each fine-tuned model against the Transformer of its seed, and collected into one table.
#
# usage: bash examples/multi30k/convert.sh --model FOLDER [--raw-dir DIR] [--work DIR]
#            [--updates N] [--seeds "1 2 3"] [--archs "transformer_csan1d ..."] [--cpu]
#   --model    the Transformer's model folder: the quick start's (WORK/model of
#              ARCH=transformer bash examples/quickstart.sh, on Multi30k) or any en-de one
#   --raw-dir  Multi30k's raw files, train/val/test_2016_flickr.{en,de} (default data/multi30k_raw)
#   --work     where everything goes (default runs/convert); a rerun skips what is done
#   --updates  fine-tuning updates of each run (default 200; at least 16: evaluate.sh averages 5 of 8 checkpoints)
#   --seeds    (default "1 2 3")
#   --archs    the conversions (default "transformer_csan1d transformer_csan2d transformer_ctxaware");
#              the Transformer itself is always trained on too, as every bootstrap's baseline
#   --cpu      train and decode on the CPU (train.sh --cpu-tiny, which keeps the folder's sizes);
#              without it, train.sh's GPU runs (all visible GPUs, the papers' batch)
# Each command is printed ("+ ...") before it runs.
set -euo pipefail

MODEL="" RAW=data/multi30k_raw WORK=runs/convert UPDATES=200 SEEDS="1 2 3" CPU=0
CONVERSIONS="transformer_csan1d transformer_csan2d transformer_ctxaware"
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --raw-dir) RAW="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --updates) UPDATES="$2"; shift 2 ;;
    --seeds) SEEDS="$2"; shift 2 ;;
    --archs) CONVERSIONS="$2"; shift 2 ;;
    --cpu) CPU=1; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "convert.sh: unknown option $1 (--help lists them)" >&2; exit 2 ;;
  esac
done
[ -n "$MODEL" ] || { echo "convert.sh: --model FOLDER is required (the Transformer to start from)" >&2; exit 2; }
for f in train val test_2016_flickr; do
  for l in en de; do
    [ -f "$RAW/$f.$l" ] || { echo "convert.sh: no $RAW/$f.$l (Multi30k's raw files; --raw-dir DIR)" >&2; exit 2; }
  done
done
# on the CPU, train.sh --cpu-tiny saves 8 checkpoints a run; on GPUs every N/8 updates too (its own
# default, every 1000, would leave a short fine-tuning nothing for evaluate.sh to average)
TRAIN=(--cpu-tiny) EVAL=(--cpu)
[ "$CPU" = 1 ] || { TRAIN=(-- --save-interval-updates $(( UPDATES >= 16 ? UPDATES / 8 : 2 ))); EVAL=(); }
run() { echo "+ $*" >&2; "$@"; }

# 1 the corpus cut as the model's data was: its tokenizer, its BPE codes, its dictionaries
run python -m fairseq_csan.recipes.prepare files --src en --tgt de --train "$RAW/train" --valid "$RAW/val" \
  --test "$RAW/test_2016_flickr" --out "$WORK/task" --like "$MODEL"

# 2 the conversions (the papers' settings: a window of 11, 3 heads, the lowest 3 encoder layers;
#   deep-global + deep context); on a rerun convert keeps a folder it would write the same, and
#   refuses one converted from another --model (a Transformer trained again since)
declare -A FOLDER=([transformer]="$MODEL")
for arch in $CONVERSIONS; do
  FOLDER[$arch]="$WORK/models/$arch"
  run python -m fairseq_csan.recipes.convert --model "$MODEL" --arch "$arch" --out "${FOLDER[$arch]}"
done
ARCHS=(transformer $CONVERSIONS)

# 3 each model as it is, before fine-tuning
for arch in "${ARCHS[@]}"; do
  run bash scripts/evaluate.sh --data "$WORK/task" --model "${FOLDER[$arch]}" --out "$WORK/eval/before/$arch" \
    --name "$arch, before" "${EVAL[@]}"
done

# 4 fine-tune each N updates, every seed; the Transformer of the seed is the baseline of its bootstrap
for seed in $SEEDS; do
  for arch in "${ARCHS[@]}"; do
    run bash scripts/train.sh --data "$WORK/task" --arch "$arch" --finetune-from "${FOLDER[$arch]}" \
      --save-dir "$WORK/checkpoints/$arch.seed$seed" --max-update "$UPDATES" --seed "$seed" "${TRAIN[@]}"
    baseline=()
    [ "$arch" = transformer ] || baseline=(--baseline "$WORK/eval/transformer.seed$seed")
    run bash scripts/evaluate.sh --data "$WORK/task" --checkpoints "$WORK/checkpoints/$arch.seed$seed" \
      --out "$WORK/eval/$arch.seed$seed" --name "$arch, seed $seed" "${baseline[@]}" "${EVAL[@]}"
  done
done

# 5 one table: sacreBLEU and chrF of every model, with its bootstrap against the Transformer
evals=("$WORK"/eval/before/* "$WORK"/eval/*.seed*)
for metric in sacrebleu chrf; do
  run python -m fairseq_csan.recipes.collect_results "${evals[@]}" --metric "$metric" --output "$WORK/$metric.md" --force
done
echo "tables: $WORK/sacrebleu.md $WORK/chrf.md" >&2
