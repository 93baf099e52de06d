"""Streaming with attention sinks (the stages: fairseq_alibi_lab/stream_eval.py)."""
from fairseq_alibi_lab import stream_eval
from fairseq_alibi_lab.experiments.base import Experiment, Model, Stages, register
from fairseq_alibi_lab.experiments.causal import SINUSOIDAL

# Streaming with attention sinks (fairseq_alibi_lab/stream_eval.py): models trained as the comparison's
# (their own checkpoints), each scored at L in blocks and with the exact sliding window (stride 1:
# fairseq-eval-lm's recomputation, the reference), then streamed through a cache of L keys.
register("streaming", Experiment(
    "Streaming with attention sinks: ALiBi, rotary and the sinusoidal twin trained as in the comparison (L=64), "
    "WikiText-2 valid and test each scored as one stream through a cache of 64 keys (window only, 1 and 4 sink "
    "tokens), valid beside nonoverlapping blocks at L, a sliding window of stride L/2 and fairseq-eval-lm's exact "
    "sliding window (stride 1: 32 times the sliding window's cost, 15-30 minutes a model on a 2-core CPU, two at once).",
    (Model("ALiBi", "alibi"), Model("Rotary", "rotary"), SINUSOIDAL), multiples=(1,), strides=("0", "/2", "1"),
    stages=Stages(score=stream_eval.score_model, rows=(stream_eval.ROWS,), report=stream_eval.report)))
