"""The GPT-2 experiment's prepared checkpoints (experiments.base.Prepared: path, updates, make), one set per seed:

    gpt2       a GPT-2 (GPT2LMHeadModel, learned positions) trained with transformers on WikiText-2 at L
               (fairseq_alibi_lab/gpt2_standin.py: the stand-in for a downloaded `gpt2`, for the small
               recipe's updates), imported into fairseq (fairseq-alibi-import-hf)
    converted  that import given ALiBi (convert_checkpoint --replace-positions), not yet fine-tuned

under CHECKPOINTS/gpt2-standin-L<L>-s<seed> (the transformers folder, its log in train.log) and
CHECKPOINTS/gpt2-imported-L<L>-s<seed>/ (checkpoint.pt, dict.txt, converted-alibi.pt). Each step
is skipped when its output is there (the stand-in's trainer resumes an interrupted run; the import
and the conversion write whole); one seed's steps hold CHECKPOINTS/.gpt2-s<seed>.lock, so parallel
jobs of one seed wait for each other.
"""
import contextlib
import fcntl
import os
import subprocess
import sys

from fairseq_alibi_lab import recipes

IMPORTED = "GPT-2 (imported)"  # the imported checkpoint's label, in every experiment and claim that names it

def paths(context, seed):
    standin = os.path.join(context.checkpoints, f"gpt2-standin-L{context.length}-s{seed}")
    imported = os.path.join(context.checkpoints, f"gpt2-imported-L{context.length}-s{seed}")
    return standin, os.path.join(imported, "checkpoint.pt"), os.path.join(imported, "converted-alibi.pt")


def path(name, context, seed):
    """The path of the prepared checkpoint `name` (gpt2, converted) for seed."""
    _, gpt2, converted = paths(context, seed)
    wanted = {"gpt2": gpt2, "converted": converted}
    if name not in wanted:
        raise ValueError(f"unknown prepared checkpoint '{name}': the GPT-2 experiment makes {', '.join(wanted)}")
    return wanted[name]


def make(name, context, seed, train=None):
    """The prepared checkpoint `name`, made where missing (train: the runner's trainer, not needed here)."""
    if not os.path.exists(path(name, context, seed)):
        standin, gpt2, converted = paths(context, seed)
        os.makedirs(context.checkpoints, exist_ok=True)
        with open(os.path.join(context.checkpoints, f".gpt2-s{seed}.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            make_steps(context, seed, standin, gpt2, converted if name == "converted" else None)


def updates(name, context, seed):
    """An import and its conversion have trained nothing here: their rows say 0 updates."""
    return 0


def make_steps(context, seed, standin, gpt2, converted):
    updates = recipes.last_value(recipes.recipe("small", context.length), "--max-update")
    if not os.path.exists(gpt2):
        print(f"    training the GPT-2 stand-in (seed {seed}, {updates} updates) -> {standin}", flush=True)
        os.makedirs(standin, exist_ok=True)
        run([sys.executable, "-m", "fairseq_alibi_lab.gpt2_standin", context.data, standin,
             "--seed", str(seed), "--length", str(context.length), "--updates", updates], os.path.join(standin, "train.log"))
        print(f"    importing it -> {gpt2}", flush=True)
        run([sys.executable, "-m", "fairseq_alibi.hf.import_gpt2", standin, os.path.dirname(gpt2), "--seed", str(seed)])
    if converted and not os.path.exists(converted):
        run([sys.executable, "-m", "fairseq_alibi.commands.convert_checkpoint", "--replace-positions", gpt2, converted])


def run(command, log=None):
    """command, its output appended to log (else shown on failure); one line naming the log if it fails."""
    with open(log, "a") if log else contextlib.nullcontext() as out:
        done = subprocess.run(command, stdout=out or subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode:
        if log:
            with open(log) as f:
                lines = f.read().strip().splitlines()
        else:
            lines = (done.stdout or "").strip().splitlines()
        raise SystemExit(f"error: {' '.join(command[1:3])} failed: {(lines or ['(no output)'])[-1]}"
                         + (f" (the whole log: {log})" if log else ""))
