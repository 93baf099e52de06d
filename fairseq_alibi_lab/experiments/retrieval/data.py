"""The experiment's data stage: the mixed training text and its test prompts made once under
data-bin/ and binarized with WikiText-2's dictionary (the runner's Stages.data and data_problem), and
where a binarized set's test prompts are."""
import os

from fairseq_alibi_lab.experiments.retrieval.prompts import LONG_MADE, LONG_MULTIPLES, LONG_TESTS, MULTIPLES, make, write_long_tests


# The experiment runner's hooks (EXPERIMENTS["retrieval"]: Experiment.data, .scorer, .report).
TASK_SEED, FRACTION, EXAMPLES = 1, 0.5, 20  # one task set for every training seed


LONG_EXAMPLES = 10  # prompts per cell past 16L (half: issue 63 allows it, said in the README)


def made_otherwise(root, made="made.json", **wanted):
    """What differs between the set `make` wrote in root (its made.json, or made-long.json: the prompts
    past 16L) and the one wanted, in one line, or None: a set made with other options is never trained
    or scored on as this one."""
    from fairseq_alibi_lab.result_rows import options_changed

    changed = options_changed(os.path.join(root, made), wanted)
    if changed is None:
        return f"{root} holds no readable {made}: move the folder away, and the set is made again"
    return (f"{root} was made with {', '.join(f'{name} {was} (wanted {now})' for name, was, now in changed)}: "
            "move the folder away, and the set is made again" if changed else None)


def prepare_data(context, length):
    """data-bin/retrieval-L<length>-f<percent>: make's text (examples of at most `length` tokens) and test
    prompts (task seed 1), binarized into bin/ with WikiText-2's own dictionary (prepared first), so that
    the sets of every length share it; each step skipped when done."""
    import shutil
    import subprocess

    from fairseq_alibi_lab.prepare import wikitext2

    wikitext = wikitext2()
    root = os.path.join("data-bin", f"retrieval-L{length}-f{round(100 * FRACTION)}")  # another mixture, another set
    source = os.environ.get("WIKITEXT2_SOURCE") or os.path.join("..", "shared", "data", "wikitext-2")
    scored = length == context.length  # a longer stage's set is trained on only: no prompts past 16L
    if not os.path.isfile(os.path.join(root, "test.jsonl")):
        make(root, source, length, FRACTION, TASK_SEED, EXAMPLES, LONG_EXAMPLES if scored else 0)
    elif scored and not os.path.isfile(os.path.join(root, LONG_TESTS)):  # a set made before the prompts past 16L
        write_long_tests(root, source, length, TASK_SEED, LONG_EXAMPLES)
    problem = made_otherwise(root, length=length, fraction=FRACTION, seed=TASK_SEED, examples=EXAMPLES) or \
        (scored and made_otherwise(root, LONG_MADE, length=length, seed=TASK_SEED, examples=LONG_EXAMPLES))
    if problem:
        raise SystemExit(f"error: {problem}")
    binarized = os.path.join(root, "bin")
    if not os.path.isdir(binarized):
        partial = binarized + ".part"
        shutil.rmtree(partial, ignore_errors=True)  # an interrupted earlier attempt's
        text = os.path.join(root, "text")
        with open(os.path.join(root, "preprocess.log"), "w") as log:
            done = subprocess.run(["fairseq-preprocess", "--only-source", "--srcdict", os.path.join(wikitext, "dict.txt"),
                                   *(f for split in ("train", "valid", "test")
                                     for f in (f"--{split}pref", os.path.join(text, f"wiki.{split}.tokens"))),
                                   "--destdir", partial, "--workers", "2"], stdout=log, stderr=subprocess.STDOUT)
        if done.returncode:
            raise SystemExit(f"error: fairseq-preprocess failed on {text} (its log: {root}/preprocess.log)")
        os.rename(partial, binarized)
    return binarized


def data_problem(data):
    """None if data is a binarized retrieval set (prepare_data's ROOT/bin, ROOT/test.jsonl beside it),
    else why not (the runner asks before any training)."""
    if not os.path.isfile(os.path.join(os.path.dirname(os.path.abspath(data)), "test.jsonl")):
        return (f"{data} is not a retrieval set (no test.jsonl beside it): leave --data out, or give the bin/ "
                "directory of one that `retrieval make` wrote")
    return None


def tests_of(data):
    """The test prompts of a binarized retrieval set (prepare_data's ROOT/bin: ROOT/test.jsonl)."""
    problem = data_problem(data)
    if problem:
        raise SystemExit(f"error: {problem}")
    return os.path.join(os.path.dirname(os.path.abspath(data)), "test.jsonl")


def test_sets(data, length):
    """[(test prompts file, the lengths its prompts have)] of a binarized retrieval set at training
    length `length`: test.jsonl (L..16L) and, where made, test-long.jsonl (32L..128L)."""
    tests = tests_of(data)
    sets = [(tests, [m * length for m in MULTIPLES])]
    long_tests = os.path.join(os.path.dirname(tests), LONG_TESTS)
    if os.path.isfile(long_tests):
        sets.append((long_tests, [m * length for m in LONG_MULTIPLES]))
    return sets
