#!/usr/bin/env python3
"""One causal self-attention call per method and kernel, against the floor: SDPA with is_causal
and no bias (the fastest causal attention PyTorch has; no position bias at all).

    python benchmarks/kernels.py --out benchmarks/kernels-gpu.md

For each length, batch x length = --tokens, --heads heads of --head-dim (default: the paper's
model, 8 heads of 128), random inputs in --dtype. "eval": forward without gradients; "train":
forward and backward, the bias's own parameters included. Each call builds the method's bias as
the model does once per forward (attention.attention_bias), then attends (the kernel's .attend, or
SDPA with the dense mask); "ran as" is the kernel that ran (a kernel that cannot run an input
leaves it to sdpa). Median of --repeats calls after two warm-ups (which compile flex), all in
this process; speed and peak memory as ratios against the floor measured in the same run."""
import argparse
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from provenance import emit, header  # noqa: E402
from fairseq_alibi.attention import attention_bias  # noqa: E402
from fairseq_alibi.kernels import KERNELS, choose_kernel  # noqa: E402
from fairseq_alibi.kernels.sdpa import masked_attention  # noqa: E402
from fairseq_alibi.positions import METHODS  # noqa: E402
from fairseq_alibi.positions.base import build_method  # noqa: E402

BIASED = ("alibi", "learned_alibi", "kerple", "fire", "t5_bias", "sandwich")


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(step, device, repeats):
    """(median seconds, peak bytes above the start) of step()."""
    for _ in range(2):
        step()
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start_bytes = torch.cuda.memory_allocated() if device.type == "cuda" else 0
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - t)
    peak = torch.cuda.max_memory_allocated() - start_bytes if device.type == "cuda" else 0
    return statistics.median(times), peak


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--tokens", type=int, default=8192, help="batch x length")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--methods", nargs="+", default=list(BIASED), choices=[m for m in METHODS if m != "fox"])
    p.add_argument("--kernels", nargs="+", default=None, help="default: every kernel installed here")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--out", help="write the table with its provenance here (default: print only)")
    args = p.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    kernels = args.kernels or [name for name, k in KERNELS.items()
                               if k.installed() is None and (name != "blocked" or device.type == "cpu")]
    rows = []
    for length in args.lengths:
        batch = max(1, args.tokens // length)
        shape = (batch, args.heads, length, args.head_dim)
        x = torch.zeros(1, 1, args.heads * args.head_dim, device=device, dtype=dtype)  # what choose_kernel reads
        for mode in ("eval", "train"):
            grad = mode == "train"
            q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=grad) for _ in range(3))

            def floor():
                with torch.set_grad_enabled(grad):
                    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                    if grad:
                        out.sum().backward()

            floor_time, floor_peak = measure(floor, device, args.repeats)
            rows.append(dict(length=length, batch=batch, mode=mode, method="(floor: no bias)", kernel="sdpa, is_causal",
                             ran="sdpa", seconds=floor_time, peak=floor_peak, speed=1.0, memory=1.0))
            for method in args.methods:
                positions = build_method(method, METHODS[method].Config(), args.heads, args.head_dim,
                                         args.heads * args.head_dim).to(device)
                for kernel in kernels:
                    if KERNELS[kernel].takes(positions) or (positions.kernels and kernel not in positions.kernels):
                        continue
                    with torch.set_grad_enabled(grad):
                        ran = choose_kernel(kernel, positions, x, length, False, False)

                    def step():
                        with torch.set_grad_enabled(grad):
                            bias = attention_bias(positions, x, length, length, None, causal=True, kernel=kernel)
                            out = (bias.kernel.attend(q, k, v, 0.0) if bias.kernel is not None else
                                   masked_attention(q, k, v, bias.mask) if bias.mask is not None else
                                   torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
                            if grad:
                                out.sum().backward()

                    try:
                        seconds, peak = measure(step, device, args.repeats)
                    except Exception as error:  # measured and said, not hidden: the row says why
                        rows.append(dict(length=length, batch=batch, mode=mode, method=method, kernel=kernel, ran=ran,
                                         error=f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"))
                        continue
                    rows.append(dict(length=length, batch=batch, mode=mode, method=method, kernel=kernel, ran=ran,
                                     seconds=seconds, peak=peak, speed=floor_time / seconds,
                                     memory=peak / floor_peak if floor_peak else None))
                    q.grad = k.grad = v.grad = None
    lines = ["| L | batch | mode | method | kernel | ran as | ms | speed vs floor | peak MiB | memory vs floor |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['length']} | {r['batch']} | {r['mode']} | {r['method']} | {r['kernel']} | {r['ran']} | "
                         f"failed: {r['error']} | | | |")
            continue
        memory = f"{r['memory']:.2f}" if r["memory"] else "-"
        lines.append(f"| {r['length']} | {r['batch']} | {r['mode']} | {r['method']} | {r['kernel']} | {r['ran']} | "
                     f"{r['seconds'] * 1e3:.2f} | {r['speed']:.3f} | {r['peak'] / 2**20:.0f} | {memory} |")
    details = (f"{args.dtype}, {args.heads} heads of {args.head_dim}, {args.tokens} tokens per call; median of "
               f"{args.repeats} calls after 2 warm-ups")
    emit("\n".join([header(details, args.device), "", *lines, ""]), args.out, rows)


if __name__ == "__main__":
    main()
