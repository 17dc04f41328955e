#!/usr/bin/env bash
# Quick start: data -> BPE -> fairseq-preprocess -> fairseq-train (transformer_csan2d) ->
# fairseq-generate -> a few translations and a sacreBLEU score. Offline; about 5 minutes on
# 2 CPU cores with the built-in toy corpus, about 23 with Multi30k.
#
# usage: bash examples/quickstart.sh
#        CORPUS=data/multi30k_raw bash examples/quickstart.sh   (Multi30k unpacked as the README says)
#        bash examples/quickstart.sh --help                       (this text)
#
# Settings (environment variables):
#   CORPUS       folder with train/val/test sentence files, e.g. train.en + train.de; the test
#                split is the one file test*.$SRC_LANG (multi30k: test_2016_flickr).
#                Default: a toy En-De corpus that fairseq_csan/recipes/toy_corpus.py writes.
#   SRC_LANG, TGT_LANG   language suffixes (default en, de)
#   WORK         output folder (default work/quickstart/<corpus name>)
#   ARCH         architecture (default transformer_csan2d): any registered one, fairseq's
#                transformer and our baselines included; a variant goes in the lower 2 of 3
#                encoder layers
#   DEVICE       auto (default: the GPU when torch sees one, else the CPU), cpu or cuda
#   MAX_UPDATE   training updates (default 400 for the toy corpus, 600 for a real one)
#   DIM          model width (default 128 toy, 256 real); FFN width is 2*DIM
#   MAX_TOKENS   tokens per batch (default 4096)
#   BPE_MERGES   subword-nmt merge operations (default 2000 toy, 8000 real)
#   TRAIN_LINES  use only the first N training pairs (default: all)
#   MODEL_FLAGS  extra fairseq-train flags, appended last so they win
#   GEN_FLAGS    extra fairseq-generate flags
#   TOY_ARGS     options for the toy corpus writer (default: "--train 20000 --valid 500 --test 500")
#   FORCE=1      redo every step, overwriting what WORK holds
set -euo pipefail
case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "[quickstart] error: no arguments; its settings are environment variables (--help lists them)" >&2; exit 2 ;;
esac

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC_LANG=${SRC_LANG:-en}
TGT_LANG=${TGT_LANG:-de}
CORPUS=${CORPUS:-}
ARCH=${ARCH:-transformer_csan2d}
MAX_TOKENS=${MAX_TOKENS:-4096}
TRAIN_LINES=${TRAIN_LINES:-}
MODEL_FLAGS=${MODEL_FLAGS:-}
FORCE=${FORCE:-0}
TOY_ARGS=${TOY_ARGS:-}
if [ -z "$CORPUS" ]; then
  NAME=toy; MAX_UPDATE=${MAX_UPDATE:-400}; BPE_MERGES=${BPE_MERGES:-2000}; DIM=${DIM:-128}
else
  NAME=$(basename "$CORPUS"); MAX_UPDATE=${MAX_UPDATE:-600}; BPE_MERGES=${BPE_MERGES:-8000}; DIM=${DIM:-256}
fi
GEN_FLAGS=${GEN_FLAGS:-}
DEVICE=${DEVICE:-auto}
export PYTHONUNBUFFERED=1  # progress lines as they come
WORK=${WORK:-work/quickstart/$NAME}

say() { echo "[quickstart $(date +%H:%M:%S)] $*"; }
die() { echo "[quickstart] error: $*" >&2; exit 1; }
done_before() { [ "$FORCE" != 1 ] && [ -e "$1" ]; }
for tool in fairseq-preprocess fairseq-train fairseq-generate subword-nmt sacrebleu; do
  command -v "$tool" >/dev/null || die "$tool not found; install first: bash scripts/install.sh"
done
# the architecture's encoder variant: our variants go in the lower 2 encoder layers; fairseq's
# own architectures and ours without a variant (transformer_ctxaware) take no --csan-layers
VARIANT=$(python -m fairseq_csan variant "$ARCH" 2>/dev/null) \
  || die "$(python -m fairseq_csan variant "$ARCH" 2>&1 | grep -v '^INFO' | tail -1)"
LAYER_FLAGS=()
case "$VARIANT" in none|standard) ;; *) LAYER_FLAGS=(--csan-layers 2) ;; esac
case "$DEVICE" in
  auto) DEVICE=cpu; python -c "import torch, sys; sys.exit(not torch.cuda.is_available())" && DEVICE=cuda ;;
  cpu|cuda) ;;
  *) die "DEVICE must be auto, cpu or cuda, got '$DEVICE'" ;;
esac
HW_FLAGS=()
[ "$DEVICE" = cpu ] && HW_FLAGS=(--cpu)

# the corpus, checked before anything is written
if [ -n "$CORPUS" ]; then
  [ -d "$CORPUS" ] || die "CORPUS=$CORPUS is not a folder"
  for split in train val; do for lang in $SRC_LANG $TGT_LANG; do
    [ -s "$CORPUS/$split.$lang" ] || die "missing $CORPUS/$split.$lang (expected train/val/test*.{$SRC_LANG,$TGT_LANG}; for another language pair set SRC_LANG and TGT_LANG, e.g. SRC_LANG=zh TGT_LANG=en)"
  done; done
  tests=$(cd "$CORPUS" && ls test*."$SRC_LANG" 2>/dev/null || true)
  [ "$(echo "$tests" | grep -c .)" = 1 ] || die "expected exactly one test*.$SRC_LANG in $CORPUS, found: ${tests:-none}"
  TEST=${tests%.$SRC_LANG}
  [ -s "$CORPUS/$TEST.$TGT_LANG" ] || die "missing $CORPUS/$TEST.$TGT_LANG"
fi

mkdir -p "$WORK"
say "work folder: $WORK (architecture $ARCH, $MAX_UPDATE updates, on the $DEVICE)"

# 1. raw data --------------------------------------------------------------------------
RAW=$WORK/raw
if [ -z "$CORPUS" ]; then
  if done_before "$RAW/test.$TGT_LANG"; then say "1/6 toy corpus already in $RAW; skipped"
  # shellcheck disable=SC2086
  else say "1/6 writing the toy corpus"; python -m fairseq_csan.recipes.toy_corpus "$RAW" $TOY_ARGS; fi
  TEST=test
else
  if done_before "$RAW/test.$TGT_LANG"; then say "1/6 corpus already copied into $RAW; skipped"
  else
    say "1/6 reading $CORPUS (test split: $TEST)"
    mkdir -p "$RAW"
    for lang in $SRC_LANG $TGT_LANG; do
      if [ -n "$TRAIN_LINES" ]; then head -n "$TRAIN_LINES" "$CORPUS/train.$lang" > "$RAW/train.$lang"
      else cp "$CORPUS/train.$lang" "$RAW/train.$lang"; fi
      cp "$CORPUS/val.$lang" "$RAW/val.$lang"
      cp "$CORPUS/$TEST.$lang" "$RAW/test.$lang"
    done
  fi
fi
[ "$(wc -l < "$RAW/train.$SRC_LANG")" = "$(wc -l < "$RAW/train.$TGT_LANG")" ] || die "train.$SRC_LANG and train.$TGT_LANG differ in length"

# 2. joint BPE (subword-nmt) on the raw text --------------------------------------------
BPE=$WORK/bpe
if done_before "$BPE/test.$TGT_LANG"; then say "2/6 BPE already applied; skipped"
else
  say "2/6 learning $BPE_MERGES joint BPE merges and applying them"
  mkdir -p "$BPE"
  subword-nmt learn-joint-bpe-and-vocab --input "$RAW/train.$SRC_LANG" "$RAW/train.$TGT_LANG" \
    -s "$BPE_MERGES" -o "$BPE/codes" --write-vocabulary "$BPE/vocab.$SRC_LANG" "$BPE/vocab.$TGT_LANG"
  for split in train val test; do for lang in $SRC_LANG $TGT_LANG; do
    subword-nmt apply-bpe -c "$BPE/codes" --vocabulary "$BPE/vocab.$lang" --vocabulary-threshold 1 \
      < "$RAW/$split.$lang" > "$BPE/$split.$lang"
  done; done
fi

# 3. binarise -----------------------------------------------------------------------------
BIN=$WORK/bin
if done_before "$BIN/test.$SRC_LANG-$TGT_LANG.$TGT_LANG.bin"; then say "3/6 binarised data already in $BIN; skipped"
else
  say "3/6 fairseq-preprocess (joined dictionary)"
  rm -rf "$BIN"
  fairseq-preprocess --source-lang "$SRC_LANG" --target-lang "$TGT_LANG" --joined-dictionary \
    --trainpref "$BPE/train" --validpref "$BPE/val" --testpref "$BPE/test" --destdir "$BIN" \
    --workers 2 --log-format simple > "$WORK/preprocess.log" 2>&1 || die "fairseq-preprocess failed; see $WORK/preprocess.log"
  grep -E "sents|Dictionary" "$WORK/preprocess.log" | sed 's/^INFO:[^:]*:/  /' | awk '!seen[$0]++' || true
fi

# 4. train -------------------------------------------------------------------------------
CKPT=$WORK/checkpoints/$ARCH
if [ "$FORCE" = 1 ]; then rm -rf "$CKPT"; fi
say "4/6 fairseq-train --arch $ARCH for $MAX_UPDATE updates (resumes from $CKPT if it holds a checkpoint)"
# a small model: DIM wide, 4 heads, 3+3 layers; the architecture's variant (2D-CSAN by default) in the lower 2 encoder layers
# shellcheck disable=SC2086
fairseq-train "$BIN" --user-dir "$ROOT/fairseq_csan" --arch "$ARCH" "${HW_FLAGS[@]}" \
  --encoder-layers 3 --decoder-layers 3 --encoder-embed-dim "$DIM" --decoder-embed-dim "$DIM" \
  --encoder-ffn-embed-dim $((2 * DIM)) --decoder-ffn-embed-dim $((2 * DIM)) \
  --encoder-attention-heads 4 --decoder-attention-heads 4 "${LAYER_FLAGS[@]}" \
  --share-all-embeddings --dropout 0.1 \
  --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 1.0 \
  --lr 1.5e-3 --lr-scheduler inverse_sqrt --warmup-updates 100 \
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
  --max-tokens "$MAX_TOKENS" --max-update "$MAX_UPDATE" --seed 1 \
  --save-dir "$CKPT" --no-epoch-checkpoints --save-interval-updates 200 --keep-interval-updates 1 \
  --log-format simple --log-interval 50 --num-workers 0 $MODEL_FLAGS 2>&1 \
  | tee -a "$WORK/train_$ARCH.log" \
  | { grep --line-buffered -E "\| (train_inner|valid) \||done training" || true; } \
  || die "fairseq-train failed; see $WORK/train_$ARCH.log"

# 5. translate the test set ----------------------------------------------------------------
OUT=$WORK/translations/$ARCH
mkdir -p "$OUT"
say "5/6 fairseq-generate on the test set (beam 5)"
# shellcheck disable=SC2086
fairseq-generate "$BIN" --user-dir "$ROOT/fairseq_csan" --path "$CKPT/checkpoint_last.pt" "${HW_FLAGS[@]}" \
  --gen-subset test --beam 5 --max-tokens 8000 --remove-bpe $GEN_FLAGS > "$OUT/generate.log" 2>&1 \
  || die "fairseq-generate failed; see $OUT/generate.log"
grep '^H-' "$OUT/generate.log" | sed 's/^H-//' | sort -n -k1,1 | cut -f3 > "$OUT/test.hyp"
[ "$(wc -l < "$OUT/test.hyp")" = "$(wc -l < "$RAW/test.$TGT_LANG")" ] || die "fewer translations than test sentences; see $OUT/generate.log"

# 6. show and score --------------------------------------------------------------------------
say "6/6 a few translations (source / reference / ours)"
for i in 1 2 3 4 5; do
  echo "  SRC: $(sed -n "${i}p" "$RAW/test.$SRC_LANG")"
  echo "  REF: $(sed -n "${i}p" "$RAW/test.$TGT_LANG")"
  echo "  HYP: $(sed -n "${i}p" "$OUT/test.hyp")"
  echo
done
sacrebleu "$RAW/test.$TGT_LANG" -i "$OUT/test.hyp" -m bleu -f text | tee "$OUT/bleu.txt"
say "done: checkpoint $CKPT/checkpoint_last.pt, translations $OUT/test.hyp, score $OUT/bleu.txt"
