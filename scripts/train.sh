#!/usr/bin/env bash
# Train any architecture on a prepared task with the papers' setup: Transformer base or big
# hyper-parameters (Vaswani et al. 2017) on 8 GPUs x 4096 tokens. See docs/recipes.md
# for where every hyper-parameter comes from.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)

usage() {
  cat <<'EOF'
usage: scripts/train.sh --data DIR --arch ARCH --save-dir DIR [options] [-- FAIRSEQ-TRAIN ARGS]

  --data DIR        a folder made by examples/*/prepare.sh (its data-bin/ is used), or a
                    fairseq data-bin folder
  --arch ARCH       any registered architecture: transformer, transformer_csan2d,
                    transformer_ctxaware_big, ...
  --save-dir DIR    checkpoints and train.log; a run that stopped resumes from
                    DIR/checkpoint_last.pt when started again with the same arguments
  --size base|big   hyper-parameter set (default: big for *_big architectures, else base)
  --gpus N          GPUs on each machine (default: all visible). --update-freq is 8/(K x N)
                    on K machines, so every update sees 8 x 4096 tokens, as on the papers'
                    8 GPUs
  --cpu-processes N data parallelism on the CPU: N processes through torchrun and gloo (they
                    stand in for N GPUs), to check a multi-GPU set-up without GPUs
  --nodes K         machines (default 1), K x --gpus processes in all; see docs/distributed.md
  --launcher L      torchrun (the default with --nodes K > 1 or --cpu-processes: run this
                    script on every machine, each with its --node-rank) or slurm (run it once
                    inside an sbatch or salloc allocation: srun starts one task per GPU and
                    fairseq reads SLURM's variables)
  --node-rank R     this machine's rank, 0 to K-1 (torchrun, K > 1)
  --master-addr H   the rank-0 machine's address (torchrun, K > 1)
  --port P          the rank-0 machine's rendezvous port (default 29500)
  --precision P     fp16 (default), bf16 or fp32
  --share S         embedding sharing: auto (default: all with one joined dictionary, as
                    Vaswani et al.; decoder input/output with two), all, decoder or none
  --max-tokens N    tokens per GPU per step (default 4096)
  --max-update N    training updates (default: 100000 base, 300000 big)
  --seed N          random seed (default 1)
  --tensorboard DIR TensorBoard event files in DIR (fairseq's --tensorboard-logdir; needs the
                    logging extra, which scripts/install.sh installs)
  --wandb PROJECT   log to Weights & Biases (fairseq's --wandb-project; pip install wandb first)
  --dry-run         print the exact command (for 8 GPUs unless --gpus is given) and exit
  --cpu-tiny        smoke run on the CPU: a tiny model (64-dim, 3+2 layers) for a few updates
                    (default 16), a checkpoint every max-update/8 updates, at least 2 (8 checkpoints
                    when max-update >= 16, enough for evaluate.sh's default average of 5),
                    fp32 (or --precision
                    bf16); for tests and first tries
Arguments after -- go to fairseq-train unchanged and override the ones above.
EOF
}

die() { echo "[train] error: $*" >&2; exit 2; }
# shell-quote a word only where needed, so the printed command can be pasted as it is
quote() {
  local w
  for w in "$@"; do
    if [[ "$w" =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then printf '%s ' "$w"; else printf "'%s' " "${w//\'/\'\\\'\'}"; fi
  done
}

data="" arch="" save="" size="" gpus="" precision="" max_tokens=4096 max_update="" seed=1
dry_run=0 tiny=0 extra=() share_mode=auto tensorboard="" wandb=""
cpu_procs="" nodes=1 launcher="" node_rank="" master_addr="" port=29500
while [ $# -gt 0 ]; do
  case "$1" in
    --data) data="${2:?--data needs a folder}"; shift 2 ;;
    --arch) arch="${2:?--arch needs a name}"; shift 2 ;;
    --save-dir) save="${2:?--save-dir needs a folder}"; shift 2 ;;
    --size) size="${2:?--size needs base or big}"; shift 2 ;;
    --gpus) gpus="${2:?--gpus needs a number}"; shift 2 ;;
    --cpu-processes) cpu_procs="${2:?--cpu-processes needs a number}"; shift 2 ;;
    --nodes) nodes="${2:?--nodes needs a number}"; shift 2 ;;
    --launcher) launcher="${2:?--launcher needs torchrun or slurm}"; shift 2 ;;
    --node-rank) node_rank="${2:?--node-rank needs a number}"; shift 2 ;;
    --master-addr) master_addr="${2:?--master-addr needs a host name or address}"; shift 2 ;;
    --port) port="${2:?--port needs a number}"; shift 2 ;;
    --precision) precision="${2:?--precision needs fp16, bf16 or fp32}"; shift 2 ;;
    --max-tokens) max_tokens="${2:?--max-tokens needs a number}"; shift 2 ;;
    --max-update) max_update="${2:?--max-update needs a number}"; shift 2 ;;
    --seed) seed="${2:?--seed needs a number}"; shift 2 ;;
    --share) share_mode="${2:?--share needs auto, all, decoder or none}"; shift 2 ;;
    --tensorboard) tensorboard="${2:?--tensorboard needs a folder}"; shift 2 ;;
    --wandb) wandb="${2:?--wandb needs a project name}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --cpu-tiny) tiny=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) usage >&2; die "unknown argument '$1' (fairseq-train arguments go after --)" ;;
  esac
done

[ -n "$data" ] || die "--data is required"
[ -n "$arch" ] || die "--arch is required"
[ -n "$save" ] || die "--save-dir is required"
for pair in "max-tokens:$max_tokens" "seed:$seed" ${max_update:+"max-update:$max_update"} ${gpus:+"gpus:$gpus"}; do
  [[ "${pair#*:}" =~ ^[0-9]+$ ]] || die "--${pair%%:*} must be a whole number, got '${pair#*:}'"
done
given_precision=$precision
precision=${precision:-fp16}
case "$precision" in fp16|bf16|fp32) ;; *) die "--precision must be fp16, bf16 or fp32, got '$precision'" ;; esac
# data parallelism: processes per machine, machines, and what starts the processes
for pair in "nodes:$nodes" "port:$port" ${cpu_procs:+"cpu-processes:$cpu_procs"} ${node_rank:+"node-rank:$node_rank"}; do
  [[ "${pair#*:}" =~ ^[0-9]+$ ]] || die "--${pair%%:*} must be a whole number, got '${pair#*:}'"
done
[ "$nodes" -ge 1 ] || die "--nodes must be 1 or more, got $nodes"
[ -z "$cpu_procs" ] || [ "$cpu_procs" -ge 1 ] || die "--cpu-processes must be 1 or more, got $cpu_procs"
[ -z "$cpu_procs" ] || [ -z "$gpus" ] || die "--cpu-processes and --gpus exclude each other: CPU processes stand in for GPUs"
case "$launcher" in ""|torchrun|slurm) ;; *) die "--launcher must be torchrun or slurm, got '$launcher'" ;; esac
[ -z "$launcher" ] && { [ -n "$cpu_procs" ] || [ "$nodes" -gt 1 ]; } && launcher=torchrun
if [ "$launcher" = torchrun ] && [ "$nodes" -gt 1 ]; then
  [ -n "$node_rank" ] && [ -n "$master_addr" ] || die "--nodes $nodes with torchrun needs --node-rank (0 to $((nodes - 1))) and --master-addr (the rank-0 machine)"
  [ "$node_rank" -lt "$nodes" ] || die "--node-rank must be 0 to $((nodes - 1)), got $node_rank"
elif [ -n "$node_rank$master_addr" ]; then
  die "--node-rank and --master-addr are for torchrun on --nodes K > 1 machines"
fi
[ "$launcher" = slurm ] && [ -n "$cpu_procs" ] && die "--launcher slurm counts GPUs; with --cpu-processes use --launcher torchrun (run it under srun, one task per machine, if you must)"
[ "$tiny" = 1 ] && [ -z "$cpu_procs" ] && [ -n "$launcher" ] && die "--cpu-tiny alone is one CPU process; add --cpu-processes N for several (--nodes, --launcher)"
if [ -n "$cpu_procs" ]; then
  [ "$given_precision" = fp16 ] && die "--precision fp16 needs a GPU; --cpu-processes takes fp32 (default) or bf16"
  [ -n "$given_precision" ] || precision=fp32
fi
if [ -z "$size" ]; then
  case "$arch" in *_big|transformer_vaswani_wmt_en_de_big|transformer_wmt_en_de_big*) size=big ;; *) size=base ;; esac
fi
case "$size" in base|big) ;; *) die "--size must be base or big, got '$size'" ;; esac
case "$share_mode" in auto|all|decoder|none) ;; *) die "--share must be auto, all, decoder or none, got '$share_mode'" ;; esac

# the binarised data and its languages
bin="$data"
[ -d "$data/data-bin" ] && bin="$data/data-bin"
[ -d "$bin" ] || die "no data folder $data (make one with examples/*/prepare.sh)"
bin=$(cd "$bin" && pwd)
dicts=("$bin"/dict.*.txt)
[ ${#dicts[@]} = 2 ] && [ -f "${dicts[0]}" ] || die "$bin must hold exactly two dict.LANG.txt files (a fairseq-preprocess output)"
src="" tgt=""
if [ -f "$data/recipe.env" ]; then
  src=$(sed -n 's/^src=//p' "$data/recipe.env"); tgt=$(sed -n 's/^tgt=//p' "$data/recipe.env")
else
  for f in "$bin"/train.*-*.*.bin; do
    [ -f "$f" ] || die "no train.*.bin in $bin"
    pair=$(basename "$f"); pair=${pair#train.}; pair=${pair%%.*}; src=${pair%-*}; tgt=${pair#*-}; break
  done
fi
# one dictionary for both sides (joint BPE): share every embedding, as Vaswani et al. do;
# two dictionaries: share the decoder's input and output embeddings only
joined=0
cmp -s "$bin/dict.$src.txt" "$bin/dict.$tgt.txt" && joined=1
if [ "$share_mode" = auto ]; then share_mode=decoder; [ "$joined" = 1 ] && share_mode=all; fi
[ "$share_mode" = all ] && [ "$joined" = 0 ] && die "--share all needs one joined dictionary; $bin has two different ones"
case "$share_mode" in
  all) share=(--share-all-embeddings) ;;
  decoder) share=(--share-decoder-input-output-embed) ;;
  none) share=() ;;
esac

# hyper-parameters (Vaswani et al. 2017, section 5; docs/recipes.md)
if [ "$size" = base ]; then d_model=512 dropout=0.1 default_updates=100000
else d_model=1024 dropout=0.3 default_updates=300000; fi
warmup=4000
# eq. 3's peak learning rate, d_model^-0.5 * warmup^-0.5, reached at the end of the warm-up
lr=$(python -c "print(f'{$d_model ** -0.5 * $warmup ** -0.5:.3g}')")
given_max_update=$max_update
max_update=${max_update:-$default_updates}

runner=(fairseq-train)
# fairseq 0.12 makes --bf16 imply --tpu; this entry point is fairseq-train without that
[ "$precision" = bf16 ] && runner=(python -m fairseq_csan.train)

if [ "$tiny" = 1 ]; then
  gpus=0 update_freq=1
  max_update=${given_max_update:-16}
  hw=(--cpu --num-workers 0)
  # fp32 unless asked; bf16 works on the CPU, fp16 does not
  case "$given_precision" in
    bf16) hw+=(--bf16) ;;
    fp16) die "--precision fp16 needs a GPU; --cpu-tiny takes fp32 (default) or bf16" ;;
  esac
  tiny_args=(--encoder-embed-dim 64 --encoder-ffn-embed-dim 128 --encoder-attention-heads 4
             --encoder-layers 3 --decoder-embed-dim 64 --decoder-ffn-embed-dim 128
             --decoder-attention-heads 4 --decoder-layers 2)
  max_tokens=1024 warmup=4 lr=0.001 log_every=2
  save_every=$(( max_update / 8 )); [ "$save_every" -ge 2 ] || save_every=2  # never 1: a rerun of a finished run takes one more update, which must not add a checkpoint
else
  [ -n "$cpu_procs" ] && gpus=$cpu_procs  # CPU processes stand in for GPUs
  if [ -z "$gpus" ]; then
    if [ "$dry_run" = 1 ]; then gpus=8
    else gpus=$(python -c "import torch; print(torch.cuda.device_count())"); fi
  fi
  [ "$gpus" -ge 1 ] || die "no GPU found: train on GPUs, or use --cpu-tiny for a smoke run or --dry-run to see the command"
  world=$(( nodes * gpus ))
  update_freq=$(( (8 + world - 1) / world ))
  if [ $(( update_freq * world )) != 8 ]; then
    echo "[train] warning: $world GPUs x update-freq $update_freq = $((update_freq * world)) batches per update, not the papers' 8;" \
      "--max-tokens $(( 8 * max_tokens / (update_freq * world) )) keeps 8 x $max_tokens tokens per update" >&2
  fi
  hw=(--distributed-world-size "$world" --update-freq "$update_freq")
  [ "$precision" = fp16 ] && hw+=(--fp16)
  [ "$precision" = bf16 ] && hw+=(--bf16)
  tiny_args=()
  save_every=1000 log_every=100
fi

# several processes (docs/distributed.md): torchrun starts them on each machine, or srun
# starts one task per GPU and fairseq reads SLURM's variables
procs=${cpu_procs:-$gpus}
if [ -n "$cpu_procs" ]; then
  if [ "$tiny" = 1 ]; then hw+=(--distributed-world-size "$(( nodes * procs ))"); else hw=(--cpu "${hw[@]}"); fi
  hw+=(--distributed-backend gloo)
fi
if [ "$launcher" = slurm ]; then
  runner=(srun --nodes "$nodes" --ntasks-per-node "$procs" --gpus-per-node "$procs" "${runner[@]}")
  hw+=(--distributed-port "$port")
elif [ "$launcher" = torchrun ]; then
  rendezvous=(--standalone)
  [ "$nodes" -gt 1 ] && rendezvous=(--nnodes "$nodes" --node_rank "$node_rank" --master_addr "$master_addr" --master_port "$port")
  if [ "${runner[0]}" = python ]; then runner=(torchrun "${rendezvous[@]}" --nproc_per_node "$procs" "${runner[@]:1}")
  else runner=(torchrun "${rendezvous[@]}" --nproc_per_node "$procs" --no-python "${runner[@]}"); fi
fi

logging=()
if [ -n "$tensorboard" ]; then
  [ "$dry_run" = 1 ] || python -c "import torch.utils.tensorboard" 2>/dev/null \
    || die "--tensorboard needs TensorBoard: pip install -e '$ROOT[logging]' (scripts/install.sh installs it)"
  logging+=(--tensorboard-logdir "$tensorboard")
fi
if [ -n "$wandb" ]; then
  [ "$dry_run" = 1 ] || python -c "import wandb" 2>/dev/null || die "--wandb needs the wandb package: pip install wandb"
  logging+=(--wandb-project "$wandb")
fi

cmd=("${runner[@]}" "$bin" --user-dir "$ROOT/fairseq_csan" --arch "$arch" "${tiny_args[@]}"
  --source-lang "$src" --target-lang "$tgt" "${share[@]}"
  --optimizer adam --adam-betas "(0.9, 0.98)" --adam-eps 1e-9
  --lr-scheduler inverse_sqrt --lr "$lr" --warmup-updates "$warmup" --warmup-init-lr 1e-07
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1
  --dropout "$dropout" --weight-decay 0.0 --clip-norm 0.0
  --max-tokens "$max_tokens" --max-update "$max_update" "${hw[@]}"
  --save-dir "$save" --save-interval-updates "$save_every" --keep-interval-updates 20 --no-epoch-checkpoints
  --log-format simple --log-interval "$log_every" --seed "$seed" "${logging[@]}"
  "${extra[@]}")

if [ "$dry_run" = 1 ]; then
  quote "${cmd[@]}"; echo
  exit 0
fi
if [ "$launcher" = slurm ]; then
  [ -n "${SLURM_JOB_ID:-}" ] || die "--launcher slurm runs inside a SLURM allocation: sbatch (or salloc) a script that calls train.sh once"
  command -v srun >/dev/null || die "--launcher slurm needs srun on PATH"
fi
[ "$launcher" = torchrun ] && { command -v torchrun >/dev/null || die "torchrun not found: it comes with torch; activate the environment"; }

# a save folder belongs to one run: resume it, never mix two
mkdir -p "$save"
identity="arch=$arch
data=$bin
size=$size
seed=$seed
share=$share_mode
tiny=$tiny"
if [ -f "$save/run.env" ] && [ "$(cat "$save/run.env")" != "$identity" ]; then
  die "$save holds another run (see $save/run.env); give a new --save-dir"
fi
printf '%s\n' "$identity" > "$save/run.env"
if [ -f "$save/checkpoint_last.pt" ]; then
  echo "[train] resuming from $save/checkpoint_last.pt" >&2
fi
{ quote "${cmd[@]}"; echo; } >> "$save/train_command.sh"
echo "[train] $(quote "${cmd[@]}")" >&2
# machines other than rank 0 (torchrun, --nodes K) log beside it, not into its log
log="$save/train.log"
[ "${node_rank:-0}" = 0 ] || log="$save/train.node$node_rank.log"
echo "[train] log: $log (the 'ups' column is training steps/s, the papers' Speed)" >&2
"${cmd[@]}" 2>&1 | tee -a "$log"
python -m fairseq_csan.recipes.score speed "$log" >&2 || true
