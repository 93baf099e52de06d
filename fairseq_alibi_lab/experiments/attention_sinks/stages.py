"""The attention-sink experiment's own stages: each model's sink mass per layer and head (its record,
`sink_mass`, by measure.py in a process of its own: the runner imports no fairseq) and its table."""
import os
import subprocess
import sys

ROWS = "sink_mass.jsonl"  # under the runner's OUT: what sink_mass appends to (the runner merges parallel parts' by it)
SINK = 0.3  # Gu et al. 2025's threshold: a head whose mean first-token mass exceeds it is a sink head
NOTHING = 1e-3  # a model with a head giving more than this to nothing gets a per-head table of it


def sink_mass(context, job):
    """A Model.records entry: the job's sink mass per layer and head into OUT/sink_mass.jsonl (unless its
    checkpoint has rows there on this split's text); True if it measured."""
    from fairseq_alibi.tools.files import data_fingerprint
    from fairseq_alibi_lab.result_rows import read_rows

    out = os.path.join(context.out, ROWS)
    text = data_fingerprint(context.data, context.split)
    if any(r["checkpoint"] == job.checkpoint and r["split"] == context.split and r["data_sha256"] == text
           for r in (read_rows(out) if os.path.exists(out) else [])):
        return False
    print(f"    sink mass on the {context.split} split", flush=True)
    done = subprocess.run([sys.executable, "-m", "fairseq_alibi_lab.experiments.attention_sinks.measure", job.checkpoint,
                           context.data, out, "--length", str(job.train_length), "--split", context.split,
                           "--label", job.model.label, "--fields", context.row_fields(job.checkpoint)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise SystemExit((done.stderr.strip().splitlines() or [f"error: measuring {job.model.label} failed"])[-1])
    return True


def report(rows, out):
    """OUT/sink-mass.md from the declared runs' checkpoints' rows: per model, mean ± std over seeds (n) of the
    first-token mass (over every head, and its largest head), Gu et al.'s sink heads (first-token mass > SINK)
    and the mass on nothing, beside what evenly spread attention gives the first token; then each layer's heads'
    first-token mass, mean over seeds, and their mass on nothing for the models that give any."""
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi_lab.result_rows import read_rows
    from fairseq_alibi_lab.results import mean_std

    path = os.path.join(out, ROWS)
    checkpoints = {r["checkpoint"] for r in rows if r.get("checkpoint")}
    measured = [r for r in (read_rows(path) if os.path.exists(path) else []) if r["checkpoint"] in checkpoints]
    if not measured:
        return None
    runs = {}  # label -> {checkpoint: {(layer, head): row}}, a checkpoint's last measurement winning
    for r in measured:
        runs.setdefault(r["label"], {}).setdefault(r["checkpoint"], {})[r["layer"], r["head"]] = r

    def shown(label, value, digits=3):
        values = [value(list(heads.values())) for _, heads in sorted(runs[label].items())]
        mean, std = mean_std(values)
        return (f"{mean:.{digits}f} ± {std:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}") + f" (n={len(values)})"

    head = ["model", "heads", "first-token mass, mean of heads", "largest head's", f"sink heads (> {SINK})",
            "mass on nothing, mean of heads"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for label, by_checkpoint in runs.items():
        heads = len(next(iter(by_checkpoint.values())))
        lines.append("| " + " | ".join([
            label, str(heads), shown(label, lambda hs: sum(h["first_token"] for h in hs) / len(hs)),
            shown(label, lambda hs: max(h["first_token"] for h in hs)),
            shown(label, lambda hs: sum(h["first_token"] > SINK for h in hs), 1),
            shown(label, lambda hs: sum(h["nothing"] for h in hs) / len(hs))]) + " |")
    sample = measured[0]
    first_query, last_query = map(int, sample["queries"].split(".."))
    even = sum(1 / (i + 1) for i in range(first_query, last_query + 1)) / (last_query - first_query + 1)
    text = (f"# Attention sinks: where attention goes at the start of a text ({sample['split']} split, blocks of "
            f"{sample['length']}, queries {sample['queries']} of each), mean ± std over seeds\n\n"
            f"A query spreading its attention evenly over the keys it sees gives the first token {even:.3f} on average "
            "over these queries.\n\n" + "\n".join(lines) + "\n")
    head_numbers = sorted({h for by_checkpoint in runs.values() for heads_of in by_checkpoint.values()
                           for _, h in heads_of})

    def per_head(field, labels):
        detail = ["| model | layer | " + " | ".join(f"head {h}" for h in head_numbers) + " |",
                  "|---" * (len(head_numbers) + 2) + "|"]
        for label in labels:
            by_checkpoint = runs[label]
            for layer in sorted({layer for heads_of in by_checkpoint.values() for layer, _ in heads_of}):
                values = [[heads_of[layer, h][field] for heads_of in by_checkpoint.values() if (layer, h) in heads_of]
                          for h in head_numbers]
                means = (f"{sum(v) / len(v):.3f}" if v else "-" for v in values)
                detail.append(f"| {label} | {layer} | " + " | ".join(means) + " |")
        return "\n".join(detail) + "\n"

    text += "\n## First-token mass per layer and head, mean over seeds\n\n" + per_head("first_token", runs)
    # where a model gives mass to nothing (a sink logit): that per head too
    giving = [label for label, by_checkpoint in runs.items()
              if any(row["nothing"] > NOTHING for heads_of in by_checkpoint.values() for row in heads_of.values())]
    if giving:
        text += "\n## Mass on nothing per layer and head, mean over seeds\n\n" + per_head("nothing", giving)
    with written_whole(os.path.join(out, "sink-mass.md")) as partial, open(partial, "w") as f:
        f.write(text)
    return text
