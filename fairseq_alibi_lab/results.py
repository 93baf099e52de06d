#!/usr/bin/env python3
"""Turn scripts/eval.sh JSON lines into the paper's tables and Figure 1.

    python scripts/results.py RESULTS.jsonl [MORE.jsonl ...] --out DIR

Writes, per (split, stride): DIR/table_<split>_stride<S>.{md,csv} with one row per (method,
train L) and one column per L_valid (the layout of the paper's Table 5 / Tables 13-15), and
DIR/figure_<split>_stride<S>.png (perplexity against L_valid; ALiBi solid, its slope scalings
dotted, the other methods dashed). Rows of one method from several training seeds (the rows'
`seed`) are one line: mean ± sample standard deviation with n in the tables, the mean with a
± std band in the figures.
Prints the Markdown tables.
"""
import argparse
import csv
import json
import math
import os
from collections import defaultdict

from fairseq_alibi.tools.files import one_line_on_disk_faults, written_whole
from fairseq_alibi_lab.result_rows import value_problem


# Row labels in the paper's order (Tables 2-4), then the methods added since, then the
# inference-time scalings (ALiBi's slopes, rotary's angles, a length temperature).
METHODS = {"transformer_lm": "Sinusoidal", "rotary": "Rotary", "t5_bias": "T5 bias", "alibi": "ALiBi",
           "nope": "NoPE", "kerple": "KERPLE", "sandwich": "Sandwich", "fire": "FIRE"}
SCALINGS = {"none": "", "linear": " + linear interp.", "ntk": " + NTK", "dynamic_ntk": " + dynamic NTK",
            "yarn": " + YaRN", "logn": " + LogN", "logn_logit": " + LogN (whole logit)"}
ORDER = [m + s for m in METHODS.values() for s in SCALINGS.values()]


def method_name(row):
    """The row's label: eval.sh's LABEL if given, else the method; + its inference-time scaling."""
    model = row["model"]
    method = row.get("label") or next((name for prefix, name in METHODS.items() if model.startswith(prefix)), model)
    if not row.get("label") and row.get("model_overrides"):  # a model changed at scoring is not the model
        method += f" {row['model_overrides']}"
    scaling = SCALINGS[row.get("scaling") or "none"]
    return method if method.endswith(scaling) else method + scaling


# What every scored row holds (scripts/eval.sh's, eval_mlm.py's), besides its stride.
FIELDS = ("model", "split", "train_length", "checkpoint", "l_valid", "perplexity")


# What every committed result row says of itself (tests/lab/test_rebuild.py checks each): what it is
# (label), which training (seed), of which experiment, trained how (its recipe, or the command
# itself where a sweep changed the recipe), by which code on which machine. The floors' rows
# (model "unigram", retrieval's "floor") train nothing: they need no seed, recipe or command. The threads a training
# ran with are in its invocation's record (the runner's runs.jsonl, a results README).
ROW_IDENTITY = ("label", "seed", "experiment", "commit", "machine")
ROW_TRAINING = ("recipe", "command")  # one of them at least


def identity_missing(row):
    """The ROW_IDENTITY fields a result row lacks (or holds empty), ROW_TRAINING's if it has none, and
    the identity of what it measured (result_rows.identity_unrecorded) unless marked unrecorded."""
    from fairseq_alibi_lab.result_rows import identity_unrecorded

    floor = row.get("model") in ("unigram", "floor")  # the unigram model, retrieval's floors from the prompts
    missing = [name for name in ROW_IDENTITY if row.get(name) in (None, "") and not (floor and name == "seed")]
    if not floor and not any(row.get(name) for name in ROW_TRAINING):
        missing.append(" or ".join(ROW_TRAINING))
    lacking, marked = identity_unrecorded(row), row.get("unrecorded") or []
    missing += [name for name in lacking if name not in marked or not row.get("unrecorded_why")]
    missing += [f"{name} (marked unrecorded, yet recorded)" for name in marked if name not in lacking]
    return missing


def read_json_lines(path, fields=FIELDS, writer="scripts/eval.sh (or eval_mlm.py)"):
    """The rows of a JSON-lines results file, each with `fields` (written by `writer`); one line of
    error for a line that is not such a row."""
    if not os.path.isfile(path):
        raise SystemExit(f"error: no results file {path}: run scripts/eval.sh first")
    with open(path, errors="replace") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    raise SystemExit(f"error: {path} line {number} is not a JSON line (left by an "
                                     "interrupted run, or not a results file?): delete that line and rerun")
                problem = row_problem(row, fields)
                if problem:
                    raise SystemExit(f"error: {path} line {number} {problem}: give the results.jsonl that "
                                     f"{writer} writes, or delete that line")
                yield row


def row_problem(row, fields=FIELDS):
    """Why a JSON line is not a row with `fields` (and, for a scored row, a stride and a finite
    perplexity), or None."""
    if not isinstance(row, dict):
        return "is not a result (not a JSON object)"
    missing = [name for name in fields if name not in row]
    if "perplexity" in fields and "stride" not in row and "stride_rule" not in row:
        missing.append("stride")
    if missing:
        return f"is not a result of this kind (no {', '.join(missing)})"
    if "perplexity" in fields and (not isinstance(row["perplexity"], (int, float)) or not math.isfinite(row["perplexity"])):
        return f"has perplexity {row['perplexity']!r}, not a finite number (a diverged model?)"
    impossible = value_problem(row)
    return f"holds {impossible}" if impossible else None


def measure(row):
    """What a row's perplexity is of: a masked LM's masked tokens or a causal LM's every token."""
    return "masked-token" if "masked_tokens" in row else "causal-LM"


def load(paths, machine=None):
    """{(split, stride rule, label, train L, seed, checkpoint, l_valid): perplexity}; the last
    measurement of a configuration wins (reruns append). Masked-token and causal-LM perplexities
    are not one measure: files mixing them are refused. machine: only the rows scored on a machine
    whose name holds it (a row names its machine), refused in one line where none was."""
    rows = [(path, r) for path in paths for r in read_json_lines(path)]
    if machine is not None:
        kept = [(path, r) for path, r in rows if machine in (r.get("machine") or "")]
        if not kept:
            named = sorted({r.get("machine") or "none named" for _, r in rows})
            raise SystemExit(f"error: no rows of {', '.join(paths)} were scored on a machine named like {machine!r}; "
                             f"theirs: {'; '.join(named)}")
        rows = kept
    kinds = {}
    for path, r in rows:
        kinds.setdefault(measure(r), path)
    if len(kinds) > 1:
        where = (f"{kinds['masked-token']} holds both masked-token and causal-LM perplexities"
                 if kinds["masked-token"] == kinds["causal-LM"] else
                 f"{kinds['masked-token']} holds masked-token perplexities and {kinds['causal-LM']} causal-LM ones")
        raise SystemExit(f"error: {where}, which are not one measure: tabulate them apart")
    return keyed(r for _, r in rows)


def keyed(rows):
    """{(split, stride rule, label, train L, seed, checkpoint, l_valid): perplexity} of rows; the
    last of a configuration wins. Two rows of one cell scored with other --model-overrides or on
    other data are two measurements, not a rerun: refused, with the fix."""
    out, scored = {}, {}
    for r in rows:
        stride = r.get("stride_rule") or str(r["stride"])  # "L_valid/2": one table
        key = (r["split"], stride, method_name(r), r["train_length"], r.get("seed"), r["checkpoint"], r["l_valid"])
        for field, what in (("model_overrides", "--model-overrides"), ("data_sha256", "data")):
            if field not in r:  # a row older than the field: nothing to compare
                continue
            other = scored.setdefault((key, field), r[field])
            if other != r[field]:
                raise SystemExit(f"error: the rows hold {key[2]} of {r['checkpoint']} at L_valid {r['l_valid']} twice, "
                                 f"scored with other {what} ({other} and {r[field]}): give each scoring its own LABEL "
                                 "(or its own results file)")
        out[key] = r["perplexity"]
    return out


def distinct_names(paths):
    """{path: its shortest tail of path components that no other path of the list ends with}."""
    parts = {p: os.path.abspath(p).split(os.sep) for p in paths}
    for depth in range(2, max(map(len, parts.values())) + 1):
        tails = {p: os.sep.join(c[-depth:]) for p, c in parts.items()}
        if len(set(tails.values())) == len(tails):
            return tails
    return {p: os.path.abspath(p) for p in paths}


def tables(rows):
    """{(split, stride): (l_valids, {(label, train L): {l_valid: [ppl of each run]}})}: the runs of a
    label are its seeds; where two checkpoints share a label, train L and seed (two runs, not two
    seeds), the label names each one's file."""
    by_run = defaultdict(lambda: defaultdict(dict))
    for (split, stride, label, train_length, seed, checkpoint, l_valid), ppl in rows.items():
        by_run[(split, stride)][(label, train_length, seed, checkpoint)][l_valid] = ppl
    grouped = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for table, runs in by_run.items():
        for (label, train_length, seed, checkpoint), line in runs.items():
            clashing = [c for lb, t, sd, c in runs if (lb, t, sd) == (label, train_length, seed)]
            if len(clashing) > 1:
                label = f"{label} ({distinct_names(clashing)[checkpoint]})"
            for l_valid, ppl in line.items():
                grouped[table][(label, train_length)][l_valid].append(ppl)
    out = {}
    for key, lines in sorted(grouped.items()):
        l_valids = sorted({lv for line in lines.values() for lv in line})
        rank = lambda kv: (ORDER.index(kv[0][0]) if kv[0][0] in ORDER else len(ORDER), kv[0][0], kv[0][1] or 0)  # noqa: E731
        out[key] = (l_valids, {k: dict(v) for k, v in sorted(lines.items(), key=rank)})
    return out


def per_run(rows, key, value=lambda r: r["perplexity"]):
    """{key(row): [value of each run]}: a configuration's runs (its seeds), one per checkpoint, a
    checkpoint scored again counted once (its last row)."""
    runs = {}
    for r in rows:
        runs.setdefault(key(r), {})[r.get("checkpoint")] = value(r)
    return {k: list(v.values()) for k, v in runs.items()}


def mean_std(values):
    """Mean and sample standard deviation (0 for one value)."""
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else 0.0
    return mean, std


def cell(values, n):
    """mean ± std over the seeds; (n=k) where this length has fewer runs than the row."""
    mean, std = mean_std(values)
    text = f"{mean:.2f} ± {std:.2f}" if len(values) > 1 else f"{mean:.2f}"
    return text + (f" (n={len(values)})" if len(values) != n else "")


def markdown(l_valids, lines):
    """One row per (label, train L); with several seeds, cells are mean ± std and n is the seeds'
    count."""
    seeded = any(len(v) > 1 for line in lines.values() for v in line.values())
    head = "| Train L | " + ("n | " if seeded else "") + " | ".join(f"L_valid {lv}" for lv in l_valids) + " |"
    sep = "|---|" + ("---|" if seeded else "") + "---|" * len(l_valids)
    body = []
    for (label, train_length), line in lines.items():
        n = max(len(v) for v in line.values())
        body.append(f"| {label} {train_length if train_length is not None else ''}".rstrip() + " | "
                    + (f"{n} | " if seeded else "")
                    + " | ".join(cell(line[lv], n) if lv in line else "" for lv in l_valids) + " |")
    return "\n".join([head, sep, *body]) + "\n"


def write_csv(path, l_valids, lines):
    """Means per length, then standard deviations and run counts (std_<L_valid>, n_<L_valid>)."""
    with written_whole(path) as partial, open(partial, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "train_length", *l_valids, *(f"std_{lv}" for lv in l_valids),
                    *(f"n_{lv}" for lv in l_valids)])
        for (label, train_length), line in lines.items():
            stats = {lv: mean_std(line[lv]) for lv in line}
            w.writerow([label, "" if train_length is None else train_length,
                        *(stats[lv][0] if lv in stats else "" for lv in l_valids),
                        *(stats[lv][1] if lv in stats else "" for lv in l_valids),
                        *(len(line[lv]) if lv in line else "" for lv in l_valids)])


def pyplot():
    """matplotlib's pyplot on the Agg backend (files, no display), imported when a figure is drawn:
    the runner's refusals and its work on rows alone do not wait for it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(path, title, lines):
    """Perplexity against L_valid: each label's mean over its seeds, its spread (mean ± std) as a band."""
    import matplotlib.ticker

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for (label, train_length), line in lines.items():
        xs = sorted(line)
        stats = [mean_std(line[x]) for x in xs]
        style = "-" if label == "ALiBi" else ":" if label.startswith("ALiBi") else "--"
        if label.lower().startswith("unigram"):
            style = "-."
        name = label if train_length is None else f"{label}, L={train_length}"
        (drawn,) = ax.plot(xs, [m for m, _ in stats], marker="o", linestyle=style, label=name)
        if any(len(line[x]) > 1 for x in xs):
            ax.fill_between(xs, [m - s for m, s in stats], [m + s for m, s in stats], color=drawn.get_color(),
                            alpha=0.2, linewidth=0)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("Validation input length (L_valid)")
    ax.set_ylabel("Perplexity (mean over seeds; band: ± std)")
    ax.set_title(title)
    ax.legend(fontsize="small")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    with written_whole(path) as partial:
        fig.savefig(partial, format="png")
    plt.close(fig)


def write_tables(rows, out):
    """Every (split, stride)'s table (.md, .csv) and figure into out; returns the printed text."""
    os.makedirs(out, exist_ok=True)
    printed = []
    for (split, stride), (l_valids, lines) in tables(rows).items():
        name = f"{split}_stride{stride.replace('L_valid/', '_Lvalid_over_')}"
        kind = "nonoverlapping" if stride == "0" else f"sliding window, stride {stride}"
        md = markdown(l_valids, lines)
        with written_whole(os.path.join(out, f"table_{name}.md")) as partial, open(partial, "w") as f:
            f.write(md)
        write_csv(os.path.join(out, f"table_{name}.csv"), l_valids, lines)
        figure(os.path.join(out, f"figure_{name}.png"), f"{split} perplexity, {kind}", lines)
        printed.append(f"\n{split} perplexity, {kind}:\n\n{md}")
    return "".join(printed)


@one_line_on_disk_faults
def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", help="JSON lines from scripts/eval.sh")
    p.add_argument("--out", required=True, help="directory for the tables and figures")
    args = p.parse_args()
    rows = load(args.results)
    if not rows:
        p.error(f"no results in {', '.join(args.results)}: run scripts/eval.sh first")
    print(write_tables(rows, args.out))


if __name__ == "__main__":
    main()
