#!/usr/bin/env bash
# Train a position method's LM, or the sinusoidal twin (stock fairseq), at one training length L.
#
#   scripts/train.sh METHOD L DATA SAVE_DIR [PRESET] [-- extra fairseq-train flags]
#
# METHOD: a position method of fairseq_alibi/positions/ (alibi, rotary, t5_bias, nope, kerple,
# sandwich, fire, learned_alibi, fox, ...: --arch METHOD_transformer_lm_PRESET) | sinusoidal.  PRESET: wiki103 (default; the paper's
# recipe) | small (CPU scale) | bloom_small (ALiBi only: the small recipe in BLOOM's layout, which
# fairseq-alibi-export-hf writes as stock BLOOM) | gpt2_small (the small recipe in GPT-2's layout:
# METHOD learned, an imported GPT-2 continued, or alibi, its conversion; fine-tune with
# --finetune-from-model). Method options go after --, e.g. -- --kerple-variant power.
# TensorBoard logs go to SAVE_DIR/tensorboard (view: tensorboard --logdir SAVE_DIR/tensorboard).
# Rerunning the same command resumes from SAVE_DIR/checkpoint_last.pt (fairseq's own resume); a
# finished run (its --max-update reached) is left as it is. A SAVE_DIR holding another run (another
# architecture or L, or started with other flags: SAVE_DIR/train_flags.json) is refused;
# CONTINUE_RUN=1 continues it anyway. One training per SAVE_DIR at a
# time (SAVE_DIR/.train.lock); DATA's dict.txt is kept in SAVE_DIR, and a fine-tune
# (--finetune-from-model) from a checkpoint of another dictionary is refused.
# Multi-GPU on one node: just run it (fairseq spawns one process per GPU). Multi-node: run it
# under SLURM's srun or torchrun, which set SLURM_NTASKS / WORLD_SIZE.
set -euo pipefail

# The methods and their inference-only flags: one definition, the registry (fairseq_alibi/methods.py
# reads it; torch, no fairseq).
{ read -r -a methods; read -r -a inference_only; } < <(python3 -c '
from fairseq_alibi.methods import CAUSAL_METHODS, INFERENCE_ONLY
print(*CAUSAL_METHODS); print(*(flag for flags in INFERENCE_ONLY.values() for flag in flags))
')
usage="usage: scripts/train.sh $(IFS='|'; echo "${methods[*]}")|sinusoidal|learned L DATA SAVE_DIR [wiki103|small|bloom_small|gpt2_small] [-- flags]"
case ${1:-} in -h|--help) source "$(dirname "$0")/usage.sh"; script_help "$0"; echo "$usage"; exit 0 ;; esac
[ $# -ge 4 ] || { echo "$usage" >&2; exit 2; }
method=$1; length=$2; data=$3; save_dir=$4
shift 4
preset=wiki103
if [ $# -gt 0 ] && [ "$1" != "--" ]; then preset=$1; shift; fi
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")/.." && pwd)

fail() { echo "error: $*" >&2; exit 1; }
[ -f "$data/dict.txt" ] || fail "$data has no dict.txt: run scripts/prepare-wikitext.sh first ($usage)"
source "$here/scripts/usage.sh"
positive_integers L "$length"
for flag in "$@"; do
  for evaluation_only in "${inference_only[@]}"; do
    case $flag in "$evaluation_only"*)
      fail "$flag is for evaluation (scripts/eval.sh's SCALING): a model trained with it would be scored scaled ever after" ;;
    esac
  done
done
# The small preset's adaptive input/softmax bands end at word 10000 (unless the flags say otherwise).
if [ "$preset" = small ] && [[ " $* " != *" --adaptive-softmax-cutoff "* ]]; then
  words=$(( $(wc -l < "$data/dict.txt") + 4 ))  # fairseq's 4 special symbols come first
  [ "$words" -ge 10000 ] || fail "the small preset's adaptive cutoffs 2000,10000 need at least 10000 words, $data has $words: pass -- --adaptive-input-cutoff A,B --adaptive-softmax-cutoff A,B with B <= $words"
fi

case $preset:$method in
  wiki103:sinusoidal) model=(--arch transformer_lm_wiki103) ;;
  bloom_small:alibi)  model=(--user-dir "$here/fairseq_alibi" --arch alibi_transformer_lm_bloom_small) ;;
  bloom_small:*)      fail "the bloom_small preset is ALiBi's in BLOOM's layout (stock BLOOM computes no other method): use METHOD alibi" ;;
  gpt2_small:alibi)   model=(--user-dir "$here/fairseq_alibi" --arch alibi_transformer_lm_gpt2_small) ;;
  gpt2_small:learned) read -r -a model <<< "$(python3 -c 'from fairseq_alibi.decoder import GPT2_SMALL_TWIN_FLAGS; print(GPT2_SMALL_TWIN_FLAGS)')" ;;
  gpt2_small:*)       fail "the gpt2_small preset is an imported GPT-2 (METHOD learned) and its ALiBi conversion (METHOD alibi): use one of those" ;;
  small:sinusoidal)   read -r -a model <<< "$(python3 -c 'from fairseq_alibi.decoder import SMALL_TWIN_FLAGS; print(SMALL_TWIN_FLAGS)')" ;;
  wiki103:*|small:*)
    [[ " ${methods[*]} " == *" $method "* ]] || fail "unknown method '$method': use one of ${methods[*]} sinusoidal"
    model=(--user-dir "$here/fairseq_alibi" --arch "${method}_transformer_lm_$preset") ;;
  *) fail "unknown preset '$preset': use wiki103, small, bloom_small or gpt2_small" ;;
esac

# Processes in this job: the launcher's world size, else one per GPU on this node. torch (seconds
# to import) is asked only where a GPU driver shows (NVIDIA's, or ROCm's /dev/kfd); without one it
# would count 0.
node_gpus=0
if [ -e /proc/driver/nvidia ] || [ -e /dev/nvidiactl ] || [ -e /dev/nvidia0 ] || [ -e /dev/kfd ] || [ -e /dev/dxg ]; then
  node_gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')
fi
world=${WORLD_SIZE:-${SLURM_NTASKS:-$node_gpus}}
case $world in ''|*[!0-9]*) fail "WORLD_SIZE / SLURM_NTASKS must be a whole number of processes, got '$world'" ;; esac
if [ "$node_gpus" -eq 0 ] && [ "$world" -gt 1 ]; then
  fail "WORLD_SIZE / SLURM_NTASKS asks for $world processes, but this machine has no GPU: fairseq's distributed training needs one GPU per process; unset it to train on CPU (one process)"
fi
# fairseq starts its distributed set-up (env:// under torchrun, SLURM's variables under srun)
# only when told the world size, and SLURM also needs a port.
launcher=()
if [ -n "${WORLD_SIZE:-}" ]; then
  launcher=(--distributed-world-size "$WORLD_SIZE")
elif [ "${SLURM_NTASKS:-1}" -gt 1 ]; then
  launcher=(--distributed-world-size "$SLURM_NTASKS" --distributed-port "${MASTER_PORT:-29500}")
fi

# The recipe by name (fairseq_alibi_lab/recipes.py, the experiment runner's too).
workers=$(( world > 0 ? world : 1 ))
mapfile -d '' recipe < <(python3 -m fairseq_alibi_lab.recipes flags "$preset" "$length" "$workers") \
  && [ ${#recipe[@]} -gt 0 ] || exit 1

# Mistakes fairseq would answer with a traceback or a run without end (--fp16 without a GPU,
# --tokens-per-sample 0, --max-update 0).
python3 "$here/fairseq_alibi/mistakes.py" train "$node_gpus" -- "${recipe[@]}" "$@" || exit 1
if [ "$node_gpus" -gt 0 ]; then
  precision=(--fp16)
else
  echo "warning: no GPU found: training on CPU in fp32 (--fp16 dropped)" >&2
  precision=(--cpu)
fi

# What a checkpoint already in SAVE_DIR holds: refuse another run, skip a finished one
# (recipes.run_status: the one definition of a finished run).
args=("${recipe[@]}" "$@")  # the last --max-update given wins, as in fairseq
source "$here/scripts/flags.sh"
max_update=$(flag_value --max-update "${args[@]}")
arch=$(flag_value --arch "${model[@]}")
mkdir -p "$save_dir"
# One training per save directory, for the run's lifetime (exec below: fairseq-train holds it).
# A distributed run is one training of several processes: rank 0 holds it for all.
rank=$(flag_value --distributed-rank "$@")
rank=${rank:-${RANK:-${SLURM_PROCID:-0}}}
if [ "$rank" = 0 ]; then
  exec 9>>"$save_dir/.train.lock"
  flock -n 9 || fail "another training is running on $save_dir (it holds $save_dir/.train.lock): wait for it, or give another SAVE_DIR"
fi
# The small presets' learning rate reaches 0 at the run's last update (unless told otherwise).
schedule=()
if [[ "$preset" = small || "$preset" = bloom_small || "$preset" = gpt2_small ]] && [[ " $* " != *" --total-num-update "* ]]; then
  schedule=(--total-num-update "$max_update")
fi
run_flags=("${model[@]}" "${recipe[@]}" "$@" "${schedule[@]}")  # what the run learns with (recipes.RUN_FLAGS)
other_ok=()
[ "${CONTINUE_RUN:-0}" = 1 ] && other_ok=(--other-ok)
read -r state done_updates < <(python3 -m fairseq_alibi_lab.recipes status "$save_dir" "$arch" "$length" \
  "$max_update" "${other_ok[@]}" -- "${run_flags[@]}" || echo failed)
[ "$state" != failed ] || exit 1
if [ "$state" = finished ]; then
  echo "$save_dir is already trained ($done_updates updates, --max-update $max_update): nothing to do"
  exit 0
fi

# The data's dictionary kept beside the checkpoints (fairseq's do not hold theirs): scoring or
# fine-tuning on another corpus's dictionary is then refused (fairseq_alibi/dictionaries.py).
python3 "$here/fairseq_alibi/dictionaries.py" keep "$data" "$save_dir" || exit 1
if [ "$state" = new ] && [ "$rank" = 0 ]; then
  python3 -m fairseq_alibi_lab.recipes record "$save_dir" -- "${run_flags[@]}"
fi
finetune_from=$(flag_value --finetune-from-model "$@")
if [ -n "$finetune_from" ]; then
  python3 "$here/fairseq_alibi/dictionaries.py" check "$finetune_from" "$data" || exit 1
fi

exec fairseq-train "$data" --task language_modeling --save-dir "$save_dir" "${model[@]}" \
  --criterion adaptive_loss --ddp-backend legacy_ddp --tokens-per-sample "$length" \
  --sample-break-mode none --skip-invalid-size-inputs-valid-test --no-epoch-checkpoints \
  --keep-interval-updates 1 --tensorboard-logdir "$save_dir/tensorboard" \
  "${recipe[@]}" "${precision[@]}" "${launcher[@]}" "$@" "${schedule[@]}"
