"""Where a model's attention goes at the start of a text: each head's mass on the first token (StreamingLLM's
attention sink; Gu et al. 2025's sink metric) and on nothing (a sink logit's share: a softmax row, and
stick-breaking's, whose remainder is the query's own key, sum to 1), over the queries of the second half of
each block of L.

    python -m fairseq_alibi_lab.experiments.attention_sinks.measure CHECKPOINT DATA OUT.jsonl
        [--length L] [--split valid] [--blocks N] [--label NAME] [--fields JSON]

The split's tokens as one stream (scripts/stream_eval.py's), cut into nonoverlapping blocks of L (default:
the training length); each block run through the model with every layer's attention weights recorded on
the dense path (fairseq_alibi.models.attention.recording_weights). A query at position i of its block
(i >= L/2, far from the start) gives its first key w_i0 and nothing 1 - sum_j w_ij; one row per layer and
head is appended to OUT: both masses averaged over those queries of every block, and provenance.
"""
import argparse
import json
import sys
import time

from fairseq_alibi_lab.result_rows import add_scorer_arguments, append_lines, require_appendable, row_fields

BATCH = 64  # blocks at once (64 x heads x L x L fp32 weights a layer: 8 MiB at L = 64, 8 heads)


def masses(model, blocks, batch=BATCH):
    """(first token, nothing): per layer, each head's mean mass (heads,) over the queries of each block's
    second half; blocks (N, L) token indices."""
    import torch

    from fairseq_alibi.models.attention import recording_weights

    length = blocks.size(1)
    first, nothing, count = None, None, 0
    with torch.no_grad():
        for start in range(0, len(blocks), batch):
            with recording_weights(model.decoder) as recorded:
                model(blocks[start:start + batch])
            weights = torch.stack([layer[0][..., length // 2:, :] for layer in recorded])  # (layers, B, heads, q, S)
            block_first = weights[..., 0].sum(dim=(1, 3)).double()
            block_nothing = (1 - weights.sum(-1)).sum(dim=(1, 3)).double()
            first = block_first if first is None else first + block_first
            nothing = block_nothing if nothing is None else nothing + block_nothing
            count += weights.size(1) * weights.size(3)
    return first / count, nothing / count


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_scorer_arguments(p)
    p.add_argument("--length", type=int, help="tokens a block (default: the checkpoint's training length)")
    p.add_argument("--blocks", type=int, help="measure the first BLOCKS blocks only (default: the whole split)")
    args = p.parse_args(argv)
    for name, least in (("length", 2), ("blocks", 1)):
        value = getattr(args, name)
        if value is not None and value < least:
            p.error(f"--{name} must be at least {least}, got {value}")
    require_appendable(args.out)
    fields = row_fields(args.fields)

    import torch

    from fairseq_alibi.models.build import load_checkpoint
    from fairseq_alibi.tools import provenance
    from fairseq_alibi.tools.checkpoints import identity, read_state
    from fairseq_alibi.tools.files import data_fingerprint, fingerprint
    from fairseq_alibi_lab.stream_eval import stream_tokens

    model, _, task = load_checkpoint(args.checkpoint, args.data, kind="causal LM")
    checkpoint = identity(args.checkpoint, read_state(args.checkpoint))
    length = args.length or checkpoint["train_length"]
    inputs, _ = stream_tokens(args.data, args.split, task.source_dictionary)
    blocks = inputs[:len(inputs) // length * length].view(-1, length)[:args.blocks]
    if not len(blocks):
        raise SystemExit(f"error: the {args.split} split has fewer than {length} tokens: give a shorter --length")
    started = time.perf_counter()
    first, nothing = masses(model, blocks)
    wall = time.perf_counter() - started
    common = {"label": args.label or None, **checkpoint, "split": args.split,
              "data_sha256": data_fingerprint(args.data, args.split), "checkpoint_sha256": fingerprint(args.checkpoint),
              "scoring": "sink mass", "length": length, "blocks": len(blocks), "queries": f"{length // 2}..{length - 1}",
              "wall_s": round(wall, 2), "threads": torch.get_num_threads(), "commit": provenance.commit(),
              "machine": provenance.machine(), **fields}
    rows = [dict(common, layer=layer, head=head, first_token=round(float(first[layer, head]), 6),
                 nothing=round(float(nothing[layer, head]), 6))
            for layer in range(first.size(0)) for head in range(first.size(1))]
    append_lines(args.out, [json.dumps(row) for row in rows])
    print(f"{args.label or checkpoint['model']}: {len(blocks)} blocks of {length}: first-token mass "
          f"{float(first.mean()):.3f} (heads' largest {float(first.max()):.3f}), nothing {float(nothing.mean()):.3f}",
          flush=True)


if __name__ == "__main__":
    sys.exit(main())
