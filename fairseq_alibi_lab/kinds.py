"""What differs between the kinds of model an experiment trains (recipes.RECIPE_KIND: causal LM,
masked LM, encoder-decoder): its data, its trainer, its scorer, its floor and its tables. The runner
asks the experiment's kind and never branches on it; a kind is given the run's jobs.Context and a
jobs.Job, never the runner. Each stage runs as `python -m
fairseq_alibi_lab.<stage>` with flags (the scripts/ wrappers are for people), in a process of its
own: the runner imports no fairseq or torch.
"""
import os
import sys

from fairseq_alibi_lab import exact_match, prepare, recipes, result_rows, results, synthetic_table, synthetic_tasks


def module(name, *args):
    """The command line of a lab stage run as a module by this Python."""
    return [sys.executable, "-m", f"fairseq_alibi_lab.{name}", *map(str, args)]


class CausalLM:
    """A decoder LM (scripts/train.sh's METHOD): WikiText-2 or the experiment's data, scored by
    fairseq-eval-lm at every length, stride and scaling, the unigram model its floor."""
    name = "causal LM"
    length_in_names = True  # a save directory names its training length (-L<L>)
    where = " at L"  # what its validation perplexity is measured at (the progress lines)
    masked = False

    def prepare(self, context):
        """(data, binarized data) every model is scored on (those trained at L train on it too)."""
        return (self.training_data(context, context.length),) * 2

    def training_data(self, context, length):
        """The binarized data a model trained at `length` trains on: --data, else the experiment's own
        for that length, else WikiText-2."""
        stages = context.experiment.stages
        return context.given_data or (stages.data(context, length) if stages.data else prepare.wikitext2(context.experiment.documents))

    def train_command(self, context, job, data):
        """The training's command and the log its output goes to (the runner follows it)."""
        command = module("measure", os.path.join(job.save_dir, "resources.jsonl"), "--",
                         *module("train", job.model.method, job.train_length, data, job.save_dir, context.experiment.recipe,
                                 "--", *job.flags))
        return command, os.path.join(job.save_dir, "train.log")

    def score_command(self, context, label, checkpoint, jobs, flags):
        scalings, lengths, strides = ([*dict.fromkeys(job[i] for job in jobs)] for i in range(3))
        return module("evaluate", checkpoint, context.data, context.results, " ".join(map(str, sorted(lengths))),
                      " ".join(strides), "--label", label, "--split", context.split,
                      "--scaling", " ".join(scalings), "--scaling-factor", "", "--fields", context.row_fields(checkpoint),
                      "--", *flags)

    def missing(self, context, job, identity, updates):
        """Each scoring's label -> the (scaling, L_valid, stride) the results lack for the job's checkpoint
        (identity: what its rows must record, result_rows.identity_problem)."""
        rows = result_rows.read_rows(context.results)
        problem = result_rows.identity_problem(rows, job.checkpoint, identity, context.results,
                                               retire_hint=" (--out), or retire them with --retire WHY")
        if problem:
            raise SystemExit(f"error: {problem}")
        done = result_rows.Measured(rows)
        return {label: [(scaling, l_valid, stride) for scaling, l_valid, stride in job.evaluations
                        if result_rows.measurement(label, job.checkpoint, updates, l_valid, result_rows.stride(stride, l_valid)[1],
                                                   scaling, context.split,
                                                   result_rows.overrides_text(flags[1]) if flags else None) not in done]
                for label, flags in job.scorings}

    def floor_command(self, context):
        """The unigram row, once per length and stride (unigram adds those OUT lacks)."""
        return module("unigram", context.data, context.results, "--lengths", " ".join(map(str, context.lengths)),
                      "--strides", " ".join(context.experiment.strides), "--split", context.split,
                      "--fields", context.fields, *(["--masked-lm"] if self.masked else []))

    @staticmethod
    def declared(row, updates, lengths):
        """Whether a row is the floor's or a declared run's (updates: checkpoint -> its declared
        updates), at a declared length."""
        return (row.get("model") == "unigram" or updates.get(row.get("checkpoint"), -1) == row.get("updates")) \
            and row["l_valid"] in lengths

    def tables(self, rows, out):
        """The tables and figures of the declared runs' rows (the last measurement of a configuration wins)."""
        table_rows = results.keyed(rows)
        return results.write_tables(table_rows, out) if table_rows else ""

    def grid(self, context):
        return (f"at L={context.length}, scored at {' '.join(map(str, context.lengths))}, "
                f"strides {' '.join(context.experiment.strides)}")


class MaskedLM(CausalLM):
    """An encoder (its --arch): trained by train_once, scored by eval_mlm on one fixed mask."""
    name = "masked LM"
    masked = True

    def train_command(self, context, job, data):
        return train_once(context, job, data), None

    def score_command(self, context, label, checkpoint, jobs, flags):
        lengths = " ".join(map(str, sorted({job[1] for job in jobs})))
        return module("eval_mlm", checkpoint, context.data, context.results, "--lengths", lengths, "--split",
                      context.split, "--label", label, "--fields", context.row_fields(checkpoint))


class EncoderDecoder:
    """An encoder-decoder on the synthetic tasks: no L (the tasks' sizes are its lengths), scored by
    exact match per test bucket, no floor row (exact match's is 0: its table names every model below
    90% in distribution)."""
    name = "encoder-decoder"
    length_in_names = False
    where = ""
    masked = False

    def prepare(self, context):
        directory = synthetic_tasks.prepared(context.given_data or os.path.join("data-bin", "synthetic"), context.task_flags)
        with open(os.path.join(directory, "text", "buckets.txt")) as f:
            self.buckets = [line.split()[0] for line in f if line.strip()]
        return directory, os.path.join(directory, "bin")

    def training_data(self, context, length):
        return context.binarized

    def train_command(self, context, job, data):
        return train_once(context, job, data), None

    def score_command(self, context, label, checkpoint, jobs, flags):
        return module("exact_match", checkpoint, context.binarized, os.path.join(context.data, "text", "buckets.txt"),
                      context.results, "--label", label, "--fields", context.row_fields(checkpoint))

    def missing(self, context, job, identity, updates):
        done = exact_match.scored_buckets(result_rows.read_rows(context.results), job.model.label, job.checkpoint, updates)
        return {job.model.label: [bucket for bucket in self.buckets if bucket not in done]}

    def floor_command(self, context):
        return None

    @staticmethod
    def declared(row, updates, lengths):
        return updates.get(row.get("checkpoint"), -1) == row.get("updates")

    def tables(self, rows, out):
        return synthetic_table.write_table(rows, out) if rows else ""

    def grid(self, context):
        return f"scored by exact match on {len(self.buckets)} size buckets"


def train_once(context, job, data):
    """train_once's command (it writes the log and measures): the recipe's fairseq-train command."""
    return module("train_once", job.save_dir, f"{job.model.label} (seed {job.seed})", "--",
                  "fairseq-train", data, "--save-dir", job.save_dir, "--user-dir", "fairseq_alibi", "--arch", job.model.method,
                  *recipes.recipe(context.experiment.recipe, job.train_length, 1, context.updates), *job.flags)


KINDS = {kind.name: kind for kind in (CausalLM, MaskedLM, EncoderDecoder)}


def kind_of(recipe):
    """A new kind object for an experiment's recipe (it keeps what it prepared: the buckets)."""
    return KINDS[recipes.RECIPE_KIND[recipe]]()
