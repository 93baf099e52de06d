"""Peak memory against the length of the text: the exported class streaming through a sink cache
(S = 4, W = 60, fed 64 tokens at a time) against the same model's one dense forward over the whole
text (the baseline, in the same run), each measurement in a fresh process (its peak resident set,
VmHWM, less that of the same process before the model runs). A random model of the small preset's
shape (4 layers, d 128, 8 heads, ALiBi), a vocabulary of 1000.

    python benchmarks/streaming_memory.py [--lengths 1024 4096 16384] [--dense-up-to 4096] [--out FILE.md]

With --out, writes the table there (and the rows as JSON beside it).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def peak_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))


def measure(mode, length):
    """In this process: (peak MiB above the start, seconds) of one pass over `length` tokens."""
    import torch

    from fairseq_alibi.hf.modeling_fairseq_alibi import FairseqAlibiConfig, FairseqAlibiForCausalLM

    torch.manual_seed(0)
    model = FairseqAlibiForCausalLM(FairseqAlibiConfig(
        vocab_size=1000, hidden_size=128, num_hidden_layers=4, num_attention_heads=8, intermediate_size=512,
        positions="alibi")).eval()
    tokens = torch.randint(4, 1000, (1, length))
    with torch.no_grad():  # warm-up on a short text: the allocator's first pages are not the method's
        model(tokens[:, :64], use_cache=False)
        before, started = peak_kib(), time.perf_counter()
        if mode == "dense":
            model(tokens, use_cache=False)
        else:
            cache = model.sink_cache(4, 60)
            for start in range(0, length, 64):
                model(tokens[:, start:start + 64], cache=cache)
    return (peak_kib() - before) / 1024, time.perf_counter() - started


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument("--dense-up-to", type=int, default=4096, help="the dense baseline's longest text (it grows as T^2)")
    p.add_argument("--out", help="write the table here (and .json beside it)")
    p.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # MODE LENGTH: one measurement, in a fresh process
    args = p.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], int(args.one[1]))))
        return
    from provenance import emit, header

    rows = []
    for length in args.lengths:
        for mode in ("dense", "streaming"):
            if mode == "dense" and length > args.dense_up_to:
                continue
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", mode, str(length)],
                                 capture_output=True, text=True, check=True).stdout
            mib, seconds = json.loads(out.strip().splitlines()[-1])
            rows.append({"mode": mode, "length": length, "peak_mib": round(mib, 1), "seconds": round(seconds, 2),
                         "tokens_per_s": round(length / seconds, 1)})
            print(rows[-1], file=sys.stderr, flush=True)
    lines = ["# Streaming memory against text length (CPU)", "",
             header("one process per measurement (peak resident set above its start)"), "",
             "| tokens | dense forward: peak MiB | streaming S=4, W=60: peak MiB | streaming / dense | streaming tokens/s |",
             "|---|---|---|---|---|"]
    for length in args.lengths:
        dense = next((r for r in rows if r["mode"] == "dense" and r["length"] == length), None)
        stream = next(r for r in rows if r["mode"] == "streaming" and r["length"] == length)
        ratio = f"{stream['peak_mib'] / dense['peak_mib']:.3f}" if dense and dense["peak_mib"] > 0 else "-"
        lines.append(f"| {length} | {dense['peak_mib'] if dense else 'not run (grows as T^2)'} | {stream['peak_mib']} | "
                     f"{ratio} | {stream['tokens_per_s']} |")
    emit("\n".join(lines) + "\n", args.out, rows)


if __name__ == "__main__":
    main()
