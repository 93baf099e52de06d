#!/usr/bin/env python3
"""Why PyTorch's fused CPU attention backward slows when a bias spreads the logits: a minimal
reproduction against PyTorch's own kernel, no model and no code of ours.

    python benchmarks/denormals.py --out benchmarks/denormals-cpu.md

SDPA with is_causal (the fused CPU kernel) on random q, k, v, one key column set to a linear ramp
of the given spread of logits (what ALiBi's -m (i - j) or FoX's -c_j does as a key column: the
separable kernel's). Each configuration runs in a fresh process, so that flushing denormals to zero
(torch.set_flush_denormal) is set before the first parallel operation, whose intra-op threads
inherit it; the median of --repeats backward passes. A weight exp(s - max) of a logit 87-103 below
its row's maximum is an fp32 denormal; x86 computes with denormals slowly, and flushed it does not.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def measure(spread, flush, threads, shape, repeats):
    import torch
    import torch.nn.functional as F

    torch.set_flush_denormal(flush)  # before any parallel region: the pool's threads inherit it
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    batch, heads, length, dim = shape
    q, k, v = (torch.randn(batch, heads, length, dim) for _ in range(3))
    entry = 8.0  # the query's constant in the column: the logit is scale x entry x the key's value
    k[..., -1] = torch.linspace(-spread / 2, spread / 2, length) / (dim ** -0.5 * entry)
    q[..., -1] = entry
    for x in (q, k, v):
        x.requires_grad_()
    times = []
    for _ in range(repeats + 1):  # one warm-up
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        grad = torch.randn_like(out)
        start = time.perf_counter()
        out.backward(grad)
        times.append(time.perf_counter() - start)
    return sorted(times[1:])[repeats // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spreads", type=float, nargs="+", default=[0, 100, 400, 800], help="the column's range of logits")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--shape", type=int, nargs=4, default=[8, 8, 512, 24], metavar=("BATCH", "HEADS", "T", "DIM"))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--job", help=argparse.SUPPRESS)
    p.add_argument("--out", help="write the table with its provenance here (default: print only)")
    args = p.parse_args()
    if args.job:
        job = json.loads(args.job)
        print(measure(job["spread"], job["flush"], job["threads"], args.shape, args.repeats))
        return
    from provenance import emit, header

    lines = ["| threads | spread of logits | backward, ms | flushed, ms | unflushed / flushed |", "|---|---|---|---|---|"]
    for threads in args.threads:
        for spread in args.spreads:
            ms = {}
            for flush in (False, True):
                job = json.dumps({"spread": spread, "flush": flush, "threads": threads})
                done = subprocess.run([sys.executable, __file__, "--job", job, "--shape", *map(str, args.shape),
                                       "--repeats", str(args.repeats)], capture_output=True, text=True, check=True)
                ms[flush] = 1000 * float(done.stdout.strip())
            lines.append(f"| {threads} | {spread:g} | {ms[False]:.1f} | {ms[True]:.1f} | {ms[False] / ms[True]:.2f} |")
            print(lines[-1], file=sys.stderr, flush=True)
    batch, heads, length, dim = args.shape
    emit(header(f"SDPA is_causal backward, fp32, batch {batch}, {heads} heads of {dim}, T {length}; median of "
                f"{args.repeats} after a warm-up, each configuration in its own process.") + "\n\n" + "\n".join(lines) + "\n",
         args.out)


if __name__ == "__main__":
    main()
