#!/usr/bin/env bash
# Run one fairseq-train command for a run directory, once:
#
#   scripts/train_once.sh SAVE_DIR NAME -- fairseq-train DATA --save-dir SAVE_DIR ...
#
# A finished run (its checkpoint_last.pt reached the command's --max-update: fairseq_alibi_lab/recipes.py,
# the one definition train.sh uses too) is left as it is; otherwise the command runs (fairseq resumes
# from SAVE_DIR/checkpoint_last.pt). A SAVE_DIR holding a run started with other flags is refused;
# CONTINUE_RUN=1 continues it anyway.
# Its log is appended to SAVE_DIR/train.log, its wall time and peak memory to
# SAVE_DIR/resources.jsonl (scripts/measure.py); progress lines and errors are shown. NAME is what the messages call it.
# Used by the presets whose models scripts/train.sh does not know (masked LMs, encoder-decoders).
# The work: fairseq_alibi_lab/train_once.py.
set -euo pipefail
case ${1:-} in -h|--help) source "$(dirname "$0")/usage.sh"; script_help "$0"; exit 0 ;; esac
exec python3 -m fairseq_alibi_lab.train_once "$@"
