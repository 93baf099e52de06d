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
# perplexity as its evaluation code returns them (all in one process) and the
# wall time, loading included; SPLIT=valid|test (default valid);
# LABEL names the checkpoint's row in scripts/results.py (default: its method). Each row also
# records the checkpoint's training seed, the code's commit and the machine; ROW_FIELDS, a JSON
# object, adds fields of the caller's (scripts/experiment.py: the experiment and its recipe).
# SCALING extends a model past its training length without retraining, by SCALING_FACTOR (a list,
# e.g. "none linear", scores each; without SCALING_FACTOR a scaling is scored past L only, where its
# factor exceeds 1):
# ALiBi checkpoints: linear|ntk|dynamic_ntk rescale the slopes (factor default: L_valid / L_train
# for linear and ntk, 1 for dynamic_ntk); rotary checkpoints: linear|ntk|yarn (default
# L_valid / L_train); any causal checkpoint of the plugin: logn|logn_logit, a length temperature at
# test time (the queries, or the whole logit, times max(1, ln n / ln L_train); no factor). ALIBI_SCALING
# and ALIBI_SCALING_FACTOR are the earlier names of SCALING and SCALING_FACTOR.
# Checked (each in one line naming the fix), planned and scored by fairseq_alibi_lab/evaluate.py.
set -euo pipefail
case ${1:-} in -h|--help) source "$(dirname "$0")/usage.sh"; script_help "$0"; exit 0 ;; esac
exec python3 "$(dirname "$0")/evaluate.py" "$@"
