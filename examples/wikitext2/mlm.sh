#!/usr/bin/env bash
# Bidirectional ALiBi on WikiText-2: RoBERTa-style masked LMs (alibi_roberta_small, the LM
# preset's dimensions) trained at L tokens per block and scored at L_valid = L ... 16L with one
# fixed evaluation mask (scripts/eval_mlm.py: the same masked tokens at every length).
#
# Environment (and common.sh's: data, L, L_VALID, TRAIN_FLAGS):
#   VARIANTS  encoder ALiBi variants (symmetric one_sided learned ruoss bialibi) and the twins:
#             sinusoidal (fairseq's RoBERTa encoder, sinusoidal positions) and learned_pos (stock
#             RoBERTa's learned positions; its table is 16L long, rows past L stay untrained).
#             Default: all seven. Also: littlebird (littlebird_roberta_small, blocks of
#             LITTLEBIRD_BLOCK tokens, a pack of LITTLEBIRD_PACK, default 8 and 8: 8 blocks at L=64)
#             and littlebird_padding (the same with the paper's padding insertion, 0.5 L per input).
#   UPDATES (default 600), OUT (runs/wikitext2-mlm), CHECKPOINTS (checkpoints/wikitext2-mlm)
# A finished run is evaluated again, not retrained; an interrupted one resumes.
UPDATES=${UPDATES:-600}
source "$(dirname "$0")/common.sh"

VARIANTS=${VARIANTS:-"symmetric one_sided learned ruoss bialibi sinusoidal learned_pos"}
OUT=${OUT:-runs/wikitext2-mlm}
CHECKPOINTS=${CHECKPOINTS:-checkpoints/wikitext2-mlm}

# The masked-LM recipe by name (fairseq_alibi/recipes.py, the experiment runner's too), for UPDATES.
mapfile -d '' recipe < <(python3 fairseq_alibi/recipes.py flags masked_lm "$L" 1 "$UPDATES") && [ ${#recipe[@]} -gt 0 ] || exit 1
recipe+=(--cpu --log-interval 50 --no-progress-bar)

LITTLEBIRD_BLOCK=${LITTLEBIRD_BLOCK:-8}
LITTLEBIRD_PACK=${LITTLEBIRD_PACK:-8}
littlebird=(--arch littlebird_roberta_small --block-size "$LITTLEBIRD_BLOCK" --pack-length "$LITTLEBIRD_PACK")

mkdir -p "$OUT"
for variant in $VARIANTS; do
  case $variant in
    sinusoidal)  flags=(--arch alibi_roberta_small --encoder-alibi none); label="Sinusoidal" ;;
    learned_pos) flags=(--arch alibi_roberta_small --encoder-alibi none --encoder-learned-pos --max-positions $((16 * L))); label="Learned positions" ;;
    symmetric|one_sided|learned|ruoss|bialibi) flags=(--arch alibi_roberta_small --encoder-alibi "$variant"); label="ALiBi $variant" ;;
    littlebird) flags=("${littlebird[@]}"); label="LittleBird" ;;
    littlebird_padding) flags=("${littlebird[@]}" --padding-insertion 0.5); label="LittleBird + padding insertion" ;;
    *) echo "error: unknown variant '$variant': use symmetric one_sided learned ruoss bialibi sinusoidal learned_pos littlebird littlebird_padding" >&2; exit 1 ;;
  esac
  save=$CHECKPOINTS/$variant-L$L
  [[ $variant == littlebird* ]] && save=$save-b$LITTLEBIRD_BLOCK-s$LITTLEBIRD_PACK
  scripts/train_once.sh "$save" "the masked LM, $label, at L=$L" -- fairseq-train "$data" --save-dir "$save" \
    --user-dir fairseq_alibi --tensorboard-logdir "$save/tensorboard" "${recipe[@]}" "${flags[@]}" "${train_flags[@]}"
  echo "== evaluating $label at L_valid = $L_VALID"
  python3 scripts/eval_mlm.py "$save/checkpoint_last.pt" "$data" "$OUT/results.jsonl" --lengths "$L_VALID" --label "$label"
done
# The floor every model must beat: a unigram model on the same masked tokens.
python3 scripts/unigram.py "$data" "$OUT/results.jsonl" --lengths "$L_VALID" --masked-lm
python3 scripts/results.py "$OUT/results.jsonl" --out "$OUT"
echo "tables and figures written to $OUT (masked-token perplexity)"
