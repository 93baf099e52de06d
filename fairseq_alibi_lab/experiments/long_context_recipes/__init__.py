"""Which recipe takes a model trained at L to 16-128L for the same training tokens (issue 89): ALiBi at L and
its test-time rescalings (NTK, a length temperature on q.k or on the whole logit), ALiBi trained with the
learned temperature (SSMax), ALiBi's short-to-long curriculum (L for 75% of the updates, then 4L), rotary
with YaRN at test time and rotary fine-tuned at 4L with YaRN for the same last 25%, and NoPE with the
test-time temperature. Each trained as retrieval's models are (WikiText-2 mixed half and half with passkey,
multi-key and key-value examples; the curriculum's and the fine-tune's second stage on the mixture made at
4L, examples up to 4L long), 5600 updates of 2,048 tokens each whatever the length, 5 included seeds;
scored by perplexity (nonoverlapping and sliding) at L..128L and by retrieval (greedy decoding by the
fairseq model itself, which takes every arm's temperature) at L..128L.

Declared before any training (git history shows it): the arms, the primary family (CLAIMS: six claims,
Holm-corrected over the family), and the inclusion rule (INCLUSION). Its own code: summary.py (the
headline table and each seed's), streams.py (the streaming rule).

Streaming (descriptive, no claim; the rule written before any arm had its seeds): once every arm has its 5
included seeds, the two trained arms with the highest mean passkey first word past the field at 32L are
streamed through a sink cache (the streaming experiment's record: 0, 1 and 4 sinks, a cache of the arm's
last training length: L, or 4L for a second stage), each seed, on the validation and test splits."""
import functools

from fairseq_alibi_lab.claims import Claim
from fairseq_alibi_lab.curriculum import FirstStages
from fairseq_alibi_lab.experiments.base import Experiment, Inclusion, Model, Stages, register
from fairseq_alibi_lab.experiments.conversion.wall_time import training_seconds, wall_time
from fairseq_alibi_lab.experiments.long_context_recipes import streams
from fairseq_alibi_lab.experiments.long_context_recipes.summary import summary
from fairseq_alibi_lab.experiments.retrieval import claims as retrieval_claims, data, floors, report as retrieval_report, score
from fairseq_alibi_lab.experiments.retrieval.prompts import LONG_MULTIPLES, MULTIPLES

UPDATES = 5600  # retrieval's: 4x the small recipe's, which taught no model to copy a key
SHARE = 0.75  # the first stage's share of the updates (BTLM: 470B of 627B tokens at 2,048, the rest at 8,192)
MULTIPLES_ALL = (*MULTIPLES, *LONG_MULTIPLES)  # L..128L: 64 to 8,192 tokens

# The runs at L keep their checkpoint after 75% of their updates (4,200): the second stages continue it.
STREAMS = (streams.stream,)  # every trained arm's included seeds (the rule picks two at the end: streams.py)
ALIBI = Model("ALiBi", "alibi", FirstStages.keeping("alibi_first"), scalings=("ntk", "logn", "logn_logit"), records=STREAMS)
ROTARY = Model("Rotary", "rotary", FirstStages.keeping("rotary_first"), scalings=("yarn",), records=STREAMS)
FIRST_STAGES = FirstStages({"alibi_first": (ALIBI, SHARE), "rotary_first": (ROTARY, SHARE)})
CURRICULUM = "ALiBi, L then 4L"
YARN_FINETUNE = "Rotary, L then 4L with YaRN"
SSMAX = "ALiBi, learned temperature (SSMax)"

MODELS = (
    ALIBI,
    Model(SSMAX, "alibi", ("--length-temperature", "ssmax", "--length-temperature-length", "{L}"), records=STREAMS),
    Model(CURRICULUM, "alibi", ("--continue-from", "{alibi_first}"), train_multiple=4, records=STREAMS),
    ROTARY,
    # YaRN's recipe: the scaling on while fine-tuning, s = 4 from the first stage's L
    Model(YARN_FINETUNE, "rotary", ("--continue-from", "{rotary_first}", "--rotary-scaling", "yarn",
                                    "--rotary-scaling-factor", "4", "--rotary-train-length", "{L}"), train_multiple=4,
          records=STREAMS),
    Model("NoPE", "nope", scalings=("logn",), records=STREAMS),
)

# The inclusion rule, declared before training: a seed of an arm is scored past L only if that arm's model
# finds the passkey's first word at L (the test prompts of L tokens, mean over the 5 depths) at least 20% of
# the time (chance: 1%; retrieval's seeds that "hardly learned" the task were at 0-16%); an excluded seed is
# reported with its value and the next seed is trained in its place, up to 10 seeds an arm.
INCLUSION = Inclusion(functools.partial(score.at_l, "passkey", "first_accuracy"), 0.20,
                      "the passkey's first word at L, depth mean, at least 20%", wanted=5, most=10)

PAST_THE_FIELD = (retrieval_claims.FIRST_PAST_FIELD,)  # needles more than FIELD (1,024) tokens from the question


DECLARED = "6435999"  # the commit that first wrote these claims, before any training of the experiment


def better(a, b, task, k, primary=True):
    return Claim(f"{a} retrieves further than {b} past the field ({task} at {k}L)", (a, task, k), (b, task, k),
                 "higher", PAST_THE_FIELD, declared=DECLARED, primary=primary)


CLAIMS = (
    better(CURRICULUM, "ALiBi + NTK", "passkey", 32),
    better(CURRICULUM, "ALiBi + NTK", "passkey", 128),
    better(CURRICULUM, "ALiBi + NTK", "multikey", 32),
    better(CURRICULUM, YARN_FINETUNE, "passkey", 32),
    better("ALiBi + LogN", "ALiBi", "passkey", 32),
    better(SSMAX, "ALiBi", "passkey", 32),
    # exploratory: numbers and raw p, no verdict
    better("ALiBi + LogN (whole logit)", "ALiBi", "passkey", 32, primary=False),
    better("ALiBi + NTK", "Rotary + YaRN", "passkey", 32, primary=False),
    better("NoPE + LogN", "NoPE", "passkey", 32, primary=False),
    better(YARN_FINETUNE, "Rotary + YaRN", "passkey", 32, primary=False),
)


# The headline table's rows: every arm, a test-time recipe as its training's label + the scaling.
ARMS = ("ALiBi", "ALiBi + NTK", "ALiBi + LogN", "ALiBi + LogN (whole logit)", SSMAX, CURRICULUM, "Rotary",
        "Rotary + YaRN", YARN_FINETUNE, "NoPE", "NoPE + LogN")


TRAINED = tuple(model.label for model in MODELS)


def report(rows, out):
    """The headline table (summary.md) and each seed's (by_seed.md), retrieval's tables, the streams (streaming.md) and each training's
    wall time (a second stage's own there; the headline adds its first stage's share of the run at L's)."""
    seconds = {label: {c: s for c, (s, _, _) in runs.items()} for label, runs in training_seconds(rows, out).items()}
    stages = {CURRICULUM: ("ALiBi", SHARE), YARN_FINETUNE: ("Rotary", SHARE)}
    return "\n".join(filter(None, (summary(rows, out, ARMS, stages, UPDATES, seconds), retrieval_report.report(rows, out),
                                    streams.report(rows, out, TRAINED, INCLUSION.wanted), wall_time(rows, out))))


register("long-context-recipes", Experiment(
    "Which recipe reaches 16-128L for the same training tokens: ALiBi at L with NTK or a length temperature "
    "(q.k or whole logit) at test time, ALiBi trained with SSMax's learned temperature, ALiBi's curriculum (75% at L, "
    "then 4L), rotary with YaRN at test time and fine-tuned at 4L with YaRN, NoPE with the test-time temperature; "
    "5600 updates of 2,048 tokens each, 5 included seeds; perplexity and retrieval at L..128L.",
    MODELS, updates=UPDATES, seeds=(1, 2, 3, 4, 5), multiples=MULTIPLES_ALL,
    # No validation while training (as retrieval: it changes no weight); the scorer measures perplexity itself.
    train_flags=("--disable-validation",),
    stages=Stages(data=data.prepare_data, data_problem=data.data_problem, prepared=FIRST_STAGES,
                  floors=floors.write_floors, score=functools.partial(score.score_model, decoder="fairseq"),
                  rows=(score.ROWS, score.BY_POSITION_ROWS, streams.ROWS), report=report,
                  claim_cells=retrieval_claims.claim_cells, cells=retrieval_claims.scored_cells),
    claims=CLAIMS, inclusion=INCLUSION))
