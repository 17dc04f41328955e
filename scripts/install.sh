#!/usr/bin/env bash
# Install fairseq_csan into the active Python environment: a fresh one, or one that already has
# torch and fairseq (they are kept, with their pins; see docs/environments.md).
# usage: bash scripts/install.sh [--dry-run] [--wheelhouse DIR]
#        bash scripts/install.sh --make-wheelhouse DIR [--python X.Y] [--with-torch] [--node-freeze FILE]
#   --dry-run    print what the environment holds and the commands a real run would run; change nothing
#   --wheelhouse DIR  install from DIR alone, never a package index (a machine without network);
#                DIR is made by --make-wheelhouse on a connected machine (docs/environments.md)
#   --make-wheelhouse DIR  fill the new folder DIR with every wheel an offline install needs
#                (fairseq-fixed compiled for that Python, the requirements, EXTRAS' packages;
#                EXTRAS defaults to gpu-check here: what scripts/gpu_check.sh runs), for
#                Linux x86-64 and Python X.Y (--python; default: this one; another is looked for
#                as pythonX.Y on PATH, then in pyenv's versions); torch only with --with-torch
#                (TORCH_SPEC, from TORCH_INDEX if set); --node-freeze FILE is the node's
#                `pip list --format=freeze`: the wheels keep to its versions, and what it has
#                already is left out
#   TORCH_SPEC   torch requirement, installed where torch is missing (default: torch==2.13.0). Set it,
#                or TORCH_INDEX, to install torch even where one is installed (that replaces it)
#   TORCH_INDEX  a package index to take torch from, e.g. PyTorch's CUDA wheel index on a GPU
#                machine: TORCH_INDEX=https://download.pytorch.org/whl/cu128 bash scripts/install.sh
#                (default: none, pip's own index)
#   FAIRSEQ_SPEC fairseq distribution, installed where no fairseq is (default: fairseq-fixed==0.12.3.1,
#                see docs/troubleshooting.md); an installed fairseq (PyPI 0.12.2, GitHub main, fairseq-fixed)
#                is always kept
#   EXTRAS       this package's extras (default: test,logging; the test extra brings the
#                recipes' tokenisers and the analysis plots, logging brings TensorBoard and
#                tensorboardX; with --wheelhouse, the wheelhouse's; others: recipes, zh, ja,
#                analysis, gpu-check)
#   IMPORT_CHECK 0 skips importing torch, fairseq and fairseq_csan at the end (default 1)
#   RESOLVE_LIMIT seconds for pip to resolve the plugin's requirements before anything of them is
#                installed (default 90); a requirement with no release for this Python is named
set -euo pipefail

TORCH_EXPLICIT=${TORCH_SPEC:+1}${TORCH_INDEX:+1}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TORCH_INDEX=${TORCH_INDEX:-}
FAIRSEQ_EXPLICIT=${FAIRSEQ_SPEC:+1}
FAIRSEQ_SPEC=${FAIRSEQ_SPEC:-fairseq-fixed==0.12.3.1}
EXTRAS_EXPLICIT=${EXTRAS:+1}
EXTRAS=${EXTRAS:-test,logging}
IMPORT_CHECK=${IMPORT_CHECK:-1}
RESOLVE_LIMIT=${RESOLVE_LIMIT:-90}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python}
dry_run=0 wheelhouse="" make_wheelhouse="" target_python="" with_torch=0 freeze=""
usage() { echo "[install] error: $* (bash scripts/install.sh --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --wheelhouse|--make-wheelhouse|--python|--node-freeze)
      [ $# -ge 2 ] && [ -n "$2" ] && [[ "$2" != --* ]] || usage "$1 needs a value"
      case "$1" in
        --wheelhouse) wheelhouse=$2 ;; --make-wheelhouse) make_wheelhouse=$2 ;;
        --python) target_python=$2 ;; *) freeze=$2 ;;
      esac
      shift ;;
    --with-torch) with_torch=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage "unknown argument '$1' (allowed: --dry-run, --wheelhouse DIR, --make-wheelhouse DIR, --python X.Y, --with-torch, --node-freeze FILE, --help)" ;;
  esac
  shift
done
if [ -n "$make_wheelhouse" ]; then
  [ "$dry_run" = 0 ] && [ -z "$wheelhouse" ] || usage "--make-wheelhouse goes alone (with --python, --with-torch, --node-freeze): it installs nothing"
  [ -z "$freeze" ] || [ -f "$freeze" ] || usage "--node-freeze $freeze: no such file"
else
  [ -z "$target_python" ] || usage "--python X.Y is the Python a wheelhouse is made for: it goes with --make-wheelhouse"
  [ "$with_torch" = 0 ] || usage "--with-torch puts torch into a wheelhouse: it goes with --make-wheelhouse"
  [ -z "$freeze" ] || usage "--node-freeze FILE says what a wheelhouse can leave out: it goes with --make-wheelhouse"
fi
case "$IMPORT_CHECK" in 0|1) ;; *) echo "[install] error: IMPORT_CHECK must be 0 or 1, got '$IMPORT_CHECK'" >&2; exit 2 ;; esac
[[ "$RESOLVE_LIMIT" =~ ^[1-9][0-9]*$ ]] || { echo "[install] error: RESOLVE_LIMIT must be a whole number of seconds, got '$RESOLVE_LIMIT'" >&2; exit 2; }
[[ "$EXTRAS" =~ ^[A-Za-z0-9_,-]*$ ]] || { echo "[install] error: EXTRAS must be comma-separated extra names (e.g. test,logging), got '$EXTRAS'" >&2; exit 2; }

say() { echo "[install] $*"; }
die() { echo "[install] error: $*" >&2; exit 1; }

if [ -n "$make_wheelhouse" ]; then
  # (on a connected machine: nothing here is installed; scripts/install_env.py does the work)
  target_python=${target_python:-$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')}
  [ -n "$EXTRAS_EXPLICIT" ] || EXTRAS=gpu-check
  TORCH_SPEC=$TORCH_SPEC TORCH_INDEX=$TORCH_INDEX FAIRSEQ_SPEC=$FAIRSEQ_SPEC EXTRAS=$EXTRAS \
    exec "$PY" "$ROOT/scripts/install_env.py" make-wheelhouse "$make_wheelhouse" "$target_python" "$with_torch" \
    "${freeze:+$(cd "$(dirname "$freeze")" && pwd)/$(basename "$freeze")}"
fi

# --- what the environment holds: distribution versions from their metadata (nothing is imported) ---
probe=$("$PY" "$ROOT/scripts/install_env.py" probe) || die "could not run $PY (set PYTHON to the environment's interpreter)"
field() { awk -v k="$1" '$1 == k { $1 = ""; sub(/^ /, ""); print }' <<< "$probe"; }
PYVER=$(field python)
TORCH_HAVE=$(field torch)
FAIRSEQ_MODULE=$(field fairseq_module)
read -r -a FAIRSEQ_DISTS <<< "$(field fairseq_dists)"
CONSTRAINTS="$(field prefix)/fairseq_csan-constraints.txt"

if [ -z "${VIRTUAL_ENV:-}" ] && [ -z "${CONDA_PREFIX:-}" ]; then
  echo "[install] warning: no virtual environment is active; installing into $(field prefix)" >&2
fi
case "$PYVER" in
  3.[89].*|3.1[0-3].*) ;;
  *) die "Python $PYVER is outside the supported 3.8-3.13 (docs/environments.md)" ;;
esac
# --- offline: everything from the wheelhouse, which must be whole and made for this Python ---
CMDS=()       # commands, one string each: printed by --dry-run, run otherwise
PINS=()       # name==version lines of the constraints file
add() { local q; q=$(printf '%q ' "$@"); CMDS+=("${q% }"); }
if [ -n "$wheelhouse" ]; then
  [ -d "$wheelhouse" ] || die "--wheelhouse $wheelhouse: no such folder"
  wheelhouse=$(cd "$wheelhouse" && pwd)
  [ -z "$TORCH_INDEX" ] || die "TORCH_INDEX=$TORCH_INDEX with --wheelhouse: an offline install takes torch from the wheelhouse (--make-wheelhouse --with-torch) or keeps the installed one"
  made=$("$PY" "$ROOT/scripts/install_env.py" wheelhouse-check "$wheelhouse") || exit 1
  wh() { awk -v k="$1" '$1 == k { $1 = ""; sub(/^ /, ""); print }' <<< "$made"; }
  if [ -n "$FAIRSEQ_EXPLICIT" ] && [ "$FAIRSEQ_SPEC" != "$(wh fairseq)" ]; then
    die "FAIRSEQ_SPEC=$FAIRSEQ_SPEC, but the wheelhouse holds $(wh fairseq)"
  fi
  FAIRSEQ_SPEC=$(wh fairseq)
  if [ "$(wh torch)" != - ] && { [ -z "$TORCH_HAVE" ] || [ -n "$TORCH_EXPLICIT" ]; }; then
    [ -z "$TORCH_EXPLICIT" ] || [ "$TORCH_SPEC" = "$(wh torch)" ] || die "TORCH_SPEC=$TORCH_SPEC, but the wheelhouse holds $(wh torch)"
    TORCH_SPEC=$(wh torch)
  elif [ -z "$TORCH_HAVE" ] || [ -n "$TORCH_EXPLICIT" ]; then
    if [ -n "$TORCH_HAVE" ]; then why="TORCH_SPEC=$TORCH_SPEC asks for torch, but"; else why="no torch is installed, and"; fi
    die "$why the wheelhouse holds none: install torch first (a cluster module, a container), or make the wheelhouse with --with-torch"
  fi
  [ -n "$EXTRAS_EXPLICIT" ] || EXTRAS=$(wh extras)
  for extra in ${EXTRAS//,/ }; do
    [[ ",$(wh extras)," == *",$extra,"* ]] || die "EXTRAS=$EXTRAS, but the wheelhouse holds the packages of the extras $(wh extras) only: make it with EXTRAS=$EXTRAS"
  done
  say "offline: every package from the wheelhouse $wheelhouse (made $(wh made)), no package index"
  # (as a file: URL, which has no blank: pip splits PIP_FIND_LINKS at blanks)
  add export PIP_NO_INDEX=1 "PIP_FIND_LINKS=$(wh uri)"
fi

FAIRSEQ_HAVE=none
if [ -n "$FAIRSEQ_MODULE" ]; then FAIRSEQ_HAVE=${FAIRSEQ_DISTS[*]:-"$FAIRSEQ_MODULE (no distribution metadata)"}; fi
say "environment: Python $PYVER, torch ${TORCH_HAVE:-none}, fairseq $FAIRSEQ_HAVE"

# --- the plan: what is kept, what is installed; pins go into a pip constraints file ---

if [ -n "$TORCH_HAVE" ] && [ -z "$TORCH_EXPLICIT" ]; then
  major=${TORCH_HAVE%%.*}; rest=${TORCH_HAVE#*.}; minor=${rest%%.*}
  if [ "$major" -lt 1 ] || { [ "$major" = 1 ] && [ "${minor%%[!0-9]*}" -lt 13 ]; }; then
    die "torch $TORCH_HAVE is older than the supported 1.13; set TORCH_SPEC (e.g. TORCH_SPEC=torch==1.13.1) to replace it"
  fi
  say "1/4 torch $TORCH_HAVE is installed: kept (TORCH_SPEC or TORCH_INDEX replaces it)"
  PINS+=("torch==$TORCH_HAVE")
  # what is built against it or pinned beside it stays too
  for name in torchaudio numpy; do
    have=$(field "$name")
    if [ -n "$have" ]; then PINS+=("$name==$have"); fi
  done
else
  say "1/4 $TORCH_SPEC${TORCH_INDEX:+ from $TORCH_INDEX}${TORCH_HAVE:+ (replaces torch $TORCH_HAVE, as TORCH_SPEC/TORCH_INDEX ask)}"
  if [ -n "$TORCH_INDEX" ]; then
    # torch alone from its own index; everything else from pip's default index
    add "$PY" -m pip install --index-url "$TORCH_INDEX" "$TORCH_SPEC"
  else
    add "$PY" -m pip install "$TORCH_SPEC"
  fi
  PINS+=("$TORCH_SPEC")
fi

# before fairseq and the plugin: pip resolves the plugin and its extras beside the pins, installing
# nothing, within RESOLVE_LIMIT seconds; a requirement without a release for this Python is
# named in one line instead of pip backtracking for many minutes (after torch: the pins name it)
add "$PY" "$ROOT/scripts/install_env.py" resolvable "$CONSTRAINTS" "$ROOT[$EXTRAS]" "$RESOLVE_LIMIT"

if [ -n "$FAIRSEQ_MODULE" ]; then
  [ -z "$FAIRSEQ_EXPLICIT" ] || die "FAIRSEQ_SPEC=$FAIRSEQ_SPEC, but a fairseq is installed ($FAIRSEQ_HAVE); two distributions of the module fairseq overwrite each other: uninstall it first or leave FAIRSEQ_SPEC unset to keep it"
  [ "${#FAIRSEQ_DISTS[@]}" -le 1 ] || echo "[install] warning: several distributions provide the module fairseq: ${FAIRSEQ_DISTS[*]}; their files overwrite each other (keep one: pip uninstall the others)" >&2
  say "2/4 fairseq is installed ($FAIRSEQ_HAVE): kept, with its hydra-core and omegaconf"
  # (a fairseq on PYTHONPATH, without distribution metadata, has no version to pin)
  if [ "${#FAIRSEQ_DISTS[@]}" -gt 0 ]; then PINS+=("${FAIRSEQ_DISTS[@]}"); fi
  for name in hydra-core omegaconf; do
    have=$(field "$name")
    if [ -n "$have" ]; then PINS+=("$name==$have"); fi
  done
else
  if [ -n "$wheelhouse" ]; then
    say "2/4 $FAIRSEQ_SPEC, compiled into the wheelhouse, after numpy and cython"
  else
    say "2/4 $FAIRSEQ_SPEC from source, against the torch above (about 4.5 minutes on 2 cores), after numpy and cython (it builds against them)"
  fi
  add "$PY" -m pip install -c "$CONSTRAINTS" numpy cython
  # --no-build-isolation: build against the installed torch instead of downloading another;
  # --no-deps: skip torchaudio, which fails to load beside torch 2.13; its other requirements,
  # with their exact pins (hydra-core, omegaconf), next, read from its metadata
  add "$PY" -m pip install --no-build-isolation --no-deps "$FAIRSEQ_SPEC"
  add "$PY" "$ROOT/scripts/install_env.py" fairseq-deps "$CONSTRAINTS" "$FAIRSEQ_SPEC"
  PINS+=("$FAIRSEQ_SPEC")
fi

say "3/4 fairseq_csan (editable) with its requirements and the extras $EXTRAS; nothing pinned changes"
add "$PY" -m pip install -c "$CONSTRAINTS" -e "$ROOT[$EXTRAS]"
# an editable install leaves the package's bytecode to its first import, which writes none where
# PYTHONDONTWRITEBYTECODE is set (some containers and CI machines), so every process would compile
# it again: compile it now, as pip does for an installed package (an edited module is compiled
# again as it is imported, as always)
add "$PY" -m compileall -q "$ROOT/fairseq_csan"

say "constraints file $CONSTRAINTS: ${PINS[*]}"
checks="every pinned distribution has its version, pip check lists no new problem"
if [ "$IMPORT_CHECK" = 1 ]; then checks+=", torch, fairseq and fairseq_csan import"; fi
say "4/4 checks: $checks"

# the checks, run after the commands (scripts/install_env.py)
add "$PY" "$ROOT/scripts/install_env.py" pins "$CONSTRAINTS"
if [ "$IMPORT_CHECK" = 1 ]; then add "$PY" "$ROOT/scripts/install_env.py" imports; fi

if [ "$dry_run" = 1 ]; then
  echo "cat > $(printf '%q' "$CONSTRAINTS") <<'EOF'"
  printf '%s\n' "${PINS[@]}"
  echo EOF
  printf '%s\n' "${CMDS[@]}"
  echo "# then $PY -m pip check, before and after: the run fails where it lists a problem it did not list before"
  exit 0
fi

# pip check before: only what the installation adds counts against it (fairseq-fixed's missing
# torchaudio is expected where step 2 installed it; see docs/troubleshooting.md)
pip_check() { "$PY" -m pip check 2>&1 | grep -v -i -E "^no broken requirements|requires torchaudio, which is not installed" | sort || true; }
before=$(pip_check)
printf '%s\n' "${PINS[@]}" > "$CONSTRAINTS"
for cmd in "${CMDS[@]}"; do
  say "run: $cmd"
  eval "$cmd" || die "this command failed: $cmd${PINS:+ (it kept the constraints in $CONSTRAINTS: a requirement that conflicts with them is named above)}"
done
new=$(comm -13 <(echo "$before") <(pip_check) | grep . || true)
[ -z "$new" ] || die "pip check lists new problems after the installation:
$new"
say "pip check: no new problem"
say "done (pins kept in $CONSTRAINTS; pip install -c it to add more packages without changing them)"
