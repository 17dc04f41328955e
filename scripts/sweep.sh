#!/usr/bin/env bash
# Train and evaluate the window/area sweep of the CSAN paper's Figure 2: 1D-CSAN for each
# window size M, and 2D-CSAN (window fixed, 11 by default) for each number of heads N, each
# scored on the dev set. Plot it with fairseq_csan/recipes/analysis/window_sweep.py --sweep OUT.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)

usage() {
  cat <<'EOF2'
usage: scripts/sweep.sh --data DIR --out DIR [options] [-- TRAIN.SH ARGS]

  --data DIR        a folder made by examples/*/prepare.sh
  --out DIR         one folder per run: csan1d_window{M}/ and csan2d_heads{N}/, each with its
                    checkpoints, its dev-set evaluation (eval/) and sweep.env
  --windows "M..."  1D window sizes, odd (default "3 5 7 9 11 13 15"; "" for none)
  --heads "N..."    2D head areas, odd, at most the model's heads (default "1 3 5 7"; "" for none)
  --window-2d M     the 2D runs' window (default 11, the paper's)
  --last N          checkpoints to average for each evaluation (default 5)
  --cpu-tiny        tiny CPU runs (train.sh --cpu-tiny; evaluation on the CPU), for tests
  --dry-run         print each run's train.sh and evaluate.sh commands, and exit
Arguments after -- go to scripts/train.sh (e.g. -- --gpus 8 --max-update 20000), and after
a second -- to fairseq-train. A finished run is not retrained (train.sh resumes it, fairseq stops at once)
and a finished evaluation is kept.
EOF2
}
die() { echo "[sweep] error: $*" >&2; exit 2; }

data="" out="" windows="3 5 7 9 11 13 15" heads="1 3 5 7" window_2d=11 last=5 tiny=0 dry_run=0 extra=() given=" "
while [ $# -gt 0 ]; do
  given+="$1 "
  case "$1" in
    --data) data="${2:?}"; shift 2 ;;
    --out) out="${2:?}"; shift 2 ;;
    --windows) windows="${2?--windows needs sizes (\"\" for none)}"; shift 2 ;;
    --heads) heads="${2?--heads needs head areas (\"\" for none)}"; shift 2 ;;
    --window-2d) window_2d="${2:?}"; shift 2 ;;
    --last) last="${2:?}"; shift 2 ;;
    --cpu-tiny) tiny=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
[ -n "$data" ] && [ -n "$out" ] || die "--data and --out are required"
for v in $windows $heads $window_2d; do
  [[ "$v" =~ ^[0-9]+$ ]] && [ $((v % 2)) = 1 ] || die "window sizes and head areas must be positive odd numbers, got '$v'"
done

# train.sh options, then (after a second --) fairseq-train arguments
train_args=() fairseq_args=() eval_args=()
seen=0
for a in "${extra[@]}"; do
  if [ "$seen" = 0 ] && [ "$a" = -- ]; then seen=1
  elif [ "$seen" = 0 ]; then train_args+=("$a")
  else fairseq_args+=("$a"); fi
done
if [ "$tiny" = 1 ]; then train_args+=(--cpu-tiny); eval_args+=(--cpu); fi

# every input checked before any run folder is made
[ -f "$data/recipe.env" ] && [ -d "$data/data-bin" ] \
  || die "--data $data is not a prepared task folder (no recipe.env or data-bin/; run examples/*/prepare.sh)"
[[ "$last" =~ ^[1-9][0-9]*$ ]] || die "--last must be a positive whole number, got '$last'"
[ -n "$windows$heads" ] || die "nothing to run: --windows and --heads are both empty"
if [[ "$given" == *" --window-2d "* && -z "$heads" ]]; then
  die "--window-2d sets the 2D runs' window, and --heads \"\" leaves them out"
fi
refusal=$(bash "$ROOT/scripts/train.sh" --data "$data" --arch transformer_csan1d --save-dir "$out/check" --dry-run \
  "${train_args[@]}" -- "${fairseq_args[@]}" 2>&1 > /dev/null) \
  || die "scripts/train.sh refuses these options: $(tail -n 1 <<< "$refusal" | sed 's/^\[train\] error: //')"

# one writer per run folder, every lock taken before any run starts: a second sweep with a run
# of this one is refused at once (it would overwrite that run's logs); sweeps of other points
# share the --out (the Multi30k reproduction runs its points side by side). The kernel frees the
# locks when this script ends, however it ends.
names=()
for m in $windows; do names+=("csan1d_window$m"); done
for n in $heads; do names+=("csan2d_heads$n"); done
[ "$dry_run" = 1 ] || mkdir -p "$out"
if [ "$dry_run" = 0 ] && command -v flock > /dev/null; then
  for name in "${names[@]}"; do
    lock="$out/.$name.lock"
    exec {fd}>>"$lock"
    flock -n "$fd" || die "$out/$name is being written by $(cat "$lock"); wait for it to end, or give another --out"
    : > "$lock"; echo "sweep.sh (pid $$, since $(date +%H:%M:%S))" >> "$lock"
  done
fi

quoted() { local q; q=$(printf '%q ' "$@"); printf '%s' "${q% }"; }
run() {  # run NAME KIND VALUE ARCH FLAGS...
  local name=$1 kind=$2 value=$3 arch=$4; shift 4
  local dir="$out/$name"
  local train=(bash "$ROOT/scripts/train.sh" --data "$data" --arch "$arch" --save-dir "$dir/checkpoints"
               "${train_args[@]}" -- "${fairseq_args[@]}" "$@")
  local evaluate=(bash "$ROOT/scripts/evaluate.sh" --data "$data" --checkpoints "$dir/checkpoints" --out "$dir/eval"
                  --subset valid --last "$last" --name "$name" "${eval_args[@]}")
  if [ "$dry_run" = 1 ]; then
    echo "$name: $(quoted "${train[@]}") && $(quoted "${evaluate[@]}")"
    return
  fi
  echo "[sweep] $name: $arch $*" >&2
  mkdir -p "$dir"
  printf 'kind=%s\nvalue=%s\narch=%s\nflags=%s\n' "$kind" "$value" "$arch" "$*" > "$dir/sweep.env"
  "${train[@]}" > "$dir/train.out" 2>&1 \
    || { tail -20 "$dir/train.out" >&2; die "training $name failed (log: $dir/train.out)"; }
  "${evaluate[@]}" > "$dir/eval.out" 2>&1 \
    || { tail -20 "$dir/eval.out" >&2; die "evaluating $name failed (log: $dir/eval.out)"; }
  grep "tokenised BLEU" "$dir/eval/results.md" >&2
}

for m in $windows; do run "csan1d_window$m" window "$m" transformer_csan1d --csan-window "$m"; done
for n in $heads; do run "csan2d_heads$n" heads "$n" transformer_csan2d --csan-window "$window_2d" --csan-heads "$n"; done
[ "$dry_run" = 0 ] || exit 0
echo "[sweep] done; plot with: python -m fairseq_csan.recipes.analysis.window_sweep --sweep $out --out DIR" >&2
