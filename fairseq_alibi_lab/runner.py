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
import dataclasses
import fcntl
import json
import os
import shlex
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from fairseq_alibi.tools import files, provenance  # noqa: E402  (no fairseq or torch import)
from fairseq_alibi_lab import inclusion, jobs as jobs_of, result_rows  # noqa: E402
from fairseq_alibi_lab.result_rows import append_lines, append_new, left_out, read_rows  # noqa: E402
from fairseq_alibi_lab.experiments import COMMITTED, declared_updates, names, slug  # noqa: E402
from fairseq_alibi_lab.kinds import kind_of  # noqa: E402
from fairseq_alibi_lab.processes import duration, follow, one_preparation_at_a_time, relayed, stopped_together  # noqa: E402


class Runner:
    def __init__(self, name, experiment, args):
        self.kind, self.stages = kind_of(experiment.recipe), experiment.stages
        self.name, self.experiment, self.args = name, experiment, args
        length = args.train_length or experiment.train_length
        self.models = [m for m in experiment.models if not args.models or set(names(m)) & set(args.models)]
        # What kinds and stages are given (jobs.Context): the command line ends here.
        self.context = jobs_of.Context(
            name, experiment, length, tuple(args.seeds or experiment.seeds), args.updates or declared_updates(experiment, length),
            args.out or os.path.join("runs", name), args.checkpoints or os.path.join("checkpoints", experiment.checkpoints or name),
            given_lengths=tuple(args.lengths or ()), train_flags=tuple(args.train_flags),
            task_flags=tuple(getattr(args, "task_flags", None) or ()), given_data=args.data or "")
        self.context = dataclasses.replace(self.context, lengths=tuple(sorted(
            {lv for m in self.models for lv in self.context.model_lengths(m)})))  # the floor's, the tables'
        self.out, self.results = self.context.out, self.context.results
        self.trained_on = {}  # training length -> the binarized data a model trained at it trains on

    def training_data(self, length):
        """The binarized data a model trained at `length` trains on (the kind's: a longer stage's set is its
        own), prepared once."""
        if length not in self.trained_on:
            self.trained_on[length] = self.kind.training_data(self.context, length)
        return self.trained_on[length]

    def job(self, model, seed, excluded=()):
        """The job of (model, seed); scored at L only where the inclusion rule excluded its checkpoint."""
        job = jobs_of.build(self.context, model, seed)
        return inclusion.at_l(job, self.context.length) if job.checkpoint in excluded else job

    def jobs(self, models, seeds, replace):
        """Seed by seed, each model's seeds of `seeds`; with an inclusion rule (and replace: the declared
        seeds, not --seeds), as many further seeds as it excluded, within the rule's most."""
        rule = self.experiment.inclusion
        excluded = inclusion.excluded(self.out) if rule else {}
        tried = {model: seeds_of(model, seeds) for model in models}
        if rule and replace:
            tried = {model: inclusion.seeds_to_try(rule, these, lambda s, m=model: self.job(m, s).checkpoint in excluded)
                     for model, these in tried.items()}
        return [self.job(m, s, excluded) for s in sorted({s for these in tried.values() for s in these})
                for m in models if s in tried[m]]

    def screened(self, job):
        """The job as it is scored: with an inclusion rule, scored at L first, then whole where the rule
        includes it, else at L only (written to OUT/excluded.jsonl)."""
        rule = self.experiment.inclusion
        first = inclusion.at_l(job, self.context.length)
        if not rule or first == job:
            return job
        self.evaluate(first)
        if self.stages.score:
            self.stages.score(self.context, first)
        value = rule.measure(self.context, job)
        if value is not None and value >= rule.at_least:
            return job
        inclusion.record(self.out, job, value, rule, {**json.loads(self.context.row_fields(job.checkpoint)), **self.identity(job)})
        print(f"    excluded: {value} at L, under {rule.at_least} ({rule.about}); scored at L only", flush=True)
        return first

    def take_shared(self, jobs):
        """The committed rows of the borrowed models' runs, relabelled, into OUT (those it lacks): their
        perplexity rows and those of the experiment's own scorer (Stages.rows: retrieval's); one line naming
        the command where some are missing."""
        for job in jobs:
            if not job.borrowed:
                continue
            experiment, label = job.borrowed
            for name in (os.path.basename(self.results), *self.stages.rows):
                rows = [dict(r, label=job.model.label) for r in read_rows(os.path.join(COMMITTED, experiment, name))
                        if r.get("label") == label and r.get("checkpoint") == job.checkpoint
                        and r.get("scaling", "none") == "none" and r.get("updates") == job.updates]
                append_new(os.path.join(self.out, name), rows)
            if any(self.missing(job, job.updates).values()):
                raise SystemExit(f"error: {COMMITTED}/{experiment}/results.jsonl lacks rows of {label} (seed {job.seed}) "
                                 f"that {self.name} shows: run scripts/experiment.py {experiment} --models {slug(label)} "
                                 f"--seeds {job.seed} and commit its results first")

    def made(self, job):
        """The job once the prepared checkpoints it needs are made (its flags name them where they are)."""
        if not job.needs:
            return job
        def train(model, seed, save, updates):  # a prepared checkpoint's own training (a conversion's teacher)
            return self.train(jobs_of.build(self.context, model, seed, save, updates))

        for name in job.needs:
            self.stages.prepared.make(name, self.context, job.seed, train)
        return jobs_of.build(self.context, job.model, job.seed)

    def train(self, job):
        """The kind's trainer, which resumes an interrupted run and leaves a finished one; its log is
        appended to SAVE/train.log, its time and memory to SAVE/resources.jsonl. Returns the
        checkpoint scored."""
        if not job.trains:  # a prepared checkpoint, scored as it is
            return job.checkpoint
        os.makedirs(job.save_dir, exist_ok=True)
        data = self.training_data(job.train_length)
        command, log_path = self.kind.train_command(self.context, job, data)
        with open(log_path or os.devnull, "a") as log:  # no log path: the trainer writes its own
            # WAIT_FOR_RUN: a run another part holds (a continuation training its first stage as that stage's
            # own job starts, in parallel) is waited for, then left finished, not refused
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    env=dict(os.environ, PYTHONUNBUFFERED="1", WAIT_FOR_RUN="1"), start_new_session=True)
            with stopped_together(proc):
                follow(proc, log, self.kind.where, job.train_updates)
        if proc.wait() != 0:  # the log's last line says why (a one-line refusal, fairseq's exception)
            with open(os.path.join(job.save_dir, "train.log")) as log:
                why = ([line.strip() for line in log if line.strip()] or ["(no output)"])[-1]
            raise SystemExit(f"error: training {job.model.label} (seed {job.seed}) failed: {why} "
                             f"(the whole log: {job.save_dir}/train.log)")
        return job.checkpoint

    def evaluate(self, job):
        """Score what is missing from the results, in one scorer process per scoring (where
        only some is missing, the lengths, strides and scalings it spans are all scored again)."""
        from fairseq_alibi.tools import checkpoints

        missing = self.missing(job, checkpoints.checkpoint_summary(job.checkpoint)[2])
        for label, flags in job.scorings:
            if missing[label]:
                self.score(label, job.checkpoint, missing[label], flags)
        return any(missing.values())

    def missing(self, job, updates):
        """Each scoring's label -> what the results lack for the job's checkpoint (the kind's measurements)."""
        return self.kind.missing(self.context, job, self.identity(job), updates)

    def identity(self, job):
        """What rows of the job's checkpoint must record to be this run's (result_rows.identity_problem): the
        file now at its path, the data scored, the training flags and data (a borrowed model's are its own
        experiment's)."""
        checkpoint, data = job.checkpoint, self.context.data  # no data: --tables
        identity = {"checkpoint_sha256": files.fingerprint(checkpoint) if os.path.isfile(checkpoint) else None,
                    "data_sha256": None, "train_flags": None if job.borrowed else shlex.join(self.context.train_flags),
                    "train_data_sha256": None}
        if data and os.path.isfile(os.path.join(data, f"{self.context.split}.idx")):
            identity["data_sha256"] = files.data_fingerprint(data, self.context.split)
        trained_on = self.training_data(job.train_length) if data and not job.borrowed else None
        if trained_on and os.path.isfile(os.path.join(trained_on, "train.idx")):  # a longer stage's: its own set
            identity["train_data_sha256"] = files.data_fingerprint(trained_on, "train")
        return identity

    def scored_elsewhere(self, job):
        """Every row of the job at its updates is in the results, but its checkpoint is not here (a fresh
        machine, the rows kept in git): it is done, not trained again."""
        return not os.path.exists(job.checkpoint) and not any(self.missing(job, job.updates).values())

    def orphaned(self, jobs):
        """The jobs of which OUT holds some rows but not all, of a checkpoint that is not here (a fresh
        machine, the rows kept in git): trained again, each would be another checkpoint file, whose rows
        cannot join these (result_rows.identity_problem), found only after its training."""
        named = {r.get("checkpoint") for name in self.scored_files() for r in read_rows(os.path.join(self.out, name))}
        return [f"{job.model.label} seed {job.seed}" for job in jobs if not job.borrowed
                and job.checkpoint in named and not os.path.exists(job.checkpoint) and not self.scored_elsewhere(job)]

    def score(self, label, checkpoint, jobs, flags):
        """The kind's scorer on what the results lack, in a process of its own; its last error line if it fails."""
        proc = subprocess.Popen(self.kind.score_command(self.context, label, checkpoint, jobs, flags), stdout=subprocess.DEVNULL,
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
        command = self.kind.floor_command(self.context)
        if command is None:
            return
        if self.stages.floors:  # a task's own floors, from its test prompts (retrieval's)
            self.stages.floors(self.context)
        subprocess.run(command, check=True)

    def tabulate(self):
        """Tables and figures from the rows of the declared runs at the declared updates (earlier
        rows, of other recipes or runs, stay in the file but not in the tables): every declared
        model's and seed's, whatever part of them this invocation ran (--models, --seeds)."""
        models, seeds = self.experiment.models, sorted({*self.experiment.seeds, *self.context.seeds})
        jobs = self.jobs(models, seeds, replace=True)
        left_out_seeds = set(inclusion.excluded(self.out))
        lengths = {lv for job in jobs for lv in job.lengths}
        updates = {job.checkpoint: job.updates for job in jobs}
        every = read_rows(self.results)
        rows = [r for r in every if self.kind.declared(r, updates, lengths) and r.get("checkpoint") not in left_out_seeds]
        if self.args.tables and len(rows) < len(every):  # said, never dropped unseen
            print(left_out([r for r in every if r not in rows], updates, lengths, self.name), flush=True)
        printed = self.kind.tables(rows, self.out)
        if printed and self.stages.report:
            printed += "\n" + (self.stages.report(rows, self.out) or "")
        if printed and left_out_seeds:
            printed += "\n" + "\n".join(inclusion.table(self.out)) + "\n"
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
        data, binarized = one_preparation_at_a_time(lambda: self.kind.prepare(self.context))
        self.context = dataclasses.replace(self.context, data=data, binarized=binarized)
        start, started = time.time(), time.strftime("%Y-%m-%dT%H:%M:%S%z")
        seeds, replace = self.context.seeds, not self.args.seeds  # a part, or --seeds: those seeds only
        jobs = self.jobs(self.models, seeds, replace)
        record = {"command": "python scripts/experiment.py " + shlex.join(sys.argv[1:]), "commit": provenance.commit(),
                  "machine": provenance.machine(), "started": started, "jobs": len(jobs),
                  # the float summation order, so a training's trajectory, depends on it
                  "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset (torch: one per core)")}
        invocations = os.path.join(self.out, "runs.jsonl")
        # Recorded as it starts, so that a run killed outright (a session's end) still leaves its line.
        append_lines(invocations, [json.dumps(dict(record, event="started"))])
        print(f"== {self.name}: {len(self.models)} models x {len(seeds)} seeds, {self.experiment.recipe} recipe, "
              f"{self.context.updates} updates {self.kind.grid(self.context)} -> {self.out}", flush=True)
        try:
            if self.args.retire:  # their rows out of the tables, kept with why, before anything is asked of them
                here = {c: files.fingerprint(c) if os.path.isfile(c) else None
                        for c in (job.checkpoint for job in jobs if not job.borrowed)}
                moved, kept = result_rows.retire(self.out, self.scored_files(), here, self.args.retire)
                print(f"    {moved} rows retired to {self.out}/{result_rows.RETIRED}: {self.args.retire}"
                      + (f"; {kept} rows scored on the checkpoints here kept (this training's)" if kept else ""), flush=True)
            orphaned = self.orphaned(jobs)
            if orphaned:
                raise SystemExit(f"error: {self.out} holds some rows of {', '.join(orphaned)}, scored on checkpoints that are "
                                 "not on this machine: trained again they would be other checkpoint files, whose rows "
                                 f"cannot join those. Carry the checkpoints ({self.context.checkpoints}) here to continue, "
                                 "--retire WHY to keep those rows aside and run them anew, or give another --out")
            self.floor()
            self.take_shared(jobs)
            while jobs:  # then the seeds that replace those the inclusion rule excluded meanwhile
                if self.args.parallel > 1:
                    self.run_parallel(jobs, start)
                else:
                    self.run_in_turn(jobs, start)
                ran = {(job.model.label, job.seed) for job in jobs}
                jobs = [job for job in self.jobs(self.models, seeds, replace) if (job.model.label, job.seed) not in ran]
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
        for number, job in enumerate(jobs, 1):
            job_start = time.time()
            elapsed = job_start - start
            left = f", about {duration(sum(worked) / len(worked) * (len(jobs) - number + 1))} left" if worked else ""
            print(f"== [{number}/{len(jobs)}] {job.model.label}, seed {job.seed} ({duration(elapsed)} so far{left})", flush=True)
            if job.borrowed:
                print(f"    {job.borrowed[0]}'s run (its committed rows): nothing to do", flush=True)
                continue
            if self.scored_elsewhere(job):
                print("    already scored (its checkpoint is not on this machine): nothing to do", flush=True)
                continue
            job = self.made(job)
            self.train(job)
            job = self.screened(job)
            scored = self.evaluate(job)
            if self.stages.score:
                scored = self.stages.score(self.context, job) or scored
            for record in job.model.records:  # what else its declaration records of it
                scored = record(self.context, job) or scored
            if scored and number < len(jobs):
                self.tabulate()  # what is done so far, in case the run is stopped
            if time.time() - job_start > 30:
                worked.append(time.time() - job_start)

    def run_parallel(self, jobs, start):
        """Each (model, seed) by a runner of its own (its rows in OUT/parts/<run>), --parallel at a
        time (small models leave a GPU, or many cores, mostly idle); each part's rows are appended
        to OUT/results.jsonl as it ends. Stopped and rerun, it continues as run_in_turn does."""
        waiting, running, failed = [job for job in jobs if not job.borrowed and not self.scored_elsewhere(job)], {}, []
        waiting.sort(key=lambda job: bool(job.needs))  # those that continue another's run after it (stable: seed by seed)
        if len(waiting) < len(jobs):
            print(f"== {len(jobs) - len(waiting)} of {len(jobs)} already scored (their checkpoints are not on this "
                  "machine): nothing to do for them", flush=True)
        while waiting or running:
            while waiting and len(running) < self.args.parallel:
                job = waiting.pop(0)
                model, seed, context = job.model, job.seed, self.context
                part = os.path.join(self.out, "parts", job.run_name())
                self.start_part(job, part)
                # The part runs what this run was started as (scripts/experiment.py, an experiment's own file).
                command = [sys.executable, os.path.abspath(sys.argv[0]), self.name, "--models", names(model)[2],
                           "--seeds", str(seed), "--out", part, "--checkpoints", context.checkpoints,
                           # the data given, else none: a part prepares (finds) each length's own as this run does
                           *(["--data", context.given_data] if context.given_data else []),
                           "--updates", str(context.updates), "--train-length", str(context.length),
                           *(["--lengths", *map(str, context.given_lengths)] if context.given_lengths else []),
                           "--train-flags", shlex.join(context.train_flags),
                           *(["--task-flags", shlex.join(context.task_flags)] if context.task_flags else [])]
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
            if waiting or running or failed:  # what is done so far (after the last, run() tabulates unless one failed)
                self.tabulate()
        if failed:
            raise SystemExit("error: some runs failed:\n  " + "\n  ".join(failed))

    def scored_files(self):
        """The files under OUT that rows go to: results.jsonl, the scorer's own (Stages.rows), the excluded seeds."""
        return (os.path.basename(self.results), *self.stages.rows, inclusion.EXCLUDED)

    def start_part(self, job, part):
        """A part begins with the rows OUT already holds for its job, and the floor's, so that its
        runner scores only what OUT lacks (a run begun one at a time, continued in parallel)."""
        os.makedirs(part, exist_ok=True)
        checkpoint = job.checkpoint
        for name in self.scored_files():
            append_new(os.path.join(part, name), [r for r in read_rows(os.path.join(self.out, name))
                                                  if r.get("checkpoint") == checkpoint or r.get("model") == "unigram"])

    def merge(self, part):
        """Append a part's model rows that OUT's files do not hold yet (the floor is OUT's own)."""
        for name in self.scored_files():
            append_new(os.path.join(self.out, name), [r for r in read_rows(os.path.join(part, name))
                                                      if r.get("model") != "unigram"])


def seeds_of(model, seeds):
    """The seeds of `seeds` a model is run for (its own, where it declares some)."""
    return [s for s in seeds if not model.seeds or s in model.seeds]
