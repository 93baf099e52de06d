#!/usr/bin/env python3
"""Position methods against the sinusoidal twin, in one run, as ratios.

    python benchmarks/bench.py --out benchmarks/cpu.md   # the full CPU table, with provenance
    python benchmarks/bench.py --smoke                   # the smallest configuration (CI)

Each measurement runs in a fresh subprocess, so that its peak memory (max RSS on CPU, max
allocated on GPU) is its own. Modes, all the same dimensions and the same token batches:
  sinusoidal   stock fairseq transformer_lm (the baseline every ratio is against)
  alibi        this plugin, --attention-kernel auto (on CPU: the dense mask heads x T x S,
               broadcast over the batch, for training; the blocked kernel, no T x S mask, for
               evaluation longer than 256 tokens)
  alibi_dense  this plugin with --attention-kernel sdpa: the dense mask everywhere
  fork         the fork's scheme, written here for comparison: key-index bias m*j materialized
               per sequence (batch*heads x T x S) in the activation dtype
  rotary, t5   the paper's other baselines from this plugin (T5 bias: dense mask in training,
               blocked kernel in long evaluation, as ALiBi)
  nope, kerple, sandwich, fire, learned_alibi, fox, ...
               every other registered method (KERPLE: its log variant), --attention-kernel auto
  MODE@KERNEL  a plugin mode with that --attention-kernel (a kernel, or a rule of auto's: e.g.
               learned_alibi@auto-no-separable, auto before the separable kernel joined it)
Training: forward + backward + Adam step on batches of TOKENS tokens at length L; its speed is
also measured "paired": all modes in one process, steps interleaved, median step-time ratio
(the most precise ratio on a noisy machine; peak memory needs the separate processes).
Evaluation: forward (features and the adaptive softmax's target log-probabilities) at L_valid,
nonoverlapping, and sliding windows (stride L_valid/2) batched 1 and 8 at a time; "forward" is
the bare model forward of one sequence of L_valid tokens (no log-probabilities to dilute it).
"""
import time

STARTED = time.perf_counter()  # before torch's import: a job's "import" phase counts from here

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from provenance import append_row, emit, header  # noqa: E402

from fairseq_alibi.positions import METHODS  # noqa: E402  (the registry: no fairseq import)

# mode -> <method>_transformer_lm, for every registered method but ALiBi's own modes (T5 bias keeps its
# mode name "t5", which the committed tables use).
PLUGIN_ARCHS = {("t5" if method == "t5_bias" else method): method for method in METHODS if method != "alibi"}
MODES = ("sinusoidal", "alibi", "alibi_dense", "fork", *PLUGIN_ARCHS)

VOCABS = {"small": 33276, "wiki103": 267735}  # WikiText-2's and WikiText-103's dictionaries
TOKENS = 4096  # tokens per training batch (--max-tokens of the CPU recipe)


def mode_name(text):
    """--modes' type: a mode, or MODE@KERNEL for a plugin mode with that --attention-kernel."""
    from fairseq_alibi.kernels import KERNEL_NAMES  # no fairseq import

    mode, _, kernel = text.partition("@")
    if mode not in MODES or (kernel and (mode in ("sinusoidal", "fork") or kernel not in KERNEL_NAMES)):
        raise argparse.ArgumentTypeError(f"{text!r}: a mode of {', '.join(MODES)}, or a plugin mode @ one of "
                                         f"{', '.join(KERNEL_NAMES)}")
    return text


def build(mode, arch, device, dtype, vocab=None):
    from fairseq_alibi.twins import SMALL_TWIN_FLAGS
    from fairseq_alibi.models.build import build_model  # fairseq's import, the first time

    mode, _, kernel = mode.partition("@")

    if mode == "sinusoidal":
        flags = SMALL_TWIN_FLAGS.split()[2:] if arch == "small" else []
        name = "transformer_lm" if arch == "small" else "transformer_lm_wiki103"
    elif mode in PLUGIN_ARCHS:
        flags, name = [], f"{PLUGIN_ARCHS[mode]}_transformer_lm_{arch}"
    else:
        flags, name = [], f"alibi_transformer_lm_{arch}"
        if mode in ("alibi_dense", "fork"):
            flags = ["--attention-kernel", "sdpa"]
    if kernel:
        flags = [*flags, "--attention-kernel", kernel]
    torch.manual_seed(0)
    model, _ = build_model(name, vocab or VOCABS[arch], flags)
    if mode == "fork":
        make_fork_style(model.decoder)
    return model.to(device=device, dtype=dtype)


def make_fork_style(decoder):
    """The fork's mask: m_h * j (key index only) + causal -inf, built in fp32, cast to the
    activation dtype, and repeated over the batch (the fork sizes it by --max-tokens). It takes
    the place of the decoder's mask cache (which serves every full forward of ALiBi)."""
    original = decoder.extract_features_scriptable
    fork = ForkMask()

    def extract_features(prev_output_tokens, *args, **kwargs):
        fork.batch = prev_output_tokens.size(0)
        return original(prev_output_tokens, *args, **kwargs)

    decoder.extract_features_scriptable = extract_features
    decoder.mask_cache = fork


class ForkMask:
    batch = 1

    def get(self, positions, length, dtype, device, causal):
        slopes = positions.slopes
        key_pos = torch.arange(length, device=slopes.device, dtype=torch.float32)
        bias = slopes[:, None, None] * key_pos[None, None, :]  # heads x 1 x S
        future = torch.ones(length, length, dtype=torch.bool, device=slopes.device).triu(1)
        mask = bias.masked_fill(future, float("-inf")).to(dtype)  # heads x T x S
        return mask.repeat(self.batch, 1, 1).view(self.batch, *mask.shape)


def batches(length, tokens, count, device, vocab):
    g = torch.Generator().manual_seed(1)
    rows = max(1, tokens // length)
    return [torch.randint(4, vocab + 4, (rows, length), generator=g).to(device) for _ in range(count)]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def train_step(model, optimizer, x):
    """Forward, adaptive-softmax loss (what fairseq's adaptive_loss computes), backward, step."""
    features = model(x)[0]
    logits, targets = model.decoder.adaptive_softmax(features, x.reshape(-1))
    sum(torch.nn.functional.cross_entropy(l.float(), t, reduction="sum")
        for l, t in zip(logits, targets) if t is not None).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def target_log_probs(model, features, target):
    """What fairseq's eval scores: log p(target) under the adaptive softmax."""
    lprobs = model.decoder.adaptive_softmax.get_log_prob(features, target)
    return lprobs.gather(-1, target.unsqueeze(-1))


def measure(job):
    """One measurement: tokens/s, peak memory in MiB, and where its time went: import (torch and,
    the first time, fairseq), build (the model, moved to the device), warm-up (the first step:
    compilation, the allocator's first blocks), measured (the timed steps)."""
    device = torch.device(job["device"])
    dtype = getattr(torch, job["dtype"])
    vocab, tokens = job.get("vocab") or VOCABS[job["arch"]], job.get("tokens") or TOKENS
    began = time.perf_counter()
    import fairseq  # noqa: F401  (the import phase, apart from the model's build)
    imported = time.perf_counter()
    if device.type == "cuda":  # jobs share a process on a GPU: each its own peak
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = build(job["mode"], job["arch"], device, dtype, vocab)
    sync(device)
    built = time.perf_counter()
    steps, warmup = job["steps"], 1
    if job["kind"] == "forward":
        model.eval()
        data = batches(job["length"], job["length"], steps + warmup, device, vocab)
        with torch.no_grad():
            for i, x in enumerate(data):
                if i == warmup:
                    sync(device)
                    start = time.perf_counter()
                model(x)
        scored = steps * data[0].numel()
    elif job["kind"] == "train":
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        data = batches(job["length"], tokens, steps + warmup, device, vocab)
        for i, x in enumerate(data):
            if i == warmup:
                sync(device)
                start = time.perf_counter()
            train_step(model, opt, x)
        scored = steps * data[0].numel()
    else:
        model.eval()
        l_valid, stride, rows = job["length"], job["stride"], job["rows"]
        if stride:  # sliding windows: each scores its last `stride` tokens
            windows = [batches(l_valid, rows * l_valid, 1, device, vocab)[0] for _ in range(steps + warmup)]
            data, score_from = windows, l_valid - stride
        else:
            data, score_from = batches(l_valid, max(l_valid, tokens), steps + warmup, device, vocab), 0
        with torch.no_grad():
            for i, x in enumerate(data):
                if i == warmup:
                    sync(device)
                    start = time.perf_counter()
                features = model(x)[0][:, score_from:].contiguous()
                target_log_probs(model, features, x[:, score_from:].contiguous())
        scored = steps * data[0][:, score_from:].numel()
    sync(device)
    seconds = time.perf_counter() - start
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = peak_rss_mib()
    del model
    return {"tokens_per_s": scored / seconds, "peak_mib": peak,
            "import_s": round(imported - (STARTED if job.get("fresh_process") else began), 3),
            "build_s": round(built - imported, 3), "warmup_s": round(start - built, 3), "measured_s": round(seconds, 3)}


def peak_rss_mib():
    """This process's peak resident memory. Linux's VmHWM, not ru_maxrss: a process started by
    another keeps the parent's high-water mark in ru_maxrss across exec (a floor at the parent's
    size); ru_maxrss where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            return int(f.read().split("VmHWM:")[1].split()[0]) / 1024
    except (OSError, IndexError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def paired_training(job):
    """Training speed of all modes in one process, steps interleaved (A B C A B C ...), so that the
    machine's drift hits each mode alike; the ratio is of median step times."""
    import statistics

    device, dtype = torch.device(job["device"]), getattr(torch, job["dtype"])
    modes = job["modes"]
    vocab, tokens = job.get("vocab") or VOCABS[job["arch"]], job.get("tokens") or TOKENS
    models = {mode: build(mode, job["arch"], device, dtype, vocab).train() for mode in modes}
    optimizers = {mode: torch.optim.Adam(m.parameters(), lr=1e-4) for mode, m in models.items()}
    x = batches(job["length"], tokens, 1, device, vocab)[0]
    times = {mode: [] for mode in modes}
    for step in range(job["steps"] + 1):
        turn = step % len(modes)
        for mode in modes[turn:] + modes[:turn]:  # rotate the order too
            model = models[mode]
            sync(device)
            start = time.perf_counter()
            train_step(model, optimizers[mode], x)
            sync(device)
            if step > 0:  # the first round warms up
                times[mode].append(time.perf_counter() - start)
    base = statistics.median(times["sinusoidal"])
    return {"paired_speed_ratio": {mode: base / statistics.median(t) for mode, t in times.items()}}


def run_job(job, in_process=False):
    """One measurement in a fresh subprocess (on CPU: its peak memory, the process's high-water mark,
    its own); in_process (on a GPU, whose peak resets per job, and the smoke test: the same code,
    without a fairseq start-up per job) in this one."""
    if in_process:  # a job that fails is a row that says why, as from its own process
        try:
            return {**job, **(paired_training(job) if job["kind"] == "paired" else measure(job))}
        except Exception as error:
            tail = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            return {**job, "error": "out of memory" if "out of memory" in tail.lower() else tail}
    proc = subprocess.run([sys.executable, __file__, "--job", json.dumps({**job, "fresh_process": True})],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["killed"])[-1]
        return {**job, "error": "out of memory" if "memory" in tail.lower() or proc.returncode < 0 else tail}
    return {**job, **json.loads(proc.stdout.strip().splitlines()[-1])}


def plan(args):
    """Training jobs are repeated, interleaved across modes, so that drift hits all modes alike."""
    jobs = []
    base = {"arch": args.arch, "device": args.device, "dtype": args.dtype, "steps": args.steps,
            "vocab": args.vocab, "tokens": args.tokens}
    for length in args.lengths:
        for repeat in range(args.repeats):
            for mode in args.modes:
                jobs.append({**base, "kind": "train", "mode": mode, "length": length, "stride": 0, "rows": 0})
    for length in args.lengths:
        jobs.append({**base, "kind": "paired", "mode": "all", "length": length, "stride": 0, "rows": 0,
                     "steps": args.paired_steps, "modes": args.modes})
    for l_valid in args.eval_lengths:
        # long lengths: fewer steps, each is a large batch already
        evals = {**base, "steps": max(1, args.steps * 1024 // max(l_valid, 1024))}
        for mode in args.modes:
            for repeat in range(max(1, args.repeats)):
                jobs.append({**evals, "kind": "forward", "mode": mode, "length": l_valid, "stride": 0, "rows": 0})
        for mode in args.modes:
            jobs.append({**evals, "kind": "eval", "mode": mode, "length": l_valid, "stride": 0, "rows": 0})
            for rows in args.sliding_batches:
                jobs.append({**evals, "kind": "sliding", "mode": mode, "length": l_valid,
                             "stride": l_valid // 2, "rows": rows})
    return jobs


def best_of_repeats(results):
    """One row per configuration: the fastest repeat (the least disturbed by the machine)."""
    best = {}
    for r in results:
        key = (r["kind"], r["length"], r["stride"], r["rows"], r["mode"])
        if key not in best or "error" in best[key] or r.get("tokens_per_s", 0) > best[key].get("tokens_per_s", 0):
            best[key] = r
    return list(best.values())


def ratios(results):
    """Each alibi/fork figure divided by the sinusoidal one of the same configuration."""
    key = lambda r: (r["kind"], r["length"], r["stride"], r["rows"])  # noqa: E731
    baseline = {key(r): r for r in results if r["mode"] == "sinusoidal" and "error" not in r}
    table = []
    for r in results:
        b = baseline.get(key(r))
        row = dict(r)
        if b and "error" not in r:
            row["speed_ratio"] = r["tokens_per_s"] / b["tokens_per_s"]
            row["memory_ratio"] = r["peak_mib"] / b["peak_mib"]
        table.append(row)
    return table


def markdown(table):
    lines = ["| what | L | stride | windows/batch | mode | tokens/s | peak MiB | speed vs sinusoidal | memory vs sinusoidal |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        if "error" in r:
            cells = [r["error"], "", "", ""]
        else:
            cells = [f"{r['tokens_per_s']:.0f}", f"{r['peak_mib']:.0f}",
                     f"{r['speed_ratio']:.3f}" if "speed_ratio" in r else "",
                     f"{r['memory_ratio']:.3f}" if "memory_ratio" in r else ""]
        what = {"train": "training", "forward": "bare forward", "eval": "eval, nonoverlapping",
                "sliding": "eval, sliding"}[r["kind"]]
        lines.append("| " + " | ".join([what, str(r["length"]), str(r["stride"] or ""), str(r["rows"] or ""),
                                         r["mode"], *cells]) + " |")
    return "\n".join(lines) + "\n"


def paired_markdown(paired, steps):
    lines = [f"Training speed, paired (one process, {steps} interleaved steps per mode, median step time):", "",
             "| L | mode | speed vs sinusoidal |", "|---|---|---|"]
    for r in paired:
        for mode, ratio in (r.get("paired_speed_ratio") or {m: None for m in r["modes"]}).items():
            lines.append(f"| {r['length']} | {mode} | {r.get('error', '') if ratio is None else f'{ratio:.3f}'} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--job", help=argparse.SUPPRESS)
    p.add_argument("--smoke", action="store_true", help="smallest configuration, in this process, printed only (CI)")
    p.add_argument("--arch", default="small", choices=["small", "wiki103"])
    p.add_argument("--modes", nargs="+", default=list(MODES), type=mode_name,
                   help="sinusoidal (the baseline) is always measured; MODE@KERNEL: a plugin mode on that kernel")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--lengths", type=int, nargs="*", default=[128, 512, 1024], help="training lengths L (none: skip)")
    p.add_argument("--eval-lengths", type=int, nargs="*", default=[512, 2048, 8192], help="L_valid (none: skip)")
    p.add_argument("--sliding-batches", type=int, nargs="*", default=[1, 8], help="(none: skip)")
    p.add_argument("--steps", type=int, default=8, help="measured steps (after one warm-up)")
    p.add_argument("--repeats", type=int, default=2, help="runs of each training configuration (best kept; 0: skip)")
    p.add_argument("--paired-steps", type=int, default=12, help="interleaved steps per mode, paired run")
    p.add_argument("--out", help="write the table with its provenance here (default: print only)")
    p.add_argument("--rows", help="append each job's row here as JSON the moment it is measured")
    args = p.parse_args()
    if args.job:
        job = json.loads(args.job)
        print(json.dumps(paired_training(job) if job["kind"] == "paired" else measure(job)))
        return
    args.vocab, args.tokens = None, None  # the arch's dictionary; TOKENS per training batch
    if args.smoke:  # every mode, every kind but sliding windows (the same forward); 576 tokens: blocked
        # kernels; the smallest dictionary the adaptive cutoffs (2000, 10000) take, and small batches
        args.lengths, args.eval_lengths, args.sliding_batches, args.steps, args.repeats = [64], [576], [], 1, 1
        args.paired_steps, args.vocab, args.tokens = 1, 10004, 256
    args.modes = ["sinusoidal"] + [m for m in args.modes if m != "sinusoidal"]
    in_process = args.smoke or args.device.startswith("cuda")
    results = []
    for job in plan(args):
        results.append(run_job(job, in_process=in_process))
        append_row(args.rows, results[-1])
        print(f"[{time.perf_counter() - STARTED:.0f} s] {job['kind']} {job['mode']} L {job['length']}: "
              + ", ".join(f"{k} {results[-1][k]}" for k in ("error", "import_s", "build_s", "warmup_s", "measured_s")
                          if k in results[-1]), file=sys.stderr, flush=True)
    paired = [r for r in results if r["kind"] == "paired"]
    table = ratios(best_of_repeats([r for r in results if r["kind"] != "paired"]))
    text = (header(f"arch {args.arch}, {args.dtype}; best of {args.repeats} interleaved runs of {args.steps} steps "
                   "for training.", args.device) + "\n\n" + markdown(table) + "\n" + paired_markdown(paired, args.paired_steps))
    emit(text, args.out, table + paired)


if __name__ == "__main__":
    main()
