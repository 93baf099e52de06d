"""How far an exported model's log-probabilities move from fairseq's fp32 ones in half precision:
this package's class (the bias computed relative, -m (i - j), in fp32, then cast) against stock
BLOOM (slope x key position, cast to the model's dtype before it is added), for one ALiBi model in
BLOOM's layout, at several lengths. CPU: bf16 (and fp16 where the CPU runs it).

    python benchmarks/hf_precision.py CHECKPOINT [--data data-bin/wikitext-2] [--lengths 64 256 1024]

Writes benchmarks/hf-precision.md (and .json): per length, dtype and class, the perplexity over the
same validation tokens, and the mean and largest |log p - log p_fairseq fp32| per token.
"""
import argparse
import json
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def validation_stream(task, data):
    from fairseq.data import data_utils

    dataset = data_utils.load_indexed_dataset(os.path.join(data, "valid"), task.source_dictionary)
    return torch.cat([dataset[i] for i in range(len(dataset))])


def blocks(stream, length, tokens):
    """(source, target) rows of `length`: fairseq-eval-lm's nonoverlapping blocks, the first `tokens` of the stream."""
    count = max(1, tokens // length)
    target = stream[: count * length].view(count, length)
    previous = torch.cat([stream.new_tensor([2]), stream[: count * length - 1]]).view(count, length)
    return previous, target


def token_log_probs(call, source, target, batch=8):
    out = []
    with torch.no_grad():
        for i in range(0, source.size(0), batch):
            logits = call(source[i:i + batch]).float().log_softmax(-1)
            out.append(logits.gather(-1, target[i:i + batch, :, None])[..., 0])
    return torch.cat(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--data", default="data-bin/wikitext-2")
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--tokens", type=int, default=16384, help="validation tokens scored at each length")
    parser.add_argument("--out", default=os.path.join(HERE, "hf-precision.md"))
    args = parser.parse_args()

    from fairseq_alibi.tools import provenance
    from fairseq_alibi.models.build import load_checkpoint
    from fairseq_alibi.hf.export import bloom_layout_problem, bloom_model_of, hf_model_of

    started = time.time()
    model, _, task = load_checkpoint(args.checkpoint, args.data, kind="causal LM")
    ours = hf_model_of(model, task.source_dictionary, {})
    problem = bloom_layout_problem(ours.config)
    if problem:
        sys.exit(f"error: {args.checkpoint} is not in BLOOM's layout ({problem}): train it with the bloom_small preset")
    bloom = bloom_model_of(ours)
    stream = validation_stream(task, args.data)
    dtypes = [torch.bfloat16]
    try:  # fp16 matmuls are not on every CPU
        torch.ones(2, 2, dtype=torch.float16) @ torch.ones(2, 2, dtype=torch.float16)
        dtypes.append(torch.float16)
    except RuntimeError:
        pass
    rows = []
    for length in args.lengths:
        source, target = blocks(stream, length, args.tokens)
        reference = token_log_probs(lambda x: model(x)[0], source, target)
        rows.append({"length": length, "dtype": "fp32", "model": "fairseq", "ppl": math.exp(-reference.mean().item()),
                     "mean_abs": 0.0, "max_abs": 0.0})
        for dtype in dtypes:
            for name, hf in (("fairseq_alibi (ours)", ours), ("stock BLOOM", bloom)):
                hf.to(dtype)
                got = token_log_probs(lambda x: hf(x).logits, source, target)
                hf.float()
                delta = (got - reference).abs()
                rows.append({"length": length, "dtype": str(dtype).replace("torch.", ""), "model": name,
                             "ppl": math.exp(-got.mean().item()), "mean_abs": delta.mean().item(),
                             "max_abs": delta.max().item()})
                print(rows[-1], flush=True)
    record = {"command": "python benchmarks/hf_precision.py " + " ".join(sys.argv[1:]), "commit": provenance.commit(),
              "machine": provenance.machine(), "wall_s": round(time.time() - started, 1),
              "checkpoint": os.path.basename(args.checkpoint), "tokens_per_length": args.tokens, "rows": rows}
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(record, f, indent=1)
    lines = ["| L_valid | dtype | class | perplexity | mean abs. Δ log p | max abs. Δ log p |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['length']} | {r['dtype']} | {r['model']} | {r['ppl']:.2f} | {r['mean_abs']:.4f} | {r['max_abs']:.3f} |"
              for r in rows]
    with open(args.out, "w") as f:
        f.write("# Exported ALiBi in half precision: this package's class against stock BLOOM\n\n"
                f"`{record['command']}` (commit {record['commit']}, {record['machine']}, {record['wall_s']} s). "
                f"One model ({record['checkpoint']}, the bloom_small preset), the first {args.tokens} validation "
                "tokens in nonoverlapping blocks of L_valid; Δ against fairseq's fp32 log-probabilities.\n\n"
                + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
