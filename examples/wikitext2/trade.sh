#!/usr/bin/env bash
# The paper's headline trade at CPU scale on WikiText-2: ALiBi trained at L=64 against sinusoidal
# models trained at the longer lengths ALiBi is then evaluated at (128, 256, 1024; and 64), all
# with the main job's recipe (tokens per update, number of updates), 3 seeds: validation
# perplexity at each length beside each model's training wall-clock and peak memory (trade.md).
# The experiment "trade" of scripts/experiment.py (options pass through, e.g. --seeds 1);
# results in runs/trade. Stop it at any time: the same command continues.
exec python3 "$(dirname "$0")/../../scripts/experiment.py" trade "$@"
