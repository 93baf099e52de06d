"""What a distillation update costs against a cross-entropy one: the conversion's two fine-tunes
(scripts/experiment.py conversion), each run for a few updates with scripts/train.sh from the same
converted model, the two kinds interleaved round by round so that both see the same load.

    python benchmarks/distillation.py DATA TEACHER.pt CONVERTED.pt [--updates 40] [--rounds 3] [--out F.md]

A round trains each kind once into a temporary directory (nothing saved, no validation) and reads
fairseq's own rate for the run (`ups` of its epoch summary: start-up excluded). The table gives each
kind's median seconds per update and the ratio of the medians.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

from provenance import emit, header

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def seconds_per_update(data, converted, save_dir, updates, extra):
    command = [os.path.join(REPO, "scripts", "train.sh"), "alibi", "64", data, save_dir, "small", "--",
               "--finetune-from-model", converted, "--max-update", str(updates), "--seed", "1",
               "--log-interval", str(updates), "--no-progress-bar", "--disable-validation", "--no-save", *extra]
    done = subprocess.run(command, capture_output=True, text=True)
    found = re.search(r"\| train \| .*\| ups ([\d.]+)", done.stdout + done.stderr)
    if done.returncode or not found:
        sys.exit(f"error: the {'distillation' if extra else 'cross-entropy'} fine-tune failed:\n"
                 + (done.stdout + done.stderr)[-2000:])
    return 1 / float(found.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("teacher", help="the sinusoidal teacher (the conversion experiment: checkpoints/conversion/sinusoidal-L64/checkpoint_last.pt)")
    p.add_argument("converted", help="its conversion to ALiBi (checkpoints/conversion/converted-L64.pt)")
    p.add_argument("--updates", type=int, default=40, help="updates per run")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out")
    p.add_argument("--note", default="", help="what else ran on the machine meanwhile, for the table's header")
    args = p.parse_args()
    kinds = {"cross entropy": [],
             "distillation (w 0.5, T 2)": ["--criterion", "lm_distillation", "--teacher-path", args.teacher,
                                           "--distill-weight", "0.5", "--distill-temperature", "2"]}
    times = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for i, (kind, extra) in enumerate(kinds.items()):
                save_dir = os.path.join(scratch, f"{round_}-{i}")
                times[kind].append(seconds_per_update(args.data, args.converted, save_dir, args.updates, extra))
                print(f"round {round_ + 1}, {kind}: {times[kind][-1]:.3f} s per update", file=sys.stderr, flush=True)
    base = statistics.median(times["cross entropy"])
    lines = [header(f"L=64, the small recipe (2048 tokens per update), {args.updates} updates per run, "
                    f"{args.rounds} interleaved rounds, one thread per process. {args.note}".strip()), "",
             "| fine-tune | seconds per update (each round) | median | vs cross entropy |", "|---|---|---|---|"]
    for kind, t in times.items():
        median = statistics.median(t)
        lines.append(f"| {kind} | {', '.join(f'{x:.3f}' for x in t)} | {median:.3f} | {median / base:.2f}x |")
    emit("\n".join(lines) + "\n", args.out, [{"kind": k, "seconds_per_update": t} for k, t in times.items()])


if __name__ == "__main__":
    main()
