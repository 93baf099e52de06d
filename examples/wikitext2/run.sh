#!/usr/bin/env bash
# Train short, test long on WikiText-2, at CPU scale (about 15 minutes on 2 cores with the defaults):
# position methods with the same dimensions, data and recipe, trained at L=64 and evaluated on the
# validation set at L_valid = 64 ... 1024 (16L).
#
# Environment:
#   METHODS   alibi rotary t5_bias sinusoidal (default: "alibi sinusoidal"; sinusoidal is stock fairseq)
#   SCALINGS  ALiBi's inference-time slope scalings to evaluate too: linear ntk dynamic_ntk (default none)
#   SLIDING   1: also a sliding window with stride L_valid/2 (each scored token sees at least
#             L_valid/2 tokens of context; about 2x the cost of nonoverlapping). Default 0.
#   L, UPDATES, L_VALID, OUT (default runs/wikitext2), CHECKPOINTS (default checkpoints/wikitext2)
#   WIKITEXT2_SOURCE  a directory, archive or URL for scripts/prepare-wikitext.sh (default:
#             ../shared/data/wikitext-2 if present, else the download mirror); or DATA, an
#             already binarized data directory; TRAIN_FLAGS, extra fairseq-train flags.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1  # show fairseq's progress as it happens

METHODS=${METHODS:-"alibi sinusoidal"}
SCALINGS=${SCALINGS:-}
SLIDING=${SLIDING:-0}
L=${L:-64}
UPDATES=${UPDATES:-400}
L_VALID=${L_VALID:-"$L $((2 * L)) $((4 * L)) $((8 * L)) $((16 * L))"}
OUT=${OUT:-runs/wikitext2}
CHECKPOINTS=${CHECKPOINTS:-checkpoints/wikitext2}
read -r -a train_flags <<< "${TRAIN_FLAGS:-}"

data=${DATA:-}
if [ -z "$data" ]; then
  source=${WIKITEXT2_SOURCE:-}
  if [ -z "$source" ] && [ -d ../shared/data/wikitext-2 ]; then source=../shared/data/wikitext-2; fi
  scripts/prepare-wikitext.sh 2 $source
  data=data-bin/wikitext-2
fi

evaluate() {  # checkpoint; L_VALID and ALIBI_SCALING from the environment
  for l_valid in $L_VALID; do
    strides=0
    [ "$SLIDING" = 1 ] && strides="0 /2"
    scripts/eval.sh "$1" "$data" "$OUT/results.jsonl" "$l_valid" "$strides"
  done
}

mkdir -p "$OUT"
rm -f "$OUT/results.jsonl"
for method in $METHODS; do
  save=$CHECKPOINTS/$method-L$L
  echo "== training $method at L=$L for $UPDATES updates -> $save"
  mkdir -p "$save"
  scripts/train.sh "$method" "$L" "$data" "$save" small -- \
    --max-update "$UPDATES" --log-interval 50 --no-progress-bar "${train_flags[@]}" 2>&1 \
    | tee "$save/train.log" | grep --line-buffered -E "train_inner|valid on|done training"
  echo "== evaluating $method at L_valid = $L_VALID"
  evaluate "$save/checkpoint_last.pt"
done
# Scaling by a = L_valid / L changes nothing at L_valid = L (nor does dynamic_ntk): skip it there.
longer=$(for l_valid in $L_VALID; do [ "$l_valid" -gt "$L" ] && echo "$l_valid"; done)
for scaling in $SCALINGS; do
  echo "== evaluating alibi with $scaling slope scaling at L_valid =" $longer
  ALIBI_SCALING=$scaling L_VALID=$longer evaluate "$CHECKPOINTS/alibi-L$L/checkpoint_last.pt"
done
python3 scripts/results.py "$OUT/results.jsonl" --out "$OUT"
echo "tables and figures written to $OUT"
