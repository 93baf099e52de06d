# Shared by the WikiText-2 presets (run.sh, convert.sh); sourced, not run. Environment:
#   L, UPDATES, L_VALID, SLIDING (see run.sh); TRAIN_FLAGS, extra fairseq-train flags;
#   WIKITEXT2_SOURCE  a directory, archive or URL for scripts/prepare-wikitext.sh (default:
#             ../shared/data/wikitext-2 if present, else the download mirror); or DATA, an
#             already binarized data directory.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/usage.sh"
preset_usage "$0" "$@"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONUNBUFFERED=1  # show fairseq's progress as it happens

L=${L:-64}
UPDATES=${UPDATES:-1400}
# Checked before anything runs (fairseq takes --max-update 0 as "no limit").
positive_integers L "$L"
positive_integers UPDATES "$UPDATES"
L_VALID=${L_VALID:-"$L $((2 * L)) $((4 * L)) $((8 * L)) $((16 * L))"}
SLIDING=${SLIDING:-0}
read -r -a l_valid_list <<< "$L_VALID"
positive_integers L_VALID "${l_valid_list[@]}"
case $SLIDING in 0|1) ;; *) echo "error: SLIDING is 0 or 1, got '$SLIDING'" >&2; exit 1 ;; esac
strides=0  # scripts/eval.sh STRIDE: nonoverlapping, and sliding by L_valid/2 if SLIDING=1
[ "$SLIDING" = 1 ] && strides="0 /2"
read -r -a train_flags <<< "${TRAIN_FLAGS:-}"

data=${DATA:-}
if [ -z "$data" ]; then
  source=${WIKITEXT2_SOURCE:-}
  if [ -z "$source" ] && [ -d ../shared/data/wikitext-2 ]; then source=../shared/data/wikitext-2; fi
  scripts/prepare-wikitext.sh 2 $source
  data=data-bin/wikitext-2
fi

train() {  # METHOD SAVE_DIR [fairseq-train flags]: the small preset at L; log appended to SAVE_DIR/train.log,
  # wall time and peak memory of each call to SAVE_DIR/resources.jsonl (scripts/measure.py)
  # (the filter shows progress and errors; train.sh's exit status is the pipeline's, not grep's)
  local method=$1 save=$2
  shift 2
  echo "== training $method at L=$L -> $save"
  mkdir -p "$save"
  # The preset's own flags come last, so that they win over TRAIN_FLAGS.
  python3 scripts/measure.py "$save/resources.jsonl" -- scripts/train.sh "$method" "$L" "$data" "$save" small -- \
    --log-interval 50 --no-progress-bar "${train_flags[@]}" "$@" 2>&1 \
    | tee -a "$save/train.log" | { grep --line-buffered -E "train_inner|valid on|done training|nothing to do|error" || true; }
}

evaluate() {  # CHECKPOINT OUT.jsonl: at each L_VALID (and sliding, stride L_valid/2, if SLIDING=1)
  scripts/eval.sh "$1" "$data" "$2" "$L_VALID" "$strides"
}
