"""Score one long text through a sink cache (StreamingLLM): every token once, memory bounded by the
cache, not by the text.

    python scripts/stream_eval.py CHECKPOINT DATA OUT.jsonl --cache 64 --sinks 0 1 4 [--split valid]
                                  [--chunk N] [--limit TOKENS] [--label NAME] [--fields JSON]

The checkpoint's model runs as the exported class (fairseq_alibi/hf: the same weights, fp32), the
split's binarized lines as one stream (each line ends in </s>; the first token is conditioned on
</s>, as fairseq-eval-lm conditions it), fed CHUNK tokens at a time (default: the window) through
model.sink_cache(S, CACHE - S) for each S: the first S tokens and the last CACHE - S, every position
inside the cache, so no position exceeds CACHE - 1 (CACHE = the training length keeps the model in
the positions it trained on). With S = 0, a relative method and one layer this is the sliding-window
recomputation (scripts/eval.sh STRIDE 1 at L_valid = CACHE); with more layers a cached token keeps
the states it had when it came in, which the recomputation rebuilds per window. One JSON line
per S is appended to OUT: perplexity, tokens, tokens/s, the cache, the keys held at most, provenance.
"""
import argparse
import json
import math
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stream_tokens(data, split, dictionary, limit=None):
    """(inputs, targets): the split's tokens as one stream, the inputs shifted by one behind </s>."""
    import torch
    from fairseq.data import data_utils

    dataset = data_utils.load_indexed_dataset(os.path.join(data, split), dictionary)
    if dataset is None:
        raise SystemExit(f"error: no binarized {split} split in {data}: run scripts/prepare-wikitext.sh first")
    targets = torch.cat([dataset[i] for i in range(len(dataset))])
    if limit:
        targets = targets[:limit]
    return torch.cat([targets.new_tensor([dictionary.eos()]), targets[:-1]]), targets


def stream_score(model, inputs, targets, sinks, window, chunk):
    """(summed natural-log loss, the keys held at most) of targets, inputs fed chunk by chunk."""
    import torch

    cache, loss, held = model.sink_cache(sinks, window), 0.0, 0
    with torch.no_grad():
        for start in range(0, len(inputs), chunk):
            # what this chunk's queries see: the keys kept before it, and its own
            kept = cache.layers[0].keys.size(-2) if cache.layers[0].is_initialized else 0
            held = max(held, kept + min(chunk, len(inputs) - start))
            logits = model(inputs[None, start:start + chunk], cache=cache).logits[0].float()
            loss -= logits.log_softmax(-1).gather(-1, targets[start:start + chunk, None]).sum().item()
    return loss, held


def refuse_below_one(parser, args, names):
    """One line for the first of the options `names` given below 1 (these scripts' counts)."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be a positive whole number, got {value}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("data", help="the binarized data directory (its dict.txt is the checkpoint's)")
    p.add_argument("out", help="a JSON-lines file the rows are appended to")
    p.add_argument("--cache", type=int, required=True, help="key slots: sinks + window (e.g. the training length)")
    p.add_argument("--sinks", type=int, nargs="+", default=[0, 1, 4], help="sink tokens, one row each")
    p.add_argument("--chunk", type=int, help="tokens fed at once (default: the window); memory grows with it")
    p.add_argument("--split", default="valid")
    p.add_argument("--limit", type=int, help="score only the stream's first LIMIT tokens")
    p.add_argument("--label", default="", help="the row's name in tables (default: the method)")
    p.add_argument("--fields", default="{}", help="a JSON object of fields added to each row (the runner's)")
    args = p.parse_args(argv)
    refuse_below_one(p, args, ("cache", "chunk", "limit"))
    for sinks in args.sinks:
        if not 0 <= sinks < args.cache:
            p.error(f"--sinks {sinks}: each must be at least 0 and below --cache {args.cache} (the window needs a slot)")
    from fairseq_alibi.tools.files import data_fingerprint, fingerprint
    from fairseq_alibi_lab.result_rows import append_lines, require_appendable, row_fields

    require_appendable(args.out)

    import torch

    from fairseq_alibi.tools import provenance
    from fairseq_alibi.models.build import load_checkpoint
    from fairseq_alibi.tools.checkpoints import identity, read_state
    from fairseq_alibi.hf.export import hf_model_of

    fields = row_fields(args.fields)
    model, _, task = load_checkpoint(args.checkpoint, args.data, kind="causal LM")
    hf = hf_model_of(model, task.source_dictionary, {}).eval()
    problem = next((why for why in [_problem(hf, s, args.cache - s) for s in args.sinks] if why), None)
    if problem:
        raise SystemExit(f"error: {args.checkpoint}: {problem}")
    checkpoint = identity(args.checkpoint, read_state(args.checkpoint))
    inputs, targets = stream_tokens(args.data, args.split, task.source_dictionary, args.limit)
    for sinks in args.sinks:
        window = args.cache - sinks
        started = time.perf_counter()
        loss, held = stream_score(hf, inputs, targets, sinks, window, args.chunk or window)
        wall = time.perf_counter() - started
        loss_base2 = loss / len(targets) / math.log(2)
        row = {"label": args.label or None, **checkpoint, "split": args.split,
               "data_sha256": data_fingerprint(args.data, args.split), "checkpoint_sha256": fingerprint(args.checkpoint),
               "scoring": "streaming", "cache": args.cache, "sinks": sinks, "window": window,
               "chunk": args.chunk or window, "keys_held": held, "tokens": len(targets), "loss_base2": loss_base2,
               "perplexity": 2 ** loss_base2, "wall_s": round(wall, 2), "tokens_per_s": round(len(targets) / wall, 1),
               "threads": torch.get_num_threads(), "commit": provenance.commit(), "machine": provenance.machine(),
               **fields}
        append_lines(args.out, [json.dumps(row)])
        print(f"{args.label or row['model']}: sinks {sinks} + window {window}: perplexity {row['perplexity']:.2f} "
              f"on {len(targets)} tokens ({row['tokens_per_s']:.0f} tokens/s, at most {held} keys)", flush=True)


# The streaming experiment (scripts/experiment.py streaming): sink counts scored through a cache of
# the training length, for the models whose positions a cache can re-assign.
SINKS = (0, 1, 4)
SPLITS = ("valid", "test")  # each streamed as one text (the experiment's split first; a split the data lacks is skipped)
ROWS = "streaming.jsonl"  # under the runner's OUT: what score_model appends to (the runner merges parallel parts' by it)


def streams(method):
    """Whether a model of this causal method can stream (position embeddings cannot)."""
    return method not in ("sinusoidal", "learned")


def method_of(arch):
    """The causal method of a row's model: the plugin's architectures are METHOD_transformer_lm_PRESET,
    fairseq's own have position embeddings."""
    head, found, _ = arch.partition("_transformer_lm")
    return head if found else "sinusoidal"


def score_model(context, job):
    """The model's streaming perplexity into OUT/streaming.jsonl (the sink counts it lacks), in a process
    of its own (the runner imports no fairseq); True if it scored anything."""
    import subprocess

    from fairseq_alibi.tools.files import data_fingerprint
    from fairseq_alibi_lab.result_rows import read_rows

    model, checkpoint = job.model, job.checkpoint
    if not streams(model.method):
        return False
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


def report(rows, out):
    """OUT/streaming.md: per model, perplexity at L in blocks, with a sliding window of stride L/2 and
    with the exact sliding window (stride 1: every token after the L - 1 before it, recomputed), then
    streamed through a cache of L keys with 0, 1 and 4 sinks, mean ± std over the seeds (n), and the
    stream's tokens/s; then the streams of the other splits (no blocks scored there)."""
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
    can_stream = {label: streams(method_of(next(r.get("model") or "" for r in rows if r["label"] == label)))
                  for label in labels}

    def shown(values):
        return f"{cell(values, len(values))} (n={len(values)})" if values else "-"

    def stream_cells(label, on):
        if not can_stream[label]:
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


def _problem(hf, sinks, window):
    from fairseq_alibi.hf.modeling_fairseq_alibi import sink_cache_problem

    return sink_cache_problem(hf.config, hf.decoder.positions, sinks, window)


if __name__ == "__main__":
    sys.exit(main())
