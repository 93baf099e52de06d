#!/usr/bin/env bash
# Run one fairseq-train command for a run directory, once:
#
#   scripts/train_once.sh SAVE_DIR NAME -- fairseq-train DATA --save-dir SAVE_DIR ...
#
# A finished run (SAVE_DIR/train.log says fairseq finished) is left as it is; otherwise the
# command runs (fairseq resumes from SAVE_DIR/checkpoint_last.pt). Its log is appended to
# SAVE_DIR/train.log, its wall time and peak memory to SAVE_DIR/resources.jsonl
# (scripts/measure.py); progress lines and errors are shown. NAME is what the messages call it.
# Used by the presets whose models scripts/train.sh does not know (masked LMs, encoder-decoders).
set -euo pipefail
usage="usage: scripts/train_once.sh SAVE_DIR NAME -- fairseq-train ..."
save=${1:?$usage}; name=${2:?$usage}
shift 2
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "$usage" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)

mkdir -p "$save"
if [ -f "$save/checkpoint_last.pt" ] && grep -q "done training" "$save/train.log" 2>/dev/null; then
  echo "== $save is already trained: leaving it as it is"
  exit 0
fi
echo "== training $name -> $save"
python3 "$here/measure.py" "$save/resources.jsonl" -- "$@" 2>&1 \
  | tee -a "$save/train.log" | { grep --line-buffered -E "train_inner|valid on|done training|error" || true; }
[ "${PIPESTATUS[0]}" = 0 ] || { echo "error: training $name failed: see $save/train.log" >&2; exit 1; }
