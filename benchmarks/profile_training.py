#!/usr/bin/env python3
"""Where a training step's time goes, per operator, one model against another (by default ALiBi
against its sinusoidal twin; --modes takes two of benchmarks/bench.py's modes, MODE@KERNEL too).

    python benchmarks/profile_training.py --length 128 --out benchmarks/profile-training-L128.md
    python benchmarks/profile_training.py --modes alibi fox --length 512

Both models in one process, steps interleaved (A, B, B, A, ...) after two warm-up steps each,
each step under torch.profiler; per operator the mean self CPU time per step. The two models
differ only in how positions enter attention, so a gap in any other operator (the adaptive
softmax's, the GEMMs) is the machine, not the method.
"""
import argparse
import os
import sys
import time
from collections import defaultdict

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
from provenance import emit, header  # noqa: E402

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--length", type=int, default=128, help="training length L (batches of 4096 tokens)")
    p.add_argument("--steps", type=int, default=10, help="profiled steps per model")
    p.add_argument("--top", type=int, default=12, help="operators shown")
    p.add_argument("--modes", nargs=2, default=["sinusoidal", "alibi"], type=bench.mode_name, metavar=("A", "B"),
                   help="the two models (bench.py's modes): B's time per operator against A's")
    p.add_argument("--out", help="write the table with its provenance here (default: print only)")
    args = p.parse_args()
    modes = A, B = tuple(args.modes)
    device = torch.device("cpu")
    x = bench.batches(args.length, bench.TOKENS, 1, device, bench.VOCABS["small"])[0]
    models = {m: bench.build(m, "small", device, torch.float32).train() for m in modes}
    optimizers = {m: torch.optim.Adam(model.parameters(), lr=1e-4) for m, model in models.items()}
    for m in modes:
        for _ in range(2):
            bench.train_step(models[m], optimizers[m], x)
    self_ms = {m: defaultdict(float) for m in modes}
    wall = {m: [] for m in modes}
    for step in range(args.steps):
        for m in (modes if step % 2 == 0 else modes[::-1]):
            start = time.perf_counter()
            with torch.profiler.profile() as prof:
                bench.train_step(models[m], optimizers[m], x)
            wall[m].append(time.perf_counter() - start)
            for event in prof.key_averages():
                self_ms[m][event.key] += event.self_cpu_time_total / 1000 / args.steps
    ops = sorted(set(self_ms[A]) | set(self_ms[B]), key=lambda k: -max(self_ms[A][k], self_ms[B][k]))[: args.top]
    total = {m: sum(self_ms[m].values()) for m in modes}
    attention = {m: sum(v for k, v in self_ms[m].items() if "scaled_dot_product" in k) for m in modes}
    lines = [f"| operator | {A} ms/step | {B} ms/step | {B} - {A} |", "|---|---|---|---|"]
    for k in ops:
        s, a = self_ms[A][k], self_ms[B][k]
        lines.append(f"| `{k}` | {s:.1f} | {a:.1f} | {a - s:+.1f} |")
    lines.append(f"| attention (all `scaled_dot_product*` ops) | {attention[A]:.1f} | "
                 f"{attention[B]:.1f} | {attention[B] - attention[A]:+.1f} |")
    lines.append(f"| all operators | {total[A]:.1f} | {total[B]:.1f} | {total[B] - total[A]:+.1f} |")
    spread = {m: f"{min(w) * 1000:.0f}-{max(w) * 1000:.0f}" for m, w in wall.items()}
    emit(header(f"small architecture, L={args.length}, {bench.TOKENS} tokens per step, {args.steps} profiled "
                f"steps per model, interleaved.") + f"\n\nStep wall time under the profiler, min-max: {A} "
         f"{spread[A]} ms, {B} {spread[B]} ms.\n\n" + "\n".join(lines) + "\n", args.out)

if __name__ == "__main__":
    main()
