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

from fairseq_alibi_lab.result_rows import add_scorer_arguments, append_lines, require_appendable, row_fields

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
    add_scorer_arguments(p)
    p.add_argument("--cache", type=int, required=True, help="key slots: sinks + window (e.g. the training length)")
    p.add_argument("--sinks", type=int, nargs="+", default=[0, 1, 4], help="sink tokens, one row each")
    p.add_argument("--chunk", type=int, help="tokens fed at once (default: the window); memory grows with it")
    p.add_argument("--limit", type=int, help="score only the stream's first LIMIT tokens")
    args = p.parse_args(argv)
    refuse_below_one(p, args, ("cache", "chunk", "limit"))
    for sinks in args.sinks:
        if not 0 <= sinks < args.cache:
            p.error(f"--sinks {sinks}: each must be at least 0 and below --cache {args.cache} (the window needs a slot)")
    from fairseq_alibi.tools.files import data_fingerprint, fingerprint

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
def _problem(hf, sinks, window):
    from fairseq_alibi.hf.modeling_fairseq_alibi import sink_cache_problem

    return sink_cache_problem(hf.config, hf.decoder.positions, sinks, window)


if __name__ == "__main__":
    sys.exit(main())
