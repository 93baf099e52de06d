#!/usr/bin/env bash
# Train short, test long on WikiText-2 at CPU scale (`make experiment`): ALiBi and the sinusoidal
# model trained at L=64 with the small recipe, scored on the validation set at L_valid = 64 ... 1024
# (16L), nonoverlapping and with a sliding window (stride L_valid/2). The experiment "main" of
# scripts/experiment.py (its options, e.g. --seeds 1 2 3, pass through); results in runs/main.
exec python3 "$(dirname "$0")/../../scripts/experiment.py" main "$@"
