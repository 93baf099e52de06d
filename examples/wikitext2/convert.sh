#!/usr/bin/env bash
# Give an existing model ALiBi, on WikiText-2 at CPU scale (measured with the current recipe and 3
# seeds on the 2-core CPU machine: about 9 core-hours with SLIDING=1, 3.3 of them training and 5.6
# scoring; about 6 without the sliding window):
# the main job's sinusoidal model (the teacher: L=64, UPDATES updates) is converted to ALiBi
# (positions dropped, every other weight kept) and fine-tuned for FINETUNE updates, once with plain
# cross entropy and once with distillation from the teacher; both are compared from L to 16L with
# the teacher, the teacher continued (the sinusoidal model fine-tuned the same way for the same
# FINETUNE updates, so that a gain over the teacher is not just more training), the converted model
# before fine-tuning, and ALiBi trained from scratch for the same total number of updates
# (UPDATES + FINETUNE). Every EVERY updates a checkpoint is kept and scored
# at L, for the recovery curve (the from-scratch run's every 4th before UPDATES). Greedy
# continuations past L show the bias at work while decoding.
# Stopped, the same command continues: finished trainings and scores are kept.
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
teacher=${TEACHER:-$CHECKPOINTS/sinusoidal-L$L/checkpoint_last.pt}
converted=$CHECKPOINTS/converted-L$L.pt
ce=() kd=() continued=() scratch=()  # one save directory per seed
for seed in "${seeds[@]}"; do
  ce+=("$CHECKPOINTS/finetune-ce-L$L-s$seed") kd+=("$CHECKPOINTS/finetune-distill-L$L-s$seed")
  continued+=("$CHECKPOINTS/teacher-continued-L$L-s$seed") scratch+=("$CHECKPOINTS/alibi-L$L-s$seed")
done
score=(python3 examples/wikitext2/score_conversion.py "$data" "$OUT" --length "$L" --lengths "$L_VALID" --strides "$strides"
  --updates "$UPDATES" --finetune "$FINETUNE" --every "$EVERY" --teacher "$teacher" --converted "$converted"
  --ce "${ce[@]}" --distill "${kd[@]}" --continued "${continued[@]}" --scratch "${scratch[@]}")
"${score[@]}" --check  # an OUT with another conversion's scores is refused before anything trains
mkdir -p "$OUT" "$CHECKPOINTS"
keep_every=(--save-interval-updates "$EVERY" --keep-interval-updates -1)

[ -n "${TEACHER:-}" ] || train sinusoidal "$CHECKPOINTS/sinusoidal-L$L" --max-update "$UPDATES"
if [ ! -f "$converted" ]; then
  python3 -m fairseq_alibi.convert_checkpoint --replace-positions "$teacher" "$converted"
fi

for i in "${!seeds[@]}"; do
  seed=${seeds[$i]}
  train alibi "${ce[$i]}" --finetune-from-model "$converted" --max-update "$FINETUNE" --seed "$seed" "${keep_every[@]}"
  train alibi "${kd[$i]}" --finetune-from-model "$converted" --max-update "$FINETUNE" --seed "$seed" "${keep_every[@]}" \
    --criterion lm_distillation --teacher-path "$teacher" \
    --distill-weight "$DISTILL_WEIGHT" --distill-temperature "$DISTILL_TEMPERATURE"
  train sinusoidal "${continued[$i]}" --finetune-from-model "$teacher" --max-update "$FINETUNE" --seed "$seed" "${keep_every[@]}"
  train alibi "${scratch[$i]}" --max-update "$((UPDATES + FINETUNE))" --seed "$seed" "${keep_every[@]}"
done

"${score[@]}"  # what OUT already holds (an interrupted scoring) is kept, the rest scored
python3 scripts/results.py "$OUT/results.jsonl" --out "$OUT"
python3 examples/wikitext2/recovery.py "$OUT/recovery.jsonl" --out "$OUT"
if [ ! -e "$OUT/generation.md" ]; then  # the first seed's models; written whole, never over an earlier one
  python3 examples/wikitext2/generate.py --prompt $((L / 2)) --new "$L" "$data" "$teacher" "$converted" \
    "${ce[0]}/checkpoint_last.pt" "${kd[0]}/checkpoint_last.pt" "${scratch[0]}/checkpoint_last.pt" > "$OUT/generation.md.part"
  mv "$OUT/generation.md.part" "$OUT/generation.md"
fi
cat "$OUT/generation.md"
echo "tables and figures written to $OUT"
