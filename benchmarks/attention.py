#!/usr/bin/env python3
"""One causal attention call on CPU: ALiBi's kernels against attention with no bias at all.

    python benchmarks/attention.py --out benchmarks/attention-cpu.md

Evaluation (--lengths): batch 1, 8 heads, head dim 16 (the small architecture), fp32, random
inputs, no gradients; median of --repeats calls after one warm-up, all in this process. Paths:
  causal    SDPA with is_causal and no mask: no position bias (the fastest causal attention
            PyTorch has on CPU; the bar for "ALiBi at no cost")
  twin      SDPA with a (T, T) causal mask shared by the heads: what stock fairseq's attention
            (the sinusoidal twin's) hands PyTorch
  dense     SDPA with the dense (1, heads, T, T) ALiBi mask (--alibi-attention sdpa)
  blocked   kernels.BlockedAlibiAttention (--alibi-attention blocked; auto on CPU above 512 tokens)
Training (--train-lengths): forward and backward of one call on 4096 tokens (4096 / T sequences),
paths causal, twin, dense, blocked (with its backward) and rank-one (the bias as one extra
query/key dimension under is_causal: no mask, but inexact; measured, not used).
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
from fairseq_alibi.alibi_bias import alibi_mask, alibi_slopes  # noqa: E402
from fairseq_alibi.kernels import BLOCK  # noqa: E402
from fairseq_alibi.kernels import BlockedAlibiAttention  # noqa: E402


def paths(slopes, length, evaluation=True):
    """Each path as a call on (q, k, v) of `length` positions; masks built once, outside the timing,
    as the models cache theirs."""
    twin = torch.zeros(length, length).masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
    dense = alibi_mask(slopes, length, length)[None]
    near = alibi_mask(slopes, BLOCK, BLOCK)
    calls = {
        "causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "twin": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=twin),
        "dense": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=dense),
    }
    calls["blocked"] = lambda q, k, v: BlockedAlibiAttention.apply(q, k, v, near, slopes, BLOCK)
    if not evaluation:  # the rank-one lead, m (j - T/2) in one extra dimension, no mask
        calls["rank-one"] = lambda q, k, v: rank_one_attention(q, k, v, slopes)
    return calls


def rank_one_attention(q, k, v, slopes):
    """Causal SDPA with ALiBi as one extra query/key dimension (m / scale, j - T/2): no mask, but
    logits off by up to ulp(m T / 2) (not used by the plugin; measured for the record)."""
    batch, heads, length, dim = q.shape
    scale = dim ** -0.5
    q_extra = (slopes / scale).view(1, heads, 1, 1).expand(batch, heads, length, 1)
    k_extra = (torch.arange(length, dtype=q.dtype) - length // 2).view(1, 1, length, 1).expand(batch, heads, length, 1)
    out = F.scaled_dot_product_attention(torch.cat([q, q_extra], -1), torch.cat([k, k_extra], -1),
                                         torch.cat([v, torch.zeros_like(k_extra)], -1), is_causal=True, scale=scale)
    return out[..., :dim]


def median_seconds(call, repeats):
    call()  # warm-up
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="*", default=[512, 1024, 2048, 4096, 8192, 16384])
    p.add_argument("--train-lengths", type=int, nargs="*", default=[128, 512, 1024])
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", help="write the table with its provenance here (default: print only)")
    args = p.parse_args()
    slopes = torch.tensor(alibi_slopes(args.heads))
    lines = ["Evaluation (no gradients, batch 1):", "", "| T | path | ms | speed vs causal | max abs diff vs dense |",
             "|---|---|---|---|---|"]
    torch.manual_seed(0)
    with torch.no_grad():
        for length in args.lengths:
            q, k, v = (torch.randn(1, args.heads, length, args.head_dim) for _ in range(3))
            calls = paths(slopes, length)
            outputs = {name: attend(q, k, v) for name, attend in calls.items()}
            times = {name: median_seconds(lambda: attend(q, k, v), args.repeats) for name, attend in calls.items()}
            diffs = {name: "" if name in ("causal", "twin") else f"{(out - outputs['dense']).abs().max().item():.1e}"
                     for name, out in outputs.items()}
            del calls, outputs  # the dense mask: up to heads x T x T
            for name, seconds in times.items():
                lines.append(f"| {length} | {name} | {seconds * 1000:.1f} | {times['causal'] / seconds:.2f} | {diffs[name]} |")
            print(lines[-len(times):], flush=True)
    if args.train_lengths:
        lines += ["", "Training (forward and backward, 4096 tokens):", "", "| T | path | ms | speed vs causal | speed vs twin |",
                  "|---|---|---|---|---|"]
    for length in args.train_lengths:
        q, k, v = (torch.randn(4096 // length, args.heads, length, args.head_dim, requires_grad=True) for _ in range(3))
        times = {name: median_seconds(lambda: attend(q, k, v).sum().backward(), args.repeats)
                 for name, attend in paths(slopes, length, evaluation=False).items()}
        for name, seconds in times.items():
            lines.append(f"| {length} | {name} | {seconds * 1000:.1f} | {times['causal'] / seconds:.2f} | "
                         f"{times['twin'] / seconds:.2f} |")
        print(lines[-len(times):], flush=True)
    emit(header(f"{torch.get_num_threads()} threads; {args.heads} heads, head dim {args.head_dim}, "
                f"fp32, median of {args.repeats}.") + "\n\n" + "\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
