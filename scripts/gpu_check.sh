#!/usr/bin/env bash
# Every check that needs a GPU, in one command, with one summary at the end (docs/distributed.md):
#   1. tests/test_gpu.py: each architecture's forward and backward in fp16 and bf16 against fp32,
#      incremental decoding against the full pass, a fairseq-train --fp16 smoke run per family,
#      and two-GPU data parallelism when there are two GPUs;
#   2. the benchmark on the GPU in each precision (docs/speed.md): training and beam-search decoding
#      of every architecture against the Transformer, and the dense/banded CSAN crossover;
#   3. the Multi30k reproduction on the GPU, several runs sharing it, trained to convergence.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)

usage() {
  cat <<'EOF'
usage: scripts/gpu_check.sh [--out DIR] [--only tests,benchmark,multi30k] [--precisions fp32,fp16,bf16]
                            [--lengths-from PREFIX] [--raw-dir DIR] [--multi30k-updates N] [--multi30k-jobs N]
                            [--dry-run]

  --out DIR              logs, tables and the Multi30k runs (default runs/gpu_check)
  --only LIST            the steps to run, comma-separated (default: all three)
  --precisions LIST      the benchmark's precisions, comma-separated (default fp32,fp16,bf16)
  --lengths-from PREFIX  the benchmark's sentence lengths: an .en/.de pair (default: newstest2014's,
                         shipped with the package; nothing need be prepared)
  --raw-dir DIR          Multi30k's raw files (default $MULTI30K, else data/multi30k_raw, where the
                         README unpacks them); checked before any GPU work
  --multi30k-updates N   training updates per Multi30k run (default 6000: converged at this size)
  --multi30k-jobs N      Multi30k runs sharing the GPU at once (default 4)
  --dry-run              list what would run, and what a run would stop at, and exit (works
                         without a GPU)
The options of a step that --only leaves out are refused (they would change nothing). On a
machine without a GPU that is the first thing it says.
EOF
}

die() { echo "[gpu_check] error: $*" >&2; exit 2; }
say() { echo "[gpu_check] $*" >&2; }

out="$ROOT/runs/gpu_check" only="tests,benchmark,multi30k" updates=6000 jobs=4 dry_run=0
precisions="fp32,fp16,bf16" lengths="" raw="${MULTI30K:-data/multi30k_raw}" given=" "
while [ $# -gt 0 ]; do
  given+="$1 "
  case "$1" in
    --out) out="${2:?--out needs a folder}"; shift 2 ;;
    --only) only="${2:?--only needs a list}"; shift 2 ;;
    --precisions) precisions="${2:?--precisions needs a list}"; shift 2 ;;
    --lengths-from) lengths="${2:?--lengths-from needs a file prefix}"; shift 2 ;;
    --raw-dir) raw="${2:?--raw-dir needs a folder}"; shift 2 ;;
    --multi30k-updates) updates="${2:?--multi30k-updates needs a number}"; shift 2 ;;
    --multi30k-jobs) jobs="${2:?--multi30k-jobs needs a number}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
# the steps run in the repository: relative paths are the caller's
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
case "$lengths" in /*|"") ;; *) lengths="$PWD/$lengths" ;; esac
case "$raw" in /*) ;; *) raw="$PWD/$raw" ;; esac
for pair in "multi30k-updates:$updates" "multi30k-jobs:$jobs"; do
  [[ "${pair#*:}" =~ ^[1-9][0-9]*$ ]] || die "--${pair%%:*} must be a whole number of 1 or more, got '${pair#*:}'"
done
IFS=, read -r -a steps <<< "$only"
[ ${#steps[@]} -ge 1 ] || die "--only needs at least one of tests, benchmark, multi30k"
for step in "${steps[@]}"; do
  case "$step" in tests|benchmark|multi30k) ;; *) die "--only takes tests, benchmark and multi30k, got '$step'" ;; esac
done
# a step's options with the step left out would be ignored: refused instead
for pair in benchmark:--precisions benchmark:--lengths-from multi30k:--raw-dir multi30k:--multi30k-updates multi30k:--multi30k-jobs; do
  if [[ "$given" == *" ${pair#*:} "* && ",$only," != *",${pair%%:*},"* ]]; then
    die "${pair#*:} sets the ${pair%%:*} step, which --only $only leaves out"
  fi
done
IFS=, read -r -a precision_list <<< "$precisions"
[ ${#precision_list[@]} -ge 1 ] || die "--precisions needs at least one of fp32, fp16, bf16"
for precision in "${precision_list[@]}"; do
  case "$precision" in fp32|fp16|bf16) ;; *) die "--precisions takes fp32, fp16 and bf16, got '$precision'" ;; esac
done

# each step: a name and its command (shell-quoted)
declare -a names=() commands=()
add() { local name=$1; shift; names+=("$name"); commands+=("$(quoted "$@")"); }
quoted() { local q; q=$(printf '%q ' "$@"); printf '%s' "${q% }"; }
for step in "${steps[@]}"; do
  case "$step" in
    tests)
      add tests python -m pytest -rs -v "$ROOT/tests/test_gpu.py" ;;
    benchmark)  # every row of docs/speed.md, and the crossover, in each precision
      for precision in "${precision_list[@]}"; do
        for mode in train decode; do
          add "benchmark-$mode-$precision" python -m fairseq_csan.recipes.benchmark --mode "$mode" --device cuda \
            --precision "$precision" --all ${lengths:+--lengths-from "$lengths"} --out "$out/benchmark_${mode}_$precision.md"
        done
        add "benchmark-crossover-$precision" python -m fairseq_csan.recipes.benchmark --mode crossover --device cuda \
          --precision "$precision" --out "$out/benchmark_crossover_$precision.md"
      done ;;
    multi30k)
      add multi30k python -m fairseq_csan.recipes.multi30k --device cuda --jobs "$jobs" \
        --max-update "$updates" --raw-dir "$raw" --out "$out/multi30k" ;;
  esac
done

# what the steps read, checked before any GPU work: the first problem, or nothing
missing_input() {
  if [[ ",$only," == *,benchmark,* && -n "$lengths" ]]; then
    for lang in en de; do
      [ -f "$lengths.$lang" ] || { echo "--lengths-from: no length source at $lengths.$lang (give an .en/.de pair, e.g. newstest2014, or leave it out for the shipped one)"; return; }
    done
  fi
  if [[ ",$only," == *,multi30k,* ]]; then
    for f in train val test_2016_flickr; do for lang in en de; do
      [ -s "$raw/$f.$lang" ] || { echo "--raw-dir: no Multi30k file $raw/$f.$lang (unpack Multi30k as the README shows, or give --raw-dir DIR)"; return; }
    done; done
  fi
}

if [ "$dry_run" = 1 ]; then
  say "the logs and tables would go to $out"
  for i in "${!names[@]}"; do echo "${names[$i]}: ${commands[$i]}"; done
  problem=$(missing_input)
  [ -z "$problem" ] || say "a run would stop before any GPU work: $problem"
  exit 0
fi

gpus=$(python -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
[ "$gpus" -ge 1 ] || die "no CUDA device here: these checks need a GPU (--dry-run lists them; the CPU-side checks are the normal test suite)"
problem=$(missing_input)
[ -z "$problem" ] || die "$problem"
if [[ ",$only," == *,benchmark,* && ",$precisions," == *,bf16,* ]] &&
   [ "$(python -c "import torch; print(int(torch.cuda.is_bf16_supported()))")" != 1 ]; then
  die "--precisions: this GPU has no bfloat16 support; give --precisions fp32,fp16"
fi
mkdir -p "$out"
say "$gpus GPU(s): $(python -c "import torch; print(torch.cuda.get_device_name(0))"); logs in $out"

declare -a results=()
for i in "${!names[@]}"; do
  log="$out/${names[$i]}.log"
  say "${names[$i]}: ${commands[$i]}"
  started=$SECONDS
  if (cd "$ROOT" && eval "${commands[$i]}") > "$log" 2>&1; then status=passed; else status="FAILED (exit $?)"; fi
  results+=("${names[$i]}: $status in $(( SECONDS - started ))s, log $log")
done

echo
echo "GPU check summary ($gpus GPU(s), $(date -u +%Y-%m-%dT%H:%MZ))"
for line in "${results[@]}"; do echo "  $line"; done
if [ -f "$out/tests.log" ]; then
  echo "  tests: $(tail -n 1 "$out/tests.log")"
fi
for table in "$out"/benchmark_*.md "$out"/multi30k/results.md; do
  if [ -f "$table" ]; then echo; echo "$table:"; cat "$table"; fi
done
if printf '%s\n' "${results[@]}" | grep -q FAILED; then exit 1; fi
