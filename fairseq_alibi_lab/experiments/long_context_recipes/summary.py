"""The experiment's headline table, OUT/summary.md (its results README opens with it): each arm's training
tokens and wall time, perplexity at L and 32L, and the first key word over the needles past the field on the
passkey and the multi-key needle at 32L and 128L, mean ± std over the included seeds (n), the floors of
the prompts under it; OUT/by_seed.md, each seed's values, which the means are made of, and the seeds the inclusion rule left out."""
import os

from fairseq_alibi_lab.experiments.retrieval.floors import FIELD, depth_means, floor_cells, past, read_floors
from fairseq_alibi_lab.experiments.retrieval.score import ROWS

TOKENS_PER_UPDATE = 2048  # the small recipe's --max-tokens: every arm's batches, whatever its length


def shown(values, digits, n=None):
    """mean ± std (n=k where fewer than the arm's seeds, or always with n=None); "-" without values."""
    from fairseq_alibi_lab.results import mean_std

    if not values:
        return "-"
    mean, std = mean_std(values)
    text = f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if len(values) > 1 else "")
    return text + (f" (n={len(values)})" if n is None or len(values) != n else "")


def past_the_field(rows, out):
    """(the included seeds' retrieval rows, the floors, keep: the needles more than FIELD tokens from the question,
    {(task, arm, length): {checkpoint: first key word over those needles}}) for the checkpoints rows name."""
    from fairseq_alibi_lab.result_rows import read_rows

    checkpoints = {r["checkpoint"] for r in rows if r.get("checkpoint")}
    scored = [r for r in read_rows(os.path.join(out, ROWS)) if r["checkpoint"] in checkpoints]
    floors = read_floors(out, scored) if scored else []
    keep = past(floors, FIELD) if floors else None
    return scored, floors, keep, depth_means(scored, "first_accuracy", keep) if keep else {}


def summary(rows, out, arms, first_stages, updates, seconds):
    """OUT/summary.md and OUT/by_seed.md (each seed's values, which the means are made of), or None before any
    retrieval row. rows: the declared runs' perplexity rows (the included seeds'); arms: the tables' row labels
    in order; first_stages: {second stage's label: (first stage's label, its share)}, whose wall time is added in
    that share to the mean; seconds: {label: {checkpoint: its training seconds}}."""
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi_lab import inclusion
    from fairseq_alibi_lab.results import method_name

    scored, floors, keep, found = past_the_field(rows, out)
    if not scored:
        return None
    length = min(r["length"] for r in scored)
    perplexity, seed_of = {}, {}
    for r in rows:
        if r.get("checkpoint") and r.get("stride") == 0 and r.get("split") == "valid":
            perplexity.setdefault((method_name(r), r["l_valid"]), {})[r["checkpoint"]] = r["perplexity"]
            seed_of[r["checkpoint"]] = r.get("seed")
    lengths = (length, 32 * length)
    cells = [(task, k) for task in ("passkey", "multikey") for k in (32, 128)]
    # one dict {checkpoint: value} per column and arm, in the column's units
    columns = lambda arm: [*(perplexity.get((arm, lv), {}) for lv in lengths),  # noqa: E731
                           *({c: 100 * v for c, v in found.get((task, arm, k * length), {}).items()} for task, k in cells)]
    names = [*(f"perplexity at {lv}" for lv in lengths), *(f"{task} past the field, {k}L" for task, k in cells)]
    digits = [2] * len(lengths) + [1] * len(cells)
    head = ["arm", "tokens", "training s", *names]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    each = ["| " + " | ".join(["arm", "seed", "training s (its own)", *names]) + " |", "|---" * (len(names) + 3) + "|"]
    for arm in arms:
        own = seconds.get(arm.split(" + ")[0], {})
        runs = list(own.values())
        cost = shown(runs, 0, n=len(runs))
        if arm in first_stages and runs:
            first, share = first_stages[arm]
            before = list(seconds.get(first, {}).values())
            cost = shown([share * sum(before) / len(before) + s for s in runs], 0, n=len(runs)) if before else "-"
        values = columns(arm)
        n = len({c for column in values[:len(lengths)] for c in column}) or None
        lines.append("| " + " | ".join([arm, f"{updates * TOKENS_PER_UPDATE / 1e6:.1f}M", cost, *(
            shown(list(column.values()), d, n) for column, d in zip(values, digits))]) + " |")
        for checkpoint in sorted({c for column in values for c in column}, key=lambda c: (seed_of.get(c) is None, seed_of.get(c), c)):
            each.append("| " + " | ".join([arm, str(seed_of.get(checkpoint, "-")), f"{own[checkpoint]:.0f}" if checkpoint in own else "-", *(
                f"{column[checkpoint]:.{d}f}" if checkpoint in column else "-" for column, d in zip(values, digits))]) + " |")
    floor = floor_cells(floors, "first_accuracy", keep) if keep else {}
    unigram = {r["l_valid"]: r["perplexity"] for r in rows if r.get("model") == "unigram" and r.get("stride") == 0}
    lines.append("| floor of the prompts (perplexity: the unigram's) | | | " + " | ".join(
        f"{unigram[lv]:.2f}" if lv in unigram else "-" for lv in lengths) + " | " + " | ".join(
        f"{100 * next(iter(floor[(task, 'Floor', k * length)].values())):.1f}" if (task, "Floor", k * length) in floor else "-"
        for task, k in cells) + " |")
    caption = (f"First key word (%) over the needles more than {FIELD} tokens from the question, depth mean; perplexity in "
               f"blocks of the length (validation)")
    text = f"{caption}; mean ± std over the included seeds.\n\n" + "\n".join(lines) + "\n"
    with written_whole(os.path.join(out, "summary.md")) as partial, open(partial, "w") as f:
        f.write(text)
    with written_whole(os.path.join(out, "by_seed.md")) as partial, open(partial, "w") as f:
        f.write(f"# Each included seed (summary.md's means are made of these)\n\n{caption}; a test-time arm's seeds "
                f"are its training's; training s: the run's own (a second stage's without its first stage's share, "
                f"which summary.md adds).\n\n" + "\n".join(each + ["", *inclusion.table(out)]).rstrip() + "\n")
    return text
