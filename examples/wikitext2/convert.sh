#!/usr/bin/env bash
# Give an existing model ALiBi, on WikiText-2 at CPU scale (an estimate from the runs' measured rates:
# about 2.5 core-hours with the current recipe and 3 seeds, a third of it distillation, which needs
# both models' full-vocabulary distributions at every token):
# the main job's sinusoidal model (the teacher: L=64, UPDATES updates) is converted to ALiBi
# (positions dropped, every other weight kept) and fine-tuned for FINETUNE updates, once with plain
# cross entropy and once with distillation from the teacher; both are compared from L to 16L with
# the teacher, the teacher continued (the sinusoidal model fine-tuned the same way for the same
# FINETUNE updates, so that a gain over the teacher is not just more training), the converted model
# before fine-tuning, and ALiBi trained from scratch for the same total number of updates
# (UPDATES + FINETUNE). Every EVERY updates a checkpoint is kept and scored
# at L, for the recovery curve. Greedy continuations past L show the bias at work while decoding.
#
# Environment (and common.sh's: data, L, L_VALID, TRAIN_FLAGS):
#   FINETUNE (default 200), EVERY (default 50), DISTILL_WEIGHT (0.5), DISTILL_TEMPERATURE (2)
#   SEEDS     training seeds of the two fine-tunes, the teacher continued and ALiBi from scratch
#             (default "1 2 3"; one teacher, seed 1: the runs compared start from the same model)
#   TEACHER   an existing sinusoidal checkpoint to start from (default: train one)
#   OUT (default runs/conversion), CHECKPOINTS (default checkpoints/conversion)
source "$(dirname "$0")/common.sh"

FINETUNE=${FINETUNE:-200}
EVERY=${EVERY:-50}
DISTILL_WEIGHT=${DISTILL_WEIGHT:-0.5}
DISTILL_TEMPERATURE=${DISTILL_TEMPERATURE:-2}
SEEDS=${SEEDS:-"1 2 3"}
read -r -a seeds <<< "$SEEDS"
positive_integers SEEDS "${seeds[@]}"
OUT=${OUT:-runs/conversion}
CHECKPOINTS=${CHECKPOINTS:-checkpoints/conversion}
for f in results.jsonl recovery.jsonl; do
  if [ -e "$OUT/$f" ]; then echo "error: $OUT/$f exists: move it away or set OUT to a new directory" >&2; exit 1; fi
done
mkdir -p "$OUT" "$CHECKPOINTS"
keep_every=(--save-interval-updates "$EVERY" --keep-interval-updates -1)

teacher=${TEACHER:-$CHECKPOINTS/sinusoidal-L$L/checkpoint_last.pt}
[ -n "${TEACHER:-}" ] || train sinusoidal "$CHECKPOINTS/sinusoidal-L$L" --max-update "$UPDATES"
converted=$CHECKPOINTS/converted-L$L.pt
if [ ! -f "$converted" ]; then
  python3 -m fairseq_alibi.convert_checkpoint --replace-positions "$teacher" "$converted"
fi

ce=() kd=() continued=() scratch=()  # one save directory per seed
total=$((UPDATES + FINETUNE))
for seed in "${seeds[@]}"; do
  ce+=("$CHECKPOINTS/finetune-ce-L$L-s$seed")
  train alibi "${ce[-1]}" --finetune-from-model "$converted" --max-update "$FINETUNE" --seed "$seed" "${keep_every[@]}"
  kd+=("$CHECKPOINTS/finetune-distill-L$L-s$seed")
  train alibi "${kd[-1]}" --finetune-from-model "$converted" --max-update "$FINETUNE" --seed "$seed" "${keep_every[@]}" \
    --criterion lm_distillation --teacher-path "$teacher" \
    --distill-weight "$DISTILL_WEIGHT" --distill-temperature "$DISTILL_TEMPERATURE"
  continued+=("$CHECKPOINTS/teacher-continued-L$L-s$seed")
  train sinusoidal "${continued[-1]}" --finetune-from-model "$teacher" --max-update "$FINETUNE" --seed "$seed" "${keep_every[@]}"
  scratch+=("$CHECKPOINTS/alibi-L$L-s$seed")
  train alibi "${scratch[-1]}" --max-update "$total" --seed "$seed" "${keep_every[@]}"
done

python3 examples/wikitext2/score_conversion.py "$data" "$OUT" --length "$L" --lengths "$L_VALID" --strides "$strides" \
  --updates "$UPDATES" --finetune "$FINETUNE" --every "$EVERY" --teacher "$teacher" --converted "$converted" \
  --ce "${ce[@]}" --distill "${kd[@]}" --continued "${continued[@]}" --scratch "${scratch[@]}"
python3 scripts/results.py "$OUT/results.jsonl" --out "$OUT"
python3 examples/wikitext2/recovery.py "$OUT/recovery.jsonl" --out "$OUT"
# the first seed's models
python3 examples/wikitext2/generate.py --prompt $((L / 2)) --new "$L" "$data" "$teacher" "$converted" "${ce[0]}/checkpoint_last.pt" \
  "${kd[0]}/checkpoint_last.pt" "${scratch[0]}/checkpoint_last.pt" | tee "$OUT/generation.md"
echo "tables and figures written to $OUT"
