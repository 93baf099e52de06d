"""The conversion experiment's prepared checkpoints (experiments.base.Prepared: path, updates, make), made
once for every seed (the runs compared start from the same model), under CHECKPOINTS:

    teacher    sinusoidal-L<L>/checkpoint_last.pt: the small recipe's sinusoidal LM, seed 1 (a run
               there that finished its own --max-update is taken as it is)
    converted  converted-L<L>.pt: the teacher with its positions dropped for ALiBi
               (convert_checkpoint --replace-positions), not fine-tuned
"""
import fcntl
import os
import sys

from fairseq_alibi.tools import checkpoints
from fairseq_alibi_lab import recipes
from fairseq_alibi_lab.experiments.conversion.gpt2 import run

TEACHER_SEED = 1


def paths(context):
    teacher = os.path.join(context.checkpoints, f"sinusoidal-L{context.length}")
    return teacher, os.path.join(context.checkpoints, f"converted-L{context.length}.pt")


def finished(path):
    """A checkpoint whose run reached the --max-update it was run with."""
    if not os.path.isfile(path):
        return False
    _, _, done, goal = checkpoints.checkpoint_summary(path)
    return goal is None or done >= goal


def path(name, context, seed):
    """The path of the prepared checkpoint `name` (teacher, converted), the same for every seed."""
    teacher_dir, converted = paths(context)
    wanted = {"teacher": os.path.join(teacher_dir, "checkpoint_last.pt"), "converted": converted}
    if name not in wanted:
        raise ValueError(f"unknown prepared checkpoint '{name}': the conversion makes {', '.join(wanted)}")
    return wanted[name]


def make(name, context, seed, train, teacher_model):
    """The prepared checkpoint `name`, made where missing, resumably (one lock: parallel jobs wait for each
    other); train(model, seed, save_dir, updates): the runner's trainer, for the teacher (teacher_model, the
    experiment's declaration of it)."""
    teacher_dir, converted = paths(context)
    teacher = path("teacher", context, seed)
    if finished(teacher) and os.path.exists(path(name, context, seed)):
        return
    os.makedirs(context.checkpoints, exist_ok=True)
    with open(os.path.join(context.checkpoints, ".teacher.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not finished(teacher):
            updates = recipe_updates(context)
            print(f"    training the sinusoidal teacher (seed {TEACHER_SEED}, {updates} updates) -> {teacher_dir}", flush=True)
            train(teacher_model, TEACHER_SEED, teacher_dir, updates)
        if name == "converted" and not os.path.exists(converted):
            run([sys.executable, "-m", "fairseq_alibi.commands.convert_checkpoint", "--replace-positions", teacher, converted])


def updates(name, context, seed):
    """The teacher's training updates (the converted model's too): its checkpoint's, else the recipe's."""
    teacher = path("teacher", context, seed)
    if os.path.isfile(teacher):
        return checkpoints.checkpoint_summary(teacher)[2]
    return recipe_updates(context)


def recipe_updates(context):
    """The recipe's --max-update at L: the teacher's training."""
    return int(recipes.last_value(recipes.recipe(context.experiment.recipe, context.length), "--max-update"))
