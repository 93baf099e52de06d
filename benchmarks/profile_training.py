#!/usr/bin/env python3
"""Where a training step's time goes, per operator, ALiBi against its sinusoidal twin.

    python benchmarks/profile_training.py --length 128 --out benchmarks/profile-training-L128.md

Both models in one process, steps interleaved (sinusoidal, alibi, sinusoidal, ...) after two
warm-up steps each, each step under torch.profiler; per operator the mean self CPU time per step.
The two models differ only in how positions enter attention, so a gap in any other operator
(the adaptive softmax's, the GEMMs) is the machine, not the method.
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

MODES = ("sinusoidal", "alibi")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--length", type=int, default=128, help="training length L (batches of 4096 tokens)")
    p.add_argument("--steps", type=int, default=10, help="profiled steps per model")
    p.add_argument("--top", type=int, default=12, help="operators shown")
    p.add_argument("--out", help="write the table with its provenance here (default: print only)")
    args = p.parse_args()
    device = torch.device("cpu")
    x = bench.batches(args.length, bench.TOKENS, 1, device, bench.VOCABS["small"])[0]
    models = {m: bench.build(m, "small", device, torch.float32).train() for m in MODES}
    optimizers = {m: torch.optim.Adam(model.parameters(), lr=1e-4) for m, model in models.items()}
    for m in MODES:
        for _ in range(2):
            bench.train_step(models[m], optimizers[m], x)
    self_ms = {m: defaultdict(float) for m in MODES}
    wall = {m: [] for m in MODES}
    for step in range(args.steps):
        for m in (MODES if step % 2 == 0 else MODES[::-1]):
            start = time.perf_counter()
            with torch.profiler.profile() as prof:
                bench.train_step(models[m], optimizers[m], x)
            wall[m].append(time.perf_counter() - start)
            for event in prof.key_averages():
                self_ms[m][event.key] += event.self_cpu_time_total / 1000 / args.steps
    ops = sorted(set(self_ms["sinusoidal"]) | set(self_ms["alibi"]),
                 key=lambda k: -max(self_ms["sinusoidal"][k], self_ms["alibi"][k]))[: args.top]
    total = {m: sum(self_ms[m].values()) for m in MODES}
    attention = {m: sum(v for k, v in self_ms[m].items() if "scaled_dot_product" in k) for m in MODES}
    lines = ["| operator | sinusoidal ms/step | alibi ms/step | alibi - sinusoidal |", "|---|---|---|---|"]
    for k in ops:
        s, a = self_ms["sinusoidal"][k], self_ms["alibi"][k]
        lines.append(f"| `{k}` | {s:.1f} | {a:.1f} | {a - s:+.1f} |")
    lines.append(f"| attention (all `scaled_dot_product*` ops) | {attention['sinusoidal']:.1f} | "
                 f"{attention['alibi']:.1f} | {attention['alibi'] - attention['sinusoidal']:+.1f} |")
    lines.append(f"| all operators | {total['sinusoidal']:.1f} | {total['alibi']:.1f} | "
                 f"{total['alibi'] - total['sinusoidal']:+.1f} |")
    spread = {m: f"{min(w) * 1000:.0f}-{max(w) * 1000:.0f}" for m, w in wall.items()}
    emit(header(f"small architecture, L={args.length}, {bench.TOKENS} tokens per step, {args.steps} profiled "
                f"steps per model, interleaved.") + f"\n\nStep wall time under the profiler, min-max: sinusoidal "
         f"{spread['sinusoidal']} ms, alibi {spread['alibi']} ms.\n\n" + "\n".join(lines) + "\n", args.out)

if __name__ == "__main__":
    main()
