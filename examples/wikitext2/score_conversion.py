"""examples/wikitext2/convert.sh's scoring: every model of the conversion at each L_VALID (its
table, OUT/results.jsonl) and every kept checkpoint at L (the recovery curve, OUT/recovery.jsonl),
all checked first and then scored in one process (scripts/evaluate.py's score).

    python3 examples/wikitext2/score_conversion.py DATA OUT_DIR --length L --lengths "L_VALID..." \
        --strides "0 /2" --updates UPDATES --finetune FINETUNE --every EVERY --teacher T.pt \
        --converted C.pt --ce DIR --distill DIR --continued DIR --scratch DIR
"""
import argparse
import glob
import os
import runpy
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
evaluate = runpy.run_path(os.path.join(REPO, "scripts", "evaluate.py"))
Scoring = evaluate["Scoring"]


def checkpoint_at(save_dir, updates, every):
    """The interval checkpoint fairseq saved after that many updates (checkpoint_EPOCH_UPDATES.pt)."""
    found = sorted(glob.glob(os.path.join(save_dir, f"checkpoint_*_{updates}.pt")))
    if not found:
        sys.exit(f"error: no checkpoint after {updates} updates in {save_dir} (is {updates} a multiple of EVERY={every}?)")
    return found[0]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("out")
    p.add_argument("--length", type=int, required=True, help="the training length L")
    p.add_argument("--lengths", required=True, help="L_valid values of the table")
    p.add_argument("--strides", default="0")
    p.add_argument("--updates", type=int, required=True, help="the teacher's updates")
    p.add_argument("--finetune", type=int, required=True, help="updates of each fine-tune")
    p.add_argument("--every", type=int, required=True, help="updates between kept checkpoints")
    for name in ("teacher", "converted"):
        p.add_argument(f"--{name}", required=True, help="checkpoint")
    for name in ("ce", "distill", "continued", "scratch"):
        p.add_argument(f"--{name}", required=True, help="save directory")
    args = p.parse_args()
    lengths, strides = [int(x) for x in args.lengths.split()], args.strides.split()
    total = args.updates + args.finetune
    results, recovery = os.path.join(args.out, "results.jsonl"), os.path.join(args.out, "recovery.jsonl")
    table = [
        (f"Sinusoidal teacher ({args.updates})", args.teacher),
        ("Converted, not fine-tuned", args.converted),
        (f"Converted + {args.finetune} CE", os.path.join(args.ce, "checkpoint_last.pt")),
        (f"Converted + {args.finetune} distill", os.path.join(args.distill, "checkpoint_last.pt")),
        (f"Sinusoidal teacher continued (+ {args.finetune})", os.path.join(args.continued, "checkpoint_last.pt")),
        (f"ALiBi from scratch ({args.updates})", checkpoint_at(args.scratch, args.updates, args.every)),
        (f"ALiBi from scratch ({total})", os.path.join(args.scratch, "checkpoint_last.pt")),
    ]
    scorings = [Scoring(checkpoint, results, lengths, label, strides) for label, checkpoint in table]
    # The recovery curve: each run's kept checkpoints (checkpoint_EPOCH_UPDATES.pt), at L.
    for label in ("ce", "distill", "continued", "scratch"):
        for checkpoint in sorted(glob.glob(os.path.join(getattr(args, label), "checkpoint_*_*.pt"))):
            scorings.append(Scoring(checkpoint, recovery, [args.length], label, show=False))
    scorings += [Scoring(args.converted, recovery, [args.length], "converted", show=False),
                 Scoring(args.teacher, recovery, [args.length], "teacher", show=False)]
    print(f"== scoring {len(table)} models at L_valid = {args.lengths}, then {len(scorings) - len(table)} "
          f"checkpoints at L = {args.length} (the recovery curve, every {args.every} updates)", flush=True)
    evaluate["score"](scorings, args.data)


if __name__ == "__main__":
    main()
