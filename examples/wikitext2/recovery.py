#!/usr/bin/env python3
"""The recovery curve of examples/wikitext2/convert.sh: perplexity at L after k updates.

    python examples/wikitext2/recovery.py RECOVERY.jsonl --out DIR

Reads the JSON lines convert.sh writes (scripts/eval.sh with LABEL teacher, converted, ce,
distill, continued, scratch; each at L_valid = L) and writes DIR/recovery.md (one row per number of
fine-tuning updates k: the two fine-tuned models after k, ALiBi from scratch after as many updates
in all as the teacher plus k) and DIR/recovery.png (perplexity against total training updates).
Runs of several training seeds show as mean ± sample std (n), their means in the figure.
"""
import argparse
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fairseq_alibi_lab.results import cell, mean_std, per_run, read_json_lines, written_whole  # noqa: E402


def load(path):
    """{label: {updates: [perplexity of each run]}}; a checkpoint scored twice counts once (the last)."""
    points = {}
    for (label, updates), values in per_run(read_json_lines(path), lambda r: (r["label"], r["updates"])).items():
        points.setdefault(label, {})[updates] = values
    missing = {"teacher", "converted", "ce", "distill", "scratch"} - set(points)  # "continued": since 2026-11-24
    if missing:
        raise SystemExit(f"error: {path} lacks the {', '.join(sorted(missing))} rows: run examples/wikitext2/convert.sh")
    return points


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recovery", help="recovery.jsonl from examples/wikitext2/convert.sh")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    points = load(args.recovery)
    (teacher_updates, (teacher,)), = points["teacher"].items()
    (converted,) = next(iter(points["converted"].values()))
    # After conversion the fine-tuning count starts at 0: k = 0 is the converted model itself.
    finetune = {name: {0: [converted], **points[name]} for name in ("ce", "distill")}
    continued = {0: [teacher], **points["continued"]} if "continued" in points else {}  # the teacher fine-tuned alike
    scratch = points["scratch"]

    ks = sorted(set(finetune["ce"]) | set(finetune["distill"]))
    lines = [f"Validation perplexity at L (teacher: {teacher:.2f} after {teacher_updates} updates)\n",
             "| Fine-tuning updates k | Converted + CE | Converted + distill | Teacher continued | "
             f"ALiBi from scratch, {teacher_updates} + k updates |", "|---|---|---|---|---|"]
    shown = lambda d, k: cell(d[k], 1) if k in d else ""  # noqa: E731  (one run: its value; more: mean ± std (n=k))
    for k in ks:
        lines.append(f"| {k} | {shown(finetune['ce'], k)} | {shown(finetune['distill'], k)} | {shown(continued, k)} | "
                     f"{shown(scratch, teacher_updates + k)} |")
    table = "\n".join(lines) + "\n"
    os.makedirs(args.out, exist_ok=True)
    with written_whole(os.path.join(args.out, "recovery.md")) as partial, open(partial, "w") as f:
        f.write(table)
    print(table)

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    xs = sorted(scratch)
    mean = lambda values: mean_std(values)[0]  # noqa: E731
    ax.plot(xs, [mean(scratch[x]) for x in xs], "o-", label="ALiBi from scratch")
    for points_k, label in ((finetune["ce"], "converted + CE"), (finetune["distill"], "converted + distillation"),
                            (continued, "teacher continued (sinusoidal)")):
        ks = sorted(points_k)
        if not ks:
            continue
        ax.plot([teacher_updates + k for k in ks], [mean(points_k[k]) for k in ks], "s--", label=label)
    ax.axhline(teacher, color="gray", linestyle=":", label=f"sinusoidal teacher ({teacher_updates} updates)")
    ax.set_yscale("log")
    ax.set_xlabel("Training updates in all (fine-tuning starts from the teacher's)")
    ax.set_ylabel("Validation perplexity at L")
    ax.set_title("Recovering a sinusoidal LM converted to ALiBi")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with written_whole(os.path.join(args.out, "recovery.png")) as partial:
        fig.savefig(partial, format="png")


if __name__ == "__main__":
    main()
