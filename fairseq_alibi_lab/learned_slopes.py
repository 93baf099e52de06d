"""What a learned-slope ALiBi learned: each head's slope m_h read from its checkpoint, and so its reach
1/m_h in tokens (the attention field, docs/retrieval.md), beside the paper's slopes it started from.
A row per checkpoint in OUT/slopes.jsonl (the retrieval stage writes it), tabulated over seeds.
torch only: the runner imports no fairseq."""
import json
import os

KEY = "learned_alibi.log_slopes"  # fairseq_alibi/positions/learned_alibi.py's one parameter, shared by the layers
ROWS = "slopes.jsonl"


def learned_slopes(state):
    """Each head's slope, exp of the stored log, of a checkpoint's state; None where it has no learned slopes."""
    found = [value for name, value in state["model"].items() if name.endswith(KEY)]
    return found[0].double().exp().tolist() if found else None


def slope_row(checkpoint, label, fields):
    """The row of checkpoint's learned slopes: the model's identity, its fingerprint, the slopes, the
    paper's slopes it started from and each head's reach 1/m_h; one line naming the checkpoint where it
    has none."""
    from fairseq_alibi.alibi_bias import alibi_slopes
    from fairseq_alibi.tools import provenance
    from fairseq_alibi.tools.checkpoints import identity, read_state
    from fairseq_alibi.tools.files import fingerprint

    state = read_state(checkpoint)
    slopes = learned_slopes(state)
    if slopes is None:
        raise SystemExit(f"error: {checkpoint} has no learned ALiBi slopes (no {KEY}): it was not trained with learned_alibi")
    return {"label": label, **identity(checkpoint, state), "checkpoint_sha256": fingerprint(checkpoint),
            "slopes": slopes, "initial_slopes": alibi_slopes(len(slopes)), "reaches": [1 / m for m in slopes],
            "commit": provenance.commit(), "machine": provenance.machine(), **fields}


def record(context, job):
    """A Model.records entry: the job's slope row (record_row); True if it wrote one."""
    return record_row(context.out, job.checkpoint, job.model.label, json.loads(context.row_fields(job.checkpoint)))


def record_row(out, checkpoint, label, fields):
    """Append checkpoint's slope row to OUT/slopes.jsonl unless it holds one already; True if it wrote one."""
    from fairseq_alibi_lab.result_rows import append_lines, read_rows

    path = os.path.join(out, ROWS)
    if any(r.get("checkpoint") == checkpoint for r in read_rows(path)):
        return False
    append_lines(path, [json.dumps(slope_row(checkpoint, label, fields))])
    return True


def table(out, checkpoints):
    """Markdown lines: each head's slope and reach, mean ± std over the seeds of each label whose
    checkpoints are among `checkpoints` (the last row of a checkpoint wins), under the paper's slopes;
    [] where OUT/slopes.jsonl has none of them."""
    from fairseq_alibi_lab.result_rows import read_rows
    from fairseq_alibi_lab.results import mean_std

    rows = {r["checkpoint"]: r for r in read_rows(os.path.join(out, ROWS)) if r.get("checkpoint") in checkpoints}
    if not rows:
        return []
    by_label = {}
    for row in rows.values():
        by_label.setdefault(row["label"], []).append(row)
    heads = len(next(iter(rows.values()))["slopes"])

    def shown(values, form):
        mean, std = mean_std(values)
        return f"{mean:{form}}" + (f" ± {std:{form}}" if len(values) > 1 else "")

    initial = next(iter(rows.values()))["initial_slopes"]
    lines = [f"## The slopes learned (`{ROWS}`)", "",
             "Each head's slope m_h read from the checkpoint and its reach 1/m_h (tokens), mean ± std over seeds (n), "
             "heads in the order ALiBi's slopes start them (head 1 steepest); the paper's fixed slopes first.", "",
             "| model | n | " + " | ".join(f"head {h + 1}" for h in range(heads)) + " |", "|---" * (heads + 2) + "|",
             "| ALiBi (fixed): slope | | " + " | ".join(f"{m:.4g}" for m in initial) + " |",
             "| ALiBi (fixed): reach | | " + " | ".join(f"{1 / m:.4g}" for m in initial) + " |"]
    for label, seeds in by_label.items():
        for what, field, form in (("slope", "slopes", ".3f"), ("reach", "reaches", ".1f")):
            lines.append(f"| {label}: {what} | {len(seeds)} | " + " | ".join(
                shown([r[field][h] for r in seeds], form) for h in range(heads)) + " |")
    return lines + [""]
