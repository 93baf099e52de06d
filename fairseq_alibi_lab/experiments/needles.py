"""Retrieval past the training length: passkey, multi-key needle and key-value prompts (the stages:
fairseq_alibi_lab/retrieval.py)."""
from fairseq_alibi_lab import retrieval
from fairseq_alibi_lab.experiments.base import Experiment, Model, Stages, register
from fairseq_alibi_lab.experiments.causal import SINUSOIDAL

# Retrieval past L (fairseq_alibi_lab/retrieval.py): the comparison's causal methods trained from
# scratch at L=64 on WikiText-2 mixed half and half with passkey, multi-key and key-value examples
# (at most L long), for 4x the small recipe's updates (its 1400, at 10% or 50% examples, taught no
# model to copy a key: docs/retrieval.md), scored by exact match at L..16L and 5 depths, and by perplexity.
register("retrieval", Experiment(
    "Retrieval past the training length: causal methods trained at L=64 for 5600 updates on WikiText-2 mixed "
    "half and half with passkey, multi-key needle and key-value examples, scored by exact match at L..16L and 5 "
    "depths, and by perplexity.",
    (SINUSOIDAL, Model("Rotary", "rotary", scalings=("ntk", "yarn")), Model("T5 bias", "t5_bias"),
     Model("ALiBi", "alibi", scalings=("ntk",)), Model("NoPE", "nope"), Model("KERPLE log", "kerple", ("--kerple-variant", "log")),
     Model("FIRE", "fire", ("--fire-init-threshold", "64")),
     # The ALiBi family completed (issue 63): learned slopes and FoX's data-dependent ALiBi, as the comparison's.
     Model("ALiBi, learned slopes", "learned_alibi"), Model("FoX (forget gate)", "fox")),
    strides=("0",), updates=5600,
    stages=Stages(data=retrieval.prepare_data, data_problem=retrieval.data_problem, floors=retrieval.write_floors,
                  score=retrieval.score_model, rows=retrieval.ROWS, report=retrieval.report)))
