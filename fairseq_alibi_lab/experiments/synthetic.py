"""Encoder-decoders on the synthetic tasks, scored by exact match per size bucket."""
from fairseq_alibi import twins
from fairseq_alibi_lab.experiments.base import Experiment, Model, register
from fairseq_alibi_lab.experiments.encoders import ENCODER_VARIANTS

register("synthetic", Experiment(
    "Encoder-decoders on synthetic tasks (copy, reverse, addition; fairseq_alibi_lab/synthetic_tasks.py) trained on "
    "sizes up to 20 and scored by exact match (greedy) up to 80: the five encoder ALiBi variants (a causal ALiBi "
    "decoder, cross-attention without positions) against their sinusoidal twin (stock --arch transformer).",
    (*(Model(f"ALiBi {variant}", "alibi_transformer_small", ("--encoder-alibi", variant)) for variant in ENCODER_VARIANTS),
     Model("Sinusoidal", "transformer", tuple(twins.TRANSLATION_TWIN_FLAGS.split()[2:]))),
    recipe="synthetic", multiples=(), strides=()))
