"""What an experiment's kinds and stages are given, computed once: the run's Context (its experiment, L,
seeds, directories, data) and one Job per (model, seed) (its directory, checkpoint, updates, flags,
lengths and scorings). Neither holds the command line or the runner; nothing here trains or scores.

A prepared checkpoint (an import, a conversion's teacher, a curriculum's first stage) is one protocol,
base.Prepared, that the experiment supplies: build() resolves a model's start, plus, kept_at and "{name}"
flags through it, and a job names the prepared checkpoints it needs made before it trains or is scored.
"""
import dataclasses
import json
import os
import re
import shlex
from typing import Optional

from fairseq_alibi_lab import recipes
from fairseq_alibi_lab.experiments.base import DOCUMENT_SCORINGS, EXPERIMENTS, Experiment, Model, declared_updates, kernel_flags, slug
from fairseq_alibi_lab.kinds import kind_of
from fairseq_alibi_lab.prepare import SEPARATOR  # what prepare --documents writes between articles

# A flag that stands for a prepared checkpoint, "{name}", or for the updates it holds, "{name.updates}" (a
# first stage's run keeping its checkpoint after them: curriculum.FirstStages).
PREPARED_FLAG = re.compile(r"\{(\w+)(\.updates)?\}")
LENGTH_FLAG = "{L}"  # a flag that stands for the experiment's L (a temperature's L, YaRN's original length)
# A documents experiment's scorings: a row label's suffix -> the scorer's --model-overrides.
SCORING_OVERRIDES = dict(zip(DOCUMENT_SCORINGS, (f"{{'document_separator': '{SEPARATOR}'}}", "{'document_separator': None}")))


@dataclasses.dataclass(frozen=True)
class Context:
    """One run of an experiment: what every job of it shares."""
    name: str
    experiment: Experiment
    length: int  # L
    seeds: tuple
    updates: int  # the experiment's training updates
    out: str
    checkpoints: str
    lengths: tuple = ()  # every L_valid the run's models are scored at (the floor's)
    given_lengths: tuple = ()  # --lengths: these L_valid for every model, else its multiples of L
    train_flags: tuple = ()  # every training's last flags (--train-flags)
    task_flags: tuple = ()  # the synthetic tasks' options (--task-flags)
    given_data: str = ""  # --data, else the kind's or the experiment's own
    data: str = ""  # the data every model is scored on, once prepared
    binarized: str = ""  # its binarized form (the same, for a language model)

    @property
    def results(self):
        return os.path.join(self.out, "results.jsonl")

    @property
    def split(self):
        return self.experiment.split

    @property
    def fields(self):
        """What every row records of the run; train_flags also keys "already done" (result_rows.identity_problem)."""
        return json.dumps({"experiment": self.name, "recipe": self.experiment.recipe,
                           "train_flags": shlex.join(self.train_flags)})

    def row_fields(self, checkpoint):
        """The run's fields, and the training data the checkpoint's run recorded (recipes.TRAINING_DATA;
        none for a checkpoint not trained by scripts/train.sh)."""
        trained_on = recipes.recorded_training_data(os.path.dirname(checkpoint))
        return json.dumps({**json.loads(self.fields), **({"train_data_sha256": trained_on} if trained_on else {})})

    def train_length(self, model):
        return model.train_multiple * self.length

    def model_lengths(self, model):
        """The L_valid values model is scored at (--lengths, else its multiples or the experiment's, of L)."""
        lengths = self.given_lengths or [m * self.length for m in model.multiples or self.experiment.multiples]
        return tuple(lv for lv in lengths if not model.longest or lv <= model.longest * self.train_length(model))

    def save_dir(self, model, seed):
        """Where (model, seed) trains: CHECKPOINTS/<stem>[-L<its L>]-s<seed>; a borrowed model's is its own
        experiment's (default checkpoints)."""
        if model.shared:
            experiment, label = model.shared
            return os.path.join("checkpoints", EXPERIMENTS[experiment].checkpoints or experiment,
                                f"{slug(label)}-L{self.train_length(model)}-s{seed}")
        length = f"-L{self.train_length(model)}" if kind_of(self.experiment.recipe).length_in_names else ""
        return os.path.join(self.checkpoints, f"{model.directory or slug(model.label)}{length}-s{seed}")

    def prepared(self, name, seed):
        """The path of the experiment's prepared checkpoint `name` for seed (made or not)."""
        return self.experiment.stages.prepared.path(name, self, seed)

    def prepared_updates(self, name, seed):
        return self.experiment.stages.prepared.updates(name, self, seed)


@dataclasses.dataclass(frozen=True)
class Job:
    """One (model, seed) of a run."""
    model: Model
    seed: int
    save_dir: str
    train_length: int
    lengths: tuple  # the L_valid it is scored at
    train_updates: int  # its training's --max-update
    updates: int  # the updates its rows name
    flags: tuple  # its whole fairseq-train flags after the recipe's (the runner's trainer adds nothing)
    evaluations: tuple  # (scaling, L_valid, stride) it is scored at
    scorings: tuple  # (row label, extra scorer flags) of each way it is scored
    needs: tuple = ()  # the prepared checkpoints made before it trains or is scored (base.Prepared)
    prepared: str = ""  # the prepared checkpoint it is, scored as it is (no training); "" for a trained model
    kept_updates: int = 0  # scored at the checkpoint its run kept after these updates (0: the run's last)
    borrowed: tuple = ()  # (experiment, label): its rows are that experiment's committed ones (Model.shared)
    results: str = ""  # the run's results (where a kept checkpoint not here is named)

    @property
    def trains(self):
        return bool(self.model.method) and not self.borrowed

    @property
    def checkpoint(self):
        """The checkpoint scored: the prepared one it is, the one its run kept after kept_updates, or its run's last."""
        if self.prepared:
            return self.prepared
        if self.kept_updates:
            return recipes.kept_checkpoint(self.save_dir, self.kept_updates, self.results)
        return os.path.join(self.save_dir, "checkpoint_last.pt")

    def run_name(self):
        return os.path.basename(self.save_dir)


def build(context, model, seed, save: Optional[str] = None, train_updates: Optional[int] = None):
    """The job of (model, seed) in this run; save, train_updates: a prepared checkpoint's own training
    (a conversion's teacher) in a directory and for updates of its own."""
    flag_names = [m[1] for f in model.flags if f != LENGTH_FLAG and (m := PREPARED_FLAG.fullmatch(f)) and not m[2]]
    needs = tuple(dict.fromkeys(n for n in (model.start, model.plus, model.kept_at, *flag_names) if n))
    updates_of = lambda name: context.prepared_updates(name, seed)  # noqa: E731
    trained = (model.updates or context.updates) + (updates_of(model.plus) if model.plus else 0)
    if train_updates:
        trained = train_updates
    if model.shared:
        updates = declared_updates(EXPERIMENTS[model.shared[0]], context.length)
    elif not model.method:
        updates = updates_of(model.start)
    else:
        updates = updates_of(model.kept_at) if model.kept_at else trained
    own = [str(context.length) if f == LENGTH_FLAG else f if not (m := PREPARED_FLAG.fullmatch(f))
           else str(updates_of(m[1])) if m[2] else context.prepared(m[1], seed) for f in model.flags]
    flags = (*context.experiment.train_flags, *kernel_flags(context.experiment, model), *own,
             *(("--finetune-from-model", context.prepared(model.start, seed)) if model.start and model.method else ()),
             "--seed", str(seed), "--max-update", str(trained), "--log-interval", "50", "--no-progress-bar",
             *context.train_flags)
    lengths = context.model_lengths(model)
    train_length = context.train_length(model)
    strides = context.experiment.strides
    evaluations = tuple([("none", lv, s) for lv in lengths for s in strides]
                        + [(sc, lv, s) for sc in model.scalings for lv in lengths if lv > train_length for s in strides])
    scorings = ((model.label, ()),) if not context.experiment.documents else tuple(
        (f"{model.label}, {suffix}", ("--model-overrides", overrides)) for suffix, overrides in SCORING_OVERRIDES.items())
    return Job(model, seed, save or context.save_dir(model, seed), train_length, lengths, trained, updates, flags,
               evaluations, scorings, needs, prepared=context.prepared(model.start, seed) if not model.method and not model.shared else "",
               kept_updates=updates if model.kept_at else 0, borrowed=tuple(model.shared), results=context.results)
