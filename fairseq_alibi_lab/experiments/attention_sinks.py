"""Streaming with attention sinks (the stages: fairseq_alibi_lab/stream_eval.py)."""
from fairseq_alibi_lab import stream_eval
from fairseq_alibi_lab.claims import Claim
from fairseq_alibi_lab.experiments.base import BEFORE_SEPARABLE, Experiment, Model, Stages, perplexity_cells, register
from fairseq_alibi_lab.experiments.causal import SINUSOIDAL

# Streaming with attention sinks (fairseq_alibi_lab/stream_eval.py): models trained as the comparison's
# (their own checkpoints), each scored at L in blocks and with the exact sliding window (stride 1:
# fairseq-eval-lm's recomputation, the reference), then streamed through a cache of L keys.
# Streaming (stream_eval.py): each stream a cell of its own beside the model's blocks at L, on the
# same checkpoints (a paired test). StreamingLLM's finding is that a softmax model evicting its first
# tokens needs a few kept as sinks; ALiBi's bias already fades distant keys.
EVERY_TOKEN_ONCE = "every token once (blocks of L, or the stream)"
STREAMING = (
    Claim("ALiBi streamed through a cache of L (window only) beats blocks of L", ("ALiBi, stream, window only", 1),
          ("ALiBi", 1), "lower", ("0",), EVERY_TOKEN_ONCE, declared="737e32a"),
    Claim("ALiBi needs no attention sink (window only no worse than 4 sinks)", ("ALiBi, stream, window only", 1),
          ("ALiBi, stream, 4 sinks", 1), "at most", ("0",), EVERY_TOKEN_ONCE, declared="737e32a"),
    Claim("Rotary needs an attention sink (4 sinks beat window only)", ("Rotary, stream, 4 sinks", 1),
          ("Rotary, stream, window only", 1), "lower", ("0",), EVERY_TOKEN_ONCE, declared="737e32a"),
    Claim("ALiBi streams better than rotary (window only)", ("ALiBi, stream, window only", 1),
          ("Rotary, stream, window only", 1), "lower", ("0",), EVERY_TOKEN_ONCE, declared="737e32a"),
    Claim("ALiBi streams better than rotary (4 sinks)", ("ALiBi, stream, 4 sinks", 1), ("Rotary, stream, 4 sinks", 1),
          "lower", ("0",), EVERY_TOKEN_ONCE, declared="737e32a"),
)
register("streaming", Experiment(
    "Streaming with attention sinks: ALiBi, rotary and the sinusoidal twin trained as in the comparison (L=64), "
    "WikiText-2 valid and test each scored as one stream through a cache of 64 keys (window only, 1 and 4 sink "
    "tokens), valid beside nonoverlapping blocks at L, a sliding window of stride L/2 and fairseq-eval-lm's exact "
    "sliding window (stride 1: 32 times the sliding window's cost, 15-30 minutes a model on a 2-core CPU, two at once).",
    (Model("ALiBi", "alibi"), Model("Rotary", "rotary"), SINUSOIDAL), multiples=(1,), strides=("0", "/2", "1"),
    stages=Stages(score=stream_eval.score_model, rows=(stream_eval.ROWS,), report=stream_eval.report,
                  claim_cells=stream_eval.claim_cells, cells=lambda experiment: perplexity_cells(experiment) | stream_eval.cells(experiment)),
    claims=STREAMING, kernel_rule=BEFORE_SEPARABLE))
