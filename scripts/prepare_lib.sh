# The preparation pipeline shared by examples/*/prepare.sh (sourced, not run).
#
# The task script sets TASK, SRC, TGT, RAW_ENV, JOINT_BPE (1: one BPE model and one dictionary
# for both languages; 0: one each) and CLEAN_RATIO, optionally DEFAULT_RAW (the raw folder when
# neither --raw-dir nor $RAW_ENV is given), DEFAULT_MERGES and DEFAULT_MERGES_WHY, then calls
# `prepare_main "$@"`.
#
# Steps, each skipped when its outputs exist and are newer than its inputs, as make would
# (--force deletes every output of this script first and redoes them all):
#   1 gather   raw corpora -> OUT/raw/{train,valid,test}.{SRC,TGT}    (fairseq_csan/recipes/corpora.py)
#   2 tokenise Moses (en, de), jieba (zh), MeCab (ja) -> OUT/tok/      (fairseq_csan/recipes/text.py)
#   3 clean    training pairs: empty, > CLEAN_MAX_LEN tokens, ratio > CLEAN_RATIO
#   4 BPE      learn MERGES merges (subword-nmt) -> OUT/bpe/codes[.LANG]
#   5 BPE      apply to train, valid, test -> OUT/bpe/
#   6 binarise fairseq-preprocess -> OUT/data-bin
# Every file is written under a temporary name and renamed when complete.

RECIPE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { echo "[prepare $TASK] $*" >&2; }
die() { echo "[prepare $TASK] error: $*" >&2; exit 2; }

prepare_usage() {
  cat <<EOF
usage: $0 [--raw-dir DIR] [--out DIR] [--merges N] [--workers N] [--no-download] [--force]

  --raw-dir DIR  folder holding the raw corpora, or receiving the downloads
                 (default: \$$RAW_ENV if set, else ${DEFAULT_RAW:-OUT/downloads})
  --out DIR      output folder (default: data/$TASK)
  --merges N     BPE merge operations (default: ${DEFAULT_MERGES:-32000}${DEFAULT_MERGES_WHY:-, as the papers})
  --workers N    processes for tokenisation, BPE and binarisation (default: all cores)
  --no-download  never download; stop with a message when a corpus is missing
  --force        delete this script's outputs in OUT (not the downloads) and redo every step
  --list         print what the raw folder must hold, and exit
EOF
}

# all_exist FILE...: true when every file exists
all_exist() { for f in "$@"; do [ -e "$f" ] || return 1; done; }
# up_to_date OUTPUT... -- INPUT...: every output exists and is newer than every input
# (--force has deleted the outputs, so it needs no case here)
up_to_date() {
  local outs=() f g
  while [ "$1" != -- ]; do outs+=("$1"); shift; done; shift
  for f in "${outs[@]}"; do
    [ -e "$f" ] || return 1
    for g in "$@"; do [ "$f" -nt "$g" ] || return 1; done
  done
}

prepare_main() {
  local raw="${!RAW_ENV:-${DEFAULT_RAW:-}}" out="data/$TASK" merges=${DEFAULT_MERGES:-32000} workers download=1 force=0
  workers=$(nproc 2>/dev/null || echo 4)
  while [ $# -gt 0 ]; do
    case "$1" in
      --raw-dir) raw="${2:?--raw-dir needs a folder}"; shift 2 ;;
      --out) out="${2:?--out needs a folder}"; shift 2 ;;
      --merges) merges="${2:?--merges needs a number}"; shift 2 ;;
      --workers) workers="${2:?--workers needs a number}"; shift 2 ;;
      --no-download) download=0; shift ;;
      --force) force=1; shift ;;
      --list) python -m fairseq_csan.recipes.corpora "$TASK" --list; return 0 ;;
      -h|--help) prepare_usage; return 0 ;;
      *) prepare_usage >&2; die "unknown argument '$1'" ;;
    esac
  done
  [[ "$merges" =~ ^[1-9][0-9]*$ ]] || die "--merges must be a positive integer, got '$merges'"
  [[ "$workers" =~ ^[1-9][0-9]*$ ]] || die "--workers must be a positive integer, got '$workers'"
  [ -n "$raw" ] || raw="$out/downloads"
  local clean_max_len=${CLEAN_MAX_LEN:-250}

  # tools, checked before any work
  command -v fairseq-preprocess >/dev/null || die "fairseq-preprocess not found: install fairseq (bash scripts/install.sh)"
  command -v subword-nmt >/dev/null || die "subword-nmt not found: pip install subword-nmt"
  local lang module
  for lang in "$SRC" "$TGT"; do
    case "$lang" in zh) module=jieba ;; ja) module=fugashi ;; *) module=sacremoses ;; esac
    python -c "import $module" 2>/dev/null || die "python module '$module' (for $lang) not found: pip install -e '$RECIPE_ROOT[recipes]'"
  done

  mkdir -p "$out"
  # the settings that shape the outputs; a rerun with other settings must not mix them
  local settings="task=$TASK
src=$SRC
tgt=$TGT
merges=$merges
joint_bpe=$JOINT_BPE
clean_max_len=$clean_max_len
clean_ratio=$CLEAN_RATIO"
  if [ -f "$out/recipe.env" ] && [ "$force" = 0 ] && [ "$(cat "$out/recipe.env")" != "$settings" ]; then
    die "$out was prepared with other settings (see $out/recipe.env); use --force to redo it or another --out"
  fi
  if [ "$force" = 1 ]; then
    # every derived output goes, so an interrupted --force run cannot leave old ones behind
    # that a later run would take for finished (downloads stay)
    log "--force: removing $out/raw, tok, bpe and data-bin"
    rm -rf "$out/raw" "$out/tok" "$out/bpe" "$out/data-bin" "$out/data-bin.tmp"
  fi
  printf '%s\n' "$settings" > "$out/recipe.env"
  python -m fairseq_csan.recipes.text versions > "$out/tools.txt"
  local started=$SECONDS

  # 1 gather
  local split gather_args=()
  [ "$download" = 1 ] || gather_args+=(--no-download)
  if all_exist "$out"/raw/{train,valid,test}."$SRC" "$out"/raw/{train,valid,test}."$TGT"; then
    log "1/6 gather: $out/raw complete; skipped"
  else
    log "1/6 gather raw corpora from $raw"
    python -m fairseq_csan.recipes.corpora "$TASK" --raw-dir "$raw" --out "$out/raw" "${gather_args[@]}" || exit $?
  fi

  # 2 tokenise
  mkdir -p "$out/tok"
  for split in train valid test; do
    for lang in "$SRC" "$TGT"; do
      if up_to_date "$out/tok/$split.$lang" -- "$out/raw/$split.$lang"; then
        log "2/6 tokenise: $out/tok/$split.$lang up to date; skipped"
      else
        log "2/6 tokenise $split.$lang"
        python -m fairseq_csan.recipes.text tokenize --lang "$lang" --workers "$workers" \
          --input "$out/raw/$split.$lang" --output "$out/tok/$split.$lang"
      fi
    done
  done

  # 3 clean the training pairs
  if up_to_date "$out/tok/train.clean.$SRC" "$out/tok/train.clean.$TGT" -- "$out/tok/train.$SRC" "$out/tok/train.$TGT"; then
    log "3/6 clean: $out/tok/train.clean.* up to date; skipped"
  else
    log "3/6 clean training pairs (1..$clean_max_len tokens, ratio <= $CLEAN_RATIO)"
    python -m fairseq_csan.recipes.text clean --max-len "$clean_max_len" --ratio "$CLEAN_RATIO" \
      --src-in "$out/tok/train.$SRC" --tgt-in "$out/tok/train.$TGT" \
      --src-out "$out/tok/train.clean.$SRC" --tgt-out "$out/tok/train.clean.$TGT"
  fi

  # 4 learn BPE
  mkdir -p "$out/bpe"
  local codes_src codes_tgt
  if [ "$JOINT_BPE" = 1 ]; then
    codes_src="$out/bpe/codes"; codes_tgt="$out/bpe/codes"
    if up_to_date "$codes_src" -- "$out/tok/train.clean.$SRC" "$out/tok/train.clean.$TGT"; then
      log "4/6 BPE: $codes_src up to date; skipped"
    else
      log "4/6 learn $merges joint BPE merges on $SRC+$TGT (subword-nmt; long on the full corpus)"
      cat "$out/tok/train.clean.$SRC" "$out/tok/train.clean.$TGT" \
        | subword-nmt learn-bpe -s "$merges" > "$codes_src.tmp"
      mv "$codes_src.tmp" "$codes_src"
    fi
  else
    codes_src="$out/bpe/codes.$SRC"; codes_tgt="$out/bpe/codes.$TGT"
    for lang in "$SRC" "$TGT"; do
      if up_to_date "$out/bpe/codes.$lang" -- "$out/tok/train.clean.$lang"; then
        log "4/6 BPE: $out/bpe/codes.$lang up to date; skipped"
      else
        log "4/6 learn $merges BPE merges on $lang (subword-nmt; long on the full corpus)"
        subword-nmt learn-bpe -s "$merges" < "$out/tok/train.clean.$lang" > "$out/bpe/codes.$lang.tmp"
        mv "$out/bpe/codes.$lang.tmp" "$out/bpe/codes.$lang"
      fi
    done
  fi

  # 5 apply BPE
  local name input codes
  for split in train valid test; do
    for lang in "$SRC" "$TGT"; do
      name="$split"; input="$out/tok/$split.$lang"
      [ "$split" = train ] && input="$out/tok/train.clean.$lang"
      codes=$codes_src; [ "$lang" = "$TGT" ] && codes=$codes_tgt
      if up_to_date "$out/bpe/$name.$lang" -- "$input" "$codes"; then
        log "5/6 apply BPE: $out/bpe/$name.$lang up to date; skipped"
      else
        log "5/6 apply BPE to $name.$lang"
        subword-nmt apply-bpe -c "$codes" --num-workers "$workers" \
          --input "$input" --output "$out/bpe/$name.$lang.tmp"
        mv "$out/bpe/$name.$lang.tmp" "$out/bpe/$name.$lang"
      fi
    done
  done

  # 6 binarise
  if up_to_date "$out/data-bin/dict.$SRC.txt" -- "$out"/bpe/{train,valid,test}."$SRC" "$out"/bpe/{train,valid,test}."$TGT"; then
    log "6/6 binarise: $out/data-bin up to date; skipped"
  else
    log "6/6 binarise with fairseq-preprocess"
    local joined=()
    [ "$JOINT_BPE" = 1 ] && joined=(--joined-dictionary)
    rm -rf "$out/data-bin.tmp"
    fairseq-preprocess --source-lang "$SRC" --target-lang "$TGT" \
      --trainpref "$out/bpe/train" --validpref "$out/bpe/valid" --testpref "$out/bpe/test" \
      --destdir "$out/data-bin.tmp" "${joined[@]}" --workers "$workers" >&2
    rm -rf "$out/data-bin"
    mv "$out/data-bin.tmp" "$out/data-bin"
  fi

  log "done in $((SECONDS - started))s: $(wc -l < "$out/tok/train.clean.$SRC") training pairs, $(wc -l < "$out/raw/valid.$SRC") valid, $(wc -l < "$out/raw/test.$SRC") test"
  log "binarised data: $out/data-bin; train with scripts/train.sh --data $out --arch ARCH --save-dir DIR"
}
