"""What differs between the kinds of model an experiment trains (recipes.RECIPE_KIND: causal LM,
masked LM, encoder-decoder): its data, its trainer, its scorer, its floor and its tables. The runner
asks the experiment's kind and never branches on it. Each stage runs as `python -m
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

    def prepare(self, run):
        """(data, binarized data) every model trains and is scored on."""
        data = run.args.data or (run.experiment.stages.data(run) if run.experiment.stages.data
                                 else prepare.wikitext2(run.experiment.documents))
        return data, data

    def train_command(self, run, model, seed, save, common):
        """The training's command and the log its output goes to (the runner follows it)."""
        command = module("measure", os.path.join(save, "resources.jsonl"), "--",
                         *module("train", model.method, run.train_length(model), run.data, save, run.experiment.recipe,
                                 "--", *common))
        return command, os.path.join(save, "train.log")

    def score_command(self, run, label, checkpoint, jobs, flags):
        scalings, lengths, strides = ([*dict.fromkeys(job[i] for job in jobs)] for i in range(3))
        return module("evaluate", checkpoint, run.data, run.results, " ".join(map(str, sorted(lengths))),
                      " ".join(strides), "--label", label, "--split", run.experiment.split,
                      "--scaling", " ".join(scalings), "--scaling-factor", "", "--fields", run.row_fields(checkpoint),
                      "--", *flags)

    def missing(self, run, model, checkpoint, updates):
        """Each scoring's label -> the (scaling, L_valid, stride) the results lack for checkpoint."""
        rows = result_rows.read_rows(run.results)
        problem = result_rows.identity_problem(rows, checkpoint, run.identity(model, checkpoint), run.results,
                                               retire_hint=" (--out), or retire them with --retire WHY")
        if problem:
            raise SystemExit(f"error: {problem}")
        done = result_rows.Measured(rows)
        return {label: [(scaling, l_valid, stride) for scaling, l_valid, stride in run.evaluations(model)
                        if result_rows.measurement(label, checkpoint, updates, l_valid, result_rows.stride(stride, l_valid)[1],
                                             scaling, run.experiment.split,
                                             result_rows.overrides_text(flags[1]) if flags else None) not in done]
                for label, flags in run.scorings(model)}

    def floor_command(self, run):
        """The unigram row, once per length and stride (unigram adds those OUT lacks)."""
        return module("unigram", run.data, run.results, "--lengths", " ".join(map(str, run.lengths)),
                      "--strides", " ".join(run.experiment.strides), "--split", run.experiment.split,
                      "--fields", run.fields, *(["--masked-lm"] if self.masked else []))

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

    def grid(self, run):
        return (f"at L={run.length}, scored at {' '.join(map(str, run.lengths))}, "
                f"strides {' '.join(run.experiment.strides)}")


class MaskedLM(CausalLM):
    """An encoder (its --arch): trained by train_once, scored by eval_mlm on one fixed mask."""
    name = "masked LM"
    masked = True

    def train_command(self, run, model, seed, save, common):
        return train_once(run, model, seed, save, common), None

    def score_command(self, run, label, checkpoint, jobs, flags):
        lengths = " ".join(map(str, sorted({job[1] for job in jobs})))
        return module("eval_mlm", checkpoint, run.data, run.results, "--lengths", lengths, "--split",
                      run.experiment.split, "--label", label, "--fields", run.row_fields(checkpoint))


class EncoderDecoder:
    """An encoder-decoder on the synthetic tasks: no L (the tasks' sizes are its lengths), scored by
    exact match per test bucket, no floor row (exact match's is 0: its table names every model below
    90% in distribution)."""
    name = "encoder-decoder"
    length_in_names = False
    where = ""
    masked = False

    def prepare(self, run):
        directory = synthetic_tasks.prepared(run.args.data or os.path.join("data-bin", "synthetic"), run.args.task_flags)
        with open(os.path.join(directory, "text", "buckets.txt")) as f:
            self.buckets = [line.split()[0] for line in f if line.strip()]
        return directory, os.path.join(directory, "bin")

    def train_command(self, run, model, seed, save, common):
        return train_once(run, model, seed, save, common), None

    def score_command(self, run, label, checkpoint, jobs, flags):
        return module("exact_match", checkpoint, run.binarized, os.path.join(run.data, "text", "buckets.txt"),
                      run.results, "--label", label, "--fields", run.row_fields(checkpoint))

    def missing(self, run, model, checkpoint, updates):
        done = exact_match.scored_buckets(result_rows.read_rows(run.results), model.label, checkpoint, updates)
        return {model.label: [bucket for bucket in self.buckets if bucket not in done]}

    def floor_command(self, run):
        return None

    @staticmethod
    def declared(row, updates, lengths):
        return updates.get(row.get("checkpoint"), -1) == row.get("updates")

    def tables(self, rows, out):
        return synthetic_table.write_table(rows, out) if rows else ""

    def grid(self, run):
        return f"scored by exact match on {len(self.buckets)} size buckets"


def train_once(run, model, seed, save, common):
    """train_once's command (it writes the log and measures): the recipe's fairseq-train command."""
    return module("train_once", save, f"{model.label} (seed {seed})", "--",
                  "fairseq-train", run.binarized, "--save-dir", save, "--user-dir", "fairseq_alibi", "--arch", model.method,
                  *recipes.recipe(run.experiment.recipe, run.train_length(model), 1, run.updates), *common)


KINDS = {kind.name: kind for kind in (CausalLM, MaskedLM, EncoderDecoder)}


def kind_of(recipe):
    """A new kind object for an experiment's recipe (it keeps what it prepared: the buckets)."""
    return KINDS[recipes.RECIPE_KIND[recipe]]()
