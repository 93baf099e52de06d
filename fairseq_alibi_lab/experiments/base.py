"""What an experiment is: its models (Model), its recipe, lengths, seeds and evaluation grid, and the
stages of its own (Stages) beside what every experiment does (fairseq_alibi_lab/runner.py: train each
(model, seed) once, score it at every length and stride, tabulate). One file in this package per
experiment or family declares it and calls register(); nothing here runs anything or imports fairseq.
"""
import dataclasses
import os
import re
from typing import Callable, Optional

from fairseq_alibi.twins import TWIN_METHODS
from fairseq_alibi_lab import recipes

# Where each experiment's results are committed (its tables rebuild from them with --tables --out).
COMMITTED = os.path.join("examples", "wikitext2", "results")


@dataclasses.dataclass(frozen=True)
class Model:
    label: str  # the row's name in every table
    method: str  # scripts/train.sh METHOD (a masked LM or encoder-decoder: its --arch)
    flags: tuple = ()  # its fairseq-train flags, after the recipe's
    scalings: tuple = ()  # evaluate's --scaling values, scored past the training length
    train_multiple: int = 1  # trained at this multiple of the experiment's L (the trade's long sinusoidal models)
    multiples: tuple = ()  # L_valid = multiple x L scored (default: the experiment's)
    longest: int = 0  # scored up to this multiple of L only (learned positions end at L: 1); 0, no limit
    # Retrieval's prompts past 16L are asked with these of ("none", *scalings) only (those above their
    # floor at 4L: a scaling at its floor there has nothing longer to show); (), all of them.
    long_scalings: tuple = ()
    # A checkpoint the experiment's Stages.prepared makes for each seed (the GPT-2 experiment's
    # "gpt2", a GPT-2 trained with transformers and imported): the model is fine-tuned from it
    # (--finetune-from-model), or, with no method, is that checkpoint, scored as it is. A flag
    # "{name}" stands for such a checkpoint (--teacher-path {gpt2}).
    start: str = ""
    # (experiment, label): this model is that experiment's run of that label (same recipe, L and
    # seeds), its rows taken from the experiment's committed results (COMMITTED), never trained or
    # scored here.
    shared: tuple = ()
    directory: str = ""  # its save directories' stem (default: the label's slug); models naming one share a run
    seeds: tuple = ()  # scored for these seeds only (a prepared checkpoint every seed starts from: the one teacher)
    # A prepared checkpoint whose updates are added to the training's (ALiBi from scratch for as long
    # as the teacher and its fine-tune together).
    plus: str = ""
    updates: int = 0  # its training's updates, where not the experiment's (a baseline trained as long as a whole pipeline)
    # A prepared checkpoint: the model is the one its run kept after as many updates as that one's
    # (--save-interval-updates), not the run's last.
    kept_at: str = ""
    # What else is recorded of this model once it is scored, each record(context, job) -> True if it wrote
    # rows of its own under OUT (the runner calls them; their files are in Stages.rows): retrieval's learned
    # slopes' reach in tokens, streaming's streams (a model that can stream declares it).
    records: tuple = ()
    family: str = ""  # the panel its rows are drawn in, where an experiment's figures group models (retrieval's)

    def __post_init__(self):
        unknown = set(self.long_scalings) - {"none", *self.scalings}
        if unknown:
            raise ValueError(f"{self.label}: long_scalings {', '.join(sorted(unknown))} not among its scalings "
                             f"(none, {', '.join(self.scalings)})")


@dataclasses.dataclass(frozen=True)
class Prepared:
    """Checkpoints an experiment makes for its models to start from, continue or be (Model.start, plus,
    kept_at, a flag "{name}"): an import, a conversion's teacher, a curriculum's first stage. context is
    the run's jobs.Context."""
    path: Callable  # path(name, context, seed) -> where it is, made or not (the same before and after)
    updates: Callable  # updates(name, context, seed) -> the training updates it holds
    # make(name, context, seed, train): made where missing; train(model, seed, save_dir, updates) runs the
    # kind's trainer on a model of the experiment's declaring (a conversion's teacher)
    make: Callable


@dataclasses.dataclass(frozen=True)
class Stages:
    """An experiment's own stages, each a function the runner calls (None: the experiment has none),
    given the run's jobs.Context and a jobs.Job, never the runner."""
    # data(context, length) -> the binarized directory the models trained at `length` train on (those trained
    # at L are also scored on it)
    data: Optional[Callable] = None
    data_problem: Optional[Callable] = None  # data_problem(directory) -> why a given --data cannot be used, or None
    prepared: Optional[Prepared] = None
    floors: Optional[Callable] = None  # floors(context): the task's own floor rows, beside the unigram row
    score: Optional[Callable] = None  # score(context, job) -> True if it scored anything
    rows: tuple = ()  # the files under OUT that `score` appends to (merged from parallel parts by name)
    report: Optional[Callable] = None  # report(rows, out) -> a table of its own from the declared runs' rows
    # Its rows as its claims' cells: claim_cells(results paths) -> claims.Cells (None: perplexity rows).
    claim_cells: Optional[Callable] = None
    # cells(experiment) -> every cell it scores, which its claims may name (None: perplexity_cells).
    cells: Optional[Callable] = None


@dataclasses.dataclass(frozen=True)
class Inclusion:
    """Which seeds are scored past L, declared before training: a seed of a model is scored past L only where
    measure(context, job) (after the job is scored at L) is at least at_least; an excluded seed is reported
    (OUT/excluded.jsonl) and the next seed is trained in its place, until `wanted` seeds are included or
    `most` were tried."""
    measure: Callable  # measure(context, job) -> the job's value at L (its rows scored), or None
    at_least: float
    about: str  # the rule in words, for the tables
    wanted: int = 5
    most: int = 10


@dataclasses.dataclass(frozen=True)
class Experiment:
    about: str
    models: tuple
    recipe: str = "small"  # fairseq_alibi_lab/recipes.py; its RECIPE_KIND says what the models are
    train_length: int = 64
    seeds: tuple = (1, 2, 3)
    multiples: tuple = (1, 2, 4, 8, 16)  # L_valid = multiple x L
    strides: tuple = ("0", "/2")  # evaluate's STRIDE: nonoverlapping, sliding by L_valid/2
    split: str = "valid"
    # WikiText-2 with <doc> between articles (prepare --documents), and each model scored with its
    # documents kept apart and packed (--document-separator set and dropped at evaluation), in rows
    # labelled "<label>, scored apart|packed". False: the usual data.
    documents: bool = False
    # checkpoints/<this> (default: the experiment's name): experiments that share a model (same label,
    # flags, recipe, L) and name the same directory train it once.
    checkpoints: str = ""
    # fairseq-train flags for every model, after the recipe's (a model size other than the recipe's).
    train_flags: tuple = ()
    # The --attention-kernel rule (kernels.AUTO_RULES) its plugin models train and are scored under, unless
    # a model names a kernel itself: an experiment with committed rows names the rule they were made
    # under (BEFORE_SEPARABLE), so that a rerun trains and scores on the same kernels, digit for digit.
    kernel_rule: str = "auto"
    updates: int = 0  # training updates (0: the recipe's)
    stages: Stages = Stages()
    # Its claims (claims.Claim), judged on its rows by scripts/claims.py; each names cells it scores.
    claims: tuple = ()
    inclusion: Optional[Inclusion] = None  # None: every seed is scored at every length


# auto's rule before the separable kernel joined it (it now trains learned slopes and FoX and evaluates
# ALiBi past 512 tokens on CPU): what the experiments committed before then ran under (kernel_rule).
BEFORE_SEPARABLE = "auto-no-separable"



def kernel_flags(experiment, model):
    """--attention-kernel and the experiment's kernel rule, for a plugin model (a position method's: a causal LM
    that is neither a stock twin nor a prepared checkpoint scored as it is) where the experiment names one; else
    none. Told apart by name, not by the registry, which imports torch: the runner (every invocation, every
    parallel part) starts without it."""
    plugin = recipes.RECIPE_KIND[experiment.recipe] == "causal LM" and model.method and model.method not in TWIN_METHODS
    return ["--attention-kernel", experiment.kernel_rule] if experiment.kernel_rule != "auto" and plugin else []


EXPERIMENTS = {}
# The two ways a documents experiment scores each model (a row's label suffix; jobs.SCORING_OVERRIDES: how).
DOCUMENT_SCORINGS = ("scored apart", "scored packed")


def register(name, experiment):
    """Declare an experiment under `name` (scripts/experiment.py NAME); a name declared twice, or a claim
    on a cell the experiment does not score, is refused."""
    if name in EXPERIMENTS:
        raise ValueError(f"experiment '{name}' is declared twice")
    scored = (experiment.stages.cells or perplexity_cells)(experiment)
    for claim in experiment.claims:
        for cell in (claim.a, claim.b):
            if tuple(cell) not in scored:
                raise ValueError(f"experiment '{name}': the claim {claim.text!r} names {cell}, a cell it does not score "
                                 f"(it scores {len(scored)} cells, e.g. {sorted(scored, key=str)[:3]})")
    EXPERIMENTS[name] = experiment
    return experiment


def labels(model):
    """The labels a model's rows carry: its own, and its own + each scaling it is scored with."""
    from fairseq_alibi_lab.results import SCALINGS

    return (model.label, *(model.label + SCALINGS[scaling] for scaling in model.scalings))


def multiples(experiment, model):
    """The multiples of L a model is scored at."""
    return tuple(k for k in (model.multiples or experiment.multiples) if not model.longest or k <= model.longest)


def perplexity_cells(experiment):
    """Every perplexity cell an experiment scores: (label, K) of a model trained at L, (label, K, T) of one
    trained at T x L; a documents experiment's labels carry the scoring (DOCUMENT_SCORINGS)."""
    found = set()
    for model in experiment.models:
        names = labels(model)
        if experiment.documents:
            names = tuple(f"{label}, {scoring}" for label in names for scoring in DOCUMENT_SCORINGS)
        trained = (model.train_multiple,) if model.train_multiple != 1 else ()
        found |= {(label, k, *trained) for label in names for k in multiples(experiment, model)}
    return found


def paired_by_seed(experiment, label_a, label_b):
    """Whether two of an experiment's labels are one seed's arms: both fine-tuned from a checkpoint
    prepared for that seed (Model.start), so a paired test pairs them by seed."""
    starts = {model.label: model.start for model in experiment.models}
    return bool(starts.get(label_a) and starts.get(label_b))


def declared_updates(experiment, length):
    """An experiment's training updates: its own, else its recipe's --max-update."""
    return experiment.updates or int(recipes.last_value(recipes.recipe(experiment.recipe, length), "--max-update"))


def slug(label):
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def names(model):
    """What --models takes for model: its label, the label's slug, and slug@K, the one trained at K x L
    (the trade's sinusoidal models share a label)."""
    return model.label, slug(model.label), f"{slug(model.label)}@{model.train_multiple}"
