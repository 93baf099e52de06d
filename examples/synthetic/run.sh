#!/usr/bin/env bash
# Length generalisation of encoder-decoders on synthetic tasks (copy, reverse, multi-digit
# addition; make_tasks.py): trained on sizes n <= 20, tested on 1-20, 21-40, 41-60 and 61-80
# (up to 4x), greedy decoding, exact match per task and bucket. Every encoder ALiBi variant
# (alibi_transformer_small: causal ALiBi decoder, cross-attention without positions) against
# the sinusoidal twin (stock --arch transformer, same dimensions).
#
# Environment:
#   VARIANTS  symmetric one_sided learned ruoss bialibi sinusoidal (default: all six)
#   UPDATES   training updates per model (default: the recipe's, recipes.synthetic), TRAIN_FLAGS extra
#             fairseq-train flags,
#   SEEDS     training seeds (default "1 2 3"; the tasks and their test sets are fixed),
#   TASK_FLAGS  flags for make_tasks.py (e.g. "--train 2000 --per-bucket 20")
#   OUT (default runs/synthetic), CHECKPOINTS (default checkpoints/synthetic), DATA_DIR
#   (default data-bin/synthetic: the generated text and its binarized form)
# A finished run is evaluated again, not retrained; an interrupted one resumes.
set -euo pipefail
source "$(dirname "$0")/../../scripts/usage.sh"
preset_usage "$0" "$@"
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1

VARIANTS=${VARIANTS:-"symmetric one_sided learned ruoss bialibi sinusoidal"}
UPDATES=${UPDATES:-}
OUT=${OUT:-runs/synthetic}
CHECKPOINTS=${CHECKPOINTS:-checkpoints/synthetic}
DATA_DIR=${DATA_DIR:-data-bin/synthetic}
read -r -a train_flags <<< "${TRAIN_FLAGS:-}"
read -r -a task_flags <<< "${TASK_FLAGS:-}"
[ -z "$UPDATES" ] || positive_integers UPDATES "$UPDATES"
read -r -a seeds <<< "${SEEDS:-1 2 3}"
positive_integers SEEDS "${seeds[@]}"

# The tasks (made once; other TASK_FLAGS over made ones are refused), then their binarized form,
# written whole (a temporary directory renamed into place).
python3 examples/synthetic/make_tasks.py "$DATA_DIR/text" "${task_flags[@]}"
if [ ! -d "$DATA_DIR/bin" ]; then
  tests=$(cut -f1 "$DATA_DIR/text/buckets.txt" | sed "s|^|$DATA_DIR/text/|" | paste -sd,)
  rm -rf "$DATA_DIR/bin.part"
  fairseq-preprocess --source-lang src --target-lang tgt --trainpref "$DATA_DIR/text/train" \
    --validpref "$DATA_DIR/text/valid" --testpref "$tests" --destdir "$DATA_DIR/bin.part" --joined-dictionary \
    --workers 2 > "$DATA_DIR/preprocess.log"
  mv "$DATA_DIR/bin.part" "$DATA_DIR/bin"
fi

# The recipe by name, one for every model (fairseq_alibi/recipes.py).
mapfile -d '' recipe < <(python3 fairseq_alibi/recipes.py flags synthetic 0 1 $UPDATES) && [ ${#recipe[@]} -gt 0 ] || exit 1
recipe+=(--cpu --log-interval 100 --no-progress-bar)
twin=$(python3 -c 'from fairseq_alibi.encoder import TRANSLATION_TWIN_FLAGS; print(TRANSLATION_TWIN_FLAGS)')

mkdir -p "$OUT"
for variant in $VARIANTS; do
  case $variant in
    sinusoidal) read -r -a model <<< "$twin"; label="Sinusoidal" ;;
    symmetric|one_sided|learned|ruoss|bialibi)
      model=(--user-dir fairseq_alibi --arch alibi_transformer_small --encoder-alibi "$variant"); label="ALiBi $variant" ;;
    *) echo "error: unknown variant '$variant': use symmetric one_sided learned ruoss bialibi sinusoidal" >&2; exit 1 ;;
  esac
  for seed in "${seeds[@]}"; do
    save=$CHECKPOINTS/$variant-s$seed
    scripts/train_once.sh "$save" "$label (seed $seed)" -- fairseq-train "$DATA_DIR/bin" --save-dir "$save" \
      --tensorboard-logdir "$save/tensorboard" "${model[@]}" "${recipe[@]}" --seed "$seed" "${train_flags[@]}"
    echo "== exact match, $label (seed $seed)"
    python3 examples/synthetic/exact_match.py "$save/checkpoint_last.pt" "$DATA_DIR/bin" \
      "$DATA_DIR/text/buckets.txt" "$OUT/results.jsonl" --label "$label" > /dev/null
  done
done
python3 examples/synthetic/table.py "$OUT/results.jsonl" --out "$OUT"
