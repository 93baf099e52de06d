"""Retrieval past the training length: passkey, multi-key needle and key-value prompts. The experiment's
own code is this folder: prompts.py (the tasks), data.py (the mixed training text), score.py (exact match),
floors.py (the floors of the prompts), report.py and figures.py (its tables), claims.py (its claims and
their cells), cli.py (`python -m fairseq_alibi_lab.retrieval`)."""
import dataclasses
import functools

from fairseq_alibi_lab import learned_slopes
from fairseq_alibi_lab.experiments.retrieval import claims, data, floors, report, score
from fairseq_alibi_lab.experiments.retrieval.figures import FAMILIES
from fairseq_alibi_lab.experiments.retrieval.prompts import LONG_MULTIPLES, MULTIPLES
from fairseq_alibi_lab.experiments.base import BEFORE_SEPARABLE, EXPERIMENTS, Experiment, Model, Stages, register
from fairseq_alibi_lab.experiments.causal import SINUSOIDAL

# Retrieval past L: the comparison's causal methods trained from scratch at L=64 on WikiText-2 mixed half and half with passkey, multi-key and key-value examples
# (at most L long), for 4x the small recipe's updates (its 1400, at 10% or 50% examples, taught no
# model to copy a key: docs/retrieval.md), scored by exact match at L..16L and 5 depths, and by perplexity.
# Past ALiBi's field (issue 63 item 2): the models above their floor at 4L (the first key word of the
# passkey, retrieval.md) are also scored at 32L, 64L and 128L (prompts.LONG_MULTIPLES: 2,048-8,192
# tokens), with their scalings; the sinusoidal twin, T5 bias and NoPE are at their floor by 4L (0.0, 0.0
# and 3.3 ± 3.2% against chance, 1%): nothing longer to learn from them.
PAST_FIELD = (*MULTIPLES, *LONG_MULTIPLES)


# The distance and context figures' panels (figures.FAMILIES); the other relative biases by default.
ALIBI_FAMILY, ROTARY, ABSOLUTE = FAMILIES[0], FAMILIES[2], FAMILIES[3]

# Rotary past 16L with YaRN only: unscaled and with NTK its passkey's first word is 0.0 ± 0.0% and
# 5.7 ± 3.2% at 4L (chance 1%; YaRN 40.3 ± 24.5%) and at most 0.7% at 16L, nothing left to fall
# past 16L (decided on its first trainings, as low).
MODELS = (
    dataclasses.replace(SINUSOIDAL, family=ABSOLUTE),
    Model("Rotary", "rotary", scalings=("ntk", "yarn"), multiples=PAST_FIELD, long_scalings=("yarn",), family=ROTARY),
    Model("T5 bias", "t5_bias"),
    Model("ALiBi", "alibi", scalings=("ntk",), multiples=PAST_FIELD, family=ALIBI_FAMILY),
    Model("NoPE", "nope", family=ABSOLUTE),
    Model("KERPLE log", "kerple", ("--kerple-variant", "log"), multiples=PAST_FIELD),
    Model("FIRE", "fire", ("--fire-init-threshold", "64"), multiples=PAST_FIELD),
    # The ALiBi family completed (issue 63): learned slopes and FoX's data-dependent ALiBi, as the comparison's;
    # then KERPLE's power kernel and Sandwich, so that every registered causal method is asked. Their 4L
    # level is not known before they are scored, so they go to 128L as the other relative biases do.
    # Learned slopes also record what their slopes became (their heads' reach in tokens).
    Model("ALiBi, learned slopes", "learned_alibi", multiples=PAST_FIELD, records=(learned_slopes.record,),
          family=ALIBI_FAMILY),
    Model("FoX (forget gate)", "fox", multiples=PAST_FIELD, family=ALIBI_FAMILY),
    Model("KERPLE power", "kerple", ("--kerple-variant", "power"), multiples=PAST_FIELD),
    Model("Sandwich", "sandwich", multiples=PAST_FIELD),
)
FAMILY_OF = {model.label: model.family for model in MODELS if model.family}

register("retrieval", Experiment(
    "Retrieval past the training length: causal methods trained at L=64 for 5600 updates on WikiText-2 mixed "
    "half and half with passkey, multi-key needle and key-value examples, scored by exact match at L..16L and 5 "
    "depths (those above their floor at 4L also at 32L..128L), and by perplexity.",
    MODELS,
    # No validation while training: every 100 updates it took about a quarter of a training's wall time,
    # and it changes no weight (tests/end_to_end/test_pipeline.py); the scorer measures perplexity itself.
    strides=("0",), updates=5600, train_flags=("--disable-validation",),
    stages=Stages(data=data.prepare_data, data_problem=data.data_problem, floors=floors.write_floors,
                  score=score.score_model, rows=(score.ROWS, score.BY_POSITION_ROWS, learned_slopes.ROWS),
                  report=functools.partial(report.report, families=FAMILY_OF), claim_cells=claims.claim_cells, cells=claims.scored_cells),
    claims=claims.CLAIMS, kernel_rule=BEFORE_SEPARABLE))

# The methods 2025 papers put beside ALiBi (issue 94: attention_options/), trained as retrieval's models are,
# beside retrieval's own ALiBi (its committed rows, Model.shared): a sibling experiment, so that retrieval's
# primary family stays whole while these train. Claims from each paper's statement, declared before their
# first training; first key word over the needles past ALiBi's field (1,024 tokens from the question).
GATED, SINK, SELECTIVE, STICK_BREAKING = ("ALiBi, output gate", "ALiBi, sink logit", "ALiBi, selective attention",
                                          "Stick-breaking")
FIELD_2025_MODELS = (
    Model("ALiBi", "alibi", multiples=PAST_FIELD, shared=("retrieval", "ALiBi"), family=ALIBI_FAMILY),
    Model(GATED, "alibi", ("--output-gate", "elementwise"), multiples=PAST_FIELD, family=ALIBI_FAMILY),
    Model(SINK, "alibi", ("--sink-logit",), multiples=PAST_FIELD, family=ALIBI_FAMILY),
    Model(SELECTIVE, "alibi", ("--selective-attention",), multiples=PAST_FIELD, family=ALIBI_FAMILY),
    Model(STICK_BREAKING, "nope", ("--stick-breaking",), multiples=PAST_FIELD, family=ABSOLUTE),
)
DECLARED_2025 = "f3bd463"  # the commit that first wrote these claims, before their first training


def further(a, task, k, primary=True):
    return claims.Claim(f"{a} retrieves further than ALiBi past its field ({task} at {k}L)", (a, task, k),
                        ("ALiBi", task, k), "higher", (claims.FIRST_PAST_FIELD,), declared=DECLARED_2025, primary=primary)


FIELD_2025_CLAIMS = (
    # Stick-breaking (Tan et al. 2025): trained at 2^11, good at 2^14; gated attention (Qiu et al. 2025): better
    # length extrapolation.
    further(STICK_BREAKING, "passkey", 32),
    further(GATED, "passkey", 32),
    # exploratory: numbers and raw p, no verdict
    further(STICK_BREAKING, "passkey", 128, primary=False),
    further(STICK_BREAKING, "multikey", 32, primary=False),
    further(SINK, "passkey", 32, primary=False),
    further(SELECTIVE, "passkey", 32, primary=False),
)
register("retrieval-2025", dataclasses.replace(
    EXPERIMENTS["retrieval"],
    about="The methods of 2025 on retrieval's recipe beside its ALiBi (retrieval's committed rows): ALiBi with the "
          "output gate, the sink logit and selective attention, and stick-breaking attention without positions.",
    models=FIELD_2025_MODELS, claims=FIELD_2025_CLAIMS,
    stages=dataclasses.replace(EXPERIMENTS["retrieval"].stages, report=functools.partial(
        report.report, families={model.label: model.family for model in FIELD_2025_MODELS}))))
