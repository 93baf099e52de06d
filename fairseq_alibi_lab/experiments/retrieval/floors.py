"""The floors of the test prompts: what answerers that retrieve nothing asked score on the very prompts
(rows of their own in OUT/floors.jsonl), the asked needles' distances from the question, and the cells
(depth means) of scored rows and floors that the tables and claims read."""
import json
import os

from fairseq_alibi_lab import claims
from fairseq_alibi_lab.experiments.retrieval.data import test_sets
from fairseq_alibi_lab.experiments.retrieval.prompts import QUESTION_WORDS, needles_in, read_tests


def write_floors(context):
    """OUT/floors.jsonl from the test prompts, once (the runner calls it with its unigram floor); floors
    of other prompts there are refused, not mixed."""
    from fairseq_alibi.tools.files import fingerprint
    from fairseq_alibi_lab.result_rows import read_rows

    path = os.path.join(context.out, FLOOR_ROWS)
    tests = {fingerprint(t): t for t, _ in test_sets(context.data, context.length)}
    held = read_rows(path)
    prompts = {r.get("prompts_sha256") for r in held}
    if prompts - set(tests):
        raise SystemExit(f"error: {path} holds the floors of other test prompts ({', '.join(map(str, prompts - set(tests)))}, "
                         f"now {', '.join(tests)}): move it away, or give another --out")
    missing = [t for sha, t in tests.items() if sha not in prompts]
    if missing:  # a set's floors added beside those already there (the prompts past 16L, made later)
        save_floors(missing, path, held)


def save_floors(tests, path, kept=()):
    """The rows `kept`, then floor_rows of each test prompts file in tests, written whole to path."""
    from fairseq_alibi.tools.files import written_whole

    rows = [*kept, *(row for t in tests for row in floor_rows(t))]
    with written_whole(path) as partial, open(partial, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


METRICS = {"accuracy": "exact match", "first_accuracy": "first key word"}  # a row's field: what it counts


# Floors from the prompts themselves: what answerers that retrieve nothing asked score on the very test
# prompts (rows of their own in OUT/floors.jsonl, `retrieval floors`), each (task, length, depth):
# - a random needle: the words of one of the prompt's needles, uniformly (its expected score);
# - the needle nearest the question: the last needle before it;
# - the most frequent number: the 1-2 digit word most frequent in the prompt (first word only);
# - chance: a key word of 100 (first word), a key of 10^4 (exact match).
# The floor of a cell is the best of them. Each row also says how far, in tokens, the asked needle's
# key sits from the first generated token (min and max over the group's prompts): a group whose
# nearest needle is past L tests retrieval past the training length, one within L does not.
FLOORS = ("a random needle", "the needle nearest the question", "the most frequent number", "chance")


FLOOR = claims.FLOOR  # the floor rows' checkpoint: a cell of one value, not of seeds


# ALiBi's attention field, in tokens (docs/retrieval.md, "The field"): where its gentlest head (slope
# 1/256 of 8 heads) pays -4 (a weight e^-4, under 2%, against a key at distance 0). A needle is past
# the field when it sits more than this far from the question (past(floors, FIELD)).
FIELD = 1024


FLOOR_ROWS = "floors.jsonl"


def answerers(task, words):
    """{floor: (exact-match score, first-word score)} of one prompt (expected values; None: not scored)."""
    from collections import Counter

    needles, asked = needles_in(task, words)
    answer = needles[asked][0]
    body = words[:-QUESTION_WORDS[task]]
    numbers = Counter(w for w in body if w.isdigit() and len(w) <= 2)
    frequent = max(numbers, key=lambda w: (numbers[w], -body.index(w))) if numbers else None
    return {
        FLOORS[0]: (sum(k == answer for k, _ in needles) / len(needles), sum(k[0] == answer[0] for k, _ in needles) / len(needles)),
        FLOORS[1]: (float(needles[-1][0] == answer), float(needles[-1][0][0] == answer[0])),
        FLOORS[2]: (None, float(frequent == answer[0])),
        FLOORS[3]: (1e-4, 1e-2),
    }


def floor_rows(tests_path):
    """The floors' rows of a test.jsonl: per floor and (task, length, depth), its exact-match and
    first-word accuracy (means over the prompts) and the asked needles' distance from the question."""
    from fairseq_alibi.tools import provenance
    from fairseq_alibi.tools.files import fingerprint

    tests = read_tests(tests_path)
    groups = {}
    for t in tests:
        groups.setdefault((t["task"], t["length"], t["depth"]), []).append(t)
    prompts, rows = fingerprint(tests_path), []
    for (task, length, depth), group in groups.items():
        scores, distances = [], []
        for t in group:
            words = t["prompt"].split()
            try:
                needles, asked = needles_in(task, words)
                held = needles[asked][0] == t["answer"].split()
            except (IndexError, KeyError, StopIteration):
                held = False
            if not held:
                raise SystemExit(f"error: a {task} prompt of {tests_path} does not hold its answer as a needle: "
                                 "not a test set `retrieval make` wrote")
            distances.append(len(words) - needles[asked][1])  # tokens from the key's first word to the first generated
            scores.append(answerers(task, words))
        means = {}  # floor -> (exact match, first word) over the group's prompts
        for floor in FLOORS:
            exact = [s[floor][0] for s in scores]
            means[floor] = (None if None in exact else sum(exact) / len(exact), sum(s[floor][1] for s in scores) / len(scores))
        for floor, (exact, first) in means.items():
            rows.append({"label": f"Floor: {floor}", "model": "floor", "checkpoint": FLOOR,
                         "scaling": "none", "task": task, "length": length, "depth": depth, "n": len(group),
                         "accuracy": exact, "first_accuracy": first,
                         "min_distance": min(distances), "max_distance": max(distances), "prompts_sha256": prompts,
                         "commit": provenance.commit(), "machine": provenance.machine(), "experiment": "retrieval",
                         "seed": None, "recipe": None})
    return rows


def depth_means(scored, metric="accuracy", keep=None):
    """{(task, name, length): {checkpoint: the metric averaged over the depths}} (the last scoring of a
    depth wins; rows without the metric are left out; keep(task, length, depth): only those depths);
    a model is named as in every table (its label, + its scaling: results.method_name). A checkpoint
    that lacks a depth another has in the cell (a scoring cut mid-length) waits: its mean over fewer
    depths would be another number."""
    from fairseq_alibi_lab.results import method_name

    last = {(r["task"], method_name(r), r["length"], r["checkpoint"], r["depth"]): r[metric] for r in scored
            if r.get(metric) is not None and (keep is None or keep(r["task"], r["length"], r["depth"]))}
    by_depth = {}
    for (task, name, length, checkpoint, depth), accuracy in last.items():
        by_depth.setdefault((task, name, length), {}).setdefault(checkpoint, {})[depth] = accuracy
    means = {}
    for cell, runs in by_depth.items():
        depths = set().union(*runs.values())
        means[cell] = {c: sum(v.values()) / len(v) for c, v in runs.items() if set(v) == depths}
    return means


def past(floors, length):
    """keep(task, L_valid, depth) for depth_means: the groups whose asked needles all sit more than
    `length` tokens from the question (floors: the floor rows, which carry the distances)."""
    far = {(r["task"], r["length"], r["depth"]) for r in floors if r["min_distance"] > length}
    return lambda task, l_valid, depth: (task, l_valid, depth) in far


def not_picking(task):
    """The answerers that do not pick the asked needle out, whose best is a cell's floor: with one needle
    (the passkey) copying it is the task, so chance alone."""
    return FLOORS[3:] if task == "passkey" else (FLOORS[0], FLOORS[1], FLOORS[3])


def floor_cells(floors, metric="accuracy", keep=None):
    """depth_means of the floor rows, and "Floor": the best of the answerers that do not pick the asked
    needle out (a random or the nearest needle, chance), each a fixed strategy over the cell's depths;
    with one needle (the passkey) copying it is the task, so chance alone."""
    cells = depth_means(floors, metric, keep)
    for task, _, length in list(cells):
        values = [cells[(task, f"Floor: {floor}", length)][FLOOR] for floor in not_picking(task) if (task, f"Floor: {floor}", length) in cells]
        if values:
            cells[(task, "Floor", length)] = {FLOOR: max(values)}
    return cells


def read_floors(out, scored):
    """The floor rows beside a results folder's rows (OUT/floors.jsonl), checked against the `scored`
    rows: one line, and no table or verdict, where they are missing or another prompt set's."""
    from fairseq_alibi_lab.result_rows import read_rows

    path = os.path.join(out, FLOOR_ROWS)
    floors = list(read_rows(path)) if os.path.exists(path) else []
    problem = floors_problem(scored, floors, path)
    if problem:
        raise SystemExit(f"error: {problem}")
    return floors


def floors_problem(scored, floors, path):
    """None, or why `floors` (the rows of `path`) are not the floors of the prompts the `scored` rows were
    asked: none at all, two prompt sets at one task and length, none at a scored length, or another
    set's than the rows record (prompts_sha256; rows scored before it was recorded are checked by the rest)."""
    make = f"`python -m fairseq_alibi_lab.retrieval floors TEST.jsonl [TEST-LONG.jsonl] {path}` from the rows' prompts"
    if scored and not floors:
        return f"no floors at {path} beside the scored rows: write them with {make}"
    sets = {}
    for r in floors:
        sets.setdefault((r["task"], r["length"]), set()).add(r.get("prompts_sha256"))
    for (task, length), prompts in sorted(sets.items()):
        if len(prompts) > 1:
            return (f"{path} holds the floors of {len(prompts)} prompt sets at {task}, {length} tokens "
                    f"({', '.join(sorted(map(str, prompts)))}): keep one, written with {make}")
    for r in scored:
        held = sets.get((r["task"], r["length"]))
        if held is None:
            return f"{path} has no floor of {r['task']} at {r['length']} tokens, which the rows score: write them with {make}"
        if r.get("prompts_sha256") and r["prompts_sha256"] not in held:
            return (f"{path} holds the floors of other prompts ({', '.join(map(str, held))}) than the rows' "
                    f"({r['prompts_sha256']}) at {r['task']}, {r['length']} tokens: write them with {make}")
    return None
