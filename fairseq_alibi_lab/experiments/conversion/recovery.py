"""The conversion experiment's scorer and report: the recovery curve and greedy continuations of a
sinusoidal LM given ALiBi (its prepared checkpoints: teacher.py).

The recovery curve: each training's kept checkpoints (--save-interval-updates) scored at L into
OUT/recovery.jsonl, labelled by the curve its model declares (a Curve in its Model.records), the from-scratch run's sparsely before the teacher's
updates; OUT/recovery.md and recovery.png from it. OUT/generation.md: generate.py's continuations
by the seed-1 models, written once, when they are all trained.
"""
import dataclasses
import json
import os
import re
import subprocess
import sys

from fairseq_alibi.tools.files import written_whole
from fairseq_alibi_lab import recipes
from fairseq_alibi_lab.experiments.conversion.teacher import finished, path, updates
from fairseq_alibi_lab.results import cell, mean_std, per_run, pyplot, read_json_lines

ROWS = "recovery.jsonl"  # under the runner's OUT: what the curves append to (the runner merges parallel parts' by it)
GENERATION = "generation.md"
SPARSE = 4  # the from-scratch run before the fine-tuning window: one kept checkpoint in SPARSE scored


def kept_checkpoints(save_dir, teacher_updates, every, scratch=False):
    """A run's kept checkpoints (checkpoint_EPOCH_UPDATES.pt) on the recovery curve, by update count.
    The from-scratch run keeps one every EVERY updates from its first; only those from the teacher's
    updates on are compared with the fine-tunes, so before them only every SPARSE-th is scored (its
    learning curve, at a quarter of the cost: each scoring is a full pass over the validation set)."""
    found = {int(m[1]): os.path.join(save_dir, name) for name in os.listdir(save_dir)
             if (m := re.fullmatch(r"checkpoint_\d+_(\d+)\.pt", name))}
    return [found[n] for n in sorted(found) if not scratch or n >= teacher_updates or n % (SPARSE * every) == 0]


@dataclasses.dataclass(frozen=True)
class Curve:
    """A Model.records entry: the model's run's kept checkpoints scored at L on the recovery curve `name` (its
    label in OUT/recovery.jsonl; "scratch": ALiBi from scratch, sparsely before the teacher's updates)."""
    name: str

    def __call__(self, context, job):
        from fairseq_alibi_lab import evaluate  # loads fairseq: here only, not when the runner starts

        every = int(recipes.last_value(job.flags, "--save-interval-updates"))
        kept = kept_checkpoints(job.save_dir, updates("teacher", context, job.seed), every, self.name == "scratch")
        return score_points(context, job, [evaluate.Scoring(path, os.path.join(context.out, ROWS), [context.length],
                                                            self.name, show=False) for path in kept])


def score_points(context, job, scorings):
    """The scorings' points OUT/recovery.jsonl lacks; True if it scored any."""
    from fairseq_alibi_lab import evaluate

    made = evaluate.score(scorings, context.data, context.split, resume=True,
                          fields=json.loads(context.row_fields(job.checkpoint))) if scorings else 0
    if made:
        print(f"    recovery curve: {made} checkpoints scored at L", flush=True)
    return bool(made)


def score_model(context, job):
    """A prepared checkpoint's point of the recovery curve at L (the teacher's, the converted model's: its
    name), then the continuations if they are due; True if it scored anything."""
    from fairseq_alibi_lab import evaluate

    made = job.prepared and score_points(context, job, [evaluate.Scoring(
        job.checkpoint, os.path.join(context.out, ROWS), [context.length], job.model.start, show=False)])
    return bool(made) | generate(context)


def generate(context):
    """OUT/generation.md, once: fairseq_alibi_lab/generate.py's greedy continuations past L by the
    teacher, the converted model and the first seed's fine-tunes and ALiBi from scratch, when they
    have all finished training; written whole, never over an earlier one."""
    out = os.path.join(context.out, GENERATION)
    seed = min(context.seeds)
    on_curve = {record.name: model for model in context.experiment.models for record in model.records
                if isinstance(record, Curve)}
    models = [path("teacher", context, seed), path("converted", context, seed),
              *(os.path.join(context.save_dir(on_curve[name], seed), "checkpoint_last.pt") for name in ("ce", "distill", "scratch"))]
    if os.path.exists(out) or not all(map(finished, models)):
        return False
    with written_whole(out) as partial, open(partial, "w") as f:
        done = subprocess.run([sys.executable, "-m", "fairseq_alibi_lab.generate", "--prompt",
                               str(context.length // 2), "--new", str(context.length), context.data, *models],
                              stdout=f, stderr=subprocess.PIPE, text=True)
        if done.returncode:
            raise SystemExit((done.stderr.strip().splitlines() or ["error: generate.py failed"])[-1])
    print(f"    greedy continuations -> {out}", flush=True)
    return True


def load(path):
    """{label: {updates: [perplexity of each run]}}; a checkpoint scored twice counts once (the last)."""
    points = {}
    for (label, steps), values in per_run(read_json_lines(path), lambda r: (r["label"], r["updates"])).items():
        points.setdefault(label, {})[steps] = values
    return points


def report(rows, out):
    """OUT/recovery.md (one row per number of fine-tuning updates k: the fine-tunes and the teacher
    continued after k, ALiBi from scratch after the teacher's updates + k; runs of several seeds as
    mean ± sample std (n)) and recovery.png (their means against updates in all), from
    OUT/recovery.jsonl; nothing until it holds the teacher, the converted model and a fine-tune."""
    path = os.path.join(out, ROWS)
    points = load(path) if os.path.exists(path) else {}
    if not {"teacher", "converted", "ce", "distill", "scratch"} <= set(points):
        return None
    (teacher_updates, (teacher,)), = points["teacher"].items()
    (converted,) = next(iter(points["converted"].values()))
    # After conversion the fine-tuning count starts at 0: k = 0 is the converted model itself.
    finetune = {name: {0: [converted], **points[name]} for name in ("ce", "distill")}
    continued = {0: [teacher], **points["continued"]} if "continued" in points else {}  # the teacher fine-tuned alike
    scratch = points["scratch"]
    ks = sorted(set(finetune["ce"]) | set(finetune["distill"]))
    lines = [f"Validation perplexity at L (teacher: {teacher:.2f} after {teacher_updates} updates)\n",
             "| Fine-tuning updates k | Converted + CE | Converted + distill | Teacher continued | "
             f"ALiBi from scratch, {teacher_updates} + k updates |", "|---|---|---|---|---|"]
    shown = lambda d, k: cell(d[k], 1) if k in d else ""  # noqa: E731  (one run: its value; more: mean ± std (n=k))
    for k in ks:
        lines.append(f"| {k} | {shown(finetune['ce'], k)} | {shown(finetune['distill'], k)} | {shown(continued, k)} | "
                     f"{shown(scratch, teacher_updates + k)} |")
    table = "\n".join(lines) + "\n"
    with written_whole(os.path.join(out, "recovery.md")) as partial, open(partial, "w") as f:
        f.write(table)
    plot(out, teacher, teacher_updates, finetune, continued, scratch)
    return table


def plot(out, teacher, teacher_updates, finetune, continued, scratch):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    xs = sorted(scratch)
    mean = lambda values: mean_std(values)[0]  # noqa: E731
    ax.plot(xs, [mean(scratch[x]) for x in xs], "o-", label="ALiBi from scratch")
    for points_k, label in ((finetune["ce"], "converted + CE"), (finetune["distill"], "converted + distillation"),
                            (continued, "teacher continued (sinusoidal)")):
        ks = sorted(points_k)
        if not ks:
            continue
        ax.plot([teacher_updates + k for k in ks], [mean(points_k[k]) for k in ks], "s--", label=label)
    ax.axhline(teacher, color="gray", linestyle=":", label=f"sinusoidal teacher ({teacher_updates} updates)")
    ax.set_yscale("log")
    ax.set_xlabel("Training updates in all (fine-tuning starts from the teacher's)")
    ax.set_ylabel("Validation perplexity at L")
    ax.set_title("Recovering a sinusoidal LM converted to ALiBi")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with written_whole(os.path.join(out, "recovery.png")) as partial:
        fig.savefig(partial, format="png")
    plt.close(fig)
