"""Attention sinks in the methods of 2025 (issue 94): where each head's attention goes at the start of a text
(its mass on the first token and on nothing, per layer and head: measure.py), for the output gate and the
sink logit beside plain ALiBi and rotary, and the other 2025 arms. The models are the comparison's (same
recipe, L, seeds and kernel rule, in its checkpoint directory: a model it trained is not trained again),
scored at L nonoverlapping. Descriptive: no claim is declared on these masses (Qiu et al. 2025 report the
gate lowers the first token's share; Gu et al. 2025 that a sink logit takes it over). Its own code:
stages.py (the record and the table), measure.py (the measurement)."""
import dataclasses

from fairseq_alibi_lab.experiments.base import BEFORE_SEPARABLE, Experiment, Model, Stages, register
from fairseq_alibi_lab.experiments.attention_sinks import stages
from fairseq_alibi_lab.experiments.causal import FIELD_2025

MODELS = tuple(dataclasses.replace(model, records=(stages.sink_mass,))
               for model in (Model("ALiBi", "alibi"), Model("Rotary", "rotary"), *FIELD_2025))

register("attention-sinks", Experiment(
    "Attention sinks: each head's mass on the first token and on nothing (queries L/2..L-1 of each block of L), for "
    "ALiBi and rotary with and without the output gate, ALiBi with the sink logit and selective attention, and "
    "stick-breaking, the comparison's models (L=64), scored at L nonoverlapping.",
    MODELS, multiples=(1,), strides=("0",), checkpoints="comparison", kernel_rule=BEFORE_SEPARABLE,
    stages=Stages(rows=(stages.ROWS,), report=stages.report)))
