"""Synthetic seq2seq tasks for length generalisation, generated deterministically.

    python3 -m fairseq_alibi_lab.synthetic_tasks OUT_DIR [--train 20000] [--per-bucket 200] [--seed 1]
        [--train-max 20] [--buckets 4]

Tasks (each example's source starts with the task's name, so one model learns all three):
- copy:    "copy 7 3 3 9" -> "7 3 3 9"
- reverse: "reverse 7 3 3 9" -> "9 3 3 7"
- add:     "add 4 7 + 9 5" -> "1 4 2" (two n-digit numbers, most significant digit first)
n is the task's size: the sequence length (copy, reverse) or the digits of each number (add).
Symbols are the ten digits. Training draws n uniformly from 1 .. train_max; the test sets hold
--per-bucket examples per task and bucket of n: 1-train_max (in distribution), then
train_max+1 .. 2 train_max, ..., up to buckets x train_max (4x by default), so train and test
lengths past training are disjoint. A test example that also occurs in training (the same source,
hence target) is dropped: short sizes have few distinct examples (copy of one digit: ten), so
the in-distribution bucket keeps fewer than --per-bucket (OUT_DIR/test_examples.txt says how
many per task and bucket). Writes OUT_DIR/{train,valid}.{src,tgt} and OUT_DIR/test{b}.{src,tgt}
for bucket b (1 = in distribution), OUT_DIR/buckets.txt, and OUT_DIR/options.json (the options
they were made with). OUT_DIR is written whole (a temporary directory renamed into place); a rerun
with the same options leaves it as it is, one with other options is refused.
"""
import argparse
import json
import os
import random
import shutil
import subprocess

from fairseq_alibi_lab.result_rows import options_changed

TASKS = ("copy", "reverse", "add")


def example(task, n, rng):
    """(source tokens, target tokens) of one example of size n."""
    if task == "add":
        a, b = (rng.randrange(10 ** (n - 1) if n > 1 else 0, 10 ** n) for _ in range(2))
        return ["add", *str(a), "+", *str(b)], list(str(a + b))
    digits = [str(rng.randrange(10)) for _ in range(n)]
    return [task, *digits], digits[::-1] if task == "reverse" else digits


def write(path, examples):
    with open(path + ".src", "w") as src, open(path + ".tgt", "w") as tgt:
        for s, t in examples:
            src.write(" ".join(s) + "\n")
            tgt.write(" ".join(t) + "\n")


OPTIONS = ("train", "valid", "per_bucket", "train_max", "buckets", "seed")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--train", type=int, default=20000, help="training examples (all tasks)")
    p.add_argument("--valid", type=int, default=600, help="validation examples (in distribution)")
    p.add_argument("--per-bucket", type=int, default=200, help="test examples per task and bucket")
    p.add_argument("--train-max", type=int, default=20, help="largest n in training")
    p.add_argument("--buckets", type=int, default=4, help="test buckets of train-max sizes each")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    for name in ("train", "valid", "per_bucket", "train_max", "buckets"):
        if getattr(args, name) < 1:
            raise SystemExit(f"error: --{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    options = {name: getattr(args, name) for name in OPTIONS}
    changed = options_changed(os.path.join(args.out, "options.json"), options)
    if changed is not None:
        if changed:
            said = "; ".join(f"--{k.replace('_', '-')} {then} then, {now} now" for k, then, now in changed)
            raise SystemExit(f"error: {args.out} holds tasks made with other options ({said}): "
                             "give another OUT_DIR (DATA_DIR for run.sh), or move it away to make them anew")
        print(f"{args.out} already holds these tasks: left as they are")
        return
    if os.path.exists(args.out) and os.listdir(args.out):
        raise SystemExit(f"error: {args.out} holds other files (tasks made without a record of their options?): "
                         "give another OUT_DIR, or move it away")
    final, args.out = args.out, args.out.rstrip("/") + ".part"
    shutil.rmtree(args.out, ignore_errors=True)  # ours: left by an interrupted run
    os.makedirs(args.out)
    rng = random.Random(args.seed)
    draw = lambda count, low, high: [example(rng.choice(TASKS), rng.randint(low, high), rng)  # noqa: E731
                                     for _ in range(count)]
    train = draw(args.train, 1, args.train_max)
    write(os.path.join(args.out, "train"), train)
    write(os.path.join(args.out, "valid"), draw(args.valid, 1, args.train_max))
    seen = {tuple(source) for source, _ in train}  # a source decides its target
    with open(os.path.join(args.out, "buckets.txt"), "w") as f, \
            open(os.path.join(args.out, "test_examples.txt"), "w") as kept:
        kept.write("bucket\ttask\tdrawn\tkept (not in training)\n")
        for b in range(1, args.buckets + 1):
            low, high = (b - 1) * args.train_max + 1, b * args.train_max
            bucket = []
            for task in TASKS:
                drawn = [example(task, rng.randint(low, high), rng) for _ in range(args.per_bucket)]
                unseen = [e for e in drawn if tuple(e[0]) not in seen]
                kept.write(f"test{b}\t{task}\t{len(drawn)}\t{len(unseen)}\n")
                bucket += unseen
            write(os.path.join(args.out, f"test{b}"), bucket)
            f.write(f"test{b}\t{low}\t{high}\n")
    with open(os.path.join(args.out, "options.json"), "w") as f:
        json.dump(options, f, indent=1)
    if os.path.isdir(final):
        os.rmdir(final)  # empty (checked above)
    os.replace(args.out, final)
    print(f"tasks written to {final}")


def prepared(directory, task_flags=()):
    """The tasks in DIRECTORY/text (made once; other options over made ones refused), binarized with
    one dictionary in DIRECTORY/bin (written whole: a temporary directory renamed into place): the
    experiment runner's data. Returns DIRECTORY."""
    text, binarized = os.path.join(directory, "text"), os.path.join(directory, "bin")
    main([text, *task_flags])
    if not os.path.isdir(binarized):
        with open(os.path.join(text, "buckets.txt")) as f:
            tests = ",".join(os.path.join(text, line.split()[0]) for line in f if line.strip())
        partial = binarized + ".part"
        shutil.rmtree(partial, ignore_errors=True)  # an interrupted earlier attempt's
        with open(os.path.join(directory, "preprocess.log"), "w") as log:
            done = subprocess.run(["fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt",
                                   "--trainpref", os.path.join(text, "train"), "--validpref", os.path.join(text, "valid"),
                                   "--testpref", tests, "--destdir", partial, "--joined-dictionary", "--workers", "2"],
                                  stdout=log, stderr=subprocess.STDOUT)
        if done.returncode:
            raise SystemExit(f"error: fairseq-preprocess failed on {text} (its log: {directory}/preprocess.log)")
        os.rename(partial, binarized)
    return directory


if __name__ == "__main__":
    main()
