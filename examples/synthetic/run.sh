#!/usr/bin/env bash
# Length generalisation of encoder-decoders on synthetic tasks (copy, reverse, multi-digit
# addition; make_tasks.py): trained on sizes n <= 20, tested on 1-20, 21-40, 41-60 and 61-80
# (up to 4x), greedy decoding, exact match per task and bucket. Every encoder ALiBi variant
# (alibi_transformer_small: causal ALiBi decoder, cross-attention without positions) against
# the sinusoidal twin (stock --arch transformer, same dimensions).
#
# Environment:
#   VARIANTS  symmetric one_sided learned ruoss bialibi sinusoidal (default: all six)
#   UPDATES   training updates per model (default 800), TRAIN_FLAGS extra fairseq-train flags,
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
UPDATES=${UPDATES:-800}
OUT=${OUT:-runs/synthetic}
CHECKPOINTS=${CHECKPOINTS:-checkpoints/synthetic}
DATA_DIR=${DATA_DIR:-data-bin/synthetic}
read -r -a train_flags <<< "${TRAIN_FLAGS:-}"
read -r -a task_flags <<< "${TASK_FLAGS:-}"
positive_integers UPDATES "$UPDATES"

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

# The CPU-scale recipe, one for every model (pre-norm: it learns these tasks faster). Sources are padded on the right (bialibi's first
# token sits at index 0; in fairseq 0.12 --left-pad-source turns left padding off).
recipe=(--task translation --source-lang src --target-lang tgt --left-pad-source
        --encoder-normalize-before --decoder-normalize-before --optimizer adam --adam-betas '(0.9,0.98)'
        --lr 0.002 --lr-scheduler polynomial_decay --warmup-updates 100 --total-num-update "$UPDATES"
        --max-update "$UPDATES" --clip-norm 1.0 --max-tokens 4096 --dropout 0.0 --criterion cross_entropy
        --seed 1 --cpu --num-workers 0 --required-batch-size-multiple 1 --no-epoch-checkpoints
        --save-interval-updates 200 --keep-interval-updates 1 --log-interval 100 --no-progress-bar
        --share-all-embeddings --max-source-positions 1024 --max-target-positions 1024)
twin=$(python3 -c 'from fairseq_alibi.encoder import TRANSLATION_TWIN_FLAGS; print(TRANSLATION_TWIN_FLAGS)')

mkdir -p "$OUT"
for variant in $VARIANTS; do
  case $variant in
    sinusoidal) read -r -a model <<< "$twin"; label="Sinusoidal" ;;
    symmetric|one_sided|learned|ruoss|bialibi)
      model=(--user-dir fairseq_alibi --arch alibi_transformer_small --encoder-alibi "$variant"); label="ALiBi $variant" ;;
    *) echo "error: unknown variant '$variant': use symmetric one_sided learned ruoss bialibi sinusoidal" >&2; exit 1 ;;
  esac
  save=$CHECKPOINTS/$variant
  scripts/train_once.sh "$save" "$label" -- fairseq-train "$DATA_DIR/bin" --save-dir "$save" \
    --tensorboard-logdir "$save/tensorboard" "${model[@]}" "${recipe[@]}" "${train_flags[@]}"
  echo "== exact match, $label"
  python3 examples/synthetic/exact_match.py "$save/checkpoint_last.pt" "$DATA_DIR/bin" \
    "$DATA_DIR/text/buckets.txt" "$OUT/results.jsonl" --label "$label" > /dev/null
done
python3 examples/synthetic/table.py "$OUT/results.jsonl" --out "$OUT"
