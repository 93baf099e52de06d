"""A short-to-long curriculum's first stage, as a prepared checkpoint (experiments.base.Prepared): the
checkpoint that a model's own run at L kept after a declared share of its updates. A second stage
continues it (train.py --continue-from: its weights, optimizer, schedule and update count) at a longer
length for the rest of the updates, so that the model trained at L only and the curriculum share their
first stage and train for the same tokens (the recipes' batches are counted in tokens, --max-tokens).

    ALIBI = Model("ALiBi", "alibi", FirstStages.keeping("alibi_first"))
    FIRST_STAGES = FirstStages({"alibi_first": (ALIBI, 0.75)})
    Model("ALiBi, L then 4L", "alibi", ("--continue-from", "{alibi_first}"), train_multiple=4)

The first stage's model keeps the checkpoint (keeping: fairseq's --keep-interval-updates-pattern, after the
updates the first stage holds, "{name.updates}"), and is trained where its kept checkpoint is missing,
after any run of it on this machine ends.
"""
import dataclasses
import os

from fairseq_alibi_lab import recipes


def kept_updates(share, updates):
    """The update after which a run of `updates` updates has spent `share` of them."""
    kept = round(share * updates)
    if not 0 < kept < updates:
        raise ValueError(f"a first stage's share must leave updates to both stages, got {share} of {updates}")
    return kept


@dataclasses.dataclass(frozen=True)
class FirstStages:
    """name -> (the model trained at L whose run is the first stage, the share of its updates)."""
    stages: dict

    @staticmethod
    def keeping(name):
        """The flags that make the first stage `name`'s run keep its checkpoint after the stage's updates
        (beside its last one): fairseq deletes every interval checkpoint but the last unless its update count
        is a multiple of this (the recipe saves one every 100 updates: the stage's must be a multiple of it)."""
        return ("--keep-interval-updates-pattern", "{%s.updates}" % name)

    def stage(self, name):
        if name not in self.stages:
            raise ValueError(f"unknown first stage '{name}': the experiment declares {', '.join(self.stages)}")
        return self.stages[name]

    def updates(self, name, context, seed):
        model, share = self.stage(name)
        return kept_updates(share, model.updates or context.updates)

    def path(self, name, context, seed):
        model, _ = self.stage(name)
        return recipes.kept_checkpoint(context.save_dir(model, seed), self.updates(name, context, seed))

    def make(self, name, context, seed, train):
        """The first stage's run trained (resumed, or left where it finished) where its kept checkpoint is
        missing; one line where the run ends without it (its flags do not keep it)."""
        if os.path.isfile(self.path(name, context, seed)):
            return
        model, share = self.stage(name)
        save = context.save_dir(model, seed)
        os.makedirs(save, exist_ok=True)
        recipes.wait_for_run(save)  # another job of this run training it (a parallel part): after it ends
        if not os.path.isfile(self.path(name, context, seed)):
            print(f"    training the first stage, {model.label} (seed {seed}) -> {save}", flush=True)
            train(model, seed, None, None)
        if not os.path.isfile(self.path(name, context, seed)):
            kept = self.updates(name, context, seed)
            raise SystemExit(f"error: {save} kept no checkpoint after {kept} updates: declare {model.label} with "
                             f"FirstStages.keeping({share}, ...) so that its run keeps it, and train it again")
