#!/usr/bin/env bash
# The paper's headline trade at CPU scale on WikiText-2: ALiBi trained at a short L against
# sinusoidal models trained at the longer lengths ALiBi is then evaluated at, all with the same
# recipe (the small preset: tokens per update, number of updates): validation perplexity at each length beside
# each model's training wall-clock and peak memory, in one run. About an hour on 2 cores with the
# current recipe (its committed results used the earlier one, 400 updates of 4096 tokens; see
# results/trade/PROVENANCE.md).
#
# Environment (and common.sh's: data, TRAIN_FLAGS):
#   ALIBI_L        ALiBi's training length (default 64)
#   SINUSOIDAL_LS  the sinusoidal models' training lengths, each evaluated at its own length
#                  (default "64 128 256 1024"); ALiBi is evaluated at all of them
#   UPDATES (default common.sh's), OUT (default runs/trade), CHECKPOINTS (default checkpoints/trade)
source "$(dirname "$0")/common.sh"

ALIBI_L=${ALIBI_L:-64}
SINUSOIDAL_LS=${SINUSOIDAL_LS:-"64 128 256 1024"}
OUT=${OUT:-runs/trade}
CHECKPOINTS=${CHECKPOINTS:-checkpoints/trade}
for length in $ALIBI_L $SINUSOIDAL_LS; do
  case $length in ''|*[!0-9]*|0) echo "error: training lengths must be positive integers, got '$length'" >&2; exit 1 ;; esac
done

mkdir -p "$OUT"
L=$ALIBI_L train alibi "$CHECKPOINTS/alibi-L$ALIBI_L" --max-update "$UPDATES"
lengths=$(printf '%s\n' "$ALIBI_L" $SINUSOIDAL_LS | sort -n -u | tr '\n' ' ')
echo "== evaluating alibi at L_valid = $lengths"
L_VALID=$lengths evaluate "$CHECKPOINTS/alibi-L$ALIBI_L/checkpoint_last.pt" "$OUT/results.jsonl"
for length in $SINUSOIDAL_LS; do
  L=$length train sinusoidal "$CHECKPOINTS/sinusoidal-L$length" --max-update "$UPDATES"
  echo "== evaluating sinusoidal (L=$length) at L_valid = $length"
  L_VALID=$length evaluate "$CHECKPOINTS/sinusoidal-L$length/checkpoint_last.pt" "$OUT/results.jsonl"
done
python3 examples/wikitext2/trade_table.py "$OUT/results.jsonl" --out "$OUT"
echo "table and figure written to $OUT"
