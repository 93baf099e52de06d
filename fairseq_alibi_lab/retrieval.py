"""Retrieval past the training length: passkey, multi-key needle and key-value lookup in WikiText-2
(the field's passkey of Mohtashami & Jaggi 2023 and RULER's needles, Hsieh et al. 2024, at word
level), generated deterministically from a seed.

    python -m fairseq_alibi_lab.retrieval make OUT_DIR --source ../shared/data/wikitext-2 [--length 64]
        [--fraction F] [--seed N] [--examples N] [--long-examples N]      (make --help: their defaults)
    python -m fairseq_alibi_lab.retrieval score CHECKPOINT DATA OUT_DIR/test.jsonl OUT.jsonl [--label NAME]
    python -m fairseq_alibi_lab.retrieval floors OUT_DIR/test.jsonl [OUT_DIR/test-long.jsonl] FLOORS.jsonl

make writes OUT_DIR/text/wiki.{train,valid,test}.tokens: WikiText-2 with retrieval examples of at
most L tokens (prompt and answer, filler from the training split) inserted as lines among the
training lines until they are `fraction` of its tokens, valid and test unchanged (so the
language-modelling perplexity of the same models shows the mixture's cost); and OUT_DIR/test.jsonl,
`examples` prompts for each task, length L..16L and depth 0, 25, 50, 75, 100% (the needle's place in
the filler), filler from the validation split; and OUT_DIR/test-long.jsonl, `long_examples` passkey
and multi-key prompts at 32L, 64L and 128L (past ALiBi's attention field at L = 64). A key is two number words (00-99 each: chance is
1 in 10^4); training keys have an even digit sum, test keys an odd one, so no test answer was seen
in training. Binarize the text with WikiText-2's own dictionary (scripts/prepare-wikitext.sh
--srcdict), so models and checkpoints of the usual data read it.

score greedily decodes each prompt's answer (behind fairseq's </s>, as a text starts) with the
checkpoint as the exported class and appends one row per (task, length, depth): exact matches of
the whole key (the count, the accuracy) and of its first word alone (a model that has learned to find
the key but not to copy both words shows there), provenance.
"""
import argparse
import json
import os
import random
import sys

from fairseq_alibi.tools.files import one_line_on_disk_faults
from fairseq_alibi_lab import claims, learned_slopes

TASKS = ("passkey", "multikey", "kvlookup")
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
MULTIPLES = (1, 2, 4, 8, 16)
# Past ALiBi's field (issue 63): 2,048-8,192 tokens at L = 64, where the gentlest head's bias is -8 to
# -32. Their own file (LONG_TESTS) from their own random stream, so test.jsonl and every row scored on
# it stay as they are; the two tasks with a floor under the ceiling (key-value lookup is at its floor
# for every model at every length to 16L); half the prompts per cell (LONG_EXAMPLES), their cost
# growing with the length squared.
LONG_MULTIPLES = (32, 64, 128)
LONG_TASKS = ("passkey", "multikey")
LONG_TESTS, LONG_MADE = "test-long.jsonl", "made-long.json"
NAMES = ("red", "blue", "green", "yellow", "black", "white", "brown", "grey", "silver", "gold")  # multikey's keys


def key(rng, parity):
    """Two number words whose digit sum has this parity (0: training, 1: test)."""
    while True:
        a, b = rng.randrange(100), rng.randrange(100)
        if sum(map(int, f"{a:02d}{b:02d}")) % 2 == parity:
            return [str(a), str(b)]


def needle_and_question(task, rng, parity):
    """(needles: word lists, which of them is asked, the question's words, the answer's words)."""
    if task == "passkey":
        answer = key(rng, parity)
        return [["the", "pass", "key", "is", *answer, ".", "remember", "it", "."]], 0, \
            ["what", "is", "the", "pass", "key", "?", "the", "pass", "key", "is"], answer
    if task == "multikey":
        names, keys = rng.sample(NAMES, 3), [key(rng, parity) for _ in range(3)]
        asked = rng.randrange(3)
        return [["the", "key", "for", name, "is", *k, "."] for name, k in zip(names, keys)], asked, \
            ["what", "is", "the", "key", "for", names[asked], "?", "the", "key", "for", names[asked], "is"], keys[asked]
    if task == "kvlookup":  # 4 pairs, the asked one placed by depth like a needle
        pairs, seen = [], set()
        while len(pairs) < 4:
            k = key(rng, parity)
            if tuple(k) not in seen:
                seen.add(tuple(k))
                pairs.append((k, key(rng, parity)))
        asked = rng.randrange(4)
        return [[*k, ":", *v, "."] for k, v in pairs], asked, ["look", "up", *pairs[asked][0], ":"], pairs[asked][1]
    raise ValueError(f"unknown task {task!r}: use one of {', '.join(TASKS)}")


def shortest(task):
    """The fewest words an example of task takes (its needles, question and answer, no filler)."""
    needles, _, question, answer = needle_and_question(task, random.Random(0), 0)
    return sum(map(len, needles)) + len(question) + len(answer)


def example(task, rng, filler, length, depth, parity):
    """(prompt words, answer words): `length` words in all (prompt + answer), the asked needle after
    depth x the filler, the other needles at random places; filler from a random offset of `filler`."""
    needles, asked, question, answer = needle_and_question(task, rng, parity)
    fill = length - sum(map(len, needles)) - len(question) - len(answer)
    if fill < 0:
        raise ValueError(f"{task} needs at least {length - fill} words, asked for {length}")
    start = rng.randrange(len(filler) - fill)
    words = filler[start:start + fill]
    places = [round(depth * fill) if i == asked else rng.randrange(fill + 1) for i in range(len(needles))]
    for place, needle in sorted(zip(places, needles), key=lambda pair: -pair[0]):  # from the back: places hold
        words = words[:place] + needle + words[place:]
    return words + question, answer


def read_words(path):
    """A WikiText file's words, its line ends as fairseq reads them (each line ends in </s>)."""
    words = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            words.extend(line.split())
            words.append("</s>")
    return words


def make(out, source, length, fraction, seed, examples, long_examples=0):
    from fairseq_alibi.tools.files import folder_written_whole, new_folder_problem

    problem = new_folder_problem(out)
    if problem:
        raise SystemExit(f"error: {problem}")
    train_path, valid_path = (os.path.join(source, f"wiki.{split}.tokens") for split in ("train", "valid"))
    for path in (train_path, valid_path):
        if not os.path.isfile(path):
            raise SystemExit(f"error: no {path}: give --source the raw WikiText-2 directory")
    rng = random.Random(seed)
    with open(train_path, encoding="utf-8") as f:
        lines = f.readlines()
    train_filler = [w for w in read_words(train_path) if w != "</s>"]
    total = sum(len(line.split()) + 1 for line in lines)
    inserted, added = [], 0
    while added < fraction / (1 - fraction) * total:  # examples are `fraction` of the mixed text
        task = TASKS[len(inserted) % len(TASKS)]
        prompt, answer = example(task, rng, train_filler, rng.randrange(shortest(task), length + 1), rng.random(), 0)
        inserted.append(" " + " ".join(prompt + answer) + " \n")
        added += len(prompt) + len(answer) + 1
    places = sorted(rng.randrange(len(lines) + 1) for _ in inserted)
    mixed, previous = [], 0
    for place, line in zip(places, inserted):
        mixed.extend(lines[previous:place])
        mixed.append(line)
        previous = place
    mixed.extend(lines[previous:])
    # its own stream: the same prompts whatever the training mixture
    tests = test_prompts(random.Random(f"{seed}/test"), valid_words(source), length, TASKS, MULTIPLES, examples)
    with folder_written_whole(out) as partial:
        os.makedirs(os.path.join(partial, "text"))
        with open(os.path.join(partial, "text", "wiki.train.tokens"), "w", encoding="utf-8") as f:
            f.writelines(mixed)
        for split in ("valid", "test"):
            with open(os.path.join(source, f"wiki.{split}.tokens"), encoding="utf-8") as f, \
                    open(os.path.join(partial, "text", f"wiki.{split}.tokens"), "w", encoding="utf-8") as g:
                g.write(f.read())
        with open(os.path.join(partial, "test.jsonl"), "w") as f:
            f.writelines(json.dumps(t) + "\n" for t in tests)
        with open(os.path.join(partial, "made.json"), "w") as f:
            json.dump({"length": length, "fraction": fraction, "seed": seed, "examples": examples,
                       "inserted": len(inserted), "inserted_words": added, "train_words": total}, f)
        if long_examples:
            write_long_tests(partial, source, length, seed, long_examples)
    print(f"{out}: {len(inserted)} retrieval examples ({added} words, {added / (added + total):.1%} of the training "
          f"text), {len(tests)} test prompts" + (f", and {LONG_TESTS} past 16L" if long_examples else ""))


def valid_words(source):
    """The filler of the test prompts: WikiText-2's validation words, without its line ends."""
    return [w for w in read_words(os.path.join(source, "wiki.valid.tokens")) if w != "</s>"]


def test_prompts(rng, filler, length, tasks, multiples, examples):
    """`examples` prompts for each task, multiple x length and depth (in that order), from rng."""
    need = max(multiples) * length
    if len(filler) <= need:
        raise SystemExit(f"error: the validation text has {len(filler)} words, too few for prompts of {need}: "
                         "give the whole WikiText-2 (--source)")
    return [{"task": task, "length": multiple * length, "depth": depth, "prompt": " ".join(prompt), "answer": " ".join(answer)}
            for task in tasks for multiple in multiples for depth in DEPTHS for _ in range(examples)
            for prompt, answer in [example(task, rng, filler, multiple * length, depth, 1)]]


def write_long_tests(root, source, length, seed, examples):
    """root/test-long.jsonl: the prompts past 16L (LONG_MULTIPLES, LONG_TASKS), from a stream of their own,
    and root/made-long.json, what they were made with; each written whole."""
    from fairseq_alibi.tools.files import written_whole

    tests = test_prompts(random.Random(f"{seed}/test-long"), valid_words(source), length, LONG_TASKS, LONG_MULTIPLES,
                         examples)
    with written_whole(os.path.join(root, LONG_TESTS)) as partial, open(partial, "w") as f:
        f.writelines(json.dumps(t) + "\n" for t in tests)
    with written_whole(os.path.join(root, LONG_MADE)) as partial, open(partial, "w") as f:
        json.dump({"length": length, "seed": seed, "examples": examples}, f)


def group_key(row):
    """What one scored group is (a results row of score() is found by it)."""
    return (row.get("label"), row["checkpoint"], row.get("updates"), row.get("scaling", "none"), row["task"],
            row["length"], row["depth"])


def score(checkpoint, data, tests_path, out, label="", scalings=("none",), lengths=None, fields=None):
    """Append to `out` a row per (scaling, task, length, depth) it lacks for this checkpoint: a
    scaling (ALiBi's or rotary's, as scripts/eval.sh applies them, factor length / L) is scored past
    the training length only."""
    import torch

    from fairseq_alibi.tools import provenance
    from fairseq_alibi.models.build import load_checkpoint
    from fairseq_alibi.tools.checkpoints import field, identity, learned_positions_end, model_and_task, read_state
    from fairseq_alibi_lab.evaluate import check_scalings
    from fairseq_alibi.tools.files import data_fingerprint, fingerprint
    from fairseq_alibi_lab.result_rows import append_lines, read_rows
    from fairseq_alibi.hf.export import hf_model_of

    tests = read_tests(tests_path)
    groups = {}
    for t in tests:
        if not lengths or t["length"] in lengths:
            groups.setdefault((t["task"], t["length"], t["depth"]), []).append(t)
    if not groups:
        raise SystemExit(f"error: no test prompt of {tests_path} has a length of {' '.join(map(str, lengths or []))}: "
                         f"its lengths are {' '.join(map(str, sorted({t['length'] for t in tests})))}")
    if not os.path.isfile(checkpoint):
        raise SystemExit(f"error: no checkpoint at {checkpoint}")
    state = read_state(checkpoint)
    scored = identity(checkpoint, state)
    # What each row was scored with: the checkpoint file, the test prompts, the training text (the mixture).
    fingerprints = {"checkpoint_sha256": fingerprint(checkpoint), "prompts_sha256": fingerprint(tests_path),
                    "mixture_sha256": data_fingerprint(data, "train") if os.path.isfile(os.path.join(data, "train.idx")) else None}
    train_length, updates = scored["train_length"], scored["updates"]
    method = str(scored["model"]).split("_transformer_lm")[0]
    # a scaling the model has no field for would be ignored, and its rows labelled with it
    check_scalings(checkpoint, str(scored["model"]), field(model_and_task(state)[0], f"{method}_scaling") is not None,
                   scalings)
    asked_lengths = {length for _, length, _ in groups}
    # a learned position table has no row past its end: </s>, the prompt and all but the answer's last word take `length`
    end = learned_positions_end(state)
    if end and max(asked_lengths) > end:
        raise SystemExit(f"error: {checkpoint} learned {end} positions, prompts of {max(asked_lengths)} tokens are past "
                         f"them: score lengths up to {end} (--lengths), or a model without learned positions")
    for name, value in fingerprints.items():  # rows of this checkpoint scored on other prompts or data: refused
        held = {r.get(name) for r in read_rows(out) if r.get("checkpoint") == checkpoint and r.get(name) and
                (name != "prompts_sha256" or r.get("length") in asked_lengths)} - {value}  # a length is in one prompts file
        if held:
            raise SystemExit(f"error: {out} holds rows of {checkpoint} with another {name} ({', '.join(sorted(held))}, "
                             f"now {value}): other test prompts or data; give another OUT")
    # A row without the first word's count (scored before it was kept) is scored again; the last wins.
    done = {group_key(r) for r in read_rows(out) if "first_correct" in r} if os.path.exists(out) else set()
    for scaling in scalings:
        for length in sorted({length for _, length, _ in groups}):
            if scaling != "none" and length <= train_length:
                continue
            todo = {k: g for k, g in groups.items() if k[1] == length and
                    (label or None, checkpoint, updates, scaling, *k) not in done}
            if not todo:
                continue
            overrides = {} if scaling == "none" else {
                f"{method}_scaling": scaling, f"{method}_train_length": train_length,
                f"{method}_scaling_factor": 1.0 if scaling == "dynamic_ntk" else length / train_length}
            model, _, task = load_checkpoint(checkpoint, data, kind="causal LM", overrides=overrides)
            dictionary = task.source_dictionary
            hf = hf_model_of(model, dictionary, {}).eval()
            # The dense path's bias is batch x heads x T x S floats: prompts go in batches under MASK_BYTES
            # (a whole group of 20 to 16L at L = 64, as always; one at a time at 8,192 tokens).
            batch = max(1, MASK_BYTES // (4 * hf.config.num_attention_heads * (length + 1) ** 2))
            for (name, _, depth), group in todo.items():
                decoded, answers = [], [[dictionary.index(w) for w in t["answer"].split()] for t in group]
                for start in range(0, len(group), batch):
                    prompts = torch.tensor([[dictionary.eos()] + [dictionary.index(w) for w in t["prompt"].split()]
                                            for t in group[start:start + batch]])
                    with torch.no_grad():
                        out_ids = hf.generate(prompts, max_new_tokens=len(answers[0]), do_sample=False,
                                              pad_token_id=dictionary.pad())
                    decoded += out_ids[:, prompts.size(1):].tolist()
                correct = sum(decoded[i] == answers[i] for i in range(len(group)))
                first = sum(decoded[i][0] == answers[i][0] for i in range(len(group)))
                row = {"label": label or None, **scored, "scaling": scaling, "task": name, "length": length, "depth": depth,
                       "n": len(group), "correct": correct, "accuracy": correct / len(group), "first_correct": first,
                       "first_accuracy": first / len(group), **fingerprints, "commit": provenance.commit(),
                       "machine": provenance.machine(), **(fields or {})}
                # each group written as it is scored: a cut at 8,192 tokens (an hour a length) loses one group
                append_lines(out, [json.dumps(row)])
                print(f"{label or row['model']}{'' if scaling == 'none' else ' + ' + scaling}: {name} at {length} "
                      f"tokens, depth {depth:.0%}: {correct}/{len(group)} (first word {first})", flush=True)


# The experiment runner's hooks (EXPERIMENTS["retrieval"]: Experiment.data, .scorer, .report).
TASK_SEED, FRACTION, EXAMPLES = 1, 0.5, 20  # one task set for every training seed
LONG_EXAMPLES = 10  # prompts per cell past 16L (half: issue 63 allows it, said in the README)
MASK_BYTES = 2 ** 30  # score's batches: at most this much dense bias at once


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


def prepare_data(runner):
    """data-bin/retrieval-L<L>-f<percent>: make's text and test prompts (task seed 1), binarized into
    bin/ with WikiText-2's own dictionary (prepared first); each step skipped when done."""
    import shutil
    import subprocess

    from fairseq_alibi_lab.prepare import wikitext2

    wikitext = wikitext2()
    root = os.path.join("data-bin", f"retrieval-L{runner.length}-f{round(100 * FRACTION)}")  # another mixture, another set
    source = os.environ.get("WIKITEXT2_SOURCE") or os.path.join("..", "shared", "data", "wikitext-2")
    if not os.path.isfile(os.path.join(root, "test.jsonl")):
        make(root, source, runner.length, FRACTION, TASK_SEED, EXAMPLES, LONG_EXAMPLES)
    elif not os.path.isfile(os.path.join(root, LONG_TESTS)):  # a set made before the prompts past 16L
        write_long_tests(root, source, runner.length, TASK_SEED, LONG_EXAMPLES)
    problem = made_otherwise(root, length=runner.length, fraction=FRACTION, seed=TASK_SEED, examples=EXAMPLES) or \
        made_otherwise(root, LONG_MADE, length=runner.length, seed=TASK_SEED, examples=LONG_EXAMPLES)
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


def read_tests(path):
    """The test prompts of a test.jsonl (`make`'s), or one line saying why the file is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            tests = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        raise SystemExit(f"error: no test prompts at {path}: give the test.jsonl that `retrieval make` wrote") from None
    except ValueError as e:
        raise SystemExit(f"error: {path} is not JSON lines ({e}): give the test.jsonl that `retrieval make` wrote") from None
    keys = ("task", "length", "depth", "prompt", "answer")
    if not tests or any(not isinstance(t, dict) or any(k not in t for k in keys) for t in tests):
        raise SystemExit(f"error: {path} holds no test prompts (each line a JSON object with {', '.join(keys)})")
    for number, t in enumerate(tests, 1):  # a prompt is scored and reported at its label's length: they must agree
        words = len(str(t["prompt"]).split()) + len(str(t["answer"]).split())
        if words != t["length"]:
            raise SystemExit(f"error: {path} prompt {number} is labelled {t['length']} tokens but holds {words} (prompt and "
                             "answer): give the test.jsonl that `retrieval make` wrote, unedited")
    return tests


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


ROWS = "retrieval.jsonl"  # under the runner's OUT: what score_model appends to (the runner merges parallel parts' by it)
# The loss along the same axis: a model scored past 16L also gets its perplexity at each position of a
# window of its longest length (by_position.py, blocks from BY_POSITION_OFFSETS offsets: about 50
# validation tokens at each position at 8,192), unscaled.
BY_POSITION_ROWS, BY_POSITION_OFFSETS = "by_position.jsonl", 2


def score_model(runner, model, seed, checkpoint):
    """The model's retrieval accuracy into OUT/retrieval.jsonl (what it lacks), in a process of its
    own (the runner imports no fairseq), and past 16L its loss by position (OUT/by_position.jsonl);
    True if it scored any retrieval."""
    from fairseq_alibi_lab.result_rows import read_rows

    out = os.path.join(runner.out, ROWS)
    before = os.path.getsize(out) if os.path.exists(out) else 0
    wanted, sets = runner.model_lengths(model), test_sets(runner.data, runner.length)
    missing = sorted(set(wanted) - {length for _, lengths in sets for length in lengths})
    if missing:
        raise SystemExit(f"error: no test prompts of {' '.join(map(str, missing))} tokens beside {runner.data} "
                         f"(test.jsonl: L..16L; {LONG_TESTS}: 32L..128L): leave --data out, and the set is completed")
    for tests, lengths in sets:
        asked = [length for length in wanted if length in lengths]
        if not asked:
            continue
        long = os.path.basename(tests) == LONG_TESTS
        scalings = model.long_scalings if long and model.long_scalings else ("none", *model.scalings)
        in_process_of_its_own(["fairseq_alibi_lab.retrieval", "score", checkpoint, runner.data, tests, out, "--label",
                               model.label, "--scalings", *scalings, "--lengths", *map(str, asked),
                               "--fields", runner.row_fields(checkpoint)], f"scoring {model.label}'s retrieval")
    if model.method == "learned_alibi":  # what its slopes became: its heads' reach in tokens
        learned_slopes.record(os.path.join(runner.out, learned_slopes.ROWS), checkpoint, model.label,
                              json.loads(runner.row_fields(checkpoint)))
    window = max(wanted)
    if window > max(MULTIPLES) * runner.length and not any(
            r.get("checkpoint") == checkpoint and r.get("length") == window for r in read_rows(os.path.join(runner.out, BY_POSITION_ROWS))):
        in_process_of_its_own(["fairseq_alibi_lab.by_position", checkpoint, runner.data, "--length", str(window),
                               "--offsets", str(BY_POSITION_OFFSETS), "--batch", "1", "--out",
                               os.path.join(runner.out, BY_POSITION_ROWS), "--label", model.label, "--fields",
                               runner.row_fields(checkpoint)], f"{model.label}'s loss by position")
    return (os.path.getsize(out) if os.path.exists(out) else 0) > before


def in_process_of_its_own(module_and_args, what):
    """python -m MODULE ARGS (the runner imports no fairseq); its last error line if it fails."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", *module_and_args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    if done.returncode:
        raise SystemExit((done.stderr.strip().splitlines() or [f"error: {what} failed"])[-1])


def write_floors(runner):
    """OUT/floors.jsonl from the test prompts, once (the runner calls it with its unigram floor); floors
    of other prompts there are refused, not mixed."""
    from fairseq_alibi.tools.files import fingerprint
    from fairseq_alibi_lab.result_rows import read_rows

    path = os.path.join(runner.out, FLOOR_ROWS)
    tests = {fingerprint(t): t for t, _ in test_sets(runner.data, runner.length)}
    held = read_rows(path)
    prompts = {r.get("prompts_sha256") for r in held}
    if prompts - set(tests):
        raise SystemExit(f"error: {path} holds the floors of other test prompts ({', '.join(map(str, prompts - set(tests)))}, "
                         f"now {', '.join(tests)}): move it away, or give another --out")
    missing = [t for sha, t in tests.items() if sha not in prompts]
    if missing:  # a set's floors added beside those already there (the prompts past 16L, made later)
        save_floors(missing, path, held)


def save_floors(tests, path, kept=()):
    """The rows `kept`, then floor_rows of each test prompts file in tests, written whole to path."""
    from fairseq_alibi.tools.files import written_whole

    rows = [*kept, *(row for t in tests for row in floor_rows(t))]
    with written_whole(path) as partial, open(partial, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


METRICS = {"accuracy": "exact match", "first_accuracy": "first key word"}  # a row's field: what it counts

# Floors from the prompts themselves: what answerers that retrieve nothing asked score on the very test
# prompts (rows of their own in OUT/floors.jsonl, `retrieval floors`), each (task, length, depth):
# - a random needle: the words of one of the prompt's needles, uniformly (its expected score);
# - the needle nearest the question: the last needle before it;
# - the most frequent number: the 1-2 digit word most frequent in the prompt (first word only);
# - chance: a key word of 100 (first word), a key of 10^4 (exact match).
# The floor of a cell is the best of them. Each row also says how far, in tokens, the asked needle's
# key sits from the first generated token (min and max over the group's prompts): a group whose
# nearest needle is past L tests retrieval past the training length, one within L does not.
FLOORS = ("a random needle", "the needle nearest the question", "the most frequent number", "chance")
FLOOR = claims.FLOOR  # the floor rows' checkpoint: a cell of one value, not of seeds
# ALiBi's attention field, in tokens (docs/retrieval.md, "The field"): where its gentlest head (slope
# 1/256 of 8 heads) pays -4 (a weight e^-4, under 2%, against a key at distance 0). A needle is past
# the field when it sits more than this far from the question (past(floors, FIELD)).
FIELD = 1024
FLOOR_ROWS = "floors.jsonl"
QUESTION_WORDS = {"passkey": 10, "multikey": 12, "kvlookup": 5}  # the question's length (needle_and_question)


def needles_in(task, words):
    """(each needle's key words and the index of its first key word, in order; the asked one's index)
    of a prompt's words (the needles as needle_and_question writes them, the question last)."""
    body, question = words[:-QUESTION_WORDS[task]], words[-QUESTION_WORDS[task]:]
    found = []
    for i in range(len(body)):
        if task == "passkey" and body[i:i + 4] == ["the", "pass", "key", "is"] and body[i + 6:i + 10] == [".", "remember", "it", "."]:
            found.append((body[i + 4:i + 6], i + 4, None))
        elif task == "multikey" and body[i:i + 3] == ["the", "key", "for"] and body[i + 4:i + 5] == ["is"] and body[i + 7:i + 8] == ["."]:
            found.append((body[i + 5:i + 7], i + 5, body[i + 3]))
        elif task == "kvlookup" and body[i + 2:i + 3] == [":"] and body[i + 5:i + 6] == ["."] and \
                all(w.isdigit() and len(w) <= 2 for w in body[i:i + 2] + body[i + 3:i + 5]):
            found.append((body[i + 3:i + 5], i + 3, tuple(body[i:i + 2])))
    if task == "passkey":
        asked = 0
    elif task == "multikey":
        asked = next(n for n, (_, _, name) in enumerate(found) if name == question[5])
    else:
        asked = next(n for n, (_, _, k) in enumerate(found) if k == tuple(question[2:4]))
    return [(k, i) for k, i, _ in found], asked


def answerers(task, words):
    """{floor: (exact-match score, first-word score)} of one prompt (expected values; None: not scored)."""
    from collections import Counter

    needles, asked = needles_in(task, words)
    answer = needles[asked][0]
    body = words[:-QUESTION_WORDS[task]]
    numbers = Counter(w for w in body if w.isdigit() and len(w) <= 2)
    frequent = max(numbers, key=lambda w: (numbers[w], -body.index(w))) if numbers else None
    return {
        FLOORS[0]: (sum(k == answer for k, _ in needles) / len(needles), sum(k[0] == answer[0] for k, _ in needles) / len(needles)),
        FLOORS[1]: (float(needles[-1][0] == answer), float(needles[-1][0][0] == answer[0])),
        FLOORS[2]: (None, float(frequent == answer[0])),
        FLOORS[3]: (1e-4, 1e-2),
    }


def floor_rows(tests_path):
    """The floors' rows of a test.jsonl: per floor and (task, length, depth), its exact-match and
    first-word accuracy (means over the prompts) and the asked needles' distance from the question."""
    from fairseq_alibi.tools import provenance
    from fairseq_alibi.tools.files import fingerprint

    tests = read_tests(tests_path)
    groups = {}
    for t in tests:
        groups.setdefault((t["task"], t["length"], t["depth"]), []).append(t)
    prompts, rows = fingerprint(tests_path), []
    for (task, length, depth), group in groups.items():
        scores, distances = [], []
        for t in group:
            words = t["prompt"].split()
            try:
                needles, asked = needles_in(task, words)
                held = needles[asked][0] == t["answer"].split()
            except (IndexError, KeyError, StopIteration):
                held = False
            if not held:
                raise SystemExit(f"error: a {task} prompt of {tests_path} does not hold its answer as a needle: "
                                 "not a test set `retrieval make` wrote")
            distances.append(len(words) - needles[asked][1])  # tokens from the key's first word to the first generated
            scores.append(answerers(task, words))
        means = {}  # floor -> (exact match, first word) over the group's prompts
        for floor in FLOORS:
            exact = [s[floor][0] for s in scores]
            means[floor] = (None if None in exact else sum(exact) / len(exact), sum(s[floor][1] for s in scores) / len(scores))
        for floor, (exact, first) in means.items():
            rows.append({"label": f"Floor: {floor}", "model": "floor", "checkpoint": FLOOR,
                         "scaling": "none", "task": task, "length": length, "depth": depth, "n": len(group),
                         "accuracy": exact, "first_accuracy": first,
                         "min_distance": min(distances), "max_distance": max(distances), "prompts_sha256": prompts,
                         "commit": provenance.commit(), "machine": provenance.machine(), "experiment": "retrieval",
                         "seed": None, "recipe": None})
    return rows


def depth_means(scored, metric="accuracy", keep=None):
    """{(task, name, length): {checkpoint: the metric averaged over the depths}} (the last scoring of a
    depth wins; rows without the metric are left out; keep(task, length, depth): only those depths);
    a model is named as in every table (its label, + its scaling: results.method_name). A checkpoint
    that lacks a depth another has in the cell (a scoring cut mid-length) waits: its mean over fewer
    depths would be another number."""
    from fairseq_alibi_lab.results import method_name

    last = {(r["task"], method_name(r), r["length"], r["checkpoint"], r["depth"]): r[metric] for r in scored
            if r.get(metric) is not None and (keep is None or keep(r["task"], r["length"], r["depth"]))}
    by_depth = {}
    for (task, name, length, checkpoint, depth), accuracy in last.items():
        by_depth.setdefault((task, name, length), {}).setdefault(checkpoint, {})[depth] = accuracy
    means = {}
    for cell, runs in by_depth.items():
        depths = set().union(*runs.values())
        means[cell] = {c: sum(v.values()) / len(v) for c, v in runs.items() if set(v) == depths}
    return means


def past(floors, length):
    """keep(task, L_valid, depth) for depth_means: the groups whose asked needles all sit more than
    `length` tokens from the question (floors: the floor rows, which carry the distances)."""
    far = {(r["task"], r["length"], r["depth"]) for r in floors if r["min_distance"] > length}
    return lambda task, l_valid, depth: (task, l_valid, depth) in far


def not_picking(task):
    """The answerers that do not pick the asked needle out, whose best is a cell's floor: with one needle
    (the passkey) copying it is the task, so chance alone."""
    return FLOORS[3:] if task == "passkey" else (FLOORS[0], FLOORS[1], FLOORS[3])


def floor_cells(floors, metric="accuracy", keep=None):
    """depth_means of the floor rows, and "Floor": the best of the answerers that do not pick the asked
    needle out (a random or the nearest needle, chance), each a fixed strategy over the cell's depths;
    with one needle (the passkey) copying it is the task, so chance alone."""
    cells = depth_means(floors, metric, keep)
    for task, _, length in list(cells):
        values = [cells[(task, f"Floor: {floor}", length)][FLOOR] for floor in not_picking(task) if (task, f"Floor: {floor}", length) in cells]
        if values:
            cells[(task, "Floor", length)] = {FLOOR: max(values)}
    return cells


def read_floors(out, scored):
    """The floor rows beside a results folder's rows (OUT/floors.jsonl), checked against the `scored`
    rows: one line, and no table or verdict, where they are missing or another prompt set's."""
    from fairseq_alibi_lab.result_rows import read_rows

    path = os.path.join(out, FLOOR_ROWS)
    floors = list(read_rows(path)) if os.path.exists(path) else []
    problem = floors_problem(scored, floors, path)
    if problem:
        raise SystemExit(f"error: {problem}")
    return floors


def floors_problem(scored, floors, path):
    """None, or why `floors` (the rows of `path`) are not the floors of the prompts the `scored` rows were
    asked: none at all, two prompt sets at one task and length, none at a scored length, or another
    set's than the rows record (prompts_sha256; rows scored before it was recorded are checked by the rest)."""
    make = f"`python -m fairseq_alibi_lab.retrieval floors TEST.jsonl [TEST-LONG.jsonl] {path}` from the rows' prompts"
    if scored and not floors:
        return f"no floors at {path} beside the scored rows: write them with {make}"
    sets = {}
    for r in floors:
        sets.setdefault((r["task"], r["length"]), set()).add(r.get("prompts_sha256"))
    for (task, length), prompts in sorted(sets.items()):
        if len(prompts) > 1:
            return (f"{path} holds the floors of {len(prompts)} prompt sets at {task}, {length} tokens "
                    f"({', '.join(sorted(map(str, prompts)))}): keep one, written with {make}")
    for r in scored:
        held = sets.get((r["task"], r["length"]))
        if held is None:
            return f"{path} has no floor of {r['task']} at {r['length']} tokens, which the rows score: write them with {make}"
        if r.get("prompts_sha256") and r["prompts_sha256"] not in held:
            return (f"{path} holds the floors of other prompts ({', '.join(map(str, held))}) than the rows' "
                    f"({r['prompts_sha256']}) at {r['task']}, {r['length']} tokens: write them with {make}")
    return None


def perplexities(rows):
    """{label: {checkpoint: validation perplexity in blocks of L}}: the scored models as language models."""
    found = {}
    for r in rows:
        if (r.get("checkpoint") and r.get("split") == "valid" and r.get("stride") == 0 and
                r.get("scaling", "none") == "none" and r.get("l_valid") == r.get("train_length")):
            found.setdefault(r.get("label") or r["model"], {})[r["checkpoint"]] = r["perplexity"]
    return found


def report(rows, out):
    """OUT/retrieval.md: per task, each model's (and scaling's) exact-match accuracy at each length,
    averaged over the depths, mean ± std over the seeds (n), beside chance and beside the same
    models' validation perplexity at L (what the mixture costs them as language models); then the
    same for the key's first word alone. And OUT/retrieval_<task>.png (exact match) and
    retrieval_<task>_first.png: accuracy by depth and length, one panel per model, mean over the seeds."""
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi_lab.result_rows import read_rows
    from fairseq_alibi_lab.results import mean_std, method_name

    def shown(values, digits, scale=1):
        if not values:
            return "-"
        mean, std = mean_std(values)
        spread = f" ± {scale * std:.{digits}f}" if len(values) > 1 else ""
        return f"{scale * mean:.{digits}f}{spread} (n={len(values)})"

    path = os.path.join(out, ROWS)
    checkpoints = {r["checkpoint"] for r in rows if r.get("checkpoint")}
    scored = [r for r in read_rows(path) if r["checkpoint"] in checkpoints]
    if not scored:
        return None
    lengths = sorted({r["length"] for r in scored})
    perplexity = perplexities(rows)
    base = {method_name(r): r.get("label") or r["model"] for r in scored}
    floors = read_floors(out, scored)
    train_length = min(lengths)
    lines = []
    views = [("mean over 5 depths, needles near the question included", None)]
    if floors:
        views.append((f"needles past L only: the depths whose asked needle sits more than {train_length} tokens "
                      "from the question in every prompt (none at L)", past(floors, train_length)))
    for view, keep in views:
        for metric, chance in (("accuracy", "0.01 (one key of 10^4)"), ("first_accuracy", "1 (one word of 100)")):
            cells = depth_means(scored, metric, keep)
            floors_here = floor_cells(floors, metric, keep)
            for task in TASKS:
                names = list(dict.fromkeys(n for t, n, _ in cells if t == task))
                if not names:
                    continue
                lines += [f"## {task}: {METRICS[metric]}, {view}", "", "| model | " + " | ".join(map(str, lengths)) +
                          " | perplexity at L |", "|---" * (len(lengths) + 2) + "|"]
                for name in names:
                    accuracy = [shown(list(cells.get((task, name, length), {}).values()), 1, 100) for length in lengths]
                    lines.append(f"| {name} | " + " | ".join(accuracy) +
                                 f" | {shown(list(perplexity.get(base[name], {}).values()), 2)} |")
                for name in ("Floor", *(f"Floor: {floor}" for floor in FLOORS[:3])):
                    values = [floors_here.get((task, name, length), {}).get(FLOOR) for length in lengths]
                    if any(v is not None for v in values):
                        lines.append(f"| {name.lower()} (from the prompts) | " + " | ".join(
                            "-" if v is None else f"{100 * v:.2f}" for v in values) + " | |")
                lines += [f"| chance: {chance} | " + " | ".join(chance.split()[0] for _ in lengths) + " | |", ""]
    distances = {metric: by_distance(scored, floors, metric) for metric in METRICS} if floors else {}
    for metric, (models, floor) in distances.items():
        bins = sorted({b for t in models.values() for m in t.values() for b in m})
        for task in (t for t in TASKS if t in models):
            lines += [f"## {task}: {METRICS[metric]}, by the asked needle's distance from the question (tokens)", "",
                      "| model | " + " | ".join(f"{2 ** b}-{2 ** (b + 1) - 1}" for b in bins) + " |",
                      "|---" * (len(bins) + 1) + "|"]
            for name, values in models[task].items():
                lines.append(f"| {name} | " + " | ".join(shown(values.get(b), 1, 100) for b in bins) + " |")
            lines += ["| floor (from the prompts) | " + " | ".join(
                "-" if b not in floor.get(task, {}) else f"{100 * floor[task][b]:.2f}" for b in bins) + " |", ""]
    windows = [r for r in read_rows(os.path.join(out, BY_POSITION_ROWS)) if r.get("checkpoint") in checkpoints]
    context = by_context(windows)
    if context:
        bins = sorted({b for values in context.values() for b in values})  # the halves first
        lines += [f"## Perplexity by tokens of context (validation, a window of {max(r['length'] for r in windows)} tokens, "
                  f"`{BY_POSITION_ROWS}`)", "",
                  "Each position p of the window (p tokens before it) in the bin of p, its perplexity averaged in log "
                  "space, mean ± std over seeds; unscaled. Blocks start at 2 offsets (0 and half the window), so a "
                  "token sits at p and p + half: the two halves average the same tokens, while neighbouring bins "
                  "average different ones.", "",
                  "| model | " + " | ".join({FIRST_HALF: "first half", SECOND_HALF: "second half"}.get(b) or (
                      "0-1" if b == 0 else f"{2 ** b}-{2 ** (b + 1) - 1}") for b in bins) + " |",
                  "|---" * (len(bins) + 1) + "|"]
        for name, values in context.items():
            lines.append(f"| {name} | " + " | ".join(shown(values.get(b), 1) for b in bins) + " |")
        lines.append("")
    lines += learned_slopes.table(out, checkpoints)
    text = ("# Retrieval: accuracy (%), mean over the depths, mean ± std over seeds\n\n"
            "Exact match of the two-word key, then of its first word alone; beside each model, the same "
            "checkpoints' validation perplexity in blocks of L (nonoverlapping). Under each table the floors "
            "computed on the test prompts (`retrieval floors`, OUT/floors.jsonl): what answering with a random "
            "needle, the needle nearest the question or the most frequent number scores; \"floor\" is the best "
            "of the answerers that do not pick the asked needle out (a random or the nearest needle, chance; the "
            "passkey has one needle, so chance), over the same depths. A model at its floor is not shown to retrieve the asked key.\n\n"
            + "\n".join(lines))
    with written_whole(os.path.join(out, "retrieval.md")) as partial, open(partial, "w") as f:
        f.write(text)
    for metric, suffix in (("accuracy", ""), ("first_accuracy", "_first")):
        heatmaps([r for r in scored if metric in r], out, metric, suffix)
        if metric in distances:
            distance_figure(*distances[metric], out, metric, suffix, train_length)
    if context:
        context_figure(context, out, train_length)
    return text


# The attention field in tokens (docs/retrieval.md): ALiBi's head h pays m_h per token of distance, so
# its reach is about 1/m_h tokens whatever L is; the small recipe's decoders have 8 heads.
HEADS = 8


FAMILIES = {"ALiBi and its family": ("ALiBi", "FoX"), "other relative biases": (), "rotary": ("Rotary",),
            "absolute positions, none": ("Sinusoidal", "NoPE")}  # the distance figure's panels, in order


def family(name):
    """The panel of the distance figure a model (and scaling) is drawn in (a relative bias unless named)."""
    return next((group for group, prefixes in FAMILIES.items() if prefixes and name.startswith(prefixes)),
                "other relative biases")


def distance_bin(distance):
    """The power-of-2 bin [2^b, 2^(b+1)) a needle's distance in tokens falls in: b."""
    return max(distance, 1).bit_length() - 1


def by_distance(scored, floors, metric):
    """({task: {name: {bin: each seed's value}}}, {task: {bin: the floor}}): each scored group (task,
    length, depth) placed by its asked needles' distance from the question in tokens (the mean of the
    group's least and greatest, from the floor rows) in a distance_bin; each seed's groups in a bin
    averaged, over the groups every seed of the model has (a seed scored at more lengths than the
    others, a run in progress, adds nothing to its bins until they are scored there too). The floor of a bin is the best, over the bin's groups, of the answerers
    that do not pick the asked needle out (floor_cells' rule, the bin in place of a length)."""
    from fairseq_alibi_lab.results import method_name

    where = {(r["task"], r["length"], r["depth"]): distance_bin(round((r["min_distance"] + r["max_distance"]) / 2))
             for r in floors}
    last = {(r["task"], method_name(r), r["checkpoint"], r["length"], r["depth"]): r[metric] for r in scored
            if r.get(metric) is not None and (r["task"], r["length"], r["depth"]) in where}
    groups = {}  # (task, name) -> {checkpoint: its (length, depth) groups}
    for task, name, checkpoint, length, depth in last:
        groups.setdefault((task, name), {}).setdefault(checkpoint, set()).add((length, depth))
    common = {key: set.intersection(*runs.values()) for key, runs in groups.items()}
    last = {key: value for key, value in last.items() if key[3:] in common[key[:2]]}
    per_seed = {}
    for (task, name, checkpoint, length, depth), value in last.items():
        per_seed.setdefault((task, name, where[(task, length, depth)]), {}).setdefault(checkpoint, []).append(value)
    models = {}
    for (task, name, b), runs in per_seed.items():
        models.setdefault(task, {}).setdefault(name, {})[b] = [sum(v) / len(v) for v in runs.values()]
    answered = {}  # (task, bin, answerer) -> its scores on the bin's groups
    for r in floors:
        if r["label"] in [f"Floor: {f}" for f in not_picking(r["task"])] and r.get(metric) is not None:
            answered.setdefault((r["task"], where[(r["task"], r["length"], r["depth"])], r["label"]), []).append(r[metric])
    floor = {}
    for (task, b, _), values in answered.items():
        floor.setdefault(task, {})[b] = max(floor.get(task, {}).get(b, 0.0), sum(values) / len(values))
    return models, floor


def mark_the_field(axis, reaches, train_length):
    """Each ALiBi head's reach dotted and the training length solid, on a panel whose x is tokens."""
    for reach in reaches:
        axis.axvline(reach, color="0.8", linestyle=":", linewidth=0.8)
    axis.axvline(train_length, color="0.5", linewidth=0.8)


def distance_figure(models, floor, out, metric, suffix, train_length):
    """OUT/retrieval_distance<suffix>.png: the metric against the asked needle's distance from the
    question in tokens (by_distance's bins, the mean over the seeds), one row of panels per task and one panel per
    family of models, the floor from the prompts dashed, each ALiBi head's reach 1/m_h dotted and
    the training length L solid."""
    from fairseq_alibi.alibi_bias import alibi_slopes
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi_lab.results import pyplot

    tasks = [t for t in TASKS if t in models]
    if not tasks:
        return
    present = {family(n) for t in tasks for n in models[t]}
    families = [group for group in FAMILIES if group in present]
    plt = pyplot()
    figure, axes = plt.subplots(len(tasks), len(families), figsize=(3.2 * len(families), 2.6 * len(tasks)),
                                squeeze=False, sharex=True, sharey=True, layout="constrained")
    reaches = [1 / m for m in alibi_slopes(HEADS)]
    for i, task in enumerate(tasks):
        for j, group in enumerate(families):
            axis = axes[i][j]
            mark_the_field(axis, reaches, train_length)
            bins = sorted(floor.get(task, {}))
            axis.plot([2 ** (b + 0.5) for b in bins], [100 * floor[task][b] for b in bins], "k--", linewidth=1,
                      label="floor (from the prompts)")
            for name, values in models[task].items():
                if family(name) == group:
                    bins = sorted(values)
                    axis.plot([2 ** (b + 0.5) for b in bins], [100 * sum(values[b]) / len(values[b]) for b in bins], marker="o",
                              markersize=2.5, linewidth=1, label=name)
            axis.set_xscale("log", base=2)
            axis.set_ylim(-3, 103)
            axis.tick_params(labelsize=6)
            axis.set_title(f"{task}: {group}", fontsize=7)
            if i == len(tasks) - 1:
                axis.set_xlabel("asked needle's distance from the question (tokens)", fontsize=6)
            if j == 0:
                axis.set_ylabel(f"{METRICS[metric]} (%)", fontsize=6)
            if i == 0:
                axis.legend(fontsize=5, loc="lower left")
    figure.suptitle(f"Retrieval by distance: mean over seeds; dotted, ALiBi's head reaches 1/m ({HEADS} heads: "
                    f"{', '.join(f'{r:g}' for r in reaches)} tokens); solid, L = {train_length}", fontsize=7)
    path = os.path.join(out, f"retrieval_distance{suffix}.png")
    with written_whole(path) as partial:
        figure.savefig(partial, format="png", dpi=120)
    plt.close(figure)


def by_context(rows):
    """{name: {bin: each seed's perplexity}}: by_position rows' perplexity at each position p (p tokens of
    context) placed in distance_bin(p), the bin's positions averaged in log space, per checkpoint (the
    last row of one wins)."""
    import math

    last = {(r.get("label") or r["model"], r["checkpoint"]): r["perplexity_by_position"] for r in rows}
    context = {}
    for (name, _), by_position in last.items():
        bins, half = {}, len(by_position) // 2
        for p, value in enumerate(by_position):
            bins.setdefault(distance_bin(p), []).append(math.log(value))
            # Blocks from 2 offsets, 0 and half the window, put each token at p and p + half: the
            # window's two halves average the same tokens, the one comparison of context alone.
            bins.setdefault(FIRST_HALF if p < half else SECOND_HALF, []).append(math.log(value))
        for b, logs in bins.items():
            context.setdefault(name, {}).setdefault(b, []).append(math.exp(sum(logs) / len(logs)))
    return context


FIRST_HALF, SECOND_HALF = -2, -1  # by_context's keys for the window's halves, beside its bins (0, 1, ...)


def context_figure(context, out, train_length):
    """OUT/perplexity_by_context.png: by_context's perplexity against the tokens of context (mean over
    seeds), one panel per family of models, ALiBi's head reaches dotted, L solid."""
    from fairseq_alibi.alibi_bias import alibi_slopes
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi_lab.results import pyplot

    families = [group for group in FAMILIES if group in {family(n) for n in context}]
    plt = pyplot()
    figure, axes = plt.subplots(1, len(families), figsize=(3.2 * len(families), 2.8), squeeze=False, sharey=True,
                                layout="constrained")
    reaches = [1 / m for m in alibi_slopes(HEADS)]
    for axis, group in zip(axes[0], families):
        mark_the_field(axis, reaches, train_length)
        for name, values in context.items():
            if family(name) == group:
                bins = sorted(b for b in values if b >= 0)
                axis.plot([2 ** (b + 0.5) for b in bins], [sum(values[b]) / len(values[b]) for b in bins], marker="o",
                          markersize=2.5, linewidth=1, label=name)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.tick_params(labelsize=6)
        axis.set_title(group, fontsize=7)
        axis.set_xlabel("tokens of context (position in the window)", fontsize=6)
        axis.legend(fontsize=5)
    axes[0][0].set_ylabel("validation perplexity", fontsize=6)
    figure.suptitle(f"Perplexity by tokens of context: mean over seeds; dotted, ALiBi's head reaches 1/m; solid, "
                    f"L = {train_length}", fontsize=7)
    with written_whole(os.path.join(out, "perplexity_by_context.png")) as partial:
        figure.savefig(partial, format="png", dpi=120)
    plt.close(figure)


def heatmaps(scored, out, metric, suffix):
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi_lab.results import method_name, pyplot

    plt = pyplot()

    for task in TASKS:
        rows = [r for r in scored if r["task"] == task]
        names = list(dict.fromkeys(map(method_name, rows)))
        if not names:
            continue
        lengths, depths = sorted({r["length"] for r in rows}), sorted({r["depth"] for r in rows})
        columns = min(len(names), 5)  # ten models and scalings in two rows, not one strip
        rows_of_panels = -(-len(names) // columns)
        figure, axes = plt.subplots(rows_of_panels, columns, figsize=(2.6 * columns, 2.8 * rows_of_panels),
                                    squeeze=False, layout="constrained")
        for axis in axes.flat[len(names):]:
            axis.set_axis_off()
        for axis, name in zip(axes.flat, names):
            grid = [[0.0] * len(lengths) for _ in depths]
            for i, depth in enumerate(depths):
                for j, length in enumerate(lengths):
                    values = [r[metric] for r in rows if r["depth"] == depth and r["length"] == length and
                              method_name(r) == name]
                    grid[i][j] = sum(values) / len(values) if values else float("nan")
            axis.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
            axis.set_xticks(range(len(lengths)), [str(x) for x in lengths], fontsize=6)
            axis.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths], fontsize=6)
            axis.set_title(f"{name}: {METRICS[metric]}", fontsize=7)
            axis.set_xlabel("tokens", fontsize=6)
        figure.colorbar(axes.flat[0].images[0], ax=axes, shrink=0.6).set_label("accuracy", fontsize=7)
        for row in axes:
            row[0].set_ylabel("depth", fontsize=6)
        path = os.path.join(out, f"retrieval_{task}{suffix}.png")
        with written_whole(path) as partial:
            figure.savefig(partial, format="png", dpi=120)
        plt.close(figure)


@one_line_on_disk_faults
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    s.add_argument("--label", default="")
    s.add_argument("--scalings", nargs="+", default=["none"],
                   help="none, and ALiBi's or rotary's inference-time scalings (scored past the training length)")
    s.add_argument("--lengths", type=int, nargs="+", help="score only the prompts of these lengths")
    s.add_argument("--fields", default="{}", help="a JSON object of fields added to each row (the runner's)")
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
        score(args.checkpoint, args.data, args.tests, args.out, args.label, args.scalings, args.lengths, fields)


if __name__ == "__main__":
    sys.exit(main())
