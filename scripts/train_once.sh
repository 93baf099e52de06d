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
set -euo pipefail
usage="usage: scripts/train_once.sh SAVE_DIR NAME -- fairseq-train ..."
case ${1:-} in -h|--help) source "$(dirname "$0")/usage.sh"; script_help "$0"; exit 0 ;; esac
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
save=$1; name=$2
shift 2
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "$usage" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)

source "$here/flags.sh"
max_update=$(flag_value --max-update "$@")
[ -n "$max_update" ] || { echo "error: the fairseq-train command needs --max-update N to know when $name is finished" >&2; exit 1; }
# Mistakes fairseq would answer with a traceback or a run without end (--max-update 0, --fp16 with
# --cpu, --tokens-per-sample 0); whether there is a GPU is not asked here (torch: seconds).
python3 "$here/../fairseq_alibi/mistakes.py" train - -- "$@" || exit 1
mkdir -p "$save"
# One trainer per save directory, for the run's lifetime (fairseq-train inherits the lock).
exec 9>>"$save/.train.lock"
flock -n 9 || { echo "error: another training is running on $save (it holds $save/.train.lock): wait for it, or give another directory" >&2; exit 1; }
other_ok=()  # CONTINUE_RUN=1: continue a run started with other flags (the refusal's advice, as in train.sh)
[ "${CONTINUE_RUN:-0}" = 1 ] && other_ok=(--other-ok)
read -r state _ < <(python3 -m fairseq_alibi_lab.recipes status "$save" - - "$max_update" "${other_ok[@]}" -- "$@" || echo failed)
[ "$state" != failed ] || exit 1
[ "$state" != new ] || python3 -m fairseq_alibi_lab.recipes record "$save" -- "$@"
if [ "$state" = finished ]; then
  echo "== $save is already trained: leaving it as it is"
  exit 0
fi
# The data's dictionaries kept beside the checkpoints, so that scoring on another corpus's is refused
# (fairseq_alibi/dictionaries.py; the data directory is the command's first argument).
if [ -d "${2:-}" ]; then python3 "$here/../fairseq_alibi/dictionaries.py" keep "$2" "$save" || exit 1; fi
echo "== training $name -> $save"
# The training in the background, its output to the log and filtered to the screen; stopping this
# script (SIGTERM, Ctrl-C) stops it (measure.py passes the signal on), so no trainer runs on unseen.
python3 "$here/measure.py" "$save/resources.jsonl" -- "$@" \
  > >(tee -a "$save/train.log" | { grep --line-buffered -E "train_inner|valid on|done training|error" || true; }) 2>&1 &
training=$!
trap 'kill -TERM "$training" 2>/dev/null; wait "$training" || true; echo "stopped: rerun to resume $name" >&2; exit 143' TERM INT
status=0
wait "$training" || status=$?
if [ "$status" != 0 ]; then
  sleep 1  # the log's writer (tee) ends just after the training: let it write the last line
  # Its last line says why (the plugin's one-line refusal, fairseq's exception).
  echo "error: training $name failed: $(grep -v '^\s*$' "$save/train.log" | tail -n 1) (the whole log: $save/train.log)" >&2
  exit 1
fi
# The data's dictionary fingerprint into each checkpoint (a top-level entry: these models' configs have no field for it).
if [ -d "${2:-}" ]; then python3 "$here/../fairseq_alibi/dictionaries.py" record "$save" "$2" || exit 1; fi
