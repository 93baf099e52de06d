"""Each trained model's training wall time (gpt2-alibi-2's report; long-context-recipes' too)."""
import os


def training_seconds(rows, out):
    """{label: {checkpoint: (training seconds, updates, machine)}} of the trained models' rows: the longest
    measured call (trade_table.training_records, kept in OUT/training-resources.csv since the checkpoints
    do not travel)."""
    from fairseq_alibi_lab.trade_table import record, training_records

    trained = [r for r in rows if r.get("checkpoint") and r.get("updates")]
    records = training_records({r["checkpoint"] for r in trained}, out)
    by_label = {}
    for r in trained:
        seconds = record(records, r["checkpoint"]).get("seconds")
        if seconds is not None:
            by_label.setdefault(r["label"], {})[r["checkpoint"]] = (seconds, r["updates"], r.get("machine"))
    return by_label


def wall_time(rows, out):
    """OUT/wall_time.md: each trained model's training wall time (training_seconds), mean ± std over its
    seeds, with the machines its rows name. Returns the table, or None where nothing was measured."""
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi_lab.results import mean_std

    by_label = training_seconds(rows, out)
    if not by_label:
        return None
    lines = ["# Training wall time (s), mean ± std over seeds", "",
             "Each training's longest measured call (`training-resources.csv`: a resumed run shows `resumed`), on the "
             "machines named; the runner trained two at a time, one thread each, so a time includes the other job's "
             "contention for memory bandwidth.", "", "| model | updates | seconds | n | machines |", "|---|---|---|---|---|"]
    for label, runs in by_label.items():
        mean, std = mean_std([s for s, _, _ in runs.values()])
        updates = sorted({u for _, u, _ in runs.values()})
        spread = f" ± {std:.0f}" if len(runs) > 1 else ""  # one run has no spread
        lines.append(f"| {label} | {', '.join(map(str, updates))} | {mean:.0f}{spread} | {len(runs)} | "
                     f"{'; '.join(sorted({str(m) for _, _, m in runs.values()}))} |")
    text = "\n".join(lines) + "\n"
    with written_whole(os.path.join(out, "wall_time.md")) as partial, open(partial, "w") as f:
        f.write(text)
    return text
