"""The retrieval experiment's claims and how its rows become their cells (Stages.claim_cells, .cells)."""
import os

from fairseq_alibi_lab.claims import Cells, Claim, one_run_per_seed
from fairseq_alibi_lab.experiments.base import labels
from fairseq_alibi_lab.experiments.retrieval.floors import FIELD, METRICS, depth_means, floor_cells, past, read_floors
from fairseq_alibi_lab.experiments.retrieval.prompts import LONG_MULTIPLES, LONG_TASKS, TASKS
from fairseq_alibi_lab.experiments.retrieval.score import ROWS

# A cell is (model + scaling, task, K), exact match or the first key word in percent at
# K x L, averaged over the depths (all five, or those whose asked needles all sit past L or past the field).
WHOLE_DEPTHS = tuple(METRICS.values())  # "exact match", "first key word": every depth
PAST_L, PAST_THE_FIELD = ", needles past L", ", needles past the field"
SCORINGS = {name + where: (metric, where) for metric, name in METRICS.items() for where in ("", PAST_L, PAST_THE_FIELD)}
FIRST_PAST_L, FIRST_PAST_FIELD = "first key word" + PAST_L, "first key word" + PAST_THE_FIELD
# Scorings added after the experiment's first rows: the first key word once exact match had been seen near
# zero (its rows of seed 1, commit 64e39cd); the needles past the field (FIELD) once every
# length had been scored (issue 91: "past the field" had been read three ways).
FIRST_WORD = (("first key word", "0171b47", True),)
FIELD_DECLARED = ((FIRST_PAST_FIELD, "b3392bf", True),)
FLOOR_LABEL = "Floor"  # a cell of the floor of the prompts (floor_cells): one value, no seeds


def cells_of(rows, floors=()):
    """({(scoring, model + scaling, task, length): {checkpoint: accuracy in percent}}, L, {checkpoint:
    seed}) from score.py's rows (depth_means) for each scoring, and the floors' cells
    (floors: floors.floor_rows, which also say which depths are past L and past the field; without
    them those scorings have no cells); two runs of one label and seed refused."""
    runs, seeds = {}, {}
    for r in rows:
        label = r.get("label") or r["model"]
        one_run_per_seed(runs, label, label, r.get("seed"), r["checkpoint"])
        seeds[r["checkpoint"]] = r.get("seed")
    length = min((r["length"] for r in rows), default=None)
    out = {}
    for scoring, (metric, where) in SCORINGS.items():
        if where and not floors:
            continue
        keep = past(floors, length if where == PAST_L else FIELD) if where else None
        for found in (depth_means(rows, metric, keep), floor_cells(floors, metric, keep) if floors else {}):
            out.update({(scoring, name, task, k): {c: 100 * v for c, v in by.items()} for (task, name, k), by in found.items()})
    return out, length, seeds


def located(length):
    def locate(cell, scoring):
        name, task, k = cell
        return (scoring, name, task, k * length), f"{name}, {task} at {k * length}"
    return locate


def compare_cell(label, k, task):
    if task not in TASKS:
        raise SystemExit(f"error: --compare on the retrieval rows needs --task (one of {', '.join(TASKS)})")
    return label, task, k


def cells_from(rows, floors, read):
    """claims.Cells of retrieval rows and their floors."""
    found, length, seeds = cells_of(rows, floors)
    scored = tuple(scoring for scoring in SCORINGS if any(key[0] == scoring for key in found))
    return Cells(found, located(length), tuple(read), seeds, higher_is_better=True, compare_cell=compare_cell,
                        scorings=scored)


def claim_cells(paths):
    """Stages.claim_cells: the rows of retrieval.jsonl beside each results file, each folder's with the
    floors of its own prompts."""
    from fairseq_alibi_lab import results

    scored = [os.path.join(os.path.dirname(path), ROWS) for path in paths]
    rows, floors = [], []
    for path in scored:
        if not os.path.exists(path):
            raise SystemExit(f"error: no {path}: the retrieval experiment writes it (scripts/experiment.py retrieval)")
        these = list(results.read_json_lines(path, ("label", "task", "length", "depth", "accuracy", "checkpoint"),
                                             "fairseq_alibi_lab/experiments/retrieval/score.py"))
        rows += these
        floors += read_floors(os.path.dirname(path), these)
    return cells_from(rows, floors, [*paths, *scored])


def scored_cells(experiment):
    """Stages.cells: (model + scaling, task, K) of every model at its lengths (past 16L: the long tasks,
    with its long scalings), and the floor's at every length."""
    found = set()
    for model in experiment.models:
        for k in model.multiples or experiment.multiples:
            long = k in LONG_MULTIPLES
            names = labels(model) if not (long and model.long_scalings) else tuple(
                label for label, scaling in zip(labels(model), ("none", *model.scalings)) if scaling in model.long_scalings)
            tasks = LONG_TASKS if long else TASKS
            found |= {(name, task, k) for name in names for task in tasks}
    return found | {(FLOOR_LABEL, task, k) for _, task, k in found}


def keeps_retrieving(label, task, k, declared, name=None):
    """"<name> keeps retrieving past ALiBi's field": the model's first key word over the needles past the
    field above the floor of the prompts at k x L (name: the claim's wording of the label)."""
    return Claim(f"{name or label} keeps retrieving past ALiBi's field ({task} at {k}L: above the floor)",
                        (label, task, k), (FLOOR_LABEL, task, k), "higher", (FIRST_PAST_FIELD,), declared=declared,
                        scorings_declared=FIELD_DECLARED)


# The field's claims, as issue 47 states them, at 4L.
CLAIMS = tuple(claim for task in TASKS for claim in (
    Claim(f"ALiBi fails past L ({task}: L above 4L)", ("ALiBi", task, 1), ("ALiBi", task, 4), "higher",
                 WHOLE_DEPTHS, declared="19b3696", scorings_declared=FIRST_WORD),
    Claim(f"NTK-ALiBi widens ALiBi's field ({task} at 4L)", ("ALiBi + NTK", task, 4), ("ALiBi", task, 4), "higher",
                 WHOLE_DEPTHS, declared="19b3696", scorings_declared=FIRST_WORD),
    Claim(f"Rotary + NTK retrieves further than ALiBi ({task} at 4L)", ("Rotary + NTK", task, 4), ("ALiBi", task, 4),
                 "higher", WHOLE_DEPTHS, declared="19b3696", scorings_declared=FIRST_WORD),
    Claim(f"Rotary + YaRN retrieves further than ALiBi ({task} at 4L)", ("Rotary + YaRN", task, 4), ("ALiBi", task, 4),
                 "higher", WHOLE_DEPTHS, declared="19b3696", scorings_declared=FIRST_WORD)))
# Past ALiBi's field (issue 63), declared before any row at these lengths: at 32L and 128L (2,048 and 8,192
# tokens at L = 64), by the first key word against the floor of the prompts (the best answerer that does not
# pick the asked needle out) and against ALiBi. "Falls to its floor": no higher than it (at most). Declared
# on the needles past L; judged on the needles past the field (FIELD), a scoring added after.
CLAIMS += tuple(claim for task in ("passkey", "multikey") for k in (32, 128) for claim in (
    Claim(f"ALiBi's retrieval falls to its floor past its field ({task} at {k}L)", ("ALiBi", task, k),
                 (FLOOR_LABEL, task, k), "at most", (FIRST_PAST_FIELD,), declared="359d214", scorings_declared=FIELD_DECLARED),
    keeps_retrieving("ALiBi + NTK", task, k, "359d214", name="NTK-ALiBi"),
    Claim(f"NTK-ALiBi retrieves further than ALiBi past its field ({task} at {k}L)", ("ALiBi + NTK", task, k),
                 ("ALiBi", task, k), "higher", (FIRST_PAST_FIELD,), declared="359d214", scorings_declared=FIELD_DECLARED),
    keeps_retrieving("KERPLE log", task, k, "359d214", name="KERPLE (log)"),
    keeps_retrieving("FIRE", task, k, "359d214")))
# The ALiBi family's new members, declared before their first training: FoX's paper claims better retrieval
# than ALiBi; learned slopes are ALiBi's own baseline. At 16L, over the needles past L, by the first key word.
CLAIMS += tuple(Claim(f"{label} retrieves further than ALiBi past L ({task} at 16L)", (label, task, 16),
                             ("ALiBi", task, 16), "higher", (FIRST_PAST_L,), declared="51e63bf",
                             after_data=True)  # ALiBi's cells were scored before: post hoc by the rule
                for label in ("FoX (forget gate)", "ALiBi, learned slopes") for task in ("passkey", "multikey"))
# The last two registered causal methods, declared before their first training: KERPLE's power kernel and
# Sandwich asked what KERPLE log and FIRE are past ALiBi's field (above the floor at 32L and 128L).
CLAIMS += tuple(keeps_retrieving(label, task, k, "386859a")
                for label in ("KERPLE power", "Sandwich") for task in ("passkey", "multikey") for k in (32, 128))
# Rotary + YaRN, the one rotary scaling above its floor at 4L, asked the same past ALiBi's field; declared
# before its first row past 16L (its seeds are trained again to get there).
CLAIMS += tuple(keeps_retrieving("Rotary + YaRN", task, k, "9033ae8") for task in ("passkey", "multikey") for k in (32, 128))
