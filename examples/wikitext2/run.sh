#!/usr/bin/env bash
# Train short, test long on WikiText-2, at CPU scale (about 17 minutes on 2 cores with the defaults):
# position methods with the same dimensions, data and recipe, trained at L=64 and evaluated on the
# validation set at L_valid = 64 ... 1024 (16L).
#
# Environment (and common.sh's: data, L_VALID, TRAIN_FLAGS):
#   METHODS   alibi rotary t5_bias sinusoidal (default: "alibi sinusoidal"; sinusoidal is stock fairseq)
#   SCALINGS  ALiBi's inference-time slope scalings to evaluate too: linear ntk dynamic_ntk (default none)
#   SLIDING   1: also a sliding window with stride L_valid/2 (each scored token sees at least
#             L_valid/2 tokens of context; about 2x the cost of nonoverlapping). Default 0.
#   L, UPDATES, L_VALID, OUT (default runs/wikitext2), CHECKPOINTS (default checkpoints/wikitext2)
source "$(dirname "$0")/common.sh"

METHODS=${METHODS:-"alibi sinusoidal"}
SCALINGS=${SCALINGS:-}
OUT=${OUT:-runs/wikitext2}
CHECKPOINTS=${CHECKPOINTS:-checkpoints/wikitext2}

mkdir -p "$OUT"
rm -f "$OUT/results.jsonl"
for method in $METHODS; do
  save=$CHECKPOINTS/$method-L$L
  train "$method" "$save" --max-update "$UPDATES"
  echo "== evaluating $method at L_valid = $L_VALID"
  evaluate "$save/checkpoint_last.pt" "$OUT/results.jsonl"
done
# Scaling by a = L_valid / L changes nothing at L_valid = L (nor does dynamic_ntk): skip it there.
longer=$(for l_valid in $L_VALID; do [ "$l_valid" -gt "$L" ] && echo "$l_valid"; done)
for scaling in $SCALINGS; do
  echo "== evaluating alibi with $scaling slope scaling at L_valid =" $longer
  ALIBI_SCALING=$scaling L_VALID=$longer evaluate "$CHECKPOINTS/alibi-L$L/checkpoint_last.pt" "$OUT/results.jsonl"
done
python3 scripts/results.py "$OUT/results.jsonl" --out "$OUT"
echo "tables and figures written to $OUT"
