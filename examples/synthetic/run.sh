#!/usr/bin/env bash
# Length generalisation of encoder-decoders on synthetic tasks (copy, reverse, multi-digit
# addition; make_tasks.py): trained on sizes n <= 20, tested on 1-20, 21-40, 41-60 and 61-80
# (up to 4x), greedy decoding, exact match per task and bucket, 3 seeds. Every encoder ALiBi
# variant (alibi_transformer_small: causal ALiBi decoder, cross-attention without positions)
# against the sinusoidal twin (stock --arch transformer, same dimensions). The experiment
# "synthetic" of scripts/experiment.py (options pass through, e.g. --seeds 1, --models
# alibi-bialibi sinusoidal, --task-flags "--train 2000" for make_tasks.py); results in
# runs/synthetic. Stop it at any time: the same command continues.
exec python3 "$(dirname "$0")/../../scripts/experiment.py" synthetic "$@"
