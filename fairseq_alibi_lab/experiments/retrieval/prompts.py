"""The retrieval tasks and their prompts: passkey, multi-key needle and key-value lookup in WikiText-2
(the field's passkey of Mohtashami & Jaggi 2023 and RULER's needles, Hsieh et al. 2024, at word level),
generated deterministically from a seed (`make`: the mixed training text and the test prompts; cli.py).

make writes OUT_DIR/text/wiki.{train,valid,test}.tokens: WikiText-2 with retrieval examples of at most L
tokens (prompt and answer, filler from the training split) inserted as lines among the training lines
until they are `fraction` of its tokens, valid and test unchanged (so the language-modelling perplexity
of the same models shows the mixture's cost); and OUT_DIR/test.jsonl, `examples` prompts for each task,
length L..16L and depth 0, 25, 50, 75, 100% (the needle's place in the filler), filler from the
validation split; and OUT_DIR/test-long.jsonl, `long_examples` passkey and multi-key prompts at 32L, 64L
and 128L (past ALiBi's attention field at L = 64). A key is two number words (00-99 each: chance is 1 in
10^4); training keys have an even digit sum, test keys an odd one, so no test answer was seen in
training. Binarize the text with WikiText-2's own dictionary (scripts/prepare-wikitext.sh --srcdict), so
models and checkpoints of the usual data read it."""
import json
import os
import random




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
