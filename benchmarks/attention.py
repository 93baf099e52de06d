#!/usr/bin/env python3
"""One causal attention call on CPU: ALiBi's kernels against attention with no bias at all.

    python benchmarks/attention.py --out benchmarks/attention-cpu.md

Batch 1, 8 heads, head dim 16 (the small architecture), fp32, random inputs, no gradients;
median of --repeats calls after one warm-up, all in this process. Paths:
  causal    SDPA with is_causal and no mask: no position bias (the fastest causal attention
            PyTorch has on CPU; the bar for "ALiBi at no cost")
  dense     SDPA with the dense (1, heads, T, T) ALiBi mask (--alibi-attention sdpa)
  blocked   kernels.blocked_attention (--alibi-attention auto, evaluation on CPU)
Speed ratios are against `causal`; the last column checks that blocked computes what dense does.
The dense mask alone is heads x T x T fp32 (2 GiB at T = 8192); blocked's bias is heads x 256 x 256.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from provenance import emit, header  # noqa: E402
from fairseq_alibi.alibi import alibi_mask, alibi_slopes  # noqa: E402
from fairseq_alibi.decoder import BLOCK  # noqa: E402
from fairseq_alibi.kernels import blocked_attention  # noqa: E402


def paths(slopes):
    near = alibi_mask(slopes, BLOCK, BLOCK)
    return {
        "causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "dense": lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=alibi_mask(slopes, q.size(2), k.size(2))[None]),
        "blocked": lambda q, k, v: blocked_attention(q, k, v, near, 0, far_slopes=slopes, block=BLOCK),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", help="write the table with its provenance here (default: print only)")
    args = p.parse_args()
    slopes = torch.tensor(alibi_slopes(args.heads))
    lines = ["| T | path | ms | speed vs causal | max abs diff vs dense |", "|---|---|---|---|---|"]
    torch.manual_seed(0)
    with torch.no_grad():
        for length in args.lengths:
            q, k, v = (torch.randn(1, args.heads, length, args.head_dim) for _ in range(3))
            times, outputs = {}, {}
            for name, attend in paths(slopes).items():
                outputs[name] = attend(q, k, v)  # warm-up
                samples = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    attend(q, k, v)
                    samples.append(time.perf_counter() - start)
                times[name] = statistics.median(samples)
            for name, seconds in times.items():
                diff = "" if name == "causal" else f"{(outputs[name] - outputs['dense']).abs().max().item():.1e}"
                lines.append(f"| {length} | {name} | {seconds * 1000:.1f} | {times['causal'] / seconds:.2f} | {diff} |")
            print(lines[-3:], flush=True)
    emit(header(f"{torch.get_num_threads()} threads; batch 1, {args.heads} heads, head dim {args.head_dim}, "
                f"fp32, median of {args.repeats}.") + "\n\n" + "\n".join(lines) + "\n", args.out)

if __name__ == "__main__":
    main()
