#!/usr/bin/env bash
# The paper's comparison (its Tables 2-5 and 13-15) at CPU scale on WikiText-2, with the methods
# the field has added since: every causal method trained at L=64 on the main job's recipe, 3 seeds,
# scored from L to 16L nonoverlapping and sliding, with ALiBi's and rotary's inference-time
# scalings. The experiment "comparison" of scripts/experiment.py (options pass through, e.g.
# --seeds 1 or --models alibi fire); results in runs/comparison. Stop it at any time: the same
# command continues.
exec python3 "$(dirname "$0")/../../scripts/experiment.py" comparison "$@"
