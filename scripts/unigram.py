#!/usr/bin/env python3
"""The floor every language model must beat: a unigram model (add-one smoothing over the
dictionary, counts from the training split), scored on a split as scripts/eval.sh scores a model.

    python3 scripts/unigram.py DATA OUT.jsonl --lengths "64 128" --strides "0 /2" [--split valid]

Its perplexity does not depend on the length or stride; one row per (L_valid, stride) is appended
so that every table of scripts/results.py gets the floor row (label "Unigram (add-one)").
"""
import argparse
import json
import math
import os
import runpy

import numpy as np
from fairseq.data import Dictionary, data_utils

LABEL = "Unigram (add-one)"


def counts(dictionary, data, split):
    dataset = data_utils.load_indexed_dataset(os.path.join(data, split), dictionary)
    if dataset is None:
        raise SystemExit(f"error: {data} has no {split} split")
    tokens = np.concatenate([dataset[i].numpy() for i in range(len(dataset))])
    return np.bincount(tokens, minlength=len(dictionary))


def perplexity(data, split):
    """(perplexity, tokens scored) of the add-one unigram model trained on DATA's train split."""
    dictionary = Dictionary.load(os.path.join(data, "dict.txt"))
    train, scored = counts(dictionary, data, "train"), counts(dictionary, data, split)
    log_p = np.log((train + 1) / (train.sum() + len(dictionary)))
    nll = -(scored * log_p).sum() / scored.sum()
    return math.exp(nll), int(scored.sum())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("out")
    p.add_argument("--lengths", required=True, help='L_valid values, e.g. "64 128"')
    p.add_argument("--strides", default="0", help='stride rules as scripts/eval.sh takes them: 0, S or /K')
    p.add_argument("--split", default="valid")
    p.add_argument("--fields", default="{}", help="a JSON object of fields added to each row")
    args = p.parse_args()
    ppl, tokens = perplexity(args.data, args.split)
    provenance = runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "fairseq_alibi", "provenance.py"))
    with open(args.out, "a") as f:
        for l_valid in map(int, args.lengths.split()):
            for rule in args.strides.split():
                stride = l_valid // int(rule[1:]) if rule.startswith("/") else int(rule)
                row = {"checkpoint": None, "label": LABEL, "model": "unigram", "train_length": None,
                       "updates": None, "split": args.split, "l_valid": l_valid, "stride": stride,
                       "stride_rule": f"L_valid{rule}" if rule.startswith("/") else rule, "scaling": "none",
                       "scaling_factor": None, "loss_base2": math.log2(ppl), "perplexity": ppl, "tokens": tokens,
                       "seed": None, "commit": provenance["commit"](), "machine": provenance["machine"](),
                       **json.loads(args.fields)}
                f.write(json.dumps(row) + "\n")
    print(f"{LABEL}: perplexity {ppl:.2f} on {tokens} {args.split} tokens")


if __name__ == "__main__":
    main()
