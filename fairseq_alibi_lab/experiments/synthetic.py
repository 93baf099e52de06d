"""Encoder-decoders on the synthetic tasks, scored by exact match per size bucket."""
from fairseq_alibi import twins
from fairseq_alibi_lab.claims import Cells, Claim, one_run_per_seed
from fairseq_alibi_lab.experiments.base import Experiment, Model, Stages, register
from fairseq_alibi_lab.experiments.encoders import ENCODER_VARIANTS, MLM_VARIANTS
from fairseq_alibi_lab.synthetic_tasks import TASKS

EXACT_MATCH = "exact match"  # the claims' scoring: exact match in percent (higher is better)
BUCKETS = tuple(f"{(b - 1) * 20 + 1}-{b * 20}" for b in range(1, 5))  # synthetic_tasks' defaults: 4 buckets of 20 sizes


def accuracy_cells(rows):
    """{(label, task, "low-high"): {checkpoint: exact match in percent}} from exact_match.py's rows
    (the last scoring of a checkpoint wins), and {checkpoint: seed}; two runs of one label and seed refused."""
    out, runs, seeds = {}, {}, {}
    for r in rows:
        one_run_per_seed(runs, r["label"], r["label"], r.get("seed"), r["checkpoint"])
        out.setdefault((r["label"], r["task"], f"{r['n_low']}-{r['n_high']}"), {})[r["checkpoint"]] = 100 * r["accuracy"]
        seeds[r["checkpoint"]] = r.get("seed")
    return out, seeds


def claim_cells(paths):
    """The synthetic tasks' claims' cells: (label, task, size bucket) of exact match (no --compare)."""
    from fairseq_alibi_lab import results

    rows = [r for path in paths for r in results.read_json_lines(
        path, ("label", "task", "n_low", "n_high", "accuracy", "checkpoint"), "examples/synthetic/exact_match.py")]
    if not rows:
        raise SystemExit(f"error: no results in {', '.join(paths)}")
    found, seeds = accuracy_cells(rows)
    return Cells(found, lambda cell, scoring: (cell, f"{cell[0]}, {cell[1]} {cell[2]}"), tuple(paths), seeds,
                 higher_is_better=True, scorings=(EXACT_MATCH,))


# The synthetic tasks: exact match at 21-40, up to twice the training sizes (1-20).
PAST = "21-40"
SYNTHETIC = tuple(
    Claim(f"{label} beats the sinusoidal twin on {task} past the training sizes", (label, task, PAST),
          ("Sinusoidal", task, PAST), "higher", (EXACT_MATCH,), declared="fc7569c", after_data=True)
    for task in ("copy", "reverse") for label in MLM_VARIANTS) + tuple(
    Claim(f"{a} beats {b} on {task} past the training sizes", (a, task, PAST), (b, task, PAST), "higher", (EXACT_MATCH,),
          declared="fc7569c", after_data=True)
    for task, a, b in (
        ("reverse", "ALiBi one_sided", "ALiBi bialibi"), ("reverse", "ALiBi one_sided", "ALiBi learned"),
        ("reverse", "ALiBi one_sided", "ALiBi symmetric"), ("reverse", "ALiBi one_sided", "ALiBi ruoss"),
        ("reverse", "ALiBi bialibi", "ALiBi learned"), ("reverse", "ALiBi bialibi", "ALiBi symmetric"),
        ("reverse", "ALiBi learned", "ALiBi symmetric"), ("reverse", "ALiBi symmetric", "ALiBi ruoss"),
        ("copy", "ALiBi ruoss", "ALiBi symmetric"), ("copy", "ALiBi ruoss", "ALiBi bialibi"),
        ("copy", "ALiBi learned", "ALiBi symmetric")))

register("synthetic", Experiment(
    "Encoder-decoders on synthetic tasks (copy, reverse, addition; fairseq_alibi_lab/synthetic_tasks.py) trained on "
    "sizes up to 20 and scored by exact match (greedy) up to 80: the five encoder ALiBi variants (a causal ALiBi "
    "decoder, cross-attention without positions) against their sinusoidal twin (stock --arch transformer).",
    (*(Model(f"ALiBi {variant}", "alibi_transformer_small", ("--encoder-alibi", variant)) for variant in ENCODER_VARIANTS),
     Model("Sinusoidal", "transformer", tuple(twins.TRANSLATION_TWIN_FLAGS.split()[2:]))),
    recipe="synthetic", multiples=(), strides=(),
    stages=Stages(claim_cells=claim_cells,
                  cells=lambda experiment: {(m.label, task, sizes) for m in experiment.models for task in TASKS for sizes in BUCKETS}),
    claims=SYNTHETIC))
