"""What one layer's FoX attention costs at inference with its bias made in blocks of rows that stop at
their causal diagonal (positions/fox.py: -inf past each block, the causal mask then added in place)
against blocks of full rows, c_i - c_j over every key, and the causal mask added out of place (the
code before it, which the retrieval scorer's dense path ran at 8,192 tokens). The two give the same
mask, element for element (checked each round), so the same attention.

    python benchmarks/fox_bias.py [--lengths 1024 4096 8192] [--heads 8] [--rounds 3] [--out F.md]

Paired: each round times both ways once, in turn (the order alternated), in one process on one
thread, so both see the same load; the table gives each way's median and the ratio of medians, for
the mask alone and with the attention after it (PyTorch's SDPA with that mask).
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from provenance import emit, header

from fairseq_alibi.positions.position_method import causal_mask
from fairseq_alibi.positions.fox import ForgetGate

HEAD_DIM = 16  # the retrieval models' (small recipe: 128 / 8)


def full_rows(gate, x):
    """The code before: blocks of query rows over every key (fp64, each cast as made), then + mask."""
    c = gate.cumulative(x, None, None)
    queries, keys = c[..., :, None], c[..., None, :]
    rows = max(1, gate.CHUNK_PAIRS // c.size(-1))
    bias = torch.empty(*queries.shape[:-1], keys.size(-1), dtype=torch.float32)
    for start in range(0, x.size(0), rows):
        bias[..., start:start + rows, :] = queries[..., start:start + rows, :] - keys
    return bias + causal_mask(x.size(0), x.size(0), torch.float32, x.device)


def blocked(gate, x):
    bias, _ = gate(x, None, None, None, None)
    return bias.add_(causal_mask(x.size(0), x.size(0), torch.float32, x.device))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 8192])
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out")
    p.add_argument("--note", default="", help="what else ran on the machine meanwhile, for the table's header")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    gate = ForgetGate(args.heads * HEAD_DIM, args.heads)
    gate.proj.weight.data.normal_(0, 1)  # gates that vary with the input
    rows = []
    for length in args.lengths:
        x = torch.randn(length, 1, args.heads * HEAD_DIM)
        q, k, v = (torch.randn(1, args.heads, length, HEAD_DIM) for _ in range(3))
        times = {(way.__name__, part): [] for way in (full_rows, blocked) for part in ("mask", "attention")}
        for round_ in range(args.rounds):
            masks = {}
            for way in (full_rows, blocked) if round_ % 2 == 0 else (blocked, full_rows):
                with torch.no_grad():
                    start = time.perf_counter()
                    mask = way(gate, x)
                    made = time.perf_counter()
                    F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                    done = time.perf_counter()
                times[way.__name__, "mask"].append(made - start)
                times[way.__name__, "attention"].append(done - start)
                masks[way.__name__] = mask
            if not torch.equal(masks["full_rows"], masks["blocked"]):
                raise SystemExit(f"error: the two masks differ at {length} tokens")
            del masks
        for part in ("mask", "attention"):
            before, after = (statistics.median(times[w, part]) for w in ("full_rows", "blocked"))
            rows.append({"length": length, "part": part, "full_rows_s": times["full_rows", part],
                         "blocked_s": times["blocked", part], "speedup": before / after})
    lines = [header(f"one layer, {args.heads} heads of {HEAD_DIM}, batch 1, fp32, one thread; {args.rounds} paired "
                    f"rounds (order alternated); the masks equal element for element in every round. {args.note}".strip()),
             "", "| tokens | timed | full rows, s (median) | to the diagonal, s (median) | full / diagonal |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['length']} | {'mask' if r['part'] == 'mask' else 'mask + SDPA'} | "
                     f"{statistics.median(r['full_rows_s']):.3f} | {statistics.median(r['blocked_s']):.3f} | {r['speedup']:.2f}x |")
    emit("\n".join(lines) + "\n", args.out, rows)


if __name__ == "__main__":
    main()
