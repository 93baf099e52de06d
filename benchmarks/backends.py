#!/usr/bin/env python3
"""Every SDPA backend this machine has (math, efficient, flash, cuDNN) on the plugin's masks,
against fp32 math: the relative error, or "-" where the backend does not take the input.

    python benchmarks/backends.py --out benchmarks/backends-gpu.md

Inputs (kernels/sdpa.py probe_input): batch 2, 4 heads, 160 tokens, head dim 64; ALiBi's bias,
the causal -inf and, in the second row, two documents. Mask dtypes: the query's (what the plugin
builds) and fp32 under a half-precision query (what the plugin never passes: the input of
PyTorch's cuDNN hazard, pytorch PR #191612). A backend above WRONG_ABOVE for the plugin's masks is
the one the plugin never selects (sdpa.masked_backends)."""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from provenance import emit, header  # noqa: E402
from fairseq_alibi.kernels.sdpa import WRONG_ABOVE, backend_errors, backends, probe_input  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", help="write the table with its provenance here (default: print only)")
    args = p.parse_args()
    dtypes = [torch.float32] + ([torch.float16, torch.bfloat16] if args.device != "cpu" else [])
    names = list(backends())
    rows, lines = [], []
    for dtype in dtypes:
        for mask_dtype, what in [(dtype, "the query's (the plugin's)"), (torch.float32, "fp32")]:
            if what == "fp32" and dtype == torch.float32:  # the same input as the row before
                continue
            errors = backend_errors(*probe_input(args.device, dtype, mask_dtype))
            short = str(dtype).replace("torch.", "")
            rows.append({"dtype": short, "mask": str(mask_dtype).replace("torch.", ""), "errors": errors,
                         "wrong_above": WRONG_ABOVE[dtype]})
            cells = ["-" if errors[n] is None else f"{errors[n]:.1e}" + (" **wrong**" if errors[n] > WRONG_ABOVE[dtype] else "")
                     for n in names]
            lines.append(f"| {short} | {what} | " + " | ".join(cells) + " |")
    text = "\n".join([header("relative error against fp32 math; -: the backend does not take this input", args.device), "",
                      "| query dtype | mask dtype | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names), *lines, ""])
    emit(text, args.out, rows)


if __name__ == "__main__":
    main()
