#!/usr/bin/env bash
# LittleBird on WikiText-2 (issue 10): masked LMs trained at L tokens per block and scored at
# L ... 16L with the bidirectional experiment's fixed evaluation mask (scripts/eval_mlm.py).
# mlm.sh's recipe and models: LittleBird (blocks of 8, a pack of 8: 8 blocks at L=64), LittleBird
# with the paper's padding insertion, and the dense encoders of the same size, BiALiBi and
# sinusoidal. Checkpoints are shared with mlm.sh (a model it trained is evaluated, not retrained).
# Environment: as mlm.sh's (VARIANTS, LITTLEBIRD_BLOCK, LITTLEBIRD_PACK, UPDATES, L, ...).
source "$(dirname "$0")/../../scripts/usage.sh"
preset_usage "$0" "$@"
export VARIANTS=${VARIANTS:-"littlebird littlebird_padding bialibi sinusoidal"}
export OUT=${OUT:-runs/wikitext2-littlebird}
exec "$(dirname "$0")/mlm.sh"
