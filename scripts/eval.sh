#!/usr/bin/env bash
# Evaluate a checkpoint at several lengths L_valid, nonoverlapping and with a sliding window.
#
#   scripts/eval.sh CHECKPOINT DATA OUT.jsonl "L_VALID..." ["STRIDE..."] [-- extra fairseq-eval-lm flags]
#
# STRIDE 0 (the default) is nonoverlapping evaluation (the paper's main tables); STRIDE S > 0
# slides a window of L_valid tokens by S tokens (--context-window L_valid-S), scoring only the
# last S: S=1 is the paper's Tables 13-15 (costs about L_valid times nonoverlapping), S=512 its
# Table 7; S=/K slides by L_valid / K. Windows are batched (the ALiBi mask does not depend on batch size).
# Appends one JSON line per (checkpoint, split, L_valid, stride), with fairseq-eval-lm's loss and
# perplexity as its evaluation code returns them (all in one process: scripts/evaluate.py) and the
# wall time, loading included; SPLIT=valid|test (default valid);
# LABEL names the checkpoint's row in scripts/results.py (default: its method). Each row also
# records the checkpoint's training seed, the code's commit and the machine; ROW_FIELDS, a JSON
# object, adds fields of the caller's (scripts/experiment.py: the experiment and its recipe).
# SCALING extends a model past its training length without retraining, by SCALING_FACTOR (a list,
# e.g. "none linear", scores each; without SCALING_FACTOR a scaling is scored past L only, where its
# factor exceeds 1):
# ALiBi checkpoints: linear|ntk|dynamic_ntk rescale the slopes (factor default: L_valid / L_train
# for linear and ntk, 1 for dynamic_ntk); rotary checkpoints: linear|ntk|yarn (default
# L_valid / L_train). ALIBI_SCALING and ALIBI_SCALING_FACTOR are the earlier names of both.
set -euo pipefail

usage='usage: scripts/eval.sh CHECKPOINT DATA OUT.jsonl "L_VALID..." ["STRIDE..."] [-- flags]'
case ${1:-} in -h|--help) source "$(dirname "$0")/usage.sh"; script_help "$0"; exit 0 ;; esac
[ $# -ge 4 ] || { echo "$usage" >&2; exit 2; }
checkpoint=$1; data=$2; out=$3; lengths=$4
shift 4
strides=0
if [ $# -gt 0 ] && [ "$1" != "--" ]; then strides=$1; shift; fi
[ "${1:-}" = "--" ] && shift
split=${SPLIT:-valid}
here=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "error: $*" >&2; exit 1; }
[ -f "$checkpoint" ] || fail "no checkpoint at $checkpoint ($usage)"
[ -f "$data/dict.txt" ] || fail "$data has no dict.txt: DATA is a binarized data directory ($usage)"
case $out in *.jsonl) ;; *) fail "OUT ($out) must be a .jsonl file, where results are appended ($usage)" ;; esac
if [ -n "${ROW_FIELDS:-}" ]; then
  python3 -c 'import json, sys; assert isinstance(json.loads(sys.argv[1]), dict)' "$ROW_FIELDS" 2>/dev/null \
    || fail "ROW_FIELDS must be a JSON object, e.g. '{\"experiment\": \"mine\"}', got '$ROW_FIELDS'"
fi
[ -f "$data/$split.idx" ] || fail "$data has no $split split: SPLIT is one of $(cd "$data" && ls *.idx 2>/dev/null | sed 's/\.idx$//' | tr '\n' ' ')"
scalings=${SCALING:-${ALIBI_SCALING:-none}}
scaling_factor=${SCALING_FACTOR:-${ALIBI_SCALING_FACTOR:-}}
if [ -n "$scaling_factor" ]; then
  python3 -c 'import math, sys; f = float(sys.argv[1]); assert math.isfinite(f) and f > 0' "$scaling_factor" 2>/dev/null \
    || fail "SCALING_FACTOR must be a positive number, got '$scaling_factor'"
fi
for l_valid in $lengths; do
  case $l_valid in ''|*[!0-9]*|0) fail "L_valid must be a positive integer, got '$l_valid'" ;; esac
done
for stride in $strides; do
  case $stride in /0) fail "stride /0: /K slides by L_valid / K, K a positive integer" ;;
    /*[!0-9]*|*[!0-9/]*|?*/*|/) fail "stride must be 0, a positive integer or /K (L_valid / K), got '$stride'" ;; esac
done

# The user's own --model-overrides: checked below (fairseq silently ignores a key the checkpoint's
# config lacks, a typo included) and merged into the ones this script sets (by scripts/evaluate.py).
extra=() user_overrides="{}"
while [ $# -gt 0 ]; do
  case $1 in --context-window*|--tokens-per-sample*|--gen-subset*|--path*)
    fail "$1 is set by this script: give L_VALID, STRIDE (context window = L_valid - stride), SPLIT= and CHECKPOINT instead" ;;
  esac
  if [ "$1" = --model-overrides ] && [ $# -gt 1 ]; then user_overrides=$2; shift 2; else extra+=("$1"); shift; fi
done

python3 "$here/fairseq_alibi/dictionaries.py" check "$checkpoint" "$data" || exit 1

# What was trained: model name and training length, read from the checkpoint's own config.
info=$(python3 - "$checkpoint" "$user_overrides" "$here/fairseq_alibi/recipes.py" <<'EOF'
import ast, difflib, runpy, sys, torch
try:
    state = torch.load(sys.argv[1], map_location="cpu", weights_only=False, mmap=True)
    assert isinstance(state, dict) and ("cfg" in state or "args" in state)
except Exception:
    sys.exit(f"error: {sys.argv[1]} is not a fairseq checkpoint")
other = runpy.run_path(sys.argv[3])["wrong_kind"](state, sys.argv[1], "causal LM")  # a masked LM, a translation model
if other:
    sys.exit(f"error: {other}")
try:
    cfg, history = state["cfg"], state.get("optimizer_history") or [{}]
    model = cfg["model"]
except Exception:
    sys.exit(f"error: {sys.argv[1]} is not a fairseq checkpoint")
try:
    overrides = ast.literal_eval(sys.argv[2])
    assert isinstance(overrides, dict)
except Exception:
    sys.exit(f"error: --model-overrides {sys.argv[2]} is not a Python dict, e.g. \"{{'alibi_attention': 'sdpa'}}\"")
for key in overrides:
    if key not in model:
        close = difflib.get_close_matches(key, model.keys(), n=1)
        sys.exit(f"error: --model-overrides names {key!r}, which {sys.argv[1]}'s model config lacks, so fairseq "
                 "would ignore it" + (f": did you mean {close[0]!r}?" if close else ""))
method = model["_name"].split("_transformer_lm")[0]
seed = (cfg.get("common") or {}).get("seed")
print(model["_name"], cfg["task"]["tokens_per_sample"], int(f"{method}_scaling" in model),
      history[-1].get("num_updates", -1), int("max_tokens" in model), "-" if seed is None else seed)
EOF
) || exit 1
read -r model train_length has_scaling updates fork seed <<< "$info"
# The paper's fork saves ALiBi models as transformer_lm: scored as they are, they are sinusoidal.
[ "$fork" = 0 ] || fail "$checkpoint is a checkpoint of the paper's fork, which fairseq would score as sinusoidal: convert it first with python -m fairseq_alibi.convert_checkpoint $checkpoint NEW.pt"
for scaling in $scalings; do
  case $scaling:$model in
    none:*|linear:alibi_*|ntk:alibi_*|dynamic_ntk:alibi_*|linear:rotary_*|ntk:rotary_*|yarn:rotary_*) ;;
    *:alibi_*) fail "SCALING=$scaling: ALiBi takes none, linear, ntk or dynamic_ntk" ;;
    *:rotary_*) fail "SCALING=$scaling: rotary takes none, linear, ntk or yarn" ;;
    *) fail "SCALING applies to ALiBi and rotary checkpoints, $checkpoint is $model" ;;
  esac
  if [ "$scaling" != none ] && [ "$has_scaling" != 1 ]; then
    # fairseq silently ignores --model-overrides of fields a checkpoint's config lacks.
    case $model in
      alibi_*) fail "$checkpoint predates ALiBi scaling: add it with python -m fairseq_alibi.convert_checkpoint $checkpoint NEW.pt" ;;
      *) fail "$checkpoint predates rotary scaling (no rotary_scaling in its config): retrain it with this version" ;;
    esac
  fi
done
prefix=${model%%_transformer_lm*}

{ mkdir -p "$(dirname "$out")" && [ ! -d "$out" ] && : >> "$out"; } 2>/dev/null \
  || fail "cannot append to $out (a read-only place, or a directory?): give another OUT"
jobs=()  # L_valid, stride, stride rule, context window, scaling, factor, overrides: tab-separated
for scaling in $scalings; do
for l_valid in $lengths; do
  # Without SCALING_FACTOR a scaling's factor is 1 up to the training length: the model unscaled.
  if [ "$scaling" != none ] && [ -z "$scaling_factor" ] && [ "$l_valid" -le "$train_length" ]; then continue; fi
  for stride in $strides; do  # a number, or /K for L_valid / K
    stride_rule=$stride
    case $stride in /*) stride=$((l_valid / ${stride#/})); stride_rule="L_valid$stride_rule" ;; esac
    if [ "$stride" -eq 0 ]; then context=0; else context=$((l_valid - stride)); fi
    if [ "$context" -lt 0 ]; then echo "skipping stride $stride > L_valid $l_valid" >&2; continue; fi
    case $scaling:$model in
      # Stock position-embedding models refuse lengths past their training length unless told.
      none:transformer_lm*) overrides="{'max_target_positions': 1000000}"; factor=1 ;;
      none:*) overrides="{}"; factor=1 ;;
      dynamic_ntk:*) factor=${scaling_factor:-1}
        overrides="{'alibi_scaling': 'dynamic_ntk', 'alibi_scaling_factor': $factor, 'alibi_train_length': $train_length}" ;;
      *) factor=${scaling_factor:-$(python3 -c "print(max(1.0, $l_valid / $train_length))")}
        overrides="{'${prefix}_scaling': '$scaling', '${prefix}_scaling_factor': $factor, '${prefix}_train_length': $train_length}" ;;
    esac
    jobs+=("$l_valid"$'\t'"$stride"$'\t'"$stride_rule"$'\t'"$context"$'\t'"$scaling"$'\t'"$factor"$'\t'"$overrides")
  done
done
done
# All of them in one process, by fairseq's own evaluation (see scripts/evaluate.py).
[ ${#jobs[@]} -gt 0 ] || exit 0
printf '%s\n' "${jobs[@]}" | python3 "$here/scripts/evaluate.py" "$checkpoint" "$data" "$out" "$split" "${LABEL:-}" \
  "$model" "$train_length" "$updates" "$seed" "$user_overrides" -- "${extra[@]}"
