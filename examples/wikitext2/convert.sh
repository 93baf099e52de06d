#!/usr/bin/env bash
# Give an existing model ALiBi, on WikiText-2 at CPU scale: the main job's sinusoidal model (the
# teacher, seed 1) converted to ALiBi and fine-tuned 200 updates with and without distillation, 3
# seeds, against the teacher continued and ALiBi from scratch, with the recovery curve (docs/conversion.md).
# The experiment "conversion" of scripts/experiment.py (options pass through); results in
# runs/conversion. Stop it at any time: the same command continues.
exec python3 "$(dirname "$0")/../../scripts/experiment.py" conversion "$@"
