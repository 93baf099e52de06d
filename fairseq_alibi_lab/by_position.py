"""Perplexity by position in the window: every token of a split predicted once at each position.

    python scripts/by_position.py CHECKPOINT DATA --length L [--split valid] [--limit TOKENS]
                                  [--batch N] [--offsets N] [--out OUT.jsonl] [--label NAME] [--fields JSON]

Blocks of L tokens start at each of the L offsets 0..L-1, so each token is predicted at every
position p, from the p tokens before it in its block; the tokens averaged are the same at every
position (those with L - 1 tokens before them and L after, in the split read as one stream as
stream_eval.py reads it). Position L-1 is what fairseq-eval-lm's exact sliding window (stride 1)
scores, the mean over positions L/2..L-1 what stride L/2 scores, the mean over all positions what
nonoverlapping blocks score: the three scorings of the results tables, taken apart by position. It
costs L passes over the split in blocks; --offsets N, N passes (a position then averages the tokens
that fell there, not the same ones at every position: for windows of thousands of tokens). Prints the perplexity at each position; with --out, one
JSON row (per-position perplexities, tokens, the command, provenance) is appended to OUT.
"""
import argparse
import json
import math
import shlex
import sys
import time

from fairseq_alibi_lab.result_rows import add_row_arguments, append_lines, require_appendable, row_fields


def loss_by_position(model, inputs, targets, length, batch=16, offsets=None):
    """(mean natural-log loss at each position 0..length-1, the tokens averaged at each): model
    (fairseq's causal LM, eval mode) predicts targets[t] from inputs[..t] (inputs are targets shifted
    by one); the tokens t with length - 1 <= t <= len - length. Blocks start at every offset (each
    token once per position), or at `offsets` offsets k x length // offsets (each token at that many
    positions, a position averaging the tokens that fell there: a window of thousands, cheaply)."""
    import torch

    n = len(targets)
    first, last = length - 1, n - length
    if last < first:
        raise ValueError(f"{n} tokens are too few for positions 0..{length - 1}: at least {2 * length - 1} are needed")
    total, count = torch.zeros(length, dtype=torch.float64), torch.zeros(length, dtype=torch.float64)
    with torch.no_grad():
        for offset in sorted({k * length // (offsets or length) for k in range(offsets or length)}):
            blocks = (n - offset) // length
            x = inputs[offset:offset + blocks * length].view(blocks, length)
            y = targets[offset:offset + blocks * length].view(blocks, length)
            t = offset + torch.arange(blocks * length).view(blocks, length)  # each target's index
            kept = (t >= first) & (t <= last)
            for b in range(0, blocks, batch):
                out = model(x[b:b + batch])
                logp = model.get_normalized_probs(out, log_probs=True).float()
                nll = -logp.gather(-1, y[b:b + batch, :, None]).squeeze(-1)
                total += (nll * kept[b:b + batch]).sum(0).double()
            count += kept.sum(0).double()
    return total / count, int(count.min())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("data", help="the binarized data directory (its dict.txt is the checkpoint's)")
    p.add_argument("--length", type=int, required=True, help="the window L (e.g. the training length)")
    p.add_argument("--split", default="valid")
    p.add_argument("--limit", type=int, help="only the split's first LIMIT tokens")
    p.add_argument("--batch", type=int, default=16, help="blocks per forward; memory grows with it")
    p.add_argument("--offsets", type=int, help="blocks start at this many offsets (default: all L of them)")
    p.add_argument("--out", help="a JSON-lines file the row is appended to")
    add_row_arguments(p)
    args = p.parse_args(argv)

    from fairseq_alibi_lab.stream_eval import refuse_below_one, stream_tokens

    refuse_below_one(p, args, ("length", "limit", "batch", "offsets"))
    if args.offsets is not None and args.offsets > args.length:
        p.error(f"--offsets {args.offsets}: at most --length ({args.length})")
    if args.limit is not None and args.limit < 2 * args.length - 1:
        p.error(f"--limit {args.limit}: at least 2 x --length - 1 = {2 * args.length - 1} tokens are needed")

    from fairseq_alibi.tools import provenance
    from fairseq_alibi.models.build import load_checkpoint
    from fairseq_alibi.tools.checkpoints import identity, learned_positions_end, read_state

    fields = row_fields(args.fields)
    if args.out:
        require_appendable(args.out)
    model, _, task = load_checkpoint(args.checkpoint, args.data, kind="causal LM")
    end = learned_positions_end(read_state(args.checkpoint))  # a learned position table has no row past its end
    if end and args.length > end:
        p.error(f"--length {args.length}: {args.checkpoint} learned {end} positions; give --length {end} or less")
    inputs, targets = stream_tokens(args.data, args.split, task.source_dictionary, args.limit)
    started = time.perf_counter()
    try:
        loss, tokens = loss_by_position(model, inputs, targets, args.length, args.batch, args.offsets)
    except ValueError as e:  # the split itself is shorter than --limit asked for
        raise SystemExit(f"error: the {args.split} split: {e}")
    wall = time.perf_counter() - started
    by_position = [math.exp(v) for v in loss.tolist()]
    half = args.length // 2
    summary = {"blocks": math.exp(loss.mean().item()), "stride_half": math.exp(loss[half:].mean().item()),
               "stride_1": by_position[-1]}
    print(f"{args.checkpoint}: {args.split}, {'at least ' if args.offsets else ''}{tokens} tokens at each of {args.length} positions; perplexity in "
          f"blocks {summary['blocks']:.2f}, positions {half}-{args.length - 1} {summary['stride_half']:.2f}, "
          f"position {args.length - 1} {summary['stride_1']:.2f}")
    for start in range(0, args.length, 16):
        print(f"  positions {start:>4}-{min(start + 15, args.length - 1):<4} "
              + " ".join(f"{v:.1f}" for v in by_position[start:start + 16]))
    if args.out:
        from fairseq_alibi.tools.files import data_fingerprint, fingerprint

        checkpoint = identity(args.checkpoint, read_state(args.checkpoint))
        row = {"label": args.label or checkpoint["model"], **checkpoint, "checkpoint_sha256": fingerprint(args.checkpoint),
               "data_sha256": data_fingerprint(args.data, args.split), "split": args.split, "length": args.length,
               "tokens": tokens, "offsets": args.offsets or args.length, **{f"perplexity_{k}": v for k, v in summary.items()},
               "perplexity_by_position": by_position, "wall_s": round(wall, 2),
               "command": "python scripts/by_position.py " + shlex.join(sys.argv[1:] if argv is None else argv),
               "commit": provenance.commit(), "machine": provenance.machine(), **fields}
        append_lines(args.out, [json.dumps(row)])


if __name__ == "__main__":
    main()
