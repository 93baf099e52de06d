#!/usr/bin/env python3
"""Exact-match accuracy of an encoder-decoder on make_tasks.py's test buckets, per task, decoded
greedily by fairseq's own generator (task.inference_step, as fairseq-generate; no text parsed).

    python3 examples/synthetic/exact_match.py CHECKPOINT DATA_BIN BUCKETS_TXT OUT.jsonl --label NAME

DATA_BIN: fairseq-preprocess's output with --testpref test1,test2,... (fairseq names those
splits test, test1, ...); BUCKETS_TXT: make_tasks.py's buckets.txt. Appends one JSON line per
(task, bucket): label, bucket, n range, examples, exact matches, accuracy, the checkpoint's seed
and updates, the commit and the machine (and --fields). A bucket's lines are appended together
once it is decoded; a bucket OUT already holds for this label and checkpoint (at its updates) is
not decoded again, so an interrupted scoring continues where it stopped.
"""
import argparse
import glob
import json
import os

from fairseq_alibi_lab.result_rows import add_row_arguments, append_lines, read_rows, require_appendable, row_fields


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("data")
    p.add_argument("buckets")
    p.add_argument("out")
    add_row_arguments(p, label_required=True)
    p.add_argument("--max-tokens", type=int, default=8000)
    args = p.parse_args()
    for path in (args.checkpoint, args.buckets):
        if not os.path.isfile(path):
            raise SystemExit(f"error: no file {path}")

    require_appendable(args.out)
    fields = row_fields(args.fields)

    import logging
    import warnings

    import torch

    logging.disable(logging.INFO)  # fairseq logs every split it loads
    # fairseq's batch iterator asks for pinned memory, which torch warns a CPU cannot give: noise here.
    warnings.filterwarnings("ignore", message=".*pin_memory.*")

    import fairseq_alibi.plugin  # noqa: F401  (registers the models)
    from fairseq_alibi.tools import provenance
    from fairseq_alibi.models.build import load_checkpoint
    from fairseq_alibi.tools.checkpoints import checkpoint_summary

    model, cfg, task = load_checkpoint(args.checkpoint, args.data, kind="encoder-decoder")
    with open(args.buckets) as f:
        buckets = [line.split() for line in f if line.strip()]
    updates = checkpoint_summary(args.checkpoint)[2]
    done = scored_buckets(read_rows(args.out), args.label, args.checkpoint, updates)
    cfg.generation.beam = 1
    cfg.generation.max_len_a, cfg.generation.max_len_b = 1.2, 10  # answers are at most n + 1 digits
    generator = task.build_generator([model], cfg.generation)
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    from fairseq_alibi.tools.files import fingerprint

    recorded = {"checkpoint_sha256": fingerprint(args.checkpoint), "commit": provenance.commit(),
                "machine": provenance.machine()}
    for b, (name, low, high) in enumerate(buckets):
        if name in done:
            continue
        split = "test" if b == 0 else f"test{b}"  # fairseq-preprocess's names for --testpref a,b,...
        task.load_dataset(split)
        scored = sorted(glob.glob(os.path.join(args.data, f"{split}.*-*.*"))) + sorted(glob.glob(os.path.join(args.data, "dict.*.txt")))
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
        lines = [json.dumps({"checkpoint": args.checkpoint, "label": args.label, "bucket": name, "n_low": int(low),
                             "n_high": int(high), "task": kind, "examples": total[kind], "exact": right[kind],
                             "accuracy": right[kind] / total[kind], "seed": cfg.common.seed, "updates": updates,
                             "data_sha256": fingerprint(*scored), **recorded, **fields})
                 for kind in sorted(total)]
        append_lines(args.out, lines)  # the bucket whole: a stopped scoring leaves no half bucket
        print("\n".join(lines), flush=True)


def scored_buckets(rows, label, checkpoint, updates):
    """The buckets the rows already hold for this label and checkpoint at `updates` updates (rows from
    before updates were recorded count as the checkpoint's present state)."""
    return {r["bucket"] for r in rows if r.get("label") == label and r.get("checkpoint") == checkpoint
            and r.get("updates", updates) == updates}


if __name__ == "__main__":
    main()
