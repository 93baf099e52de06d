"""The command line (the old name `python -m fairseq_alibi_lab.retrieval` is an alias):

    python -m fairseq_alibi_lab.retrieval make OUT_DIR --source ../shared/data/wikitext-2 [--length 64]
        [--fraction F] [--seed N] [--examples N] [--long-examples N]      (make --help: their defaults)
    python -m fairseq_alibi_lab.retrieval score CHECKPOINT DATA OUT_DIR/test.jsonl OUT.jsonl [--label NAME]
        [--scalings ...] [--lengths ...] [--decoder hf|fairseq]
    python -m fairseq_alibi_lab.retrieval floors OUT_DIR/test.jsonl [OUT_DIR/test-long.jsonl] FLOORS.jsonl

make: the mixed training text and the test prompts (prompts.py); score: exact match of a checkpoint on
them (score.py); floors: the floors of a test set, from its prompts (floors.py)."""
import argparse
import os
import sys

from fairseq_alibi.tools.files import one_line_on_disk_faults
from fairseq_alibi_lab.result_rows import add_row_arguments
from fairseq_alibi_lab.experiments.retrieval.data import EXAMPLES, FRACTION, LONG_EXAMPLES, TASK_SEED
from fairseq_alibi_lab.experiments.retrieval.floors import save_floors
from fairseq_alibi_lab.experiments.retrieval.prompts import LONG_TESTS, TASKS, make, shortest
from fairseq_alibi_lab.experiments.retrieval.score import DECODERS, score


@one_line_on_disk_faults
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m fairseq_alibi_lab.retrieval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make", help="the mixed training text and the test prompts")
    m.add_argument("out")
    m.add_argument("--source", required=True, help="the raw WikiText-2 directory (wiki.*.tokens)")
    m.add_argument("--length", type=int, default=64, help="the training length L (default %(default)s)")
    m.add_argument("--fraction", type=float, default=FRACTION,
                   help="the share of the training text that is retrieval examples (default %(default)s)")
    m.add_argument("--seed", type=int, default=TASK_SEED, help="the tasks' seed (default %(default)s)")
    m.add_argument("--examples", type=int, default=EXAMPLES, help="test prompts per task, length and depth (default %(default)s)")
    m.add_argument("--long-examples", type=int, default=LONG_EXAMPLES,
                   help=f"prompts per task, length and depth past 16L ({LONG_TESTS}; 0: none; default %(default)s)")
    s = sub.add_parser("score", help="exact-match accuracy of a checkpoint on test prompts")
    s.add_argument("checkpoint")
    s.add_argument("data", help="the binarized data (its dict.txt is the checkpoint's)")
    s.add_argument("tests", help="make's test.jsonl")
    s.add_argument("out", help="a JSON-lines file the rows are appended to")
    add_row_arguments(s)
    s.add_argument("--scalings", nargs="+", default=["none"],
                   help="none, and ALiBi's or rotary's inference-time scalings (scored past the training length)")
    s.add_argument("--lengths", type=int, nargs="+", help="score only the prompts of these lengths")
    s.add_argument("--decoder", choices=DECODERS, default="hf",
                   help="greedy decoding by the exported class (hf, the default) or by the fairseq model itself "
                        "(fairseq: any plugin model, a length temperature's too)")
    f = sub.add_parser("floors", help="the floors of a test set, from its prompts (rows of their own)")
    f.add_argument("tests", nargs="+", help=f"make's test.jsonl (and {LONG_TESTS})")
    f.add_argument("out", help="a new JSON-lines file (the runner's: OUT/floors.jsonl)")
    args = p.parse_args(argv)
    if args.command == "floors":
        if os.path.exists(args.out):
            p.error(f"{args.out} exists: floors are written whole, once; give a new path")
        save_floors(args.tests, args.out)
        return 0
    if args.command == "make":
        need = max(map(shortest, TASKS))
        if args.length < need:
            p.error(f"--length {args.length}: the tasks need at least {need} words (multikey's needles and question)")
        if not 0 < args.fraction < 1:
            p.error(f"--fraction must be between 0 and 1, got {args.fraction}")
        if args.examples < 1 or args.long_examples < 0:
            p.error(f"--examples must be at least 1 and --long-examples at least 0, got {args.examples} and {args.long_examples}")
        make(args.out, args.source, args.length, args.fraction, args.seed, args.examples, args.long_examples)
    else:
        from fairseq_alibi_lab.result_rows import require_appendable, row_fields

        require_appendable(args.out)
        fields = row_fields(args.fields)
        score(args.checkpoint, args.data, args.tests, args.out, args.label, args.scalings, args.lengths, fields, args.decoder)


if __name__ == "__main__":
    sys.exit(main())
