#!/usr/bin/env python3
"""The cost of --document-separator, as ratios against the same model without it, in one run.

    python benchmarks/documents.py --out benchmarks/documents-cpu.md
    python benchmarks/documents.py --smoke          # the smallest configuration

Tokens: WikiText-2 with <doc> between articles (scripts/prepare-wikitext.sh --documents 2), in
consecutive blocks as fairseq's --sample-break-mode none cuts them, so batches hold article ends
as often as in training. Both models of a pair have the same weights and see the same batches.
- Training (small architecture, L tokens, TOKENS per batch): forward, adaptive-softmax loss,
  backward, Adam step; the pair's steps interleaved in one process (A B B A ...), the ratio of
  median step times, and the spread of the per-round ratios (the machine's noise).
- Long evaluation (ALiBi, the decoder's features of one sequence of L_valid tokens centred on an
  article end, no gradients): without the option
  (the blocked kernel), with it (auto: the blocked kernel's document path), and with it on the
  dense mask (sdpa); time paired as above, peak memory (max RSS) of each in its own process.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench import train_step  # noqa: E402
from provenance import emit, header  # noqa: E402

DATA = os.path.join("data-bin", "wikitext-2-documents")
SEPARATOR = "<doc>"


def stream(data, split):
    """(tokens of the split as one stream, the dictionary)."""
    from fairseq.data import Dictionary, data_utils

    if not os.path.isfile(os.path.join(data, f"{split}.idx")):
        raise SystemExit(f"error: {data} has no {split} split: run scripts/prepare-wikitext.sh --documents 2 first")
    dictionary = Dictionary.load(os.path.join(data, "dict.txt"))
    dataset = data_utils.load_indexed_dataset(os.path.join(data, split), dictionary)
    return torch.cat([dataset[i] for i in range(len(dataset))]), dictionary


def build(method, dictionary, documents, kernel="auto", arch="small"):
    from fairseq_alibi.models.build import build_model

    flags = ["--alibi-attention", kernel] if method == "alibi" else []
    torch.manual_seed(0)  # the same weights with and without the option
    model, _ = build_model(f"{method}_transformer_lm_{arch}", len(dictionary) - 4, flags)
    # build_model's dictionary (same size) names its words w0..: what --document-separator <doc>
    # sets on the real data's dictionary, set here by index.
    model.decoder.document_separator = dictionary.index(SEPARATOR) if documents else None
    return model


def paired_training(method, dictionary, tokens, length, batch_tokens, steps):
    rows = batch_tokens // length
    blocks = tokens[: len(tokens) // length * length].view(-1, length)
    models = {documents: build(method, dictionary, documents).train() for documents in (False, True)}
    optimizers = {d: torch.optim.Adam(m.parameters(), lr=1e-4) for d, m in models.items()}
    times = {False: [], True: []}
    with_separator = 0
    for step in range(steps + 1):
        x = blocks[step * rows:(step + 1) * rows]
        with_separator += int(bool((x[:, :-1] == dictionary.index(SEPARATOR)).any())) if step else 0
        for documents in ((False, True) if step % 2 else (True, False)):
            start = time.perf_counter()
            train_step(models[documents], optimizers[documents], x)
            if step > 0:  # the first round warms up
                times[documents].append(time.perf_counter() - start)
    ratios = sorted(a / b for a, b in zip(times[False], times[True]))  # speed with / without
    quartiles = statistics.quantiles(ratios, n=4)
    return {"method": method, "length": length, "steps": steps, "batches_with_separator": with_separator,
            "speed_ratio": statistics.median(times[False]) / statistics.median(times[True]),
            "round_ratio_quartiles": [quartiles[0], quartiles[2]],
            "step_ms": {"without": 1000 * statistics.median(times[False]), "with": 1000 * statistics.median(times[True])}}


EVAL_MODES = {"without": (False, "auto"), "with": (True, "auto"), "with, dense mask": (True, "sdpa")}
DENSE_UP_TO = 4096  # the dense mask past this: heads x T x T fp32 (8.6 GB at 16384)


def window(tokens, dictionary, l_valid):
    """L_valid consecutive tokens centred on the first article end (so that short windows hold one)."""
    first = int((tokens == dictionary.index(SEPARATOR)).nonzero()[0])
    start = max(0, min(first - l_valid // 2, len(tokens) - l_valid))
    return tokens[start:start + l_valid][None]


def evaluate_once(model, x):
    """The decoder's features: what the option changes (the vocabulary's log-probabilities after it
    cost the same either way, and their memory would hide the attention's)."""
    with torch.no_grad():
        model(x, features_only=True)


def paired_evaluation(dictionary, tokens, l_valid, repeats):
    x = window(tokens, dictionary, l_valid)
    models = {name: build("alibi", dictionary, d, kernel).eval() for name, (d, kernel) in EVAL_MODES.items()
              if kernel != "sdpa" or l_valid <= DENSE_UP_TO}
    times = {name: [] for name in models}
    for turn in range(repeats + 1):
        order = list(models)[turn % len(models):] + list(models)[:turn % len(models)]
        for name in order:
            start = time.perf_counter()
            evaluate_once(models[name], x)
            if turn > 0:
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["without"])
    return {name: {"ms": 1000 * statistics.median(t), "speed_vs_without": base / statistics.median(t)}
            for name, t in times.items()}


def peak_memory(data, l_valid, name):
    """Peak RSS (MiB) of a fresh process that evaluates once in mode `name` (loading included)."""
    code = (f"import sys; sys.argv = ['x']; sys.path[:0] = [{HERE!r}, {os.path.dirname(HERE)!r}]\n"
            "import documents as b\n"
            f"tokens, d = b.stream({data!r}, 'valid')\n"
            f"m = b.build('alibi', d, *b.EVAL_MODES[{name!r}]).eval()\n"
            f"b.evaluate_once(m, b.window(tokens, d, {l_valid}))\n"
            "from bench import peak_rss_mib; print(peak_rss_mib())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stderr.strip().splitlines()[-1])
    return float(proc.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=DATA)
    p.add_argument("--length", type=int, default=64, help="training L")
    p.add_argument("--tokens", type=int, default=4096, help="tokens per training batch")
    p.add_argument("--steps", type=int, default=60, help="interleaved training rounds")
    p.add_argument("--eval-lengths", type=int, nargs="*", default=[4096, 16384])
    p.add_argument("--repeats", type=int, default=5, help="interleaved evaluation rounds")
    p.add_argument("--smoke", action="store_true", help="the smallest configuration")
    p.add_argument("--out")
    args = p.parse_args()
    if args.smoke:
        args.steps, args.eval_lengths, args.repeats, args.tokens = 4, [1024], 1, 1024
    torch.set_num_threads(os.cpu_count() or 1)
    train_tokens, dictionary = stream(args.data, "train")
    valid_tokens, _ = stream(args.data, "valid")
    started = time.time()
    training = [paired_training(m, dictionary, train_tokens, args.length, args.tokens, args.steps)
                for m in ("alibi", "rotary")]
    evaluation = []
    for l_valid in args.eval_lengths:
        paired = paired_evaluation(dictionary, valid_tokens, l_valid, args.repeats)
        separators = int((window(valid_tokens, dictionary, l_valid) == dictionary.index(SEPARATOR)).sum())
        for name, row in paired.items():
            evaluation.append({"l_valid": l_valid, "separators": separators, "mode": name, **row,
                               "peak_mib": peak_memory(args.data, l_valid, name)})
    lines = [header(f"WikiText-2 with {SEPARATOR} between articles; arch small, float32, "
                    f"{torch.get_num_threads()} threads; {time.time() - started:.0f} s"), "",
             f"Training, L={args.length}, {args.tokens} tokens per batch, {args.steps} interleaved rounds "
             "(speed with the option / without; quartiles of the per-round ratios):", "",
             "| method | batches with an article end | ms/step without | ms/step with | speed ratio | round ratios, quartiles |",
             "|---|---|---|---|---|---|"]
    for r in training:
        lines.append(f"| {r['method']} | {r['batches_with_separator']}/{r['steps']} | {r['step_ms']['without']:.1f} | "
                     f"{r['step_ms']['with']:.1f} | {r['speed_ratio']:.3f} | "
                     f"{r['round_ratio_quartiles'][0]:.3f}-{r['round_ratio_quartiles'][1]:.3f} |")
    lines += ["", f"Evaluation, ALiBi, the features of one sequence, no gradients ({args.repeats} interleaved rounds; peak: its own process):",
              "", "| L_valid | article ends | mode | ms | speed vs without | peak MiB |", "|---|---|---|---|---|---|"]
    for r in evaluation:
        lines.append(f"| {r['l_valid']} | {r['separators']} | {r['mode']} | {r['ms']:.0f} | {r['speed_vs_without']:.3f} | "
                     f"{r['peak_mib']:.0f} |")
    emit("\n".join(lines) + "\n", args.out, {"training": training, "evaluation": evaluation})


if __name__ == "__main__":
    main()
