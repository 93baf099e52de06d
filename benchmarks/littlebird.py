#!/usr/bin/env python3
"""LittleBird's encoder against the dense BiALiBi encoder of the same size: peak memory and
tokens/s from 1k to 16k tokens, in one run.

    python benchmarks/littlebird.py --out benchmarks/littlebird-cpu.md [--lengths "1024 ... 16384"]

Encoders (no LM head): alibi_roberta_small --encoder-alibi bialibi (dense: SDPA with a
(1, heads, T, T) bias), and littlebird_roberta_small at the paper's block size and pack length
(64, 64) and at the WikiText-2 experiment's (8, 8); 4 layers, d 128, 8 heads, fp32, one input
of T random tokens. Each (encoder, T, mode) runs in a fresh process so that its peak memory is
its own: `memory` is how far the calls raised the process's peak resident memory (ru_maxrss)
above its peak after building the encoder and its input (at short lengths possibly 0, the
build's peak covering the call's), `tokens/s` is T over the median of --repeats
calls after one warm-up. Modes: eval (no gradients) and train (forward and backward of
sum(x^2), dropout on). A process that cannot allocate (address space capped at --memory-cap GiB,
so that it fails rather than the machine) is reported as such. Ratios are against dense at the
same T; the growth column is memory at T over memory at the previous T (2 = linear, 4 = quadratic).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

ENCODERS = {
    "dense BiALiBi": ("alibi_roberta_small", ["--encoder-alibi", "bialibi"]),
    "LittleBird b=64 s=64": ("littlebird_roberta_small", ["--block-size", "64", "--pack-length", "64"]),
    "LittleBird b=8 s=8": ("littlebird_roberta_small", ["--block-size", "8", "--pack-length", "8"]),
}


def child(name, length, mode, repeats):
    """One measurement, printed as a JSON line."""
    import torch

    import fairseq_alibi.plugin  # noqa: F401
    from fairseq_alibi.models.build import build_model

    arch, flags = ENCODERS[name]
    model, dictionary = build_model(arch, 1000, flags, task="masked_lm")
    encoder = model.encoder.sentence_encoder.train(mode == "train")
    tokens = torch.randint(4, len(dictionary), (1, length), generator=torch.Generator().manual_seed(0))
    tokens[0, 0] = dictionary.bos()

    def call():
        if mode == "eval":
            with torch.no_grad():
                encoder(tokens)
        else:
            out = encoder(tokens)["encoder_out"][0]
            out.pow(2).sum().backward()
            encoder.zero_grad(set_to_none=True)

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": statistics.median(times[1:]), "memory_mib": (peak - before) / 1024}))


def cell(value):
    return "" if value is None else f"{value:.2f}"


def measure(name, length, mode, repeats, cap_gib):
    def limit():
        cap = int(cap_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    proc = subprocess.run([sys.executable, __file__, "--child", name, str(length), mode, str(repeats)],
                          capture_output=True, text=True, preexec_fn=limit)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])
    last = (proc.stderr.strip().splitlines() or ["?"])[-1]
    if "alloc" in last.lower() or "memory" in last.lower() or proc.returncode < 0:
        return {"failed": f"does not fit ({cap_gib:g} GiB cap)"}
    raise SystemExit(f"error: {name} at {length} ({mode}) failed: {last}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="1024 2048 4096 8192 16384")
    p.add_argument("--modes", default="eval train")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--memory-cap", type=float, default=20.0, help="GiB of address space per measurement")
    p.add_argument("--out", default=None)
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        name, length, mode, repeats = args.child
        return child(name, int(length), mode, int(repeats))

    import torch
    from provenance import emit, header

    rows = []
    for mode in args.modes.split():
        for length in map(int, args.lengths.split()):
            for name in ENCODERS:
                row = {"mode": mode, "length": length, "encoder": name,
                       **measure(name, length, mode, args.repeats, args.memory_cap)}
                print(json.dumps(row), file=sys.stderr)
                rows.append(row)

    lines = [header(f"{torch.get_num_threads()} threads; 4 layers, d 128, 8 heads, fp32, batch 1; "
                    f"median of {args.repeats} after a warm-up; each measurement in its own process"), ""]
    for mode in args.modes.split():
        lines += ["", f"{'Evaluation (no gradients)' if mode == 'eval' else 'Training (forward + backward)'}:", "",
                  "| T | encoder | tokens/s | memory MiB | speed vs dense | memory vs dense | memory growth vs T/2 |",
                  "|---|---|---|---|---|---|---|"]
        for row in (r for r in rows if r["mode"] == mode):
            if "failed" in row:
                lines.append(f"| {row['length']} | {row['encoder']} | {row['failed']} |  |  |  |  |")
                continue
            dense = next(r for r in rows if r["mode"] == mode and r["length"] == row["length"]
                         and r["encoder"] == "dense BiALiBi")
            half = next((r for r in rows if r["mode"] == mode and r["length"] * 2 == row["length"]
                         and r["encoder"] == row["encoder"] and "failed" not in r), None)
            fits = "failed" not in dense
            speed = dense["seconds"] / row["seconds"] if fits else None
            memory = row["memory_mib"] / dense["memory_mib"] if fits and dense["memory_mib"] > 0 else None
            growth = row["memory_mib"] / half["memory_mib"] if half and half["memory_mib"] > 0 else None
            lines.append(f"| {row['length']} | {row['encoder']} | {row['length'] / row['seconds']:.0f} | "
                         f"{row['memory_mib']:.0f} | {cell(speed)} | {cell(memory)} | {cell(growth)} |")
    emit("\n".join(lines) + "\n", args.out, rows)


if __name__ == "__main__":
    main()
