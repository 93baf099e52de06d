#!/usr/bin/env bash
# Bidirectional ALiBi on WikiText-2: RoBERTa-style masked LMs (alibi_roberta_small, the LM
# preset's dimensions) trained at L=64 on the masked_lm recipe (fairseq_alibi_lab/recipes.py), 3 seeds,
# scored at L ... 16L with one fixed evaluation mask (scripts/eval_mlm.py: the same masked tokens
# at every length), against the masked unigram floor: the five encoder ALiBi variants and the
# position-embedding twins (sinusoidal; learned positions, a table 16L long whose rows past L stay
# untrained). The experiment "mlm" of scripts/experiment.py (options pass through, e.g.
# --seeds 1 or --models alibi-bialibi learned-positions); results in runs/mlm. Stop it at any
# time: the same command continues.
exec python3 "$(dirname "$0")/../../scripts/experiment.py" mlm "$@"
