#!/usr/bin/env bash
# LittleBird on WikiText-2 (issue 10): masked LMs trained at L=64 and scored at L ... 16L on the
# bidirectional experiment's fixed evaluation mask (scripts/eval_mlm.py), mlm's recipe and seeds:
# LittleBird (blocks of 8, a pack of 8: 8 blocks at L=64), LittleBird with the paper's padding
# insertion, and the dense encoders of the same size, BiALiBi and sinusoidal, whose runs are mlm's
# (checkpoints/mlm: a model it trained is scored, not retrained). The experiment "littlebird" of
# scripts/experiment.py (options pass through); results in runs/littlebird. LittleBird with its own
# setting (blocks and pack of 64) at L=512: `python scripts/experiment.py littlebird-long` (its results:
# examples/wikitext2/results/littlebird-long/).
exec python3 "$(dirname "$0")/../../scripts/experiment.py" littlebird "$@"
