#!/usr/bin/env python3
"""Masked-token perplexity of a masked LM at several input lengths, with the SAME masked tokens
at every length.

    python3 scripts/eval_mlm.py CHECKPOINT DATA OUT.jsonl --lengths "64 128 256" [--split valid]
        [--mask-prob 0.15] [--seed 1] [--label NAME] [--fields JSON]

fairseq's masked_lm task draws its masks per block (from seed, epoch and block index), so the
masked set changes with the block length and scores at two lengths are not comparable. Here the
mask is drawn once over the whole split (each token masked with probability --mask-prob, from
--seed; every masked token becomes <mask>), then the split is cut into nonoverlapping blocks of
L_valid - 1 tokens, each after <s> as in training (the last block shorter), and every masked
token is scored exactly once, at every L_valid, with more or less context around it.
Appends one JSON line per L_valid (scripts/results.py makes the table and figure from them);
the perplexity is exp(mean cross entropy over the masked tokens).
"""
import argparse
import json
import math
import os
import time

from fairseq_alibi_lab import result_rows


def fail(message):
    raise SystemExit(f"error: {message}")


def evaluation_mask(stream, mask_prob, seed):
    """Which tokens of the split (one stream) are masked: drawn once, from seed; the same set for
    every model and length (scripts/unigram.py --masked-lm scores the floor on it too)."""
    import torch

    return torch.rand(stream.shape, generator=torch.Generator().manual_seed(seed)) < mask_prob


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    result_rows.add_scorer_arguments(p)
    p.add_argument("--lengths", required=True, help='L_valid values, e.g. "64 128 256"')
    p.add_argument("--mask-prob", type=float, default=0.15)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=16384, help="tokens per batch")
    args = p.parse_args()
    from fairseq_alibi.tools import files
    from fairseq_alibi.tools import provenance
    from fairseq_alibi.tools.checkpoints import checkpoint_summary as summary
    fields = result_rows.row_fields(args.fields)

    lengths = args.lengths.split()
    if not lengths or not all(x.isdigit() and int(x) >= 2 for x in lengths):
        fail(f"--lengths must be integers of at least 2 (<s> and one token), got '{args.lengths}'")
    if not 0 < args.mask_prob < 1:
        fail(f"--mask-prob must be between 0 and 1, got {args.mask_prob}")
    if not os.path.isfile(args.checkpoint):
        fail(f"no checkpoint at {args.checkpoint}")
    if not os.path.isfile(os.path.join(args.data, f"{args.split}.idx")):
        fail(f"{args.data} has no {args.split} split (a directory made by fairseq-preprocess)")
    result_rows.require_appendable(args.out)

    import torch
    import torch.nn.functional as F

    import fairseq_alibi.plugin  # noqa: F401  (registers the models)
    from fairseq.data import data_utils
    from fairseq_alibi.models.build import load_checkpoint

    model, cfg, task = load_checkpoint(args.checkpoint, args.data, kind="masked LM")
    dictionary = task.source_dictionary

    # The split as one stream of tokens (each line ends with </s>, as fairseq's blocks see it).
    split = data_utils.load_indexed_dataset(os.path.join(args.data, args.split), dictionary)
    stream = torch.cat([split[i] for i in range(len(split))])
    masked = evaluation_mask(stream, args.mask_prob, args.seed)
    inputs = stream.masked_fill(masked, dictionary.index("<mask>"))

    train_length = cfg.task.tokens_per_sample
    label = args.label or getattr(cfg.model, "encoder_alibi", None) or cfg.model._name
    longest = max(map(int, lengths))
    if longest - 1 > len(stream):
        fail(f"L_valid {longest} is longer than the {args.split} split ({len(stream)} tokens): nothing recorded")
    positions = model.max_positions()
    positions = positions[0] if isinstance(positions, tuple) else positions
    if positions is not None and longest > positions:
        fail(f"L_valid {longest} is past {args.checkpoint}'s {positions} positions (a learned-position table): "
             "nothing recorded; score it up to its table's length")
    if not masked.any():
        fail(f"--mask-prob {args.mask_prob} masks no token of the {args.split} split: nothing to score")
    recorded = {"seed": getattr(cfg.common, "seed", None), "updates": summary(args.checkpoint)[2],
                # what was scored: the checkpoint file and the split (result_rows.IDENTITY)
                "checkpoint_sha256": files.fingerprint(args.checkpoint),
                "data_sha256": files.data_fingerprint(args.data, args.split),
                "commit": provenance.commit(), "machine": provenance.machine(), **fields}
    scored = []  # written when every length is scored: a failure records nothing
    for l_valid in map(int, lengths):
        start = time.time()
        block = l_valid - 1
        total, count = 0.0, 0
        starts = list(range(0, len(stream), block))
        per_batch = max(1, args.max_tokens // l_valid)
        with torch.no_grad():
            for first in range(0, len(starts), per_batch):
                rows = [(s, min(s + block, len(stream))) for s in starts[first:first + per_batch]]
                width = max(e - s for s, e in rows) + 1
                src = torch.full((len(rows), width), dictionary.pad())
                target_mask = torch.zeros(len(rows), width, dtype=torch.bool)
                targets = []
                for r, (s, e) in enumerate(rows):
                    src[r, 0] = dictionary.bos()
                    src[r, 1:e - s + 1] = inputs[s:e]
                    target_mask[r, 1:e - s + 1] = masked[s:e]
                    targets.append(stream[s:e][masked[s:e]])
                if not target_mask.any():
                    continue
                logits = model(src, masked_tokens=target_mask)[0]
                total += F.cross_entropy(logits.float(), torch.cat(targets), reduction="sum").item()
                count += int(target_mask.sum())
        row = {"checkpoint": args.checkpoint, "label": label, "model": cfg.model._name,
               "train_length": train_length, "split": args.split, "l_valid": l_valid, "stride": 0,
               "stride_rule": "0", "masked_tokens": count, "mask_prob": args.mask_prob, "mask_seed": args.seed,
               "loss": total / count, "perplexity": math.exp(total / count), "seconds": round(time.time() - start, 2),
               **recorded}
        if not math.isfinite(row["perplexity"]):
            fail(f"perplexity {row['perplexity']} for {args.checkpoint} at L_valid {l_valid}: its weights hold "
                 "NaN or inf (a diverged run?); nothing recorded")
        scored.append(row)
    result_rows.append_lines(args.out, [json.dumps(row) for row in scored])
    for row in scored:
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
