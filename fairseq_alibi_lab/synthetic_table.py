#!/usr/bin/env python3
"""exact_match.py's JSON lines -> OUT/table.md (exact match %, one row per model, one column per
task and size bucket; a model's runs of several seeds as mean ± sample std, with n) and
OUT/figure.png (one panel per task, the mean with the seeds' ± std as a band). Prints the table.

A task no model learns in distribution (mean exact match below LEARNED in the first bucket) says
nothing about length: its columns and panel are left out, and a line under the table names it
with the best model's score (its rows stay in RESULTS). Under the table too: the models below
LEARNED in distribution on a task that is shown, whose scores past it say little.

    python3 examples/synthetic/table.py RESULTS.jsonl --out DIR
"""
import argparse
import os
import sys

from fairseq_alibi_lab.results import mean_std, per_run, pyplot, read_json_lines, written_whole

LEARNED = 90.0  # % exact match in distribution: the bar for "learned the task"


def percent(values, n):
    """mean ± std over the seeds, one decimal; (n=k) where this cell has fewer runs than its row."""
    mean, std = mean_std(values)
    return (f"{mean:.1f} ± {std:.1f}" if len(values) > 1 else f"{mean:.1f}") + (f" (n={len(values)})" if len(values) != n else "")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    rows = list(read_json_lines(args.results, ("label", "task", "n_low", "n_high", "accuracy"),
                                "examples/synthetic/exact_match.py"))
    if not rows:
        raise SystemExit(f"error: no results in {args.results}: run examples/synthetic/run.sh first")
    print(write_table(rows, args.out), end="")


def write_table(rows, out):
    """OUT/table.md and OUT/figure.png from exact_match.py's rows; returns the table."""
    labels = list(dict.fromkeys(r["label"] for r in rows))
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    buckets = sorted({(r["n_low"], r["n_high"]) for r in rows})
    runs = per_run(rows, lambda r: (r["label"], r["task"], (r["n_low"], r["n_high"])), lambda r: 100 * r["accuracy"])
    accuracy = {key: mean_std(values)[0] for key, values in runs.items()}
    notes = []
    for task in list(tasks):  # each model's score in distribution (the first bucket)
        scores = {label: accuracy[label, task, buckets[0]] for label in labels if (label, task, buckets[0]) in accuracy}
        best = max(scores, key=scores.get, default=None)
        if best is not None and scores[best] < LEARNED:
            tasks.remove(task)
            notes.append(f"- {task}: left out, learned by no model (best in distribution {scores[best]:.1f}%, "
                         f"{best}; the bar is {LEARNED:.0f}%); its rows are in the results")
        else:
            notes += [f"- {task}: {label} below {LEARNED:.0f}% in distribution ({a:.1f}%): its scores past it say little"
                      for label, a in scores.items() if a < LEARNED]
    columns = [(t, b) for t in tasks for b in buckets]
    seeds = {label: max(len(v) for (lab, _, _), v in runs.items() if lab == label) for label in labels}
    lines = ["| model | n | " + " | ".join(f"{t} n={lo}-{hi}" for t, (lo, hi) in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for label in labels:
        cells = [percent(runs[label, t, b], seeds[label]) if (label, t, b) in runs else "" for t, b in columns]
        lines.append(f"| {label} | {seeds[label]} | " + " | ".join(cells) + " |")
    table = "\n".join(lines + ([""] + notes if notes else [])) + "\n"
    os.makedirs(out, exist_ok=True)
    with written_whole(os.path.join(out, "table.md")) as partial, open(partial, "w") as f:
        f.write(table)

    if not tasks:  # nothing learned: no figure to draw
        return table
    plt = pyplot()
    fig, axes = plt.subplots(1, len(tasks), figsize=(4 * len(tasks), 3.6), dpi=100, squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for label in labels:
            xs = [i for i, b in enumerate(buckets) if (label, task, b) in accuracy]
            mean, std = zip(*(mean_std(runs[label, task, buckets[i]]) for i in xs))
            (line,) = ax.plot(xs, mean, marker="o", linestyle="--" if label == "Sinusoidal" else "-", label=label)
            ax.fill_between(xs, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                            color=line.get_color(), alpha=0.15, linewidth=0)  # the seeds' spread
        ax.set_xticks(range(len(buckets)), [f"{lo}-{hi}" for lo, hi in buckets])
        ax.set_title(task)
        ax.set_xlabel("size n (training: the first bucket)")
        ax.set_ylim(-3, 103)
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("exact match (%)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    with written_whole(os.path.join(out, "figure.png")) as partial:
        fig.savefig(partial, format="png")
    plt.close(fig)
    return table


if __name__ == "__main__":
    main()
