#!/usr/bin/env python3
"""One causal self-attention call per method and kernel, against the floor: SDPA with is_causal
and no bias (the fastest causal attention PyTorch has; no position bias at all).

    python benchmarks/kernels.py --out benchmarks/kernels-gpu.md [--rows rows.jsonl]
    python benchmarks/kernels.py --dtype float32 --head-dim 16 --lengths 512 1024 2048 4096 8192 \
        --train-lengths 512 1024 2048 --kernels auto sdpa blocked separable --repeats 5 \
        --out benchmarks/kernels-cpu.md          (the CPU table: the small recipe's heads, about 20 minutes)

For each length, batch x length = --tokens, --heads heads of --head-dim (default: the paper's
model, 8 heads of 128), random inputs in --dtype. "eval": forward without gradients; "train":
forward and backward, the bias's own parameters included. Each call builds the method's bias as
the model does once per forward (attention.attention_bias), then attends as a layer does
(attention.biased_attention: the kernel, the dense mask, FoX's gates from the layer's input);
"auto" is what a model gets with no flag, "ran as" the kernel that ran (a kernel that cannot run
an input leaves it to sdpa). Paired: for one (length, mode), every (method, kernel) and the floor
(twice: the second copy's ratio is the noise alone; once more with heads one column wider, what the
separable kernel's term column costs by itself) are warmed up (twice: flex compiles then),
then timed in rounds, one call each per round in a rotating order, so that the machine's drift
hits all alike; speed is the median over rounds of the floor's time over the configuration's,
± half their interquartile range; peak memory (GPU) as a ratio to the floor's. Each row is appended to --rows the
moment its (length, mode) is measured, with where its time went (set-up, warm-up, timed calls).
"""
import argparse
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from provenance import append_row, emit, header  # noqa: E402
from fairseq_alibi.models.attention import attention_bias, biased_attention  # noqa: E402
from fairseq_alibi.kernels import AUTO_RULES, KERNELS, choose_kernel, takes_bias  # noqa: E402
from fairseq_alibi.positions import METHODS  # noqa: E402
from fairseq_alibi.positions.position_method import build_method  # noqa: E402



def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(step, device):
    synchronize(device)
    start = time.perf_counter()
    step()
    synchronize(device)
    return time.perf_counter() - start


def measure_paired(steps, device, repeats):
    """{name: (seconds of each round, peak bytes above the start, warm-up seconds)} of the steps ({name:
    step}), timed in rounds of one call each, the order rotated every round. Peak memory (GPU only)
    comes from one extra call of each alone."""
    names = list(steps)
    warmup = {name: timed(steps[name], device) + timed(steps[name], device) for name in names}
    times = {name: [] for name in names}
    for round_ in range(repeats):
        turn = round_ % len(names)
        for name in names[turn:] + names[:turn]:
            times[name].append(timed(steps[name], device))
    peaks = {}
    for name in names:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            start_bytes = torch.cuda.memory_allocated()
            timed(steps[name], device)
            peaks[name] = torch.cuda.max_memory_allocated() - start_bytes
        else:
            peaks[name] = 0
    return {name: (times[name], peaks[name], warmup[name]) for name in names}


def speed(floor_rounds, rounds):
    """The median over rounds of floor / this configuration (each round's pair measured together), and
    half the interquartile range of those ratios (the noise)."""
    ratios = sorted(f / t for f, t in zip(floor_rounds, rounds))
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return statistics.median(ratios), (quartiles[2] - quartiles[0]) / 2


def attention_step(positions, layer_bias, x, q, k, v, length, kernel, grad):
    """One call: the bias built as the model builds it once per forward, then the layer's attention
    (models.attention.biased_attention: the kernel, the dense mask, or a layer's bias from its input x)."""
    def step():
        with torch.set_grad_enabled(grad):
            bias = attention_bias(positions, x, length, length, None, causal=True, kernel=kernel)
            out, _ = biased_attention(bias, layer_bias, x, q, k, v, None, None, 0.0)
            if grad:
                out.sum().backward()
                q.grad = k.grad = v.grad = None
                if layer_bias is not None:
                    layer_bias.zero_grad()
    return step


STARTED = time.perf_counter()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--tokens", type=int, default=8192, help="batch x length")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    biased = [m for m in METHODS if build_method(m, METHODS[m].Config(), 2, 8, 16).adds_bias()]  # rotary, NoPE: the floor
    p.add_argument("--methods", nargs="+", default=biased, choices=list(METHODS))
    p.add_argument("--kernels", nargs="+", default=None, choices=["auto", *KERNELS],
                   help="default: auto and every kernel installed here")
    p.add_argument("--modes", nargs="+", default=["eval", "train"], choices=["eval", "train"])
    p.add_argument("--train-lengths", type=int, nargs="+", help="the lengths trained at (default: --lengths)")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--out", help="write the table with its provenance here (default: print only)")
    p.add_argument("--rows", help="append each row here as JSON the moment it is measured")
    args = p.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    kernels = args.kernels or ["auto", *(name for name, k in KERNELS.items()
                                         if k.installed() is None and (name != "blocked" or device.type == "cpu"))]
    rows = []
    for length in args.lengths:
        batch = max(1, args.tokens // length)
        shape = (batch, args.heads, length, args.head_dim)
        # The layer's input (length, batch, C): what choose_kernel reads, and a layer bias's gates.
        x = torch.randn(length, batch, args.heads * args.head_dim, device=device, dtype=dtype)
        for mode in args.modes:
            if mode == "train" and args.train_lengths and length not in args.train_lengths:
                continue
            set_up = time.perf_counter()
            grad = mode == "train"
            q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=grad) for _ in range(3))
            steps, described = {}, {}

            def floor():
                with torch.set_grad_enabled(grad):
                    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                    if grad:
                        out.sum().backward()

            wider = [torch.randn(*shape[:3], args.head_dim + 1, device=device, dtype=dtype, requires_grad=grad)
                     for _ in range(3)]

            def floor_one_column_wider():  # what a term column costs by itself (separable's extra column)
                with torch.set_grad_enabled(grad):
                    out = torch.nn.functional.scaled_dot_product_attention(*wider, is_causal=True)
                    if grad:
                        out.sum().backward()

            steps["floor"] = floor
            described["floor"] = dict(method="(floor: no bias)", kernel="sdpa, is_causal", ran="sdpa")
            steps["floor again"] = floor  # its ratio to the floor is the rounds' noise alone
            described["floor again"] = dict(method="(the floor again: noise)", kernel="sdpa, is_causal", ran="sdpa")
            steps["floor wider"] = floor_one_column_wider
            described["floor wider"] = dict(method=f"(no bias, heads of {args.head_dim + 1})", kernel="sdpa, is_causal",
                                            ran="sdpa")
            for method in args.methods:
                positions = build_method(method, METHODS[method].Config(), args.heads, args.head_dim,
                                         args.heads * args.head_dim).to(device)
                layer_bias = positions.layer_bias()
                layer_bias = layer_bias.to(device) if layer_bias is not None else None
                for kernel in kernels:
                    if kernel not in AUTO_RULES and takes_bias(kernel, positions):
                        continue
                    with torch.set_grad_enabled(grad):
                        ran = choose_kernel(kernel, positions, x, length, False, False)
                    steps[(method, kernel)] = attention_step(positions, layer_bias, x, q, k, v, length, kernel, grad)
                    described[(method, kernel)] = dict(method=method, kernel=kernel, ran=ran)
            set_up = time.perf_counter() - set_up
            try:
                measured = measure_paired(steps, device, args.repeats)
            except Exception as error:  # measured and said, not hidden: the rows say why
                measured = None
                why = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
            floor_rounds, floor_peak = measured["floor"][:2] if measured else (None, None)
            for name, about in described.items():
                row = dict(length=length, batch=batch, mode=mode, **about, set_up_s=round(set_up, 3))
                if measured is None:
                    row["error"] = why
                else:
                    rounds, peak, warmup = measured[name]
                    ratio, noise = speed(floor_rounds, rounds)
                    row.update(seconds=statistics.median(rounds), peak=peak, speed=ratio, noise=noise,
                               memory=peak / floor_peak if floor_peak else None, warmup_s=round(warmup, 3),
                               timed_s=round(sum(rounds), 3))
                rows.append(row)
                append_row(args.rows, row)
            print(f"[{time.perf_counter() - STARTED:.0f} s] L {length} {mode}: {len(described)} configurations "
                  f"(set-up {set_up:.1f} s)", file=sys.stderr, flush=True)
    lines = ["| L | batch | mode | method | kernel | ran as | ms | speed vs floor | ± (noise) | peak MiB | memory vs floor |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['length']} | {r['batch']} | {r['mode']} | {r['method']} | {r['kernel']} | {r['ran']} | "
                         f"failed: {r['error']} | | | | |")
            continue
        memory = f"{r['memory']:.2f}" if r["memory"] else "-"
        lines.append(f"| {r['length']} | {r['batch']} | {r['mode']} | {r['method']} | {r['kernel']} | {r['ran']} | "
                     f"{r['seconds'] * 1e3:.2f} | {r['speed']:.3f} | {r['noise']:.3f} | {r['peak'] / 2**20:.0f} | {memory} |")
    details = (f"{args.dtype}, {args.heads} heads of {args.head_dim}, {args.tokens} tokens per call; paired: "
               f"{args.repeats} rounds (one call of each configuration per round, the order rotated) after 2 warm-ups; "
               "speed: the median over rounds of the floor's time / the configuration's in that round, ± half the "
               "interquartile range of those ratios; '(the floor again)' is the floor timed as a configuration: "
               "its distance from 1 is the noise alone; '(no bias, heads of d + 1)' is the floor one column wider, "
               "what the separable kernel's term column costs by itself; kernel 'auto' is what a model gets with no "
               "flag (ran as)")
    emit("\n".join([header(details, args.device), "", *lines, ""]), args.out, rows)


if __name__ == "__main__":
    main()
