#!/usr/bin/env bash
# The paper's comparison (its Tables 2-5 and 13-15) at CPU scale on WikiText-2: sinusoidal,
# rotary, T5 bias and ALiBi trained at the same L=64, evaluated nonoverlapping and with a sliding
# window from L to 16L, plus ALiBi with each inference-time slope scaling. About 85 minutes on
# 2 CPU cores with the recipe of its committed results (400 updates of 4096 tokens; about 3x
# that with the current one). Same environment variables as run.sh.
set -euo pipefail
export METHODS=${METHODS:-"sinusoidal rotary t5_bias alibi"}
export SCALINGS=${SCALINGS-"linear ntk dynamic_ntk"}  # SCALINGS="" for none
export SLIDING=${SLIDING:-1}
export OUT=${OUT:-runs/comparison}
export CHECKPOINTS=${CHECKPOINTS:-checkpoints/comparison}
exec "$(dirname "$0")/run.sh"
