#!/usr/bin/env python3
"""ALiBi before and after a change of the code, in one process, steps interleaved.

    python benchmarks/before_after.py --ref 0cb0917 --out benchmarks/before-after-cpu.md

The package as it was at --ref (from git history) is imported under another name beside today's,
and the same ALiBi model (alibi_transformer_lm_small, same weights) is built twice from each. The
four models take turns, step by step, in a rotating order. Training: forward + backward + Adam
step on batches of 4096 tokens at L; evaluation: a forward of one sequence of L_valid tokens
without gradients (the blocked kernel above 512 tokens on CPU). Reported, of median step times:
after / before (the mean of the four cross ratios) and the spread between two copies of the same
code (the larger of |before2 / before1 - 1| and |after2 / after1 - 1|): the noise floor. A
difference within it is not separated.
"""
import argparse
import importlib
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)
from bench import TOKENS, VOCABS, batches, train_step  # noqa: E402
from provenance import emit, header  # noqa: E402


def previous_package(ref, directory):
    """The ALiBi LM class of the package as it was at `ref`, imported as fairseq_alibi_previous
    beside today's. fairseq's registries refuse a second registration of a name, so while the
    previous package is imported its register_* decorators are no-ops: today's models keep every
    name, and the previous class is built directly."""
    import fairseq_alibi.plugin  # noqa: F401  (today's, registered first)
    from fairseq import criterions, models

    archive = subprocess.run(["git", "archive", ref, "fairseq_alibi"], cwd=REPO, capture_output=True, check=True)
    tarfile.open(fileobj=io.BytesIO(archive.stdout)).extractall(directory)
    os.rename(os.path.join(directory, "fairseq_alibi"), os.path.join(directory, "fairseq_alibi_previous"))
    unregistered = lambda *args, **kwargs: (lambda cls: cls)  # noqa: E731
    saved = [(module, name, getattr(module, name)) for module, name in
             [(models, "register_model"), (models, "register_model_architecture"), (criterions, "register_criterion")]]
    for module, name, _ in saved:
        setattr(module, name, unregistered)
    sys.path.insert(0, directory)
    try:
        return importlib.import_module("fairseq_alibi_previous").alibi_lm.AlibiTransformerLanguageModel
    finally:
        for module, name, function in saved:
            setattr(module, name, function)


def build_both(previous_lm, vocab):
    """The same small ALiBi model from today's code and from the previous one (same seed, same
    arguments: today's parser, whose options include the previous ones)."""
    import types

    from fairseq import models, options
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    for i in range(vocab):
        dictionary.add_symbol(f"w{i}")
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, ["/dev/null", "--task", "language_modeling", "--arch",
                                                "alibi_transformer_lm_small"])
    task = types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    built = {}
    after = models.ARCH_MODEL_REGISTRY["alibi_transformer_lm_small"].build_model
    for name, build in [("before", previous_lm.build_model), ("after", after),
                        ("before again", previous_lm.build_model), ("after again", after)]:
        torch.manual_seed(0)
        built[name] = build(argparse.Namespace(**vars(args)), task)
    assert type(built["after"]).__module__.startswith("fairseq_alibi.")
    assert type(built["before"]).__module__.startswith("fairseq_alibi_previous.")
    return built


def interleaved(models, step, rounds):
    """Median seconds of `step(model)` per model, the models taking turns in a rotating order."""
    names = list(models)
    times = {name: [] for name in names}
    for r in range(rounds + 1):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            start = time.perf_counter()
            step(models[name])
            if r > 0:  # the first round warms up
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", default="0cb0917", help="the commit to compare today's code with")
    p.add_argument("--lengths", type=int, nargs="*", default=[128, 512, 1024], help="training lengths")
    p.add_argument("--eval-lengths", type=int, nargs="*", default=[1024, 4096], help="evaluation lengths")
    p.add_argument("--rounds", type=int, default=20, help="measured steps per model (after one warm-up round)")
    p.add_argument("--out")
    args = p.parse_args()
    vocab = VOCABS["small"]
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        built = build_both(previous_package(args.ref, directory), vocab)
        for length in args.lengths:
            optimizers = {id(m): torch.optim.Adam(m.parameters(), lr=1e-4) for m in built.values()}
            x = batches(length, TOKENS, 1, torch.device("cpu"), vocab)[0]
            for m in built.values():
                m.train()
            med = interleaved(built, lambda m: train_step(m, optimizers[id(m)], x), args.rounds)
            rows.append({"kind": "training", "length": length, **med})
        for length in args.eval_lengths:
            x = batches(length, length, 1, torch.device("cpu"), vocab)[0]
            for m in built.values():
                m.eval()
            with torch.no_grad():
                med = interleaved(built, lambda m: m(x), args.rounds)
            rows.append({"kind": "evaluation forward", "length": length, **med})
    lines = ["| what | L | before (ms) | after (ms) | after / before | noise: same code, two copies |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        cross = statistics.mean(r[a] / r[b] for a in ("after", "after again") for b in ("before", "before again"))
        noise = max(abs(r["before again"] / r["before"] - 1), abs(r["after again"] / r["after"] - 1))
        r.update(ratio=cross, noise=noise)
        lines.append(f"| {r['kind']} | {r['length']} | {1000 * r['before']:.1f} | {1000 * r['after']:.1f} | "
                     f"{cross:.3f} | ±{noise:.3f} |")
    text = (header(f"ALiBi small, fp32, {args.rounds} interleaved rounds, median step times; before = "
                   f"`{args.ref}`, after = this commit", "cpu") + "\n\n" + "\n".join(lines) + "\n")
    emit(text, args.out, rows)


if __name__ == "__main__":
    main()
