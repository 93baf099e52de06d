"""examples/wikitext2/convert.sh's scoring: every model of the conversion at each L_VALID (its
table, OUT/results.jsonl) and the kept checkpoints at L (the recovery curve, OUT/recovery.jsonl;
recovery_checkpoints says which), all checked first and then scored in one process
(scripts/evaluate.py's score), and the unigram model's rows (scripts/unigram.py), the table's floor.

    python3 examples/wikitext2/score_conversion.py DATA OUT_DIR --length L --lengths "L_VALID..." \
        --strides "0 /2" --updates UPDATES --finetune FINETUNE --every EVERY --teacher T.pt \
        --converted C.pt --ce DIR... --distill DIR... --continued DIR... --scratch DIR...

Each of --ce, --distill, --continued and --scratch takes one save directory per training seed (their
rows share a label and carry the seed: the tables show mean ± std over them).

An interrupted scoring continues: OUT/scoring.json records these settings, and with the same ones a
measurement already in OUT's results is not made again; OUT holding scores made with other settings
is refused. --check does only that check (convert.sh, before it trains).
"""
import argparse
import glob
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from fairseq_alibi_lab import evaluate  # noqa: E402
from fairseq_alibi import files  # noqa: E402
Scoring = evaluate.Scoring


def checkpoint_at(save_dir, updates, every):
    """The interval checkpoint fairseq saved after that many updates (checkpoint_EPOCH_UPDATES.pt)."""
    found = sorted(glob.glob(os.path.join(save_dir, f"checkpoint_*_{updates}.pt")))
    if not found:
        sys.exit(f"error: no checkpoint after {updates} updates in {save_dir} (is {updates} a multiple of EVERY={every}?)")
    return found[0]


# What every row of the conversion records of it (results.ROW_IDENTITY): convert.sh trains the small preset.
FIELDS = {"experiment": "conversion", "recipe": "small"}
SPARSE = 4  # the from-scratch run before the fine-tuning window: one kept checkpoint in SPARSE scored


def recovery_checkpoints(save_dir, updates, every, scratch=False):
    """A run's kept checkpoints (checkpoint_EPOCH_UPDATES.pt) on the recovery curve, by update count.
    The from-scratch run keeps one every EVERY updates from its first; only the last FINETUNE of them
    are compared with the fine-tunes, so before the teacher's UPDATES only every SPARSE-th is scored
    (its learning curve, at a quarter of the cost: each scoring is a full pass over the validation set)."""
    found = {int(os.path.basename(path)[:-3].rsplit("_", 1)[1]): path
             for path in glob.glob(os.path.join(save_dir, "checkpoint_*_*.pt"))}
    return [found[n] for n in sorted(found) if not scratch or n >= updates or n % (SPARSE * every) == 0]


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
        p.add_argument(f"--{name}", required=True, nargs="+", help="save directories, one per seed")
    p.add_argument("--check", action="store_true", help="only check that OUT holds no scores of other settings")
    args = p.parse_args()
    lengths, strides = [int(x) for x in args.lengths.split()], args.strides.split()
    total = args.updates + args.finetune
    results, recovery = os.path.join(args.out, "results.jsonl"), os.path.join(args.out, "recovery.jsonl")
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "check")}
    recorded = os.path.join(args.out, "scoring.json")
    if os.path.exists(results) or os.path.exists(recovery):
        before = None
        if os.path.isfile(recorded):
            with open(recorded) as f:
                before = json.load(f)
        if before != settings:
            changed = ("no record of its settings" if before is None else "; ".join(
                f"--{k} {before.get(k)} then, {v} now" for k, v in settings.items() if before.get(k) != v))
            sys.exit(f"error: {args.out} holds the scores of another conversion ({changed}): "
                     "move it away or set OUT to a new directory")
    if args.check:
        return
    with files.written_whole(recorded) as partial, open(partial, "w") as f:
        json.dump(settings, f, indent=1)
    last = lambda dirs: [os.path.join(d, "checkpoint_last.pt") for d in dirs]  # noqa: E731
    table = [
        (f"Sinusoidal teacher ({args.updates})", [args.teacher]),
        ("Converted, not fine-tuned", [args.converted]),
        (f"Converted + {args.finetune} CE", last(args.ce)),
        (f"Converted + {args.finetune} distill", last(args.distill)),
        (f"Sinusoidal teacher continued (+ {args.finetune})", last(args.continued)),
        (f"ALiBi from scratch ({args.updates})", [checkpoint_at(d, args.updates, args.every) for d in args.scratch]),
        (f"ALiBi from scratch ({total})", last(args.scratch)),
    ]
    scorings = [Scoring(checkpoint, results, lengths, label, strides) for label, checkpoints in table
                for checkpoint in checkpoints]
    table_scorings = len(scorings)
    # The recovery curve: each run's kept checkpoints (checkpoint_EPOCH_UPDATES.pt), at L.
    for label in ("ce", "distill", "continued", "scratch"):
        for save_dir in getattr(args, label):
            for checkpoint in recovery_checkpoints(save_dir, args.updates, args.every, scratch=label == "scratch"):
                scorings.append(Scoring(checkpoint, recovery, [args.length], label, show=False))
    scorings += [Scoring(args.converted, recovery, [args.length], "converted", show=False),
                 Scoring(args.teacher, recovery, [args.length], "teacher", show=False)]
    print(f"== scoring {table_scorings} models at L_valid = {args.lengths}, then {len(scorings) - table_scorings} "
          f"checkpoints at L = {args.length} (the recovery curve: every {args.every} updates, "
          f"ALiBi from scratch every {SPARSE * args.every} before {args.updates}); "
          f"what {args.out} already holds is kept", flush=True)
    made = evaluate.score(scorings, args.data, resume=True, fields=FIELDS)
    print(f"== {made} measurements made", flush=True)
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "unigram.py"), args.data, results,  # the floor
                    "--lengths", args.lengths, "--strides", args.strides, "--fields", json.dumps(FIELDS)],
                   check=True)  # (the rows it lacks)


if __name__ == "__main__":
    main()
