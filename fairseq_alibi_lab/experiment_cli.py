"""The experiment runner's command line (scripts/experiment.py, `python -m
fairseq_alibi_lab.experiment_cli`): its options, each checked once in one line, then the runner
(fairseq_alibi_lab/runner.py, whose docstring is the --help)."""
import argparse
import os
import re
import shlex
import signal

from fairseq_alibi.tools import files
from fairseq_alibi_lab import recipes, runner
from fairseq_alibi_lab.experiments import EXPERIMENTS, names


# The environment variables of the bash presets (examples/wikitext2/common.sh) and the runner's options
# for them; not DATA, OUT or CHECKPOINTS: names too common to refuse (a GPU machine here sets OUT).
PRESET_VARIABLES = {"L": "--train-length", "UPDATES": "--updates", "L_VALID": "--lengths",
                    "TRAIN_FLAGS": "--train-flags", "VARIANTS": "--models",
                    "SLIDING": "nothing (the declaration scores both strides)",
                    "LITTLEBIRD_BLOCK": "an experiment declared with littlebird(BLOCK, PACK)",
                    "LITTLEBIRD_PACK": "an experiment declared with littlebird(BLOCK, PACK)",
                    "ALIBI_L": "--train-length", "SINUSOIDAL_LS": "nothing (the trade's declaration: multiples of L)",
                    "SEEDS": "--seeds", "TASK_FLAGS": "--task-flags"}


@files.one_line_on_disk_faults
def main():
    p = argparse.ArgumentParser(description=runner.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="the experiment: " + ", ".join(EXPERIMENTS))
    p.add_argument("--list", action="store_true", help="list the experiments and their models")
    p.add_argument("--seeds", type=int, nargs="+", help="training seeds (default: the declaration's)")
    p.add_argument("--models", nargs="+", help="only these models (labels, or their lower-case-hyphen form; "
                   "NAME@K: the one trained at K x L, e.g. sinusoidal@16 in trade)")
    p.add_argument("--updates", type=int, help="training updates (default: the recipe's)")
    p.add_argument("--train-length", type=int, help="L (default: the declaration's)")
    p.add_argument("--lengths", type=int, nargs="+", help="L_valid values (default: the declaration's multiples of L)")
    p.add_argument("--data", help="a binarized data directory (default: WikiText-2, prepared if needed; synthetic: "
                   "where its tasks are made, DATA/text and DATA/bin, default data-bin/synthetic)")
    p.add_argument("--out", help="results, tables and figures (default: runs/NAME)")
    p.add_argument("--checkpoints", help="checkpoints (default: checkpoints/NAME)")
    p.add_argument("--train-flags", default="", help="extra fairseq-train flags for every model (toy sizes)")
    p.add_argument("--task-flags", default="", help="synthetic only: fairseq_alibi_lab/synthetic_tasks.py options (toy sizes)")
    p.add_argument("--parallel", type=int, default=1,
                   help="run this many (model, seed) jobs at once (a GPU or many cores; default 1: one at a time)")
    p.add_argument("--retire", metavar="WHY", help="move the rows of the selected models and seeds (their checkpoints' "
                   "rows) from OUT's results to OUT/retired.jsonl with this reason, then run them anew: a second "
                   "training of a (model, seed) is never mixed with the first's rows; rows of the checkpoint file "
                   "there now stay, so the same command continues a stopped run")
    p.add_argument("--tables", action="store_true",
                   help="only rebuild the tables and figures from OUT/results.jsonl (rows merged from elsewhere)")
    args = p.parse_args()
    if args.list or not args.name:
        for name, e in EXPERIMENTS.items():
            print(f"{name}: {e.about}\n    models: {', '.join(m.label + (f' (at {m.train_multiple}L)' if m.train_multiple > 1 else '') for m in e.models)}; seeds {' '.join(map(str, e.seeds))}")
        return
    if args.name not in EXPERIMENTS:
        p.error(f"unknown experiment '{args.name}': use one of {', '.join(EXPERIMENTS)} (--list describes them)")
    # The bash presets read these; the runner does not: a run that silently ignored L=128 would
    # train and tabulate L=64 under the user's belief that it is L=128.
    for variable, option in PRESET_VARIABLES.items():
        if os.environ.get(variable):
            p.error(f"{variable}={os.environ[variable]} is not read by the experiment runner (it takes options): "
                    f"use {option}, or unset {variable}")
    experiment = EXPERIMENTS[args.name]
    known = {name for m in experiment.models for name in names(m)}
    for name in args.models or ():
        if name not in known:
            shown = dict.fromkeys(names(m)[1 if m.train_multiple == 1 else 2] for m in experiment.models)
            p.error(f"unknown model '{name}' for {args.name}: use one of {', '.join(shown)}")
    for name, values in (("--seeds", args.seeds), ("--lengths", args.lengths), ("--updates", [args.updates]),
                         ("--train-length", [args.train_length]), ("--parallel", [args.parallel])):
        if any(v is not None and v < (0 if name == "--seeds" else 1) for v in values or ()):
            p.error(f"{name} must be {'non-negative' if name == '--seeds' else 'positive'} integers")
    if args.retire is not None and (not args.retire.strip() or args.tables):
        p.error("--retire takes the reason the rows are retired (kept beside them), and not with --tables")
    if args.task_flags and experiment.recipe != "synthetic":
        p.error(f"--task-flags is for the synthetic tasks, not {args.name}: leave it out")
    args.train_flags, args.task_flags = shlex.split(args.train_flags), shlex.split(args.task_flags)
    # A model is its declaration: flags that make another one would be trained and tabulated under its label.
    declared = [f for f in args.train_flags if f.split("=")[0] in ("--arch", "--user-dir", "--task", "--tokens-per-sample")]
    if declared:
        p.error(f"--train-flags may not set {', '.join(declared)}: each model's architecture, task and L are its "
                "declaration's (use --train-length for L, or declare another experiment)")
    if any(f.split("=")[0] == "--seed" for f in args.train_flags):  # it would train another seed in this seed's folder
        p.error("--train-flags may not set --seed: a run's seed is its folder's and its rows'; give --seeds")
    # Nor what a model's declaration sets (KERPLE's variant, an encoder's ALiBi, LittleBird's blocks):
    # trained so, it would be tabulated under a label that says otherwise.
    selected = [m for m in experiment.models if not args.models or set(names(m)) & set(args.models)]
    owned = {}
    for m in selected:
        for f in m.flags:  # its sizes aside (the toy runs shrink a twin's declared dimensions)
            if f.startswith("--") and not re.fullmatch(r"--(encoder|decoder)-[a-z-]*(layers|dim|heads)", f.split("=")[0]) \
                    and m.label not in owned.setdefault(f.split("=")[0], []):
                owned[f.split("=")[0]].append(m.label)
    overridden = [f"{f.split('=')[0]} ({', '.join(owned[f.split('=')[0]])})" for f in args.train_flags
                  if f.split("=")[0] in owned and f.split("=")[0] not in recipes.BOOKKEEPING]
    if overridden:
        p.error(f"--train-flags may not set {', '.join(overridden)}: the model's declaration sets it, and its label "
                "says so; declare another model or experiment for another value")
    # Paths given are the caller's; defaults (runs/, checkpoints/, data-bin/) are the repository's.
    # Those inside the repository are kept relative to it, as the defaults are: rows name the same
    # checkpoint whichever way it was given, and no machine's paths.
    for name in ("data", "out", "checkpoints"):
        if getattr(args, name):
            path = os.path.abspath(getattr(args, name))
            inside = os.path.relpath(path, runner.REPO)
            setattr(args, name, path if inside.split(os.sep)[0] == ".." else inside)
    os.chdir(runner.REPO)
    runner.Runner(args.name, experiment, args).run()


def cli():
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops as Ctrl-C does
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("\nstopped: run the same command again to continue (finished work is kept)")


if __name__ == "__main__":
    cli()
