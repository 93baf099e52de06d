#!/usr/bin/env python3
"""The floor every language model must beat: a unigram model (add-one smoothing over the
dictionary, counts from the training split), scored on a split as scripts/eval.sh scores a model.

    python3 scripts/unigram.py DATA OUT.jsonl --lengths "64 128" --strides "0 /2" [--split valid]

Its perplexity does not depend on the length or stride; one row per (L_valid, stride) is appended
so that every table of scripts/results.py gets the floor row (label "Unigram (add-one)"), and only
where OUT does not hold that row yet: run again, it adds nothing.
With --masked-lm it is scored on the masked tokens of scripts/eval_mlm.py's fixed evaluation mask
(--mask-prob, --seed as there), a masked LM's floor, and its rows say so (masked_tokens).
"""
import argparse
import json
import math
import os

import numpy as np

from fairseq_alibi.tools import provenance
from fairseq_alibi_lab import result_rows  # results rows: read, keyed, appended; no fairseq

LABEL = "Unigram (add-one)"


def load_split(data, split, dictionary=None):
    """fairseq's dataset of DATA's split (imported here: fairseq takes seconds to start, which a
    run that finds its rows already there does not wait for), or a one-line refusal."""
    from fairseq.data import Dictionary, data_utils

    dataset = data_utils.load_indexed_dataset(os.path.join(data, split),
                                              dictionary or Dictionary.load(os.path.join(data, "dict.txt")))
    if dataset is None:
        raise SystemExit(f"error: {data} has no {split} split")
    return dataset


def counts(dictionary, data, split, masked=None):
    """Token counts of the split; masked=(mask_prob, seed): of the tokens that scripts/eval_mlm.py's
    evaluation mask selects only."""
    import torch

    dataset = load_split(data, split, dictionary)
    stream = torch.cat([dataset[i] for i in range(len(dataset))])
    if masked:
        from fairseq_alibi_lab.eval_mlm import evaluation_mask as mask
        stream = stream[mask(stream, *masked)]
    return np.bincount(stream.numpy(), minlength=len(dictionary))


def perplexity(data, split, masked=None):
    """(perplexity, tokens scored) of the add-one unigram model trained on DATA's train split;
    masked=(mask_prob, seed): on eval_mlm.py's masked tokens, over the masked LM's dictionary."""
    from fairseq.data import Dictionary

    dictionary = Dictionary.load(os.path.join(data, "dict.txt"))
    train = counts(dictionary, data, "train")
    if masked:
        dictionary.add_symbol("<mask>")  # what fairseq's masked_lm task adds: the model predicts over it too
        train = np.append(train, 0)
    scored = counts(dictionary, data, split, masked)
    log_p = np.log((train + 1) / (train.sum() + len(dictionary)))
    nll = -(scored * log_p).sum() / scored.sum()
    return math.exp(nll), int(scored.sum())


def check(args):
    """Every argument, before anything is read or written: one line naming the fix."""
    if not os.path.isfile(os.path.join(args.data, "dict.txt")):
        raise SystemExit(f"error: {args.data} has no dict.txt: DATA is a binarized data directory "
                         "(scripts/prepare-wikitext.sh)")
    if not args.lengths.split() or not all(x.isdigit() and int(x) > 0 for x in args.lengths.split()):
        raise SystemExit(f"error: --lengths must be positive integers, e.g. \"64 128\", got '{args.lengths}'")
    for rule in args.strides.split():
        if result_rows.stride_problem(rule):
            raise SystemExit(f"error: --strides: {result_rows.stride_problem(rule)}")
    args.fields = result_rows.row_fields(args.fields)  # a dict from here on
    if args.masked_lm and not 0 < args.mask_prob < 1:
        raise SystemExit(f"error: --mask-prob must be between 0 and 1, got {args.mask_prob}")
    result_rows.require_appendable(args.out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("out")
    p.add_argument("--lengths", required=True, help='L_valid values, e.g. "64 128"')
    p.add_argument("--strides", default="0", help='stride rules as scripts/eval.sh takes them: 0, S or /K')
    p.add_argument("--split", default="valid")
    p.add_argument("--fields", default="{}", help="a JSON object of fields added to each row")
    p.add_argument("--masked-lm", action="store_true", help="score eval_mlm.py's masked tokens (a masked LM's floor)")
    p.add_argument("--mask-prob", type=float, default=0.15, help="with --masked-lm: as eval_mlm.py's")
    p.add_argument("--seed", type=int, default=1, help="with --masked-lm: the mask's seed, as eval_mlm.py's")
    args = p.parse_args()
    check(args)
    have = {result_rows.row_key(r) for r in result_rows.read_rows(args.out) if r.get("model") == "unigram"}
    wanted = []  # (L_valid, stride, its rule) of the rows OUT lacks; no stride > L_valid (nor in eval.sh)
    for l_valid in map(int, args.lengths.split()):
        for rule in args.strides.split():
            stride, stride_rule = result_rows.stride(rule, l_valid)
            if stride <= l_valid and result_rows.measurement(LABEL, None, None, l_valid, stride_rule, "none", args.split) not in have:
                wanted.append((l_valid, stride, stride_rule))
    if not wanted:
        print(f"{LABEL}: {args.out} already holds these rows")
        return
    split = load_split(args.data, args.split)  # kept while its sizes are read: they are a view of its memory map
    split_tokens, longest = int(split.sizes.sum()), max(l_valid for l_valid, _, _ in wanted)
    if longest > split_tokens:  # as eval.sh: no row for a length nothing was scored at
        raise SystemExit(f"error: L_valid {longest} is longer than the {args.split} split ({split_tokens} tokens): "
                         f"nothing recorded; use lengths up to {split_tokens}")
    masked = (args.mask_prob, args.seed) if args.masked_lm else None
    ppl, tokens = perplexity(args.data, args.split, masked)
    mask_fields = {"masked_tokens": tokens, "mask_prob": args.mask_prob, "mask_seed": args.seed} if masked else {}
    rows = [json.dumps({
        "checkpoint": None, "label": LABEL, "model": "unigram", "train_length": None, "updates": None,
        "split": args.split, "l_valid": l_valid, "stride": stride, "stride_rule": stride_rule, "scaling": "none",
        "scaling_factor": None, "loss_base2": math.log2(ppl), "perplexity": ppl, "tokens": tokens,
        "seed": None, "commit": provenance.commit(), "machine": provenance.machine(), **mask_fields,
        **args.fields}) for l_valid, stride, stride_rule in wanted]
    result_rows.append_lines(args.out, rows)
    print(f"{LABEL}: perplexity {ppl:.2f} on {tokens} {'masked ' if masked else ''}{args.split} tokens")


if __name__ == "__main__":
    main()
