#!/usr/bin/env python3
"""Turn scripts/eval.sh JSON lines into the paper's tables and Figure 1.

    python scripts/results.py RESULTS.jsonl [MORE.jsonl ...] --out DIR

Writes, per (split, stride): DIR/table_<split>_stride<S>.{md,csv} with one row per (method,
train L) and one column per L_valid (the layout of the paper's Table 5 / Tables 13-15), and
DIR/figure_<split>_stride<S>.png (perplexity against L_valid; ALiBi solid, its slope scalings
dotted, the other methods dashed).
Prints the Markdown tables.
"""
import argparse
import csv
import json
import os
from collections import defaultdict

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


# Row labels in the paper's order (Tables 2-4), then the methods added since, then the
# inference-time scalings (ALiBi's slopes, rotary's angles).
METHODS = {"transformer_lm": "Sinusoidal", "rotary": "Rotary", "t5_bias": "T5 bias", "alibi": "ALiBi",
           "nope": "NoPE", "kerple": "KERPLE", "sandwich": "Sandwich", "fire": "FIRE"}
SCALINGS = {"none": "", "linear": " + linear interp.", "ntk": " + NTK", "dynamic_ntk": " + dynamic NTK",
            "yarn": " + YaRN"}
ORDER = [m + s for m in METHODS.values() for s in SCALINGS.values()]


def method_name(row):
    """The row's label: eval.sh's LABEL if given, else the method (+ its slope scaling)."""
    if row.get("label"):
        return row["label"]
    model = row["model"]
    method = next((name for prefix, name in METHODS.items() if model.startswith(prefix)), model)
    return method + SCALINGS[row.get("scaling") or "none"]


def read_json_lines(path):
    """The rows of one of scripts/eval.sh's JSON-lines files; one line of error for a bad line."""
    if not os.path.isfile(path):
        raise SystemExit(f"error: no results file {path}: run scripts/eval.sh first")
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    raise SystemExit(f"error: {path} line {number} is not a JSON line (left by an "
                                     "interrupted run?): delete that line and rerun")


def load(paths):
    rows = {}
    for path in paths:
        for r in read_json_lines(path):
            # The last measurement of a configuration wins (reruns append).
            stride = r.get("stride_rule") or str(r["stride"])  # "L_valid/2": one table
            key = (r["split"], stride, method_name(r), r["train_length"], r["checkpoint"], r["l_valid"])
            rows[key] = r["perplexity"]
    return rows


def tables(rows):
    """{(split, stride): (l_valids, {(method, train L): {l_valid: ppl}})}, one line per checkpoint:
    where checkpoints share a method and L, the label names each one's file."""
    by_checkpoint = defaultdict(lambda: defaultdict(dict))
    for (split, stride, method, train_length, checkpoint, l_valid), ppl in rows.items():
        by_checkpoint[(split, stride)][(method, train_length, checkpoint)][l_valid] = ppl
    grouped = defaultdict(dict)
    for table, lines in by_checkpoint.items():
        for (method, train_length, checkpoint), line in lines.items():
            shared = sum(1 for m, t, _ in lines if (m, t) == (method, train_length)) > 1
            if shared:
                path = os.path.abspath(checkpoint)
                method = f"{method} ({os.path.basename(os.path.dirname(path))}/{os.path.basename(path)})"
            grouped[table][(method, train_length)] = line
    out = {}
    for key, lines in sorted(grouped.items()):
        l_valids = sorted({lv for line in lines.values() for lv in line})
        rank = lambda kv: (ORDER.index(kv[0][0]) if kv[0][0] in ORDER else len(ORDER), kv[0][0], kv[0][1])  # noqa: E731
        out[key] = (l_valids, dict(sorted(lines.items(), key=rank)))
    return out


def markdown(l_valids, lines):
    head = "| Train L | " + " | ".join(f"L_valid {lv}" for lv in l_valids) + " |"
    sep = "|---|" + "---|" * len(l_valids)
    body = [
        f"| {method} {train_length} | "
        + " | ".join(f"{line[lv]:.2f}" if lv in line else "" for lv in l_valids)
        + " |"
        for (method, train_length), line in lines.items()
    ]
    return "\n".join([head, sep, *body]) + "\n"


def write_csv(path, l_valids, lines):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "train_length", *l_valids])
        for (method, train_length), line in lines.items():
            w.writerow([method, train_length, *(line.get(lv, "") for lv in l_valids)])


def figure(path, title, lines):
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for (method, train_length), line in lines.items():
        xs = sorted(line)
        style = "-" if method == "ALiBi" else ":" if method.startswith("ALiBi") else "--"
        ax.plot(xs, [line[x] for x in xs], marker="o", linestyle=style,
                label=f"{method}, L={train_length}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("Validation input length (L_valid)")
    ax.set_ylabel("Perplexity")
    ax.set_title(title)
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", help="JSON lines from scripts/eval.sh")
    p.add_argument("--out", required=True, help="directory for the tables and figures")
    args = p.parse_args()
    rows = load(args.results)
    if not rows:
        p.error(f"no results in {', '.join(args.results)}: run scripts/eval.sh first")
    os.makedirs(args.out, exist_ok=True)
    for (split, stride), (l_valids, lines) in tables(rows).items():
        name = f"{split}_stride{stride.replace('L_valid/', '_Lvalid_over_')}"
        kind = "nonoverlapping" if stride == "0" else f"sliding window, stride {stride}"
        md = markdown(l_valids, lines)
        with open(os.path.join(args.out, f"table_{name}.md"), "w") as f:
            f.write(md)
        write_csv(os.path.join(args.out, f"table_{name}.csv"), l_valids, lines)
        figure(os.path.join(args.out, f"figure_{name}.png"), f"{split} perplexity, {kind}", lines)
        print(f"\n{split} perplexity, {kind}:\n\n{md}")


if __name__ == "__main__":
    main()
