"""Streaming with attention sinks. The experiment's own code is this folder: stages.py (its record, cells and
table); the streams are scored by the lab's tool, scripts/stream_eval.py (fairseq_alibi_lab/stream_eval.py)."""
import functools

from fairseq_alibi_lab.claims import Claim
from fairseq_alibi_lab.experiments.base import BEFORE_SEPARABLE, Experiment, Model, Stages, perplexity_cells, register
from fairseq_alibi_lab.experiments.causal import SINUSOIDAL
from fairseq_alibi_lab.experiments.streaming import stages

# Streaming with attention sinks (scripts/stream_eval.py): models trained as the comparison's
# (their own checkpoints), each scored at L in blocks and with the exact sliding window (stride 1:
# fairseq-eval-lm's recomputation, the reference), then streamed through a cache of L keys.
# Streaming: each stream a cell of its own beside the model's blocks at L, on the
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
# What can stream records its streams (the sinusoidal twin's position embeddings cannot stream).
MODELS = (Model("ALiBi", "alibi", records=(stages.stream,)), Model("Rotary", "rotary", records=(stages.stream,)),
          SINUSOIDAL)
STREAMED = tuple(model.label for model in MODELS if stages.stream in model.records)

register("streaming", Experiment(
    "Streaming with attention sinks: ALiBi, rotary and the sinusoidal twin trained as in the comparison (L=64), "
    "WikiText-2 valid and test each scored as one stream through a cache of 64 keys (window only, 1 and 4 sink "
    "tokens), valid beside nonoverlapping blocks at L, a sliding window of stride L/2 and fairseq-eval-lm's exact "
    "sliding window (stride 1: 32 times the sliding window's cost, 15-30 minutes a model on a 2-core CPU, two at once).",
    MODELS, multiples=(1,), strides=("0", "/2", "1"),
    stages=Stages(rows=(stages.ROWS,), report=functools.partial(stages.report, can_stream=STREAMED),
                  claim_cells=stages.claim_cells, cells=lambda experiment: perplexity_cells(experiment) | stages.cells(experiment)),
    claims=STREAMING, kernel_rule=BEFORE_SEPARABLE))
