"""The GPT-2 -> ALiBi experiment again, deconfounded (issue 65): gpt2-alibi's fine-tunes warmed back
up to the recipe's lr 0.003, which alone set the continued GPT-2 back 10%. First gpt2-schedule
chooses the fine-tune schedule on the continued GPT-2 alone (seed 1), by the rule in its
description, written before any of its rows; then gpt2-alibi-2 (declared here once the schedule is
chosen; its claims were declared before any row of either) runs the conversion with it, 3 seeds, beside ALiBi
trained from scratch in the GPT-2's layout for the GPT-2's and its fine-tune's updates together.
Both share their GPT-2 stand-ins (checkpoints/gpt2-alibi-2)."""
import os

from fairseq_alibi_lab import gpt2_conversion
from fairseq_alibi_lab.claims import Claim
from fairseq_alibi_lab.experiments.alibi_conversion import DISTILLATION, GPT2_PREPARED
from fairseq_alibi_lab.experiments.base import BEFORE_SEPARABLE, Experiment, Model, Stages, register, slug

PEAKS = ("0.001", "0.0003", "0.0001")  # no re-warm-up: the peak from the first update, linear decay to 0
IMPORTED = gpt2_conversion.IMPORTED


def continued(peak):
    """gpt2-schedule's label of the GPT-2 continued from `peak` with no warm-up."""
    return f"GPT-2 continued, peak {peak}, no warm-up"


def chosen_peak(rows):
    """gpt2-schedule's rule, on its rows: the highest peak whose continued GPT-2 is no worse than the
    imported GPT-2 at L (validation, nonoverlapping), else the lowest peak."""
    at_l = {r["label"]: r["perplexity"] for r in rows if r.get("checkpoint") and r.get("split") == "valid"
            and r.get("stride") == 0 and r.get("l_valid") == r.get("train_length")}
    missing = [label for label in (IMPORTED, *map(continued, PEAKS)) if label not in at_l]
    if missing:
        raise SystemExit(f"error: gpt2-schedule's rows lack {', '.join(missing)} at L: run `python scripts/experiment.py gpt2-schedule`")
    return next((peak for peak in PEAKS if at_l[continued(peak)] <= at_l[IMPORTED]), PEAKS[-1])


GPT2_STAGES = Stages(prepared=GPT2_PREPARED)

register("gpt2-schedule", Experiment(
    "The fine-tune schedule for gpt2-alibi's rerun, chosen on the continued GPT-2 alone (seed 1, scored at L): the "
    "imported GPT-2 continued for 200 updates with the recipe's schedule (100 warm-up updates back to lr 0.003) and "
    "with no warm-up from peaks 0.001, 0.0003 and 0.0001, each decaying linearly to 0. Chosen, by a rule written "
    "before any row: the highest peak whose continued GPT-2 is no worse than the imported GPT-2 at L "
    "(nonoverlapping), else the lowest peak.",
    (Model(IMPORTED, "", start="gpt2", longest=1),
     Model("GPT-2 continued, recipe schedule", "learned", start="gpt2", longest=1),
     *(Model(continued(peak), "learned", ("--lr", peak, "--warmup-updates", "0"),
             start="gpt2", longest=1) for peak in PEAKS)),
    recipe="gpt2_small", updates=200, seeds=(1,), multiples=(1,), checkpoints="gpt2-alibi-2", stages=GPT2_STAGES,
    kernel_rule=BEFORE_SEPARABLE))


def wall_time(rows, out):
    """OUT/wall_time.md: each trained model's training wall time (the longest measured call,
    trade_table.training_records, kept in OUT/training-resources.csv since the checkpoints do not
    travel), mean ± std over its seeds, with the machines its rows name. Returns the table, or None
    where nothing was measured."""
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi_lab.results import mean_std
    from fairseq_alibi_lab.trade_table import record, training_records

    trained = [r for r in rows if r.get("checkpoint") and r.get("updates")]
    records = training_records({r["checkpoint"] for r in trained}, out)
    by_label = {}
    for r in trained:
        seconds = record(records, r["checkpoint"]).get("seconds")
        if seconds is not None:
            by_label.setdefault(r["label"], {})[r["checkpoint"]] = (seconds, r["updates"], r.get("machine"))
    if not by_label:
        return None
    lines = ["# Training wall time (s), mean ± std over seeds", "",
             "Each training's longest measured call (`training-resources.csv`: a resumed run shows `resumed`), on the "
             "machines named; the runner trained two at a time, one thread each, so a time includes the other job's "
             "contention for memory bandwidth.", "", "| model | updates | seconds | n | machines |", "|---|---|---|---|---|"]
    for label, runs in by_label.items():
        mean, std = mean_std([s for s, _, _ in runs.values()])
        updates = sorted({u for _, u, _ in runs.values()})
        spread = f" ± {std:.0f}" if len(runs) > 1 else ""  # one run has no spread
        lines.append(f"| {label} | {', '.join(map(str, updates))} | {mean:.0f}{spread} | {len(runs)} | "
                     f"{'; '.join(sorted({str(m) for _, _, m in runs.values()}))} |")
    text = "\n".join(lines) + "\n"
    with written_whole(os.path.join(out, "wall_time.md")) as partial, open(partial, "w") as f:
        f.write(text)
    return text


# gpt2-schedule's choice: chosen_peak of its committed rows (examples/wikitext2/results/gpt2-schedule;
# tests/lab/test_conversion.py checks that they give this peak).
PEAK = "0.0001"
SCHEDULE = ("--lr", PEAK, "--warmup-updates", "0")

# gpt2-alibi-2's claims: every fine-tune with the schedule gpt2-schedule chooses; declared before any row of either experiment.
CONTINUED_D, CE_D, DISTILLED_D = ("GPT-2 continued (chosen schedule)", "GPT-2 -> ALiBi, cross entropy (chosen schedule)",
                                  "GPT-2 -> ALiBi, distillation (chosen schedule)")
SCRATCH_D = "ALiBi from scratch, GPT-2 layout (1600)"
GPT2_ALIBI_2 = (
    Claim("With the chosen schedule the continued GPT-2 is not set back (no worse than imported, at L)",
          (CONTINUED_D, 1), (IMPORTED, 1), "at most", declared="8c4f3e2"),
    Claim("Distillation recovers the conversion better than cross entropy, schedule deconfounded (at L)",
          (DISTILLED_D, 1), (CE_D, 1), "lower", declared="8c4f3e2"),
    Claim("Distillation recovers the conversion better than cross entropy, schedule deconfounded (at 16L)",
          (DISTILLED_D, 16), (CE_D, 16), "lower", declared="8c4f3e2"),
    Claim("The distilled conversion is below the GPT-2 continued as long, schedule deconfounded (at L)",
          (DISTILLED_D, 1), (CONTINUED_D, 1), "lower", declared="8c4f3e2"),
    Claim("Cross entropy's conversion is below the GPT-2 continued as long, schedule deconfounded (at L)",
          (CE_D, 1), (CONTINUED_D, 1), "lower", declared="8c4f3e2"),
    Claim("ALiBi from scratch in the GPT-2's layout for as many updates beats the distilled conversion (at L)",
          (SCRATCH_D, 1), (DISTILLED_D, 1), "lower", declared="8c4f3e2"),
    Claim("ALiBi from scratch in the GPT-2's layout for as many updates beats the distilled conversion (at 16L)",
          (SCRATCH_D, 16), (DISTILLED_D, 16), "lower", declared="8c4f3e2"),
    Claim("The distilled conversion at 16L is below the imported GPT-2 at L (sliding window)",
          (DISTILLED_D, 16), (IMPORTED, 1), "lower", ("L_valid/2",), declared="8c4f3e2"),
    Claim("The distilled conversion uses context past L (16L below L, sliding window)",
          (DISTILLED_D, 16), (DISTILLED_D, 1), "lower", ("L_valid/2",), declared="8c4f3e2"),
)
register("gpt2-alibi-2", Experiment(
    "gpt2-alibi again, deconfounded: the imported GPT-2 continued, and its ALiBi conversion fine-tuned with cross "
    f"entropy and with distillation from it, each for 200 updates with gpt2-schedule's choice (no warm-up, peak {PEAK}, "
    "linear decay to 0), beside ALiBi trained from scratch in the GPT-2's layout for 1600 updates (the stand-in's "
    "1400 + 200); nonoverlapping and sliding; each training's wall time.",
    (Model(IMPORTED, "", start="gpt2", longest=1),
     # seed 1 is gpt2-schedule's run of this peak (same start, flags and updates): trained once
     Model(CONTINUED_D, "learned", SCHEDULE, start="gpt2", longest=1, directory=slug(continued(PEAK))),
     Model(CE_D, "alibi", SCHEDULE, start="converted"),
     Model(DISTILLED_D, "alibi", SCHEDULE + DISTILLATION, start="converted"),
     Model(SCRATCH_D, "alibi", updates=1600)),
    recipe="gpt2_small", updates=200, checkpoints="gpt2-alibi-2",
    stages=Stages(prepared=GPT2_PREPARED, report=wall_time),
    claims=GPT2_ALIBI_2, kernel_rule=BEFORE_SEPARABLE))
