"""OUT/retrieval.md and its figures: each model's accuracy per task and length (mean over the depths,
mean ± std over the seeds) beside the floors and its perplexity, by the asked needle's distance, and
perplexity by tokens of context."""
import os

from fairseq_alibi_lab import learned_slopes
from fairseq_alibi_lab.experiments.retrieval.figures import OTHER, context_figure, distance_figure, heatmaps
from fairseq_alibi_lab.experiments.retrieval.floors import FLOOR, FLOORS, METRICS, depth_means, floor_cells, not_picking, past, read_floors
from fairseq_alibi_lab.experiments.retrieval.prompts import TASKS
from fairseq_alibi_lab.experiments.retrieval.score import BY_POSITION_ROWS, ROWS


def perplexities(rows):
    """{label: {checkpoint: validation perplexity in blocks of L}}: the scored models as language models."""
    found = {}
    for r in rows:
        if (r.get("checkpoint") and r.get("split") == "valid" and r.get("stride") == 0 and
                r.get("scaling", "none") == "none" and r.get("l_valid") == r.get("train_length")):
            found.setdefault(r.get("label") or r["model"], {})[r["checkpoint"]] = r["perplexity"]
    return found


def report(rows, out, families=None):
    """OUT/retrieval.md: per task, each model's (and scaling's) exact-match accuracy at each length,
    averaged over the depths, mean ± std over the seeds (n), beside chance and beside the same
    models' validation perplexity at L (what the mixture costs them as language models); then the
    same for the key's first word alone. And OUT/retrieval_<task>.png (exact match) and
    retrieval_<task>_first.png: accuracy by depth and length, one panel per model, mean over the seeds;
    the distance and context figures draw each model in its family's panel (families: {label: family},
    the declared models' Model.family)."""
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi_lab.result_rows import read_rows
    from fairseq_alibi_lab.results import mean_std, method_name

    def shown(values, digits, scale=1):
        if not values:
            return "-"
        mean, std = mean_std(values)
        spread = f" ± {scale * std:.{digits}f}" if len(values) > 1 else ""
        return f"{scale * mean:.{digits}f}{spread} (n={len(values)})"

    path = os.path.join(out, ROWS)
    checkpoints = {r["checkpoint"] for r in rows if r.get("checkpoint")}
    scored = [r for r in read_rows(path) if r["checkpoint"] in checkpoints]
    if not scored:
        return None
    lengths = sorted({r["length"] for r in scored})
    perplexity = perplexities(rows)
    base = {method_name(r): r.get("label") or r["model"] for r in scored}
    floors = read_floors(out, scored)
    train_length = min(lengths)
    lines = []
    views = [("mean over 5 depths, needles near the question included", None)]
    if floors:
        views.append((f"needles past L only: the depths whose asked needle sits more than {train_length} tokens "
                      "from the question in every prompt (none at L)", past(floors, train_length)))
    for view, keep in views:
        for metric, chance in (("accuracy", "0.01 (one key of 10^4)"), ("first_accuracy", "1 (one word of 100)")):
            cells = depth_means(scored, metric, keep)
            floors_here = floor_cells(floors, metric, keep)
            for task in TASKS:
                names = list(dict.fromkeys(n for t, n, _ in cells if t == task))
                if not names:
                    continue
                lines += [f"## {task}: {METRICS[metric]}, {view}", "", "| model | " + " | ".join(map(str, lengths)) +
                          " | perplexity at L |", "|---" * (len(lengths) + 2) + "|"]
                for name in names:
                    accuracy = [shown(list(cells.get((task, name, length), {}).values()), 1, 100) for length in lengths]
                    lines.append(f"| {name} | " + " | ".join(accuracy) +
                                 f" | {shown(list(perplexity.get(base[name], {}).values()), 2)} |")
                for name in ("Floor", *(f"Floor: {floor}" for floor in FLOORS[:3])):
                    values = [floors_here.get((task, name, length), {}).get(FLOOR) for length in lengths]
                    if any(v is not None for v in values):
                        lines.append(f"| {name.lower()} (from the prompts) | " + " | ".join(
                            "-" if v is None else f"{100 * v:.2f}" for v in values) + " | |")
                lines += [f"| chance: {chance} | " + " | ".join(chance.split()[0] for _ in lengths) + " | |", ""]
    distances = {metric: by_distance(scored, floors, metric) for metric in METRICS} if floors else {}
    for metric, (models, floor) in distances.items():
        bins = sorted({b for t in models.values() for m in t.values() for b in m})
        for task in (t for t in TASKS if t in models):
            lines += [f"## {task}: {METRICS[metric]}, by the asked needle's distance from the question (tokens)", "",
                      "| model | " + " | ".join(f"{2 ** b}-{2 ** (b + 1) - 1}" for b in bins) + " |",
                      "|---" * (len(bins) + 1) + "|"]
            for name, values in models[task].items():
                lines.append(f"| {name} | " + " | ".join(shown(values.get(b), 1, 100) for b in bins) + " |")
            lines += ["| floor (from the prompts) | " + " | ".join(
                "-" if b not in floor.get(task, {}) else f"{100 * floor[task][b]:.2f}" for b in bins) + " |", ""]
    windows = [r for r in read_rows(os.path.join(out, BY_POSITION_ROWS)) if r.get("checkpoint") in checkpoints]
    context = by_context(windows)
    if context:
        bins = sorted({b for values in context.values() for b in values})  # the halves first
        lines += [f"## Perplexity by tokens of context (validation, a window of {max(r['length'] for r in windows)} tokens, "
                  f"`{BY_POSITION_ROWS}`)", "",
                  "Each position p of the window (p tokens before it) in the bin of p, its perplexity averaged in log "
                  "space, mean ± std over seeds; unscaled. Blocks start at 2 offsets (0 and half the window), so a "
                  "token sits at p and p + half: the two halves average the same tokens, while neighbouring bins "
                  "average different ones.", "",
                  "| model | " + " | ".join({FIRST_HALF: "first half", SECOND_HALF: "second half"}.get(b) or (
                      "0-1" if b == 0 else f"{2 ** b}-{2 ** (b + 1) - 1}") for b in bins) + " |",
                  "|---" * (len(bins) + 1) + "|"]
        for name, values in context.items():
            lines.append(f"| {name} | " + " | ".join(shown(values.get(b), 1) for b in bins) + " |")
        lines.append("")
    lines += learned_slopes.table(out, checkpoints)
    text = ("# Retrieval: accuracy (%), mean over the depths, mean ± std over seeds\n\n"
            "Exact match of the two-word key, then of its first word alone; beside each model, the same "
            "checkpoints' validation perplexity in blocks of L (nonoverlapping). Under each table the floors "
            "computed on the test prompts (`retrieval floors`, OUT/floors.jsonl): what answering with a random "
            "needle, the needle nearest the question or the most frequent number scores; \"floor\" is the best "
            "of the answerers that do not pick the asked needle out (a random or the nearest needle, chance; the "
            "passkey has one needle, so chance), over the same depths. A model at its floor is not shown to retrieve the asked key.\n\n"
            + "\n".join(lines))
    with written_whole(os.path.join(out, "retrieval.md")) as partial, open(partial, "w") as f:
        f.write(text)
    family = {name: (families or {}).get(label) or OTHER for name, label in
              [*base.items(), *((name, name) for name in context)]}
    for metric, suffix in (("accuracy", ""), ("first_accuracy", "_first")):
        heatmaps([r for r in scored if metric in r], out, metric, suffix)
        if metric in distances:
            distance_figure(*distances[metric], out, metric, suffix, train_length, family)
    if context:
        context_figure(context, out, train_length, family)
    return text


def distance_bin(distance):
    """The power-of-2 bin [2^b, 2^(b+1)) a needle's distance in tokens falls in: b."""
    return max(distance, 1).bit_length() - 1


def by_distance(scored, floors, metric):
    """({task: {name: {bin: each seed's value}}}, {task: {bin: the floor}}): each scored group (task,
    length, depth) placed by its asked needles' distance from the question in tokens (the mean of the
    group's least and greatest, from the floor rows) in a distance_bin; each seed's groups in a bin
    averaged, over the groups every seed of the model has (a seed scored at more lengths than the
    others, a run in progress, adds nothing to its bins until they are scored there too). The floor of a bin is the best, over the bin's groups, of the answerers
    that do not pick the asked needle out (floor_cells' rule, the bin in place of a length)."""
    from fairseq_alibi_lab.results import method_name

    where = {(r["task"], r["length"], r["depth"]): distance_bin(round((r["min_distance"] + r["max_distance"]) / 2))
             for r in floors}
    last = {(r["task"], method_name(r), r["checkpoint"], r["length"], r["depth"]): r[metric] for r in scored
            if r.get(metric) is not None and (r["task"], r["length"], r["depth"]) in where}
    groups = {}  # (task, name) -> {checkpoint: its (length, depth) groups}
    for task, name, checkpoint, length, depth in last:
        groups.setdefault((task, name), {}).setdefault(checkpoint, set()).add((length, depth))
    common = {key: set.intersection(*runs.values()) for key, runs in groups.items()}
    last = {key: value for key, value in last.items() if key[3:] in common[key[:2]]}
    per_seed = {}
    for (task, name, checkpoint, length, depth), value in last.items():
        per_seed.setdefault((task, name, where[(task, length, depth)]), {}).setdefault(checkpoint, []).append(value)
    models = {}
    for (task, name, b), runs in per_seed.items():
        models.setdefault(task, {}).setdefault(name, {})[b] = [sum(v) / len(v) for v in runs.values()]
    answered = {}  # (task, bin, answerer) -> its scores on the bin's groups
    for r in floors:
        if r["label"] in [f"Floor: {f}" for f in not_picking(r["task"])] and r.get(metric) is not None:
            answered.setdefault((r["task"], where[(r["task"], r["length"], r["depth"])], r["label"]), []).append(r[metric])
    floor = {}
    for (task, b, _), values in answered.items():
        floor.setdefault(task, {})[b] = max(floor.get(task, {}).get(b, 0.0), sum(values) / len(values))
    return models, floor


def by_context(rows):
    """{name: {bin: each seed's perplexity}}: by_position rows' perplexity at each position p (p tokens of
    context) placed in distance_bin(p), the bin's positions averaged in log space, per checkpoint (the
    last row of one wins)."""
    import math

    last = {(r.get("label") or r["model"], r["checkpoint"]): r["perplexity_by_position"] for r in rows}
    context = {}
    for (name, _), by_position in last.items():
        bins, half = {}, len(by_position) // 2
        for p, value in enumerate(by_position):
            bins.setdefault(distance_bin(p), []).append(math.log(value))
            # Blocks from 2 offsets, 0 and half the window, put each token at p and p + half: the
            # window's two halves average the same tokens, the one comparison of context alone.
            bins.setdefault(FIRST_HALF if p < half else SECOND_HALF, []).append(math.log(value))
        for b, logs in bins.items():
            context.setdefault(name, {}).setdefault(b, []).append(math.exp(sum(logs) / len(logs)))
    return context


FIRST_HALF, SECOND_HALF = -2, -1  # by_context's keys for the window's halves, beside its bins (0, 1, ...)
