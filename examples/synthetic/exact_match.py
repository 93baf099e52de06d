#!/usr/bin/env python3
"""Exact-match accuracy of an encoder-decoder on make_tasks.py's test buckets, per task, decoded
greedily by fairseq's own generator (task.inference_step, as fairseq-generate; no text parsed).

    python3 examples/synthetic/exact_match.py CHECKPOINT DATA_BIN BUCKETS_TXT OUT.jsonl --label NAME

DATA_BIN: fairseq-preprocess's output with --testpref test1,test2,... (fairseq names those
splits test, test1, ...); BUCKETS_TXT: make_tasks.py's buckets.txt. Appends one JSON line per
(task, bucket): label, bucket, n range, examples, exact matches, accuracy.
"""
import argparse
import json
import os
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("data")
    p.add_argument("buckets")
    p.add_argument("out")
    p.add_argument("--label", required=True)
    p.add_argument("--max-tokens", type=int, default=8000)
    args = p.parse_args()
    for path in (args.checkpoint, args.buckets):
        if not os.path.isfile(path):
            raise SystemExit(f"error: no file {path}")
    if not args.out.endswith(".jsonl"):
        raise SystemExit(f"error: OUT ({args.out}) must be a .jsonl file, where results are appended")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from fairseq_alibi.files import append_lines, require_appendable

    require_appendable(args.out)

    import logging
    import warnings

    import torch

    logging.disable(logging.INFO)  # fairseq logs every split it loads
    # fairseq's batch iterator asks for pinned memory, which torch warns a CPU cannot give: noise here.
    warnings.filterwarnings("ignore", message=".*pin_memory.*")

    import fairseq_alibi  # noqa: F401  (registers the models)
    from fairseq_alibi import provenance
    from fairseq_alibi.build import load_checkpoint

    model, cfg, task = load_checkpoint(args.checkpoint, args.data, kind="encoder-decoder")
    cfg.generation.beam = 1
    cfg.generation.max_len_a, cfg.generation.max_len_b = 1.2, 10  # answers are at most n + 1 digits
    generator = task.build_generator([model], cfg.generation)
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    recorded = {"commit": provenance.commit(), "machine": provenance.machine()}
    with open(args.buckets) as f:
        buckets = [line.split() for line in f if line.strip()]
    for b, (name, low, high) in enumerate(buckets):
        split = "test" if b == 0 else f"test{b}"  # fairseq-preprocess's names for --testpref a,b,...
        task.load_dataset(split)
        batches = task.get_batch_iterator(dataset=task.dataset(split), max_tokens=args.max_tokens,
                                          max_positions=None, ignore_invalid_inputs=False).next_epoch_itr(shuffle=False)
        right, total = {}, {}
        with torch.no_grad():
            for sample in batches:
                hypos = task.inference_step(generator, [model], sample)
                for i in range(len(hypos)):
                    source = sample["net_input"]["src_tokens"][i]
                    source = source[source.ne(src_dict.pad())]
                    kind = src_dict[source[0]]
                    target = sample["target"][i]
                    target = target[target.ne(tgt_dict.pad())]
                    hypothesis = hypos[i][0]["tokens"]
                    total[kind] = total.get(kind, 0) + 1
                    right[kind] = right.get(kind, 0) + int(torch.equal(hypothesis, target))
        for kind in sorted(total):
            row = {"checkpoint": args.checkpoint, "label": args.label, "bucket": name, "n_low": int(low),
                   "n_high": int(high), "task": kind, "examples": total[kind], "exact": right[kind],
                   "accuracy": right[kind] / total[kind], "seed": cfg.common.seed, "commit": recorded["commit"],
                   "machine": recorded["machine"]}
            append_lines(args.out, [json.dumps(row)])
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
