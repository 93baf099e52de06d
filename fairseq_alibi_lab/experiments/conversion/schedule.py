"""gpt2-schedule's choice of the fine-tune schedule for gpt2-alibi-2: its peaks, its labels and its rule."""
from fairseq_alibi_lab.experiments.conversion.gpt2 import IMPORTED

PEAKS = ("0.001", "0.0003", "0.0001")  # no re-warm-up: the peak from the first update, linear decay to 0


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


# gpt2-schedule's choice: chosen_peak of its committed rows (examples/wikitext2/results/gpt2-schedule;
# tests/lab/test_conversion.py checks that they give this peak).
PEAK = "0.0001"
SCHEDULE = ("--lr", PEAK, "--warmup-updates", "0")
