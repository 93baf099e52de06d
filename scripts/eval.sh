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
  python3 "$here/fairseq_alibi/provenance.py" row-fields ROW_FIELDS "$ROW_FIELDS" || exit 1
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

# The checkpoint's checks (its dictionary, kind, scalings, overrides), the (length, stride,
# scaling) jobs and their scoring, all in one process (scripts/evaluate.py).
exec python3 "$here/scripts/evaluate.py" "$checkpoint" "$data" "$out" "$split" "${LABEL:-}" "$lengths" "$strides" \
  "$scalings" "$scaling_factor" "$user_overrides" -- "${extra[@]}"
