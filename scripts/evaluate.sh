#!/usr/bin/env bash
# Evaluate a trained model as the papers do: average the last checkpoints, decode the test
# set with beam 4 and length penalty 0.6, and report tokenised BLEU (and compound-split BLEU
# for En-De), sacreBLEU and chrF with their signatures, decoding speed, and, given the
# baseline's evaluation, paired bootstrap significance of tokenised BLEU and of chrF.
# See docs/recipes.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)

usage() {
  cat <<'EOF'
usage: scripts/evaluate.sh --data DIR --checkpoints DIR --out DIR [options]

  --data DIR         the folder made by examples/*/prepare.sh
  --checkpoints DIR  the --save-dir of scripts/train.sh
  --out DIR          where the outputs go (evaluation.env, averaged.pt, generate.txt,
                     generate.log, hyp.tok, hyp.detok, results.json, results.md); run again
                     with the same checkpoints and settings, it keeps the average and the
                     decoding and scores again
  --last N           average the N newest interval checkpoints (default 5 for base runs,
                     20 for big ones, as Vaswani et al. 2017)
  --checkpoint FILE  evaluate this checkpoint instead of an average
  --subset S         test (default) or valid
  --beam N           beam size (default 4)        --lenpen X   length penalty (default 0.6)
  --batch-size N     sentences per batch (default 128)
  --baseline DIR     the --out of the baseline's evaluation: adds paired bootstrap resampling
  --bootstrap-samples N  resamples for the bootstrap (default 1000)
  --name NAME        the system's name in tables (default: its architecture)
  --cpu              decode on the CPU            --fp16   decode in fp16 (GPU)
  --progress-every S while decoding, report the sentences done every S seconds (default 30)
  --force            redo the evaluation in an --out that holds one of other checkpoints
                     or settings (its outputs are replaced)
EOF
}

die() { echo "[evaluate] error: $*" >&2; exit 2; }
log() { echo "[evaluate] $*" >&2; }

data="" ckdir="" out="" last="" checkpoint="" subset=test beam=4 lenpen=0.6 batch=128
baseline="" samples=1000 name="" hw=() force=0 progress_every=30
while [ $# -gt 0 ]; do
  case "$1" in
    --data) data="${2:?}"; shift 2 ;;
    --checkpoints) ckdir="${2:?}"; shift 2 ;;
    --out) out="${2:?}"; shift 2 ;;
    --last) last="${2:?}"; shift 2 ;;
    --checkpoint) checkpoint="${2:?}"; shift 2 ;;
    --subset) subset="${2:?}"; shift 2 ;;
    --beam) beam="${2:?}"; shift 2 ;;
    --lenpen) lenpen="${2:?}"; shift 2 ;;
    --batch-size) batch="${2:?}"; shift 2 ;;
    --baseline) baseline="${2:?}"; shift 2 ;;
    --bootstrap-samples) samples="${2:?}"; shift 2 ;;
    --name) name="${2:?}"; shift 2 ;;
    --cpu) hw+=(--cpu); shift ;;
    --fp16) hw+=(--fp16); shift ;;
    --force) force=1; shift ;;
    --progress-every) progress_every="${2:?}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done

[ -n "$data" ] && [ -n "$out" ] || die "--data and --out are required"
[ -n "$ckdir" ] || [ -n "$checkpoint" ] || die "--checkpoints DIR (or --checkpoint FILE) is required"
[ -f "$data/recipe.env" ] && [ -d "$data/data-bin" ] || die "$data is not a prepared task folder (no recipe.env or data-bin/; run examples/*/prepare.sh)"
case "$subset" in test|valid) ;; *) die "--subset must be test or valid, got '$subset'" ;; esac
for pair in "beam:$beam" "batch-size:$batch" "bootstrap-samples:$samples" "progress-every:$progress_every" ${last:+"last:$last"}; do
  [[ "${pair#*:}" =~ ^[1-9][0-9]*$ ]] || die "--${pair%%:*} must be a positive whole number, got '${pair#*:}'"
done
[[ "$lenpen" =~ ^[0-9]*\.?[0-9]+$ ]] || die "--lenpen must be a number, got '$lenpen'"
if [ -n "$baseline" ] && [ ! -f "$baseline/hyp.tok" ]; then
  die "--baseline $baseline has no hyp.tok: evaluate the baseline first, with the same --subset"
fi

task=$(sed -n 's/^task=//p' "$data/recipe.env")
src=$(sed -n 's/^src=//p' "$data/recipe.env")
tgt=$(sed -n 's/^tgt=//p' "$data/recipe.env")
arch="" size=base
if [ -n "$ckdir" ] && [ -f "$ckdir/run.env" ]; then
  arch=$(sed -n 's/^arch=//p' "$ckdir/run.env"); size=$(sed -n 's/^size=//p' "$ckdir/run.env")
fi
if [ -z "$last" ]; then last=5; [ "$size" = big ] && last=20; fi
mkdir -p "$out"

# what this evaluation is of: the checkpoints (with their modification times) and the
# decoding settings. An --out holding another evaluation is refused unless --force is given.
if [ -n "$checkpoint" ]; then
  [ -f "$checkpoint" ] || die "no checkpoint $checkpoint"
  inputs=("$checkpoint")
else
  mapfile -t inputs < <(python -m fairseq_csan.recipes.average_checkpoints --dir "$ckdir" --last "$last" --list) \
    && [ ${#inputs[@]} -gt 0 ] || die "cannot choose the last $last checkpoints of $ckdir (see above); --last N averages fewer, --checkpoint FILE takes one"
fi
identity="$(for f in "${inputs[@]}"; do echo "checkpoint=$(cd "$(dirname "$f")" && pwd -P)/$(basename "$f") $(stat -c %Y "$f")"; done)
averaged=$([ -n "$checkpoint" ] && echo no || echo yes)
subset=$subset
beam=$beam
lenpen=$lenpen
batch_size=$batch
decoding=${hw[*]:-gpu fp32}"
same=0
[ -f "$out/evaluation.env" ] && [ "$(cat "$out/evaluation.env")" = "$identity" ] && same=1
if [ "$same" = 0 ] && [ -f "$out/evaluation.env" ] && [ "$force" = 0 ]; then
  die "$out holds an evaluation of other checkpoints or settings (see $out/evaluation.env); use --force to redo it, or another --out"
fi
if [ "$same" = 0 ] || [ "$force" = 1 ]; then
  rm -f "$out"/averaged.pt "$out"/generate.txt "$out"/generate.log "$out"/hyp.tok "$out"/hyp.detok "$out"/results.json "$out"/results.md
fi
printf '%s\n' "$identity" > "$out/evaluation.env"

# 1 the weights: one checkpoint, or the average of the last N
if [ -n "$checkpoint" ]; then
  model="$checkpoint"
  log "1/3 evaluating $checkpoint (no averaging)"
else
  model="$out/averaged.pt"
  if [ -f "$model" ]; then
    log "1/3 $model (the same checkpoints) exists; kept"
  else
    log "1/3 averaging the last $last checkpoints of $ckdir"
    python -m fairseq_csan.recipes.average_checkpoints --inputs "${inputs[@]}" --output "$model" --force
  fi
fi

# 2 decode
gen="$out/generate.txt"
if [ -f "$gen" ]; then
  log "2/3 $gen (the same model and settings) exists; kept"
else
  total=$(wc -l < "$data/tok/$subset.$tgt")
  log "2/3 decoding $subset ($total sentences): beam $beam, length penalty $lenpen, output length <= source + 50"
  # the hypotheses (stdout) and the log with the timing line (stderr) go to separate files,
  # so that no log line can land inside a hypothesis; a watcher reports progress meanwhile
  rm -f "$gen.tmp"
  # (its sleep gets no handle on our output, so that nothing reading it waits for the sleep)
  ( while sleep "$progress_every" > /dev/null 2>&1; do
      log "    decoded $(grep -c '^H-' "$gen.tmp" 2>/dev/null || true) of $total sentences"
    done ) &
  watcher=$!
  trap 'kill "$watcher" 2> /dev/null || true' EXIT
  status=0
  PYTHONUNBUFFERED=1 fairseq-generate "$data/data-bin" --user-dir "$ROOT/fairseq_csan" --path "$model" \
      --source-lang "$src" --target-lang "$tgt" --gen-subset "$subset" \
      --beam "$beam" --lenpen "$lenpen" --max-len-a 1 --max-len-b 50 --remove-bpe \
      --batch-size "$batch" "${hw[@]}" > "$gen.tmp" 2> "$out/generate.log" || status=$?
  kill "$watcher" 2>/dev/null || true
  wait "$watcher" 2>/dev/null || true
  if [ "$status" != 0 ]; then
    tail -20 "$out/generate.log" >&2
    die "fairseq-generate failed (its log: $out/generate.log)"
  fi
  log "    decoded $(grep -c '^H-' "$gen.tmp" || true) of $total sentences"
  mv "$gen.tmp" "$gen"
fi

# 3 score
log "3/3 scoring"
score_args=(--generate-log "$gen" --decode-log "$out/generate.log" --ref-tok "$data/tok/$subset.$tgt" --ref-raw "$data/raw/$subset.$tgt"
  --lang "$tgt" --out "$out" --name "${name:-${arch:-$(basename "$out")}}" --task "$task"
  --bootstrap-samples "$samples")
[ -n "$arch" ] && score_args+=(--arch "$arch")
[ "$tgt" = de ] && score_args+=(--compound-split)
[ -n "$ckdir" ] && [ -f "$ckdir/train.log" ] && score_args+=(--train-log "$ckdir/train.log")
[ -n "$baseline" ] && score_args+=(--baseline "$baseline")
python -m fairseq_csan.recipes.score score "${score_args[@]}"
