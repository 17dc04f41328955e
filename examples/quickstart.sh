#!/usr/bin/env bash
# Quick start: the task recipes' own pipeline at a small size, offline.
#   1 corpus    a toy En-De corpus (fairseq_csan.recipes.toy_corpus), or your own from CORPUS
#   2 prepare   each language's tokenisation, joint BPE, fairseq-preprocess
#               (fairseq_csan.recipes.prepare, as examples/*/prepare.sh)
#   3 train     scripts/train.sh: a small ARCH model (fairseq-train --user-dir fairseq_csan)
#   4 evaluate  scripts/evaluate.sh: the last 5 checkpoints averaged, beam 4, BLEU and chrF
#   5 export    a fairseq model folder (fairseq_csan.recipes.export), and one sentence
#               translated with TransformerModel.from_pretrained(folder)
# How long it takes, and what it prints: docs/recipes.md (The quick start), measured with its date.
#
# usage: bash examples/quickstart.sh
#        CORPUS=data/multi30k_raw bash examples/quickstart.sh   (Multi30k unpacked as the README says)
#        CORPUS=DIR SRC=fr TGT=en bash examples/quickstart.sh     (any language pair, either direction)
#        bash examples/quickstart.sh --help                       (this text)
#
# Settings (environment variables):
#   CORPUS       a folder of line-aligned UTF-8 files in both languages: train.SRC/.TGT, val or
#                valid, and one or more test* (the first in name order is the test set; Multi30k's
#                own names work as they are: en-de with val and test_2016_flickr alone is prepared
#                as examples/multi30k/prepare.sh, any other as your own files, prepare files).
#                Default: the toy corpus, written to WORK/raw
#   SRC, TGT     the languages, as the files' suffixes (default en and de); the toy corpus is
#                English-German (en-de or de-en)
#   WORK         output folder (default work/quickstart/<toy or the corpus folder's name>, with
#                _SRC_TGT added for a pair other than en-de)
#   ARCH         architecture (default transformer_csan2d): any registered one, fairseq's
#                transformer and our baselines included; a variant goes in the lower 2 of 3
#                encoder layers
#   MODEL        the exported model folder (default WORK/model, WORK/model_ARCH for another ARCH)
#   DEVICE       auto (default: the GPU when torch sees one, else the CPU), cpu or cuda
#   MAX_UPDATE   training updates (default 400 for the toy corpus, 600 for a CORPUS)
#   DIM          model width (default 128 toy, 256 for a CORPUS); FFN width is 2*DIM
#   MAX_TOKENS   tokens per batch (default 4096)
#   BPE_MERGES   joint BPE merge operations (default 2000 toy, 8000 for a CORPUS, as for Multi30k)
#   MODEL_FLAGS  extra fairseq-train flags, appended last so they win
#   TOY_ARGS     options for the toy corpus writer (default: "--train 20000 --valid 500 --test 500")
#   FORCE=1      redo every step, replacing what the kit wrote in WORK (a file of yours there is
#                named and refused, never removed)
#   DRY_RUN=1    print the commands each step would run, and exit (nothing is written)
# A rerun skips what is done and redoes what was made from changed inputs (docs/recipes.md).
set -euo pipefail
case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "[quickstart] error: no arguments; its settings are environment variables (--help lists them)" >&2; exit 2 ;;
esac

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CORPUS=${CORPUS:-}
SRC=${SRC:-en}
TGT=${TGT:-de}
ARCH=${ARCH:-transformer_csan2d}
MAX_TOKENS=${MAX_TOKENS:-4096}
MODEL_FLAGS=${MODEL_FLAGS:-}
FORCE=${FORCE:-0}
TOY_ARGS=${TOY_ARGS:-}
DEVICE=${DEVICE:-auto}
DRY_RUN=${DRY_RUN:-0}
if [ -z "$CORPUS" ]; then
  NAME=toy; MAX_UPDATE=${MAX_UPDATE:-400}; BPE_MERGES=${BPE_MERGES:-2000}; DIM=${DIM:-128}
else
  NAME=$(basename "$CORPUS"); MAX_UPDATE=${MAX_UPDATE:-600}; BPE_MERGES=${BPE_MERGES:-8000}; DIM=${DIM:-256}
fi
[ "$SRC-$TGT" = en-de ] || NAME=${NAME}_${SRC}_$TGT
WORK=${WORK:-work/quickstart/$NAME}
if [ "$ARCH" = transformer_csan2d ]; then MODEL=${MODEL:-$WORK/model}; else MODEL=${MODEL:-$WORK/model_$ARCH}; fi
export PYTHONUNBUFFERED=1  # progress lines as they come

say() { echo "[quickstart $(date +%H:%M:%S)] $*"; }
die() { echo "[quickstart] error: $*" >&2; exit 1; }
show() { printf '+'; printf ' %q' "$@"; echo; [ "$DRY_RUN" = 1 ] || "$@"; }  # print a command, then run it

# the settings, checked before anything is written
command -v fairseq-train >/dev/null || die "fairseq-train not found; install first: bash scripts/install.sh"
for n in SRC TGT; do
  [[ "${!n}" =~ ^[a-z]{2,3}(_[A-Za-z0-9]+)?$ ]] || die "$n must be a language code as the files' suffix (en, fr, zh, pt_BR), got '${!n}'"
done
[ "$SRC" != "$TGT" ] || die "SRC and TGT are both $SRC: give two languages"
[ -n "$CORPUS" ] || [ "$SRC-$TGT" = en-de ] || [ "$SRC-$TGT" = de-en ] \
  || die "SRC=$SRC TGT=$TGT: the toy corpus is English-German (en-de or de-en); give CORPUS=DIR for another pair"
case "$DEVICE" in auto|cpu|cuda) ;; *) die "DEVICE must be auto, cpu or cuda, got '$DEVICE'" ;; esac
for n in FORCE DRY_RUN; do
  case "${!n}" in 0|1) ;; *) die "$n must be 0 or 1, got '${!n}'" ;; esac
done
for n in MAX_UPDATE DIM MAX_TOKENS BPE_MERGES; do
  [[ "${!n}" =~ ^[1-9][0-9]*$ ]] || die "$n must be a positive whole number, got '${!n}'"
done
if [ -n "$CORPUS" ]; then
  [ -z "$TOY_ARGS" ] || die "TOY_ARGS sets the toy corpus, and CORPUS=$CORPUS replaces it; leave out one of them"
  [ -d "$CORPUS" ] || die "CORPUS=$CORPUS is not a folder"
  VALID=val; [ -e "$CORPUS/val.$SRC" ] || [ ! -e "$CORPUS/valid.$SRC" ] || VALID=valid
  [ ! -e "$CORPUS/val.$SRC" ] || [ ! -e "$CORPUS/valid.$SRC" ] \
    || die "CORPUS=$CORPUS holds both val.$SRC and valid.$SRC: move one of them out of the way"
  TESTS=()  # in byte order of their names, whatever the locale; a test set without its TGT side is left out
  while IFS= read -r f; do
    name=$(basename "$f" ".$SRC")
    if [ -e "$CORPUS/$name.$TGT" ]; then TESTS+=("$name"); else say "  $f has no $name.$TGT: not a test set here"; fi
  done < <(LC_ALL=C find "$CORPUS" -maxdepth 1 -name "test*.$SRC" | LC_ALL=C sort)
  need() { for lang in "$SRC" "$TGT"; do
    [ -s "$CORPUS/$1.$lang" ] || die "missing $CORPUS/$1.$lang: CORPUS holds train, val (or valid) and test* files, each in $SRC and $TGT (SRC and TGT set the languages)"
  done; }
  need train; need "$VALID"
  [ ${#TESTS[@]} -gt 0 ] || die "CORPUS=$CORPUS holds no test set test*.$SRC (with its test*.$TGT)"
  for f in "${TESTS[@]}"; do need "$f"; done
fi
# (this asks Python, so it comes after the checks above, which do not): the architecture's
# variant and, unless DEVICE=cpu, whether torch sees a CUDA device (which takes a torch import).
# Our variants go in the lower 2 encoder layers; fairseq's own architectures and ours without a
# variant (transformer_ctxaware) take no --csan-layers
PROBE=(--device)
[ "$DEVICE" = cpu ] && PROBE=()
FACTS=$(python -m fairseq_csan variant "$ARCH" "${PROBE[@]}" 2>/dev/null) \
  || die "$(python -m fairseq_csan variant "$ARCH" "${PROBE[@]}" 2>&1 | grep -v '^INFO' | tail -1)"
read -r VARIANT SEEN <<< "$FACTS"
LAYER_FLAGS=()
case "$VARIANT" in none|standard) ;; *) LAYER_FLAGS=(--csan-layers 2) ;; esac
case "$DEVICE" in
  auto) DEVICE=$SEEN ;;
  cpu) ;;
  cuda) [ "$SEEN" = cuda ] \
          || die "DEVICE=cuda: torch sees no CUDA device here; DEVICE=cpu (or auto) trains on the CPU" ;;
esac
FORCE_FLAG=()
[ "$FORCE" = 1 ] && FORCE_FLAG=(--force)

say "work folder: $WORK (architecture $ARCH, $MAX_UPDATE updates, on the $DEVICE)"
DATA=$WORK/data CKPT=$WORK/checkpoints/$ARCH RESULTS=$WORK/results/$ARCH

say "1/5 corpus"
if [ -z "$CORPUS" ]; then
  RAW=$WORK/raw
  if [ "$FORCE" != 1 ] && [ "$DRY_RUN" != 1 ] && [ -s "$RAW/test.de" ]; then say "  toy corpus already in $RAW; kept"
  # shellcheck disable=SC2086
  else show python -m fairseq_csan.recipes.toy_corpus "$RAW" $TOY_ARGS; fi
  if [ "$SRC" = en ]; then
    PREPARE=(python -m fairseq_csan.recipes.prepare toy_en_de --raw-dir "$RAW" --no-download)
  else  # German-English: the toy corpus as your own files
    PREPARE=(python -m fairseq_csan.recipes.prepare files --src de --tgt en --train "$RAW/train" --valid "$RAW/val" --test "$RAW/test")
  fi
elif [ "$SRC-$TGT $VALID ${TESTS[*]}" = "en-de val test_2016_flickr" ]; then  # Multi30k as the README unpacks it
  PREPARE=(bash "$ROOT/examples/multi30k/prepare.sh" --raw-dir "$CORPUS" --no-download)
else
  TEST_FLAGS=()
  for f in "${TESTS[@]}"; do TEST_FLAGS+=(--test "$CORPUS/$f"); done
  PREPARE=(python -m fairseq_csan.recipes.prepare files --src "$SRC" --tgt "$TGT" --train "$CORPUS/train"
           --valid "$CORPUS/$VALID" "${TEST_FLAGS[@]}")
fi

say "2/5 prepare: tokenise, clean, joint BPE (up to $BPE_MERGES merges), fairseq-preprocess"
show "${PREPARE[@]}" --out "$DATA" --merges "$BPE_MERGES" "${FORCE_FLAG[@]}"

say "3/5 train $ARCH for $MAX_UPDATE updates (a rerun resumes from $CKPT)"
HW=(--cpu-tiny)  # one CPU process, fp32
[ "$DEVICE" = cuda ] && HW=(--gpus 1)
SAVE_EVERY=$(( MAX_UPDATE / 8 > 2 ? MAX_UPDATE / 8 : 2 ))  # 8 checkpoints, for an average of 5
# a small model: DIM wide, 4 heads, 3+3 layers; after --, fairseq-train flags that override train.sh's
# shellcheck disable=SC2086
show bash "$ROOT/scripts/train.sh" --data "$DATA" --arch "$ARCH" --save-dir "$CKPT" "${HW[@]}" \
  --max-update "$MAX_UPDATE" "${FORCE_FLAG[@]}" -- \
  --encoder-layers 3 --decoder-layers 3 --encoder-embed-dim "$DIM" --decoder-embed-dim "$DIM" \
  --encoder-ffn-embed-dim $((2 * DIM)) --decoder-ffn-embed-dim $((2 * DIM)) \
  --encoder-attention-heads 4 --decoder-attention-heads 4 "${LAYER_FLAGS[@]}" --dropout 0.1 \
  --lr 1.5e-3 --warmup-updates 100 --clip-norm 1.0 --max-tokens "$MAX_TOKENS" --update-freq 1 \
  --save-interval-updates "$SAVE_EVERY" --log-interval 50 $MODEL_FLAGS \
  | { grep --line-buffered -E "^\+ |\| (train_inner|valid) \||done training" || true; } \
  || die "training failed; see $CKPT/train.log"

# the last 5 checkpoints, or all there are (fairseq skips an interval checkpoint at an epoch's end)
LAST=5
[ "$DRY_RUN" = 1 ] || LAST=$(find "$CKPT" -maxdepth 1 -name 'checkpoint_*_*.pt' | wc -l)
[ "$LAST" -le 5 ] || LAST=5
say "4/5 evaluate: average the last $LAST checkpoints, decode the test set (beam 4), score"
EVAL_HW=()
[ "$DEVICE" = cpu ] && EVAL_HW=(--cpu)
show bash "$ROOT/scripts/evaluate.sh" --data "$DATA" --checkpoints "$CKPT" --out "$RESULTS" --last "$LAST" \
  "${EVAL_HW[@]}" "${FORCE_FLAG[@]}"

say "5/5 export a fairseq model folder"
show python -m fairseq_csan.recipes.export --data "$DATA" --checkpoint "$RESULTS/averaged.pt" --out "$MODEL" \
  "${FORCE_FLAG[@]}"
[ "$DRY_RUN" = 0 ] || { say "DRY_RUN=1: the commands above were listed, not run"; exit 0; }

echo
say "a few test sentences (source / reference / ours)"
for i in 1 2 3; do
  echo "  SRC: $(sed -n "${i}p" "$DATA/raw/test.$SRC")"
  echo "  REF: $(sed -n "${i}p" "$DATA/raw/test.$TGT")"
  echo "  HYP: $(sed -n "${i}p" "$RESULTS/hyp.detok")"
done
grep -E "^- (tokenised BLEU|sacreBLEU|chrF)" "$RESULTS/results.md" || true
SENTENCE=$(sed -n 1p "$DATA/raw/test.$SRC" | tr -d "\"'\\\\\`\$")  # no quotes to escape in the line below
ONE_LINE="python -c 'import fairseq_csan; from fairseq.models.transformer import TransformerModel as T; print(T.from_pretrained(\"$MODEL\").translate(\"$SENTENCE\"))'"
say "translate your own sentence with the exported model:"
echo "  $ONE_LINE"
echo "  -> $(bash -c "$ONE_LINE" 2>/dev/null)"
say "done: model folder $MODEL, scores $RESULTS/results.md, translations $RESULTS/hyp.detok"
