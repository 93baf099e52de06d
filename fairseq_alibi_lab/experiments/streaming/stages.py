"""The streaming experiment's own stages: each model that can stream streamed through a sink cache by
scripts/stream_eval.py (its record, `stream`), its streams as cells of their own beside its blocks at L,
and its table."""
import os
import subprocess
import sys

SINKS = (0, 1, 4)
SPLITS = ("valid", "test")  # each streamed as one text (the experiment's split first; a split the data lacks is skipped)
ROWS = "streaming.jsonl"  # under the runner's OUT: what stream appends to (the runner merges parallel parts' by it)


def stream(context, job):
    """A Model.records entry (the models that can stream declare it: position embeddings cannot): the model's
    streaming perplexity into OUT/streaming.jsonl (the sink counts it lacks), by scripts/stream_eval.py in a
    process of its own (the runner imports no fairseq); True if it scored anything."""
    from fairseq_alibi.tools.files import data_fingerprint
    from fairseq_alibi_lab.result_rows import read_rows

    model, checkpoint = job.model, job.checkpoint
    out = os.path.join(context.out, ROWS)
    cache = job.train_length
    rows = [r for r in (read_rows(out) if os.path.exists(out) else []) if r.get("cache") == cache]
    scored = False
    for split in (context.split, *(s for s in SPLITS if s != context.split)):
        if not os.path.exists(os.path.join(context.data, f"{split}.idx")):
            continue
        # A row streamed another text under this split's name is not this one's (rows from before the
        # text's fingerprint was recorded are taken as they are).
        text = data_fingerprint(context.data, split)
        have = {r["sinks"] for r in rows if r["checkpoint"] == checkpoint and r.get("split") == split
                and r.get("data_sha256") in (None, text)}
        missing = [sinks for sinks in SINKS if sinks not in have]
        if not missing:
            continue
        print(f"    streaming the {split} split: cache {cache}, sinks {' '.join(map(str, missing))}", flush=True)
        done = subprocess.run([sys.executable, "-m", "fairseq_alibi_lab.stream_eval", checkpoint, context.data, out,
                               "--cache", str(cache), "--sinks", *map(str, missing), "--label", model.label,
                               "--split", split, "--fields", context.row_fields(checkpoint)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        if done.returncode:
            raise SystemExit((done.stderr.strip().splitlines() or [f"error: streaming {model.label} failed"])[-1])
        scored = True
    return scored


def stream_label(label, sinks):
    """A stream's name as a cell of its own, beside the model's blocks (claims.py)."""
    return f"{label}, stream, " + ("window only" if sinks == 0 else f"{sinks} sink{'s' * (sinks != 1)}")


def stream_cells(path):
    """The streams of path as claims.py's rows: (split, "0", stream_label, train L, seed, checkpoint,
    cache) -> perplexity, the last scoring of a checkpoint and sink count winning (a stream is every
    token once, as blocks are, so it sits beside them at L_valid = the cache)."""
    from fairseq_alibi_lab.result_rows import read_rows

    return {(r["split"], "0", stream_label(r["label"], r["sinks"]), r["train_length"], r.get("seed"), r["checkpoint"],
             r["cache"]): r["perplexity"] for r in read_rows(path)}


def claim_cells(paths):
    """The streaming experiment's claims' cells: its perplexity rows, and beside each results file its
    streams (stream_cells), a cell of their own at L."""
    from fairseq_alibi_lab import claims, results

    rows, read = results.load(paths), list(paths)
    for path in paths:
        streamed = os.path.join(os.path.dirname(path), ROWS)
        if not os.path.exists(streamed):
            raise SystemExit(f"error: no {ROWS} beside {path}: the streaming experiment writes it (scripts/experiment.py streaming)")
        read.append(streamed)
        rows.update(stream_cells(streamed))
    return claims.perplexity_rows(rows, read)


def cells(experiment):
    """The streams' cells an experiment scores: each model's streams at L (the cache)."""
    return {(stream_label(model.label, sinks), 1) for model in experiment.models for sinks in SINKS}


def report(rows, out, can_stream=()):
    """OUT/streaming.md: per model, perplexity at L in blocks, with a sliding window of stride L/2 and
    with the exact sliding window (stride 1: every token after the L - 1 before it, recomputed), then
    streamed through a cache of L keys with 0, 1 and 4 sinks, mean ± std over the seeds (n), and the
    stream's tokens/s; then the streams of the other splits (no blocks scored there). can_stream: the labels
    of the models declared to stream (the others have position embeddings)."""
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi_lab.result_rows import read_rows
    from fairseq_alibi_lab.results import cell, per_run

    path = os.path.join(out, ROWS)
    checkpoints = {r["checkpoint"] for r in rows if r.get("checkpoint")}
    length = min((r["l_valid"] for r in rows), default=None)
    labels = list(dict.fromkeys(r["label"] for r in rows if r.get("checkpoint")))
    if not labels:
        return None
    split = next(r.get("split", "valid") for r in rows if r.get("checkpoint"))
    streamed = [r for r in (read_rows(path) if os.path.exists(path) else [])
                if r["checkpoint"] in checkpoints and r["cache"] == length]
    # {key: [one value per checkpoint]}, the last scoring of a checkpoint counted
    scored = per_run([r for r in rows if r["l_valid"] == length], lambda r: (r["label"], r["stride_rule"]))
    scored.update(per_run(streamed, lambda r: (r.get("label"), r.get("split"), r["sinks"])))
    speed = per_run(streamed, lambda r: (r.get("label"), r.get("split"), r["sinks"]), lambda r: r["tokens_per_s"])

    def shown(values):
        return f"{cell(values, len(values))} (n={len(values)})" if values else "-"

    def stream_cells(label, on):
        if label not in can_stream:
            return ["cannot stream (position embeddings)"] * len(SINKS) + ["-"]
        tokens_per_s = speed.get((label, on, 0))
        return [shown(scored.get((label, on, sinks), [])) for sinks in SINKS] + [
            f"{sum(tokens_per_s) / len(tokens_per_s):.0f}" if tokens_per_s else "-"]

    streams_head = [*(f"stream, {s} sink{'s' * (s != 1)} + window {length - s}" for s in SINKS), "stream tokens/s (S=0)"]
    head = ["model", f"blocks of {length}", f"sliding window of {length} (stride {length // 2})",
            f"exact sliding window of {length} (stride 1)", *streams_head]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for label in labels:
        cells = [shown(scored.get((label, key), [])) for key in ("0", "L_valid/2", "1")] + stream_cells(label, split)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    text = (f"# Streaming: perplexity on the {split} split as one text, cache of {length} keys, "
            "mean ± std over seeds\n\n" + "\n".join(lines) + "\n")
    for other in sorted({r.get("split") for r in streamed} - {split}):
        lines = ["| " + " | ".join(["model", *streams_head]) + " |", "|---" * (len(streams_head) + 1) + "|"]
        lines += [f"| {label} | " + " | ".join(stream_cells(label, other)) + " |" for label in labels]
        text += f"\n## The {other} split as one text, streamed only\n\n" + "\n".join(lines) + "\n"
    with written_whole(os.path.join(out, "streaming.md")) as partial, open(partial, "w") as f:
        f.write(text)
    return text
