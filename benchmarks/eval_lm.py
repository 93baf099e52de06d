#!/usr/bin/env python3
"""fairseq-eval-lm's speed and peak memory, ALiBi against its sinusoidal twin, as ratios.

    python benchmarks/eval_lm.py --data data-bin/wikitext-2 \
        --alibi checkpoints/wikitext2/alibi-L64/checkpoint_last.pt \
        --sinusoidal checkpoints/wikitext2/sinusoidal-L64/checkpoint_last.pt \
        --lengths 8192 --out benchmarks/eval-lm-cpu.md

Each evaluation is `scripts/eval.sh` (fairseq's own evaluation, nonoverlapping, the whole split)
in a fresh process under scripts/measure.py: wall seconds of the evaluation itself (as eval.sh reports
them, loading included), peak RSS of the process tree. Modes:
  sinusoidal   the twin (the baseline)
  alibi        --alibi-attention auto: on CPU, the blocked kernel (no heads x T x S mask)
  alibi_dense  --alibi-attention sdpa: the dense mask, what `auto` did before; only up to
               --dense-up-to, since its mask is heads x T x T fp32 (32 GiB at 32768 with 8 heads)
The two ALiBi modes must give the same perplexity; the table shows both.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from provenance import emit, header  # noqa: E402


def evaluate(checkpoint, data, l_valid, overrides, workdir):
    out = os.path.join(workdir, f"{time.time_ns()}.jsonl")
    resources = os.path.join(workdir, f"{time.time_ns()}.resources.jsonl")
    cmd = [sys.executable, os.path.join(REPO, "scripts", "measure.py"), resources, "--",
           os.path.join(REPO, "scripts", "eval.sh"), checkpoint, data, out, str(l_valid)]
    if overrides:
        cmd += ["--", "--model-overrides", overrides]
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)  # eval.sh runs python3
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["killed"])[-1]}
    with open(out) as f:
        row = json.loads(f.readline())
    with open(resources) as f:
        peak_mib = json.loads(f.readline())["peak_mib"]
    return {"perplexity": row["perplexity"], "seconds": row["seconds"], "tokens_per_s": row["tokens_per_s"],
            "peak_mib": peak_mib}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="binarized data directory (data-bin/wikitext-2)")
    p.add_argument("--alibi", required=True, help="an ALiBi checkpoint")
    p.add_argument("--sinusoidal", required=True, help="its sinusoidal twin's checkpoint")
    p.add_argument("--lengths", type=int, nargs="+", default=[8192], help="L_valid")
    p.add_argument("--dense-up-to", type=int, default=8192, help="longest L_valid for alibi_dense")
    p.add_argument("--repeats", type=int, default=2, help="interleaved runs of each mode (fastest kept)")
    p.add_argument("--out", help="write the table with its provenance here (default: print only)")
    args = p.parse_args()
    for path in (args.alibi, args.sinusoidal):
        if not os.path.isfile(path):
            sys.exit(f"error: no checkpoint at {path}")
    modes = {"sinusoidal": (args.sinusoidal, None), "alibi": (args.alibi, None),
             "alibi_dense": (args.alibi, "{'alibi_attention': 'sdpa'}")}
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for l_valid in args.lengths:
            best = {}
            for repeat in range(args.repeats):
                for mode, (checkpoint, overrides) in modes.items():
                    if mode == "alibi_dense" and l_valid > args.dense_up_to:
                        continue
                    r = evaluate(checkpoint, args.data, l_valid, overrides, workdir)
                    print(mode, l_valid, r, flush=True)
                    if mode not in best or "error" in best[mode] or r.get("tokens_per_s", 0) > best[mode].get("tokens_per_s", 0):
                        best[mode] = r
            base = best.get("sinusoidal", {})
            for mode, r in best.items():
                row = {"mode": mode, "l_valid": l_valid, **r}
                if "error" not in r and "error" not in base:
                    row["speed_ratio"] = r["tokens_per_s"] / base["tokens_per_s"]
                    row["memory_ratio"] = r["peak_mib"] / base["peak_mib"]
                rows.append(row)
    lines = ["| L_valid | mode | perplexity | seconds | tokens/s | peak MiB | speed vs sinusoidal | memory vs sinusoidal |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['l_valid']} | {r['mode']} | {r['error']} | | | | | |")
            continue
        lines.append(f"| {r['l_valid']} | {r['mode']} | {r['perplexity']:.2f} | {r['seconds']:.1f} | "
                     f"{r['tokens_per_s']:.0f} | {r['peak_mib']:.0f} | {r.get('speed_ratio', 0):.3f} | "
                     f"{r.get('memory_ratio', 0):.3f} |")
    emit(header(f"fastest of {args.repeats} interleaved runs.") + "\n\n" + "\n".join(lines) + "\n", args.out, rows)


if __name__ == "__main__":
    main()
