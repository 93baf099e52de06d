#!/usr/bin/env python3
"""The headline-trade table and figure (examples/wikitext2/trade.sh): ALiBi trained at a short L,
evaluated at each length a sinusoidal model was trained at, beside that model.

    python3 examples/wikitext2/trade_table.py RESULTS.jsonl --out DIR

Perplexities from RESULTS.jsonl (scripts/eval.sh's rows, nonoverlapping); each model's training
wall-clock and peak memory from resources.jsonl beside its checkpoint (scripts/measure.py, one
line per call of scripts/train.sh: the longest is the training; a call that found the run finished
adds a short line, which is ignored; a resumed run is marked).
"""
import argparse
import json
import os
import sys

RESUMED_IF_LONGER = 60  # seconds: calls beyond the longest that trained too
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from results import read_json_lines, written_whole  # noqa: E402  (eval.sh's rows; one line for a bad one)


def training_cost(checkpoint):
    path = os.path.join(os.path.dirname(checkpoint), "resources.jsonl")
    if not os.path.exists(path):
        return None
    everything = list(read_json_lines(path, ("exit", "seconds", "peak_mib"), "scripts/measure.py"))
    calls = [c for c in everything if c["exit"] == 0] or everything
    longest = max(calls, key=lambda c: c["seconds"])
    resumed = sum(c["seconds"] > RESUMED_IF_LONGER for c in calls) > 1
    return {"seconds": longest["seconds"], "peak_mib": longest["peak_mib"], "resumed": resumed}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="RESULTS.jsonl written by trade.sh")
    p.add_argument("--out", required=True, help="directory for trade.md, trade.csv and trade.png")
    args = p.parse_args()
    rows = [r for r in read_json_lines(args.results) if r["stride"] == 0 and r["scaling"] == "none"]
    alibi = [r for r in rows if r["model"].startswith("alibi")]
    # Reruns append: the last row of each sinusoidal checkpoint at its own length wins.
    sinusoidal = list({r["checkpoint"]: r for r in rows if r["model"] == "transformer_lm"
                       and r["l_valid"] == r["train_length"]}.values())
    if len({r["checkpoint"] for r in alibi}) != 1 or not sinusoidal:
        sys.exit(f"error: {args.results} must hold one ALiBi checkpoint and sinusoidal ones (trade.sh's output)")
    alibi_at = {r["l_valid"]: r for r in alibi}
    alibi_cost = training_cost(alibi[0]["checkpoint"])
    lines = [f"| L_valid | ALiBi L={alibi[0]['train_length']} | sinusoidal L=L_valid | ALiBi / sinusoidal perplexity "
             "| training s: ALiBi, sinusoidal | speed-up | peak MiB: ALiBi, sinusoidal | memory ratio |",
             "|---|---|---|---|---|---|---|---|"]
    csv = ["l_valid,alibi_train_length,alibi_ppl,sinusoidal_ppl,alibi_train_s,sinusoidal_train_s,"
           "alibi_peak_mib,sinusoidal_peak_mib"]
    points = []
    for s in sorted(sinusoidal, key=lambda r: r["train_length"]):
        if s["l_valid"] != s["train_length"] or s["l_valid"] not in alibi_at:
            continue
        a, cost = alibi_at[s["l_valid"]], training_cost(s["checkpoint"])
        mark = lambda c: " (resumed)" if c and c["resumed"] else ""  # noqa: E731
        if cost and alibi_cost:
            costs = (f"{alibi_cost['seconds']:.0f}{mark(alibi_cost)}, {cost['seconds']:.0f}{mark(cost)} | "
                     f"{cost['seconds'] / alibi_cost['seconds']:.2f}x | {alibi_cost['peak_mib']:.0f}, "
                     f"{cost['peak_mib']:.0f} | {alibi_cost['peak_mib'] / cost['peak_mib']:.2f}")
        else:
            costs = "not measured | | not measured |"
        lines.append(f"| {s['l_valid']} | {a['perplexity']:.2f} | {s['perplexity']:.2f} | "
                     f"{a['perplexity'] / s['perplexity']:.3f} | {costs} |")
        csv.append(",".join(str(x) for x in (
            s["l_valid"], a["train_length"], round(a["perplexity"], 2), round(s["perplexity"], 2),
            alibi_cost and alibi_cost["seconds"], cost and cost["seconds"],
            alibi_cost and alibi_cost["peak_mib"], cost and cost["peak_mib"])))
        points.append((s["l_valid"], a["perplexity"], s["perplexity"], cost, alibi_cost))
    os.makedirs(args.out, exist_ok=True)
    for name, text in (("trade.md", lines), ("trade.csv", csv)):
        with written_whole(os.path.join(args.out, name)) as partial, open(partial, "w") as f:
            f.write("\n".join(text) + "\n")
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    lengths = [p[0] for p in points]
    left.plot(lengths, [p[1] for p in points], "o-", label=f"ALiBi, trained at L={alibi[0]['train_length']}")
    left.plot(lengths, [p[2] for p in points], "s--", label="sinusoidal, trained at L = L_valid")
    left.set(xscale="log", xlabel="L_valid (tokens)", ylabel="validation perplexity", xticks=lengths,
             xticklabels=[str(x) for x in lengths], title="perplexity at L_valid")
    left.legend()
    if all(p[3] and p[4] for p in points):
        right.plot(lengths, [p[3]["seconds"] for p in points], "s--", label="sinusoidal at L_valid: training s")
        right.axhline(points[0][4]["seconds"], color="C0", label="ALiBi: training s")
        right.set(xscale="log", xlabel="L (sinusoidal's training length)", ylabel="training wall-clock (s)",
                  xticks=lengths, xticklabels=[str(x) for x in lengths], title="what each costs to train")
        right.legend()
    fig.tight_layout()
    with written_whole(os.path.join(args.out, "trade.png")) as partial:
        fig.savefig(partial, dpi=120, format="png")


if __name__ == "__main__":
    main()
