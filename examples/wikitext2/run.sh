#!/usr/bin/env bash
# Train short, test long on WikiText-2, at CPU scale (about 15 minutes on 2 cores):
# ALiBi and its sinusoidal twin (stock fairseq), same dimensions, data and recipe, trained at
# L=64 and evaluated nonoverlapping on the validation set at L_valid = 64 ... 1024 (16L).
#
# Environment: WIKITEXT2_SOURCE (a directory, archive or URL for scripts/prepare-wikitext.sh;
# default: ../shared/data/wikitext-2 if present, else the download mirror), L, UPDATES,
# L_VALID, OUT (default runs/wikitext2), CHECKPOINTS (default checkpoints/wikitext2).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1  # show fairseq's progress as it happens

L=${L:-64}
UPDATES=${UPDATES:-400}
L_VALID=${L_VALID:-"$L $((2 * L)) $((4 * L)) $((8 * L)) $((16 * L))"}
OUT=${OUT:-runs/wikitext2}
CHECKPOINTS=${CHECKPOINTS:-checkpoints/wikitext2}
source=${WIKITEXT2_SOURCE:-}
if [ -z "$source" ] && [ -d ../shared/data/wikitext-2 ]; then source=../shared/data/wikitext-2; fi

scripts/prepare-wikitext.sh 2 $source
mkdir -p "$OUT"
rm -f "$OUT/results.jsonl"
for method in alibi sinusoidal; do
  save=$CHECKPOINTS/$method-L$L
  echo "== training $method at L=$L for $UPDATES updates -> $save"
  mkdir -p "$save"
  scripts/train.sh "$method" "$L" data-bin/wikitext-2 "$save" small -- \
    --max-update "$UPDATES" --log-interval 50 --no-progress-bar 2>&1 \
    | tee "$save/train.log" | grep --line-buffered -E "train_inner|valid on|done training"
  echo "== evaluating $method at L_valid = $L_VALID"
  scripts/eval.sh "$save/checkpoint_last.pt" data-bin/wikitext-2 "$OUT/results.jsonl" "$L_VALID"
done
python3 scripts/results.py "$OUT/results.jsonl" --out "$OUT"
echo "table and figure written to $OUT"
