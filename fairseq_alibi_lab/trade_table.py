#!/usr/bin/env python3
"""The headline-trade table and figure (scripts/experiment.py trade, examples/wikitext2/trade.sh):
ALiBi trained at a short L, evaluated at each length a sinusoidal model was trained at, beside that
model.

    python3 examples/wikitext2/trade_table.py RESULTS.jsonl --out DIR

Perplexities from RESULTS.jsonl (scripts/eval.sh's rows, nonoverlapping); each model's training
wall-clock and peak memory from resources.jsonl beside its checkpoint (scripts/measure.py, one
line per call of scripts/train.sh: the longest that trained is the training; a call that found the run
finished, or waited for another process to finish it, is ignored; a resumed run is marked). Runs of several training seeds show
as mean ± sample std (n); their ratios are ratios of the means. Then every sinusoidal model at its own
length in one grid, by training length and tokens per update (--max-tokens x --update-freq, from
train_flags.json beside its checkpoint): a row holds the tokens and compute fixed, so it tells the
training length's effect from the batch's; the trade's "sequences per update fixed" models and their
control at L (trained with --update-freq) fill the rows below the recipe's.
"""
import argparse
import csv
import json
import os
import sys

RESUMED_IF_LONGER = 60  # seconds: calls beyond the longest that trained too
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from fairseq_alibi_lab.results import cell, mean_std, per_run, pyplot, read_json_lines, written_whole  # noqa: E402  (eval.sh's rows; one line for a bad one)
from fairseq_alibi_lab.recipes import RUN_FLAGS  # noqa: E402


# Each training's cost and batch, kept beside the results (the checkpoints, and the files beside
# them, do not travel): rebuilt from those files where present, read from here where not.
RECORD = "training-resources.csv"
COLUMNS = ("run", "seconds", "peak_mib", "exit", "calls", "resumed", "tokens_per_update")


def trained(call):
    """Whether a measured call trained: it computed for longer than a start-up (its CPU seconds; a line written
    before measure.py recorded them, its wall time). A call that waited for another process's training of the run
    lasts as long but did not; a killed call that trained did (its run resumed)."""
    return call.get("cpu_s", call["seconds"]) > RESUMED_IF_LONGER


def resumed_in_log(folder):
    """Whether the run's train.log (train_once's: every call's fairseq output, appended) shows a call loading the
    run's own last checkpoint: a call killed before measure.py wrote its line (a session's end) trained the
    part before, so the run was resumed even where resources.jsonl holds one call."""
    own = f"{os.path.basename(os.path.normpath(folder))}/checkpoint_last.pt (epoch"
    try:
        with open(os.path.join(folder, "train.log"), errors="replace") as f:
            return any("Loaded checkpoint" in line and own in line for line in f)
    except OSError:
        return False


def measured(checkpoint):
    """What the files beside checkpoint say of its training: its cost (resources.jsonl, the longest
    call that trained) and its tokens per update (RUN_FLAGS); {} where they are gone."""
    record = {}
    path = os.path.join(os.path.dirname(checkpoint), "resources.jsonl")
    if os.path.exists(path):
        everything = list(read_json_lines(path, ("exit", "seconds", "peak_mib"), "scripts/measure.py"))
        calls = [c for c in everything if c["exit"] == 0] or everything
        longest = max([c for c in calls if trained(c)] or calls, key=lambda c: c["seconds"])
        record.update(seconds=round(longest["seconds"], 1), peak_mib=round(longest["peak_mib"], 1), exit=longest["exit"],
                      calls=len(everything),
                      resumed=int(sum(map(trained, everything)) > 1 or resumed_in_log(os.path.dirname(checkpoint))))
    path = os.path.join(os.path.dirname(checkpoint), RUN_FLAGS)
    if os.path.exists(path):
        with open(path) as f:
            flags = json.load(f)
        record["tokens_per_update"] = int(flags["--max-tokens"]) * int(flags.get("--update-freq") or 1)
    return record


def training_records(checkpoints, out):
    """{run (its checkpoint's folder): record}: OUT/RECORD's, updated from the files beside each
    checkpoint where they are (measured), and written back."""
    path = os.path.join(out, RECORD)
    records = {}
    if os.path.exists(path):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                records[row["run"]] = {k: (float(v) if k in ("seconds", "peak_mib") else int(v)) for k, v in row.items()
                                       if k != "run" and v not in ("", None)}
    for checkpoint in sorted(checkpoints):
        run = os.path.basename(os.path.dirname(checkpoint))
        records[run] = {**records.get(run, {}), **measured(checkpoint)}
    known = {run: record for run, record in records.items() if record}
    if known:
        os.makedirs(out, exist_ok=True)
        with written_whole(path) as partial, open(partial, "w") as f:
            lines = [",".join([run, *(str(record.get(k, "")) for k in COLUMNS[1:])]) for run, record in sorted(known.items())]
            f.write("\n".join([",".join(COLUMNS), *lines]) + "\n")
    return known


def record(records, checkpoint):
    return records.get(os.path.basename(os.path.dirname(checkpoint)), {})


def costs(records, checkpoints):
    """Mean training seconds and peak MiB over the runs, whether any was resumed; None if any is not measured."""
    measured = [record(records, c) for c in sorted(checkpoints)]
    if not measured or not all("seconds" in m for m in measured):
        return None
    return {"seconds": mean_std([c["seconds"] for c in measured])[0], "peak_mib": mean_std([c["peak_mib"] for c in measured])[0],
            "resumed": any(c.get("resumed") for c in measured)}


def cost_at(records, side, length):
    """costs() of the runs among `side`'s rows scored at L_valid `length`."""
    return costs(records, {r["checkpoint"] for r in side if r["l_valid"] == length})


def spread(values):
    """mean ± sample std (n) over several runs, the value of one."""
    return cell(values, len(values)) + (f" (n={len(values)})" if len(values) > 1 else "")


def seconds(cost):
    return f"{cost['seconds']:.0f}" + (" (resumed)" if cost["resumed"] else "")


def report(rows, out):
    """Write out/trade.{md,csv,png} from eval.sh rows; return the Markdown table (None, writing
    nothing, until the rows hold ALiBi runs of one training length and sinusoidal ones)."""
    rows = [r for r in rows if r.get("stride", 0) == 0 and (r.get("scaling") or "none") == "none" and r.get("checkpoint")]
    alibi = [r for r in rows if r["model"].startswith("alibi")]
    own_length = [r for r in rows if r["model"] == "transformer_lm" and r["l_valid"] == r["train_length"]]
    sinusoidal = [r for r in own_length if (r.get("label") or "Sinusoidal") == "Sinusoidal"]  # the recipe's batch
    if len({r["train_length"] for r in alibi}) != 1 or not sinusoidal:
        return None
    alibi_length = alibi[0]["train_length"]
    records = training_records({r["checkpoint"] for r in alibi + own_length}, out)
    alibi_at, sinusoidal_at = (per_run(side, lambda r: r["l_valid"]) for side in (alibi, sinusoidal))
    alibi_cost = costs(records, {r["checkpoint"] for r in alibi})
    lines = [f"| L_valid | ALiBi L={alibi_length} | sinusoidal L=L_valid | ALiBi / sinusoidal perplexity "
             "| training s: ALiBi, sinusoidal | speed-up | peak MiB: ALiBi, sinusoidal | memory ratio |",
             "|---|---|---|---|---|---|---|---|"]
    csv_lines = ["l_valid,alibi_train_length,alibi_ppl,alibi_ppl_std,alibi_n,sinusoidal_ppl,sinusoidal_ppl_std,sinusoidal_n,"
           "alibi_train_s,sinusoidal_train_s,alibi_peak_mib,sinusoidal_peak_mib"]
    points = []
    for l_valid in sorted(sinusoidal_at):
        a, s = alibi_at.get(l_valid), sinusoidal_at[l_valid]
        if not a:
            continue
        cost = cost_at(records, sinusoidal, l_valid)
        (a_mean, a_std), (s_mean, s_std) = mean_std(a), mean_std(s)
        if cost and alibi_cost:
            shown = (f"{seconds(alibi_cost)}, {seconds(cost)} | "
                     f"{cost['seconds'] / alibi_cost['seconds']:.2f}x | {alibi_cost['peak_mib']:.0f}, "
                     f"{cost['peak_mib']:.0f} | {alibi_cost['peak_mib'] / cost['peak_mib']:.2f}")
        else:
            shown = "not measured | | not measured |"
        lines.append(f"| {l_valid} | {spread(a)} | {spread(s)} | {a_mean / s_mean:.3f} | {shown} |")
        csv_lines.append(",".join(str(x) for x in (
            l_valid, alibi_length, round(a_mean, 2), round(a_std, 2), len(a), round(s_mean, 2), round(s_std, 2), len(s),
            alibi_cost and round(alibi_cost["seconds"], 1), cost and round(cost["seconds"], 1),
            alibi_cost and round(alibi_cost["peak_mib"]), cost and round(cost["peak_mib"]))))
        points.append((l_valid, a_mean, s_mean, cost))
    if len(own_length) > len(sinusoidal):  # sinusoidal models of other batches: the grid
        lines += ["", *batch_grid(own_length, records)]
    os.makedirs(out, exist_ok=True)
    for name, text in (("trade.md", lines), ("trade.csv", csv_lines)):
        with written_whole(os.path.join(out, name)) as partial, open(partial, "w") as f:
            f.write("\n".join(text) + "\n")
    figure(os.path.join(out, "trade.png"), points, alibi_length, alibi_cost)
    return "\n".join(lines) + "\n"


def batch_grid(own_length, records):
    """Markdown lines: sinusoidal models at their own length L, a column per L and a row per tokens
    per update; each cell the perplexity, the sequences per update and the mean training seconds."""
    tokens = {r["checkpoint"]: record(records, r["checkpoint"]).get("tokens_per_update") for r in own_length}
    known = [r for r in own_length if tokens[r["checkpoint"]]]
    def batch_and_length(r):
        return tokens[r["checkpoint"]], r["train_length"]
    at = per_run(known, batch_and_length)
    runs = per_run(known, batch_and_length, value=lambda r: r["checkpoint"])  # for their costs
    lengths, batches = sorted({k[1] for k in at}), sorted({k[0] for k in at})
    lines = ["Sinusoidal models at their own length L, by tokens per update: a row holds tokens and compute "
             "fixed; each cell: perplexity; sequences per update, training s",
             "", "| tokens per update | " + " | ".join(f"L={length}" for length in lengths) + " |",
             "|---|" + "---|" * len(lengths)]
    for batch in batches:
        cells = []
        for length in lengths:
            if (batch, length) not in at:
                cells.append("")
                continue
            cost = costs(records, runs[batch, length])
            cells.append(f"{spread(at[batch, length])}; {batch // length} seq, "
                         + (f"{seconds(cost)} s" if cost else "s not measured"))
        lines.append(f"| {batch} | " + " | ".join(cells) + " |")
    left_out = [checkpoint for checkpoint, batch in tokens.items() if not batch]
    if left_out:
        lines += ["", f"({len(left_out)} of these runs left out: no {RUN_FLAGS} beside the checkpoint, nor their "
                  f"tokens per update in {RECORD})"]
    return lines


def figure(path, points, alibi_length, alibi_cost):
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    lengths = [p[0] for p in points]
    left.plot(lengths, [p[1] for p in points], "o-", label=f"ALiBi, trained at L={alibi_length}")
    left.plot(lengths, [p[2] for p in points], "s--", label="sinusoidal, trained at L = L_valid")
    left.set(xscale="log", xlabel="L_valid (tokens)", ylabel="validation perplexity (mean over seeds)", xticks=lengths,
             xticklabels=[str(x) for x in lengths], title="perplexity at L_valid")
    left.legend()
    if alibi_cost and all(p[3] for p in points):
        right.plot(lengths, [p[3]["seconds"] for p in points], "s--", label="sinusoidal at L_valid: training s")
        right.axhline(alibi_cost["seconds"], color="C0", label="ALiBi: training s")
        right.set(xscale="log", xlabel="L (sinusoidal's training length)", ylabel="training wall-clock (s)",
                  xticks=lengths, xticklabels=[str(x) for x in lengths], title="what each costs to train")
        right.legend()
    fig.tight_layout()
    with written_whole(path) as partial:
        fig.savefig(partial, dpi=120, format="png")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="RESULTS.jsonl written by scripts/experiment.py trade")
    p.add_argument("--out", required=True, help="directory for trade.md, trade.csv and trade.png")
    args = p.parse_args()
    table = report(list(read_json_lines(args.results)), args.out)
    if table is None:
        sys.exit(f"error: {args.results} must hold ALiBi runs of one training length and sinusoidal ones "
                 "(scripts/experiment.py trade's output)")
    print(table, end="")


if __name__ == "__main__":
    main()
