"""What an experiment is: its models (Model), its recipe, lengths, seeds and evaluation grid, and the
stages of its own (Stages) beside what every experiment does (fairseq_alibi_lab/runner.py: train each
(model, seed) once, score it at every length and stride, tabulate). One file in this package per
experiment or family declares it and calls register(); nothing here runs anything or imports fairseq.
"""
import dataclasses
import os
import re
from typing import Callable, Optional

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

    def __post_init__(self):
        unknown = set(self.long_scalings) - {"none", *self.scalings}
        if unknown:
            raise ValueError(f"{self.label}: long_scalings {', '.join(sorted(unknown))} not among its scalings "
                             f"(none, {', '.join(self.scalings)})")


@dataclasses.dataclass(frozen=True)
class Stages:
    """An experiment's own stages, each a function the runner calls (None: the experiment has none).
    `run` is the runner (its out, data, length, checkpoints, model_lengths, row_fields, train...)."""
    data: Optional[Callable] = None  # data(run) -> the binarized directory every model trains and is scored on
    data_problem: Optional[Callable] = None  # data_problem(directory) -> why a given --data cannot be used, or None
    prepared: Optional[Callable] = None  # prepared(name, run, seed, make) -> the path of a Model.start checkpoint
    prepared_updates: Optional[Callable] = None  # prepared_updates(name, run, seed) -> its training updates
    floors: Optional[Callable] = None  # floors(run): the task's own floor rows, beside the unigram row
    score: Optional[Callable] = None  # score(run, model, seed, checkpoint) -> True if it scored anything
    rows: tuple = ()  # the files under OUT that `score` appends to (merged from parallel parts by name)
    report: Optional[Callable] = None  # report(rows, out) -> a table of its own from the declared runs' rows


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
    updates: int = 0  # training updates (0: the recipe's)
    stages: Stages = Stages()


EXPERIMENTS = {}


def register(name, experiment):
    """Declare an experiment under `name` (scripts/experiment.py NAME); a name declared twice is refused."""
    if name in EXPERIMENTS:
        raise ValueError(f"experiment '{name}' is declared twice")
    EXPERIMENTS[name] = experiment
    return experiment


def declared_updates(experiment, length):
    """An experiment's training updates: its own, else its recipe's --max-update."""
    return experiment.updates or int(recipes.last_value(recipes.recipe(experiment.recipe, length), "--max-update"))


def slug(label):
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def names(model):
    """What --models takes for model: its label, the label's slug, and slug@K, the one trained at K x L
    (the trade's sinusoidal models share a label)."""
    return model.label, slug(model.label), f"{slug(model.label)}@{model.train_multiple}"
