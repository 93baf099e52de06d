"""An experiment's inclusion rule (experiments.base.Inclusion), applied by the runner: a seed is scored at L
first, and past L only where the rule's measure there reaches its threshold; an excluded seed is written to
OUT/excluded.jsonl (its value and the rule) and stays in no table past L, and the next seed is trained in its
place until the rule's wanted seeds are included or its most were tried."""
import dataclasses
import json
import os

from fairseq_alibi.tools import provenance
from fairseq_alibi_lab.result_rows import append_lines, read_rows

EXCLUDED = "excluded.jsonl"  # under OUT (merged from parallel parts by name)


def excluded(out):
    """{checkpoint: its row} of the seeds left out under OUT."""
    return {r["checkpoint"]: r for r in read_rows(os.path.join(out, EXCLUDED))}


def seeds_to_try(inclusion, seeds, is_excluded):
    """seeds, then as many next seeds as are needed for inclusion.wanted included ones (is_excluded(seed):
    known excluded; a seed not yet scored counts as included), up to inclusion.most tried."""
    tried = list(seeds)
    while tried and len(tried) < inclusion.most and sum(not is_excluded(s) for s in tried) < inclusion.wanted:
        tried.append(max(tried) + 1)
    return tried


def at_l(job, length):
    """The job scored at L only (its rows at L; an excluded seed's, or an included one's first look)."""
    return dataclasses.replace(job, lengths=tuple(lv for lv in job.lengths if lv == length),
                               evaluations=tuple(e for e in job.evaluations if e[1] == length))


def record(out, job, value, inclusion, identity):
    """OUT/excluded.jsonl gains the job's row: the seed left out, its value at L, the rule, and what the job's
    rows record of it (identity: the run's fields and the checkpoint file's fingerprint, so that a --retire of
    its path, run again after a stop, keeps a new training's exclusion as it keeps that training's rows)."""
    append_lines(os.path.join(out, EXCLUDED), [json.dumps({
        "label": job.model.label, "seed": job.seed, "checkpoint": job.checkpoint, "value": value,
        "at_least": inclusion.at_least, "rule": inclusion.about, **identity, "commit": provenance.commit(),
        "machine": provenance.machine()})])


def table(out):
    """The excluded seeds as Markdown lines (none: an empty list)."""
    rows = list(excluded(out).values())
    if not rows:
        return []
    lines = [f"Excluded by the inclusion rule ({rows[0]['rule']}): scored at L only, in no table past L.", "",
             "| model | seed | value at L |", "|---|---|---|"]
    value = lambda r: "not scored" if r["value"] is None else f"{100 * r['value']:.1f}%"  # noqa: E731
    return lines + [f"| {r['label']} | {r['seed']} | {value(r)} |" for r in sorted(rows, key=lambda r: (r["label"], r["seed"]))]
