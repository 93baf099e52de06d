"""Run a declared experiment: train each (model, seed) once, score each at every length and
stride, and tabulate the seeds as mean ± std.

    python scripts/experiment.py NAME [--seeds 1 2 3] [--updates N] [--out DIR] ...
    python scripts/experiment.py --list         (its options: fairseq_alibi_lab/experiment_cli.py)

An experiment is declared in its own file of fairseq_alibi_lab/experiments/; its recipe's kind of
model (fairseq_alibi_lab/kinds.py) says how each model trains and is scored. This runner schedules,
resumes and writes: each (model, seed) trains into CHECKPOINTS/<label>-L<L>-s<seed>; an interrupted
training resumes, a finished one (recipes.run_status) is left, as is one whose rows are all in the
results where its checkpoint is gone (a fresh machine, the rows kept in git). Each missing (length,
stride, scaling) is scored and appended to OUT/results.jsonl with the label, seed, recipe, commit and
machine; nothing is deleted, so the same command continues a stopped run. The unigram model is every
table's floor row; tables and figures are rebuilt after each job; OUT/runs.jsonl records each
invocation (command, commit, machine, threads) as it starts and with its wall time as it ends.
"""
import fcntl
import json
import os
import re
import shlex
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from fairseq_alibi.tools import checkpoints, files, provenance  # noqa: E402  (no fairseq or torch import)
from fairseq_alibi_lab import recipes, result_rows  # noqa: E402
from fairseq_alibi_lab.result_rows import append_lines, append_new, left_out, read_rows  # noqa: E402
from fairseq_alibi_lab.experiments import COMMITTED, EXPERIMENTS, base, declared_updates, names, slug  # noqa: E402
from fairseq_alibi_lab.kinds import kind_of  # noqa: E402
from fairseq_alibi_lab.processes import duration, follow, one_preparation_at_a_time, relayed, stopped_together  # noqa: E402
from fairseq_alibi_lab.prepare import SEPARATOR  # noqa: E402  (what prepare --documents writes between articles)

# Label suffix -> the evaluation's --model-overrides.
DOCUMENT_SCORINGS = dict(zip(base.DOCUMENT_SCORINGS, (f"{{'document_separator': '{SEPARATOR}'}}",
                                                      "{'document_separator': None}")))


class Runner:
    def __init__(self, name, experiment, args):
        self.kind, self.stages = kind_of(experiment.recipe), experiment.stages
        self.name, self.experiment, self.args = name, experiment, args
        self.length = args.train_length or experiment.train_length
        self.seeds = tuple(args.seeds or experiment.seeds)
        self.updates = args.updates or declared_updates(experiment, self.length)
        self.out = args.out or os.path.join("runs", name)
        self.checkpoints = args.checkpoints or os.path.join("checkpoints", experiment.checkpoints or name)
        self.models = [m for m in experiment.models if not args.models or set(names(m)) & set(args.models)]
        self.lengths = sorted({lv for m in self.models for lv in self.model_lengths(m)})  # the floor's, the tables'
        self.results = os.path.join(self.out, "results.jsonl")
        # What every row records of the run; train_flags also keys "already done" (identity_problem).
        self.fields = json.dumps({"experiment": name, "recipe": experiment.recipe, "train_flags": shlex.join(args.train_flags)})

    def train_length(self, model):
        return model.train_multiple * self.length

    def row_fields(self, checkpoint):
        """What every row of checkpoint records of the run (self.fields), and the training data its run
        recorded (recipes.TRAINING_DATA; none for a checkpoint not trained by scripts/train.sh)."""
        trained_on = recipes.recorded_training_data(os.path.dirname(checkpoint))
        return json.dumps({**json.loads(self.fields), **({"train_data_sha256": trained_on} if trained_on else {})})

    def model_lengths(self, model):
        """The L_valid values model is scored at (--lengths, else its multiples or the experiment's, of L)."""
        lengths = self.args.lengths or [m * self.length for m in model.multiples or self.experiment.multiples]
        return [lv for lv in lengths if not model.longest or lv <= model.longest * self.train_length(model)]

    def save_dir(self, model, seed):
        if model.shared:  # the other experiment's own directory (default checkpoints)
            experiment, label = model.shared
            return os.path.join("checkpoints", EXPERIMENTS[experiment].checkpoints or experiment,
                                f"{slug(label)}-L{self.train_length(model)}-s{seed}")
        length = f"-L{self.train_length(model)}" if self.kind.length_in_names else ""
        return os.path.join(self.checkpoints, f"{model.directory or slug(model.label)}{length}-s{seed}")

    def checkpoint(self, model, seed):
        """The checkpoint scored for (model, seed): the last of its training, the one it kept after
        kept_at's updates, or the prepared one it is."""
        if not model.method and not model.shared:
            return self.stages.prepared(model.start, self, seed, False)
        if model.kept_at:
            return self.kept(model, seed)
        return os.path.join(self.save_dir(model, seed), "checkpoint_last.pt")

    def kept(self, model, seed):
        """fairseq's checkpoint_EPOCH_UPDATES.pt after kept_at's updates; where the run is not here,
        the one the results name (the epoch is fairseq's to say)."""
        save, updates = self.save_dir(model, seed), self.stages.prepared_updates(model.kept_at, self, seed)
        pattern = re.compile(re.escape(os.path.join(save, "checkpoint_")) + rf"\d+_{updates}\.pt")
        found = sorted(os.path.join(save, name) for name in (os.listdir(save) if os.path.isdir(save) else ())
                       if pattern.fullmatch(os.path.join(save, name)))
        named = [r["checkpoint"] for r in read_rows(self.results) if pattern.fullmatch(r.get("checkpoint") or "")]
        return (found or named or [os.path.join(save, f"checkpoint_?_{updates}.pt")])[0]

    def training_updates(self, model, seed):
        """The --max-update model's run trains to: its own or the experiment's (+ plus's)."""
        return (model.updates or self.updates) + (self.stages.prepared_updates(model.plus, self, seed) if model.plus else 0)

    def model_updates(self, model, seed=None):
        """The updates a scored row of model names: the shared experiment's, the prepared checkpoint's
        where it is scored as it is (an import: none), kept_at's, else its training's."""
        if model.shared:
            return declared_updates(EXPERIMENTS[model.shared[0]], self.length)
        if not model.method:
            return self.stages.prepared_updates(model.start, self, seed)
        return self.stages.prepared_updates(model.kept_at, self, seed) if model.kept_at else self.training_updates(model, seed)

    def model_seeds(self, model, seeds):
        return [s for s in seeds if not model.seeds or s in model.seeds]

    def flags(self, model, seed):
        """model's flags, a "{name}" made and replaced by its prepared checkpoint; --finetune-from-model
        its start; before them, a plugin model's kernel rule where the experiment names one."""
        named = [self.stages.prepared(f[1:-1], self, seed, True) if re.fullmatch(r"\{\w+\}", f) else f for f in model.flags]
        return base.kernel_flags(self.experiment, model) + named + (["--finetune-from-model", self.stages.prepared(model.start, self, seed, True)] if model.start else [])

    def take_shared(self):
        """The committed rows of the shared models' runs, relabelled, into OUT (those it lacks); one
        line naming the command where some are missing."""
        for model in self.models:
            if not model.shared:
                continue
            experiment, label = model.shared
            wanted = {self.checkpoint(model, seed) for seed in self.seeds}
            rows = [dict(r, label=model.label) for r in read_rows(os.path.join(COMMITTED, experiment, "results.jsonl"))
                    if r.get("label") == label and r.get("checkpoint") in wanted and r.get("scaling", "none") == "none"
                    and r.get("updates") == self.model_updates(model)]
            append_new(self.results, rows)
            for seed in self.seeds:
                if any(self.missing(model, self.checkpoint(model, seed), self.model_updates(model)).values()):
                    raise SystemExit(f"error: {COMMITTED}/{experiment}/results.jsonl lacks rows of {label} (seed {seed}) "
                                     f"that {self.name} shows: run scripts/experiment.py {experiment} --models {slug(label)} "
                                     f"--seeds {seed} and commit its results first")

    def train(self, model, seed, save=None, updates=None):
        """The kind's trainer, which resumes an interrupted run and leaves a finished one; its log is
        appended to SAVE/train.log, its time and memory to SAVE/resources.jsonl. Returns the
        checkpoint scored. save, updates: a prepared checkpoint's own run (the conversion's teacher),
        else the model's."""
        if not model.method:  # a prepared checkpoint, scored as it is
            return self.stages.prepared(model.start, self, seed, True)
        save = save or self.save_dir(model, seed)
        updates = updates or self.training_updates(model, seed)
        os.makedirs(save, exist_ok=True)
        common = [*self.experiment.train_flags, *self.flags(model, seed), "--seed", str(seed), "--max-update", str(updates),
                  "--log-interval", "50", "--no-progress-bar", *self.args.train_flags]
        command, log_path = self.kind.train_command(self, model, seed, save, common)
        with open(log_path or os.devnull, "a") as log:  # no log path: the trainer writes its own
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True)
            with stopped_together(proc):
                follow(proc, log, self.kind.where, updates)
        if proc.wait() != 0:  # the log's last line says why (a one-line refusal, fairseq's exception)
            with open(os.path.join(save, "train.log")) as log:
                why = ([line.strip() for line in log if line.strip()] or ["(no output)"])[-1]
            raise SystemExit(f"error: training {model.label} (seed {seed}) failed: {why} (the whole log: {save}/train.log)")
        return self.checkpoint(model, seed) if save == self.save_dir(model, seed) else os.path.join(save, "checkpoint_last.pt")

    def evaluations(self, model):
        """(scaling, L_valid, stride) to score: every length and stride; scalings past L only (at L
        they change nothing)."""
        lengths = self.model_lengths(model)
        jobs = [("none", lv, s) for lv in lengths for s in self.experiment.strides]
        jobs += [(sc, lv, s) for sc in model.scalings for lv in lengths if lv > self.train_length(model)
                 for s in self.experiment.strides]
        return jobs

    def scorings(self, model):
        """(row label, extra fairseq-eval-lm flags) of each way the model is scored."""
        if not self.experiment.documents:
            return [(model.label, [])]
        return [(f"{model.label}, {suffix}", ["--model-overrides", overrides])
                for suffix, overrides in DOCUMENT_SCORINGS.items()]

    def evaluate(self, model, checkpoint):
        """Score what is missing from the results, in one scorer process per scoring (where
        only some is missing, the lengths, strides and scalings it spans are all scored again)."""
        missing = self.missing(model, checkpoint, checkpoints.checkpoint_summary(checkpoint)[2])
        for label, flags in self.scorings(model):
            if missing[label]:
                self.score(label, checkpoint, missing[label], flags)
        return any(missing.values())

    def missing(self, model, checkpoint, updates):
        """Each scoring's label -> what the results lack for checkpoint (the kind's measurements)."""
        return self.kind.missing(self, model, checkpoint, updates)

    def identity(self, model, checkpoint):
        """What rows of checkpoint must record to be this run's (result_rows.identity_problem): the file now
        at its path, the data scored, the training flags and data (a shared model's are its own
        experiment's)."""
        identity = {"checkpoint_sha256": files.fingerprint(checkpoint) if os.path.isfile(checkpoint) else None,
                    "data_sha256": None, "train_flags": None if model.shared else shlex.join(self.args.train_flags),
                    "train_data_sha256": None}
        data = getattr(self, "data", None)  # set by run(); --tables has none
        if data and os.path.isfile(os.path.join(data, f"{self.experiment.split}.idx")):
            identity["data_sha256"] = files.data_fingerprint(data, self.experiment.split)
        if data and not model.shared and os.path.isfile(os.path.join(data, "train.idx")):
            identity["train_data_sha256"] = files.data_fingerprint(data, "train")
        return identity

    def scored_elsewhere(self, model, seed):
        """Every row of (model, seed) at the declared updates is in the results, but its checkpoint is
        not here (a fresh machine, the rows kept in git): it is done, not trained again."""
        checkpoint = self.checkpoint(model, seed)
        return not os.path.exists(checkpoint) and not any(self.missing(model, checkpoint, self.model_updates(model, seed)).values())

    def orphaned(self, jobs):
        """The (model, seed) runs of which OUT holds some rows but not all, of a checkpoint that is not
        here (a fresh machine, the rows kept in git): trained again, each would be another checkpoint
        file, whose rows cannot join these (result_rows.identity_problem), found only after its training."""
        named = {r.get("checkpoint") for name in self.scored_files() for r in read_rows(os.path.join(self.out, name))}
        return [f"{model.label} seed {seed}" for model, seed in jobs if not model.shared
                for checkpoint in [self.checkpoint(model, seed)]
                if checkpoint in named and not os.path.exists(checkpoint) and not self.scored_elsewhere(model, seed)]

    def score(self, label, checkpoint, jobs, flags):
        """The kind's scorer on what the results lack, in a process of its own; its last error line if it fails."""
        proc = subprocess.Popen(self.kind.score_command(self, label, checkpoint, jobs, flags), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        with stopped_together(proc):
            errors = relayed(proc, "scoring ")  # its progress shown as it comes, all of it kept
        if proc.returncode != 0:
            log = os.path.join(self.out, "scoring-errors.log")  # the whole of it, for a crash's cause
            with open(log, "a") as f:
                f.write(f"== {label} ({checkpoint}), {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n{errors}\n")
            last = (errors.strip().splitlines() or [f"error: scoring {label} failed"])[-1]
            raise SystemExit(f"{last} (all of it in {log})")

    def floor(self):
        """The kind's floor row (the unigram's, once per length and stride) and the experiment's own floors."""
        command = self.kind.floor_command(self)
        if command is None:
            return
        if self.stages.floors:  # a task's own floors, from its test prompts (retrieval's)
            self.stages.floors(self)
        subprocess.run(command, check=True)

    def tabulate(self):
        """Tables and figures from the rows of the declared runs at the declared updates (earlier
        rows, of other recipes or runs, stay in the file but not in the tables): every declared
        model's and seed's, whatever part of them this invocation ran (--models, --seeds)."""
        models, seeds = self.experiment.models, sorted({*self.experiment.seeds, *self.seeds})
        lengths = {lv for m in models for lv in self.model_lengths(m)}
        updates = {self.checkpoint(m, s): self.model_updates(m, s) for m in models for s in self.model_seeds(m, seeds)}
        every = read_rows(self.results)
        rows = [r for r in every if self.kind.declared(r, updates, lengths)]
        if self.args.tables and len(rows) < len(every):  # said, never dropped unseen
            print(left_out([r for r in every if r not in rows], updates, lengths, self.name), flush=True)
        printed = self.kind.tables(rows, self.out)
        if printed and self.stages.report:
            printed += "\n" + (self.stages.report(rows, self.out) or "")
        return printed

    def run(self):
        os.makedirs(self.out, exist_ok=True)
        lock = open(os.path.join(self.out, ".lock"), "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise SystemExit(f"error: another scripts/experiment.py is running on {self.out}: wait for it, or give --out")
        if self.args.tables:
            print(self.tabulate() or f"no rows of {self.name}'s runs in {self.results} yet")
            return
        if self.args.data and self.stages.data_problem:  # data the experiment cannot use: refused before any training
            problem = self.stages.data_problem(self.args.data)
            if problem:
                raise SystemExit(f"error: {problem}")
        self.data, self.binarized = one_preparation_at_a_time(lambda: self.kind.prepare(self))
        start, started = time.time(), time.strftime("%Y-%m-%dT%H:%M:%S%z")
        jobs = [(m, s) for s in self.seeds for m in self.models if s in self.model_seeds(m, self.seeds)]  # seed by seed
        record = {"command": "python scripts/experiment.py " + shlex.join(sys.argv[1:]), "commit": provenance.commit(),
                  "machine": provenance.machine(), "started": started, "jobs": len(jobs),
                  # the float summation order, so a training's trajectory, depends on it
                  "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset (torch: one per core)")}
        invocations = os.path.join(self.out, "runs.jsonl")
        # Recorded as it starts, so that a run killed outright (a session's end) still leaves its line.
        append_lines(invocations, [json.dumps(dict(record, event="started"))])
        print(f"== {self.name}: {len(self.models)} models x {len(self.seeds)} seeds, {self.experiment.recipe} recipe, "
              f"{self.updates} updates {self.kind.grid(self)} -> {self.out}", flush=True)
        try:
            if self.args.retire:  # their rows out of the tables, kept with why, before anything is asked of them
                here = {c: files.fingerprint(c) if os.path.isfile(c) else None
                        for c in (self.checkpoint(m, s) for m, s in jobs if not m.shared)}
                moved, kept = result_rows.retire(self.out, self.scored_files(), here, self.args.retire)
                print(f"    {moved} rows retired to {self.out}/{result_rows.RETIRED}: {self.args.retire}"
                      + (f"; {kept} rows scored on the checkpoints here kept (this training's)" if kept else ""), flush=True)
            orphaned = self.orphaned(jobs)
            if orphaned:
                raise SystemExit(f"error: {self.out} holds some rows of {', '.join(orphaned)}, scored on checkpoints that are "
                                 "not on this machine: trained again they would be other checkpoint files, whose rows "
                                 f"cannot join those. Carry the checkpoints ({self.checkpoints}) here to continue, "
                                 "--retire WHY to keep those rows aside and run them anew, or give another --out")
            self.floor()
            self.take_shared()
            if self.args.parallel > 1:
                self.run_parallel(jobs, start)
            else:
                self.run_in_turn(jobs, start)
            printed = self.tabulate()
        except KeyboardInterrupt:
            append_lines(invocations, [json.dumps(dict(record, event="stopped", wall_s=round(time.time() - start, 1)))])
            raise
        except SystemExit as refusal:  # a refusal or a failed job: its line, so that no "started" stands alone
            append_lines(invocations, [json.dumps(dict(record, event="failed", wall_s=round(time.time() - start, 1),
                                                       why=(str(refusal.code).strip().splitlines() or [""])[-1]))])
            raise
        append_lines(invocations, [json.dumps(dict(record, event="finished", wall_s=round(time.time() - start, 1)))])
        print(printed)
        print(f"== {self.name} done in {duration(time.time() - start)}: tables and figures in {self.out}")

    def run_in_turn(self, jobs, start):
        worked = []  # seconds of the jobs that did work (for the estimate)
        for number, (model, seed) in enumerate(jobs, 1):
            job_start = time.time()
            elapsed = job_start - start
            left = f", about {duration(sum(worked) / len(worked) * (len(jobs) - number + 1))} left" if worked else ""
            print(f"== [{number}/{len(jobs)}] {model.label}, seed {seed} ({duration(elapsed)} so far{left})", flush=True)
            if model.shared:
                print(f"    {model.shared[0]}'s run (its committed rows): nothing to do", flush=True)
                continue
            if self.scored_elsewhere(model, seed):
                print("    already scored (its checkpoint is not on this machine): nothing to do", flush=True)
                continue
            checkpoint = self.train(model, seed)
            scored = self.evaluate(model, checkpoint)
            if self.stages.score:
                scored = self.stages.score(self, model, seed, checkpoint) or scored
            if scored and number < len(jobs):
                self.tabulate()  # what is done so far, in case the run is stopped
            if time.time() - job_start > 30:
                worked.append(time.time() - job_start)

    def run_parallel(self, jobs, start):
        """Each (model, seed) by a runner of its own (its rows in OUT/parts/<run>), --parallel at a
        time (small models leave a GPU, or many cores, mostly idle); each part's rows are appended
        to OUT/results.jsonl as it ends. Stopped and rerun, it continues as run_in_turn does."""
        waiting, running, failed = [job for job in jobs if not job[0].shared and not self.scored_elsewhere(*job)], {}, []
        if len(waiting) < len(jobs):
            print(f"== {len(jobs) - len(waiting)} of {len(jobs)} already scored (their checkpoints are not on this "
                  "machine): nothing to do for them", flush=True)
        while waiting or running:
            while waiting and len(running) < self.args.parallel:
                model, seed = waiting.pop(0)
                part = os.path.join(self.out, "parts", os.path.basename(self.save_dir(model, seed)))
                self.start_part(model, seed, part)
                # The part runs what this run was started as (scripts/experiment.py, an experiment's own file).
                command = [sys.executable, os.path.abspath(sys.argv[0]), self.name, "--models", names(model)[2],
                           "--seeds", str(seed), "--out", part, "--checkpoints", self.checkpoints, "--data", self.data,
                           "--updates", str(self.updates), "--train-length", str(self.length),
                           *(["--lengths", *map(str, self.args.lengths)] if self.args.lengths else []),
                           "--train-flags", shlex.join(self.args.train_flags),
                           *(["--task-flags", shlex.join(self.args.task_flags)] if self.args.task_flags else [])]
                # Unless told, the parts share the cores out: N parts of a thread per core each would
                # oversubscribe them N times.
                threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // self.args.parallel))
                with open(os.path.join(part, "runner.log"), "a") as log:
                    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                            env=dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=threads))
                running[proc] = (model, seed, part)
            with stopped_together(*running):
                while not (ended := [proc for proc in running if proc.poll() is not None]):
                    time.sleep(1)
            proc = ended[0]
            model, seed, part = running.pop(proc)
            self.merge(part)
            ok = proc.returncode == 0
            if not ok:
                with open(os.path.join(part, "runner.log")) as log:
                    last = (log.read().strip().splitlines() or [""])[-1]
                failed.append(f"{model.label}, seed {seed}: {last} (see {part}/runner.log)")
            print(f"== {len(jobs) - len(waiting) - len(running)}/{len(jobs)} ended ({duration(time.time() - start)} "
                  f"so far): {model.label}, seed {seed}{'' if ok else ' FAILED'}", flush=True)
            self.tabulate()
        if failed:
            raise SystemExit("error: some runs failed:\n  " + "\n  ".join(failed))

    def scored_files(self):
        """The files under OUT that rows go to: results.jsonl, and the scorer's own (Stages.rows)."""
        return (os.path.basename(self.results), *self.stages.rows)

    def start_part(self, model, seed, part):
        """A part begins with the rows OUT already holds for its (model, seed), and the floor's, so
        that its runner scores only what OUT lacks (a run begun one at a time, continued in parallel)."""
        os.makedirs(part, exist_ok=True)
        checkpoint = self.checkpoint(model, seed)
        for name in self.scored_files():
            append_new(os.path.join(part, name), [r for r in read_rows(os.path.join(self.out, name))
                                                  if r.get("checkpoint") == checkpoint or r.get("model") == "unigram"])

    def merge(self, part):
        """Append a part's model rows that OUT's files do not hold yet (the floor is OUT's own)."""
        for name in self.scored_files():
            append_new(os.path.join(self.out, name), [r for r in read_rows(os.path.join(part, name))
                                                      if r.get("model") != "unigram"])
