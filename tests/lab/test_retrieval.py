"""The retrieval tasks (fairseq_alibi_lab/experiments/retrieval/): made deterministically, test keys never seen
in training, prompts of the asked length with the needle where the depth puts it; scored by greedy
decoding as fairseq's own model decodes."""
import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, find_wikitext2, run

from fairseq_alibi_lab.experiments.retrieval.data import FRACTION  # noqa: E402
from fairseq_alibi_lab.experiments.retrieval.prompts import TASKS, example, key, read_words, shortest  # noqa: E402


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """The first lines of each raw WikiText-2 split, under their own names."""
    root = tmp_path_factory.mktemp("wikitext-2-head")
    for split, lines in [("train", 2000), ("valid", 300), ("test", 50)]:
        with open(os.path.join(find_wikitext2(), f"wiki.{split}.tokens"), encoding="utf-8") as f:
            (root / f"wiki.{split}.tokens").write_text("".join(next(f) for _ in range(lines)), encoding="utf-8")
    return root


def make(source, out, *flags):
    return run([sys.executable, "-m", "fairseq_alibi_lab.retrieval", "make", str(out), "--source", str(source),
                "--length", "48", "--examples", "2", "--long-examples", "1", *flags])



def toy_floors(rows, prompts="toy"):
    """Floor rows of one prompt set for every (task, length, depth) the rows score (retrieval.floor_rows'
    fields): the tables and claims refuse scored rows without the floors of their prompts."""
    from fairseq_alibi_lab.experiments.retrieval.floors import FLOOR, FLOORS

    groups = sorted({(r["task"], r["length"], r["depth"]) for r in rows})
    return [{"label": f"Floor: {floor}", "model": "floor", "checkpoint": FLOOR, "scaling": "none", "task": task,
             "length": length, "depth": depth, "n": 10, "accuracy": 0.0001, "first_accuracy": 0.01,
             "min_distance": int(length * (1 - depth)) + 5, "max_distance": int(length * (1 - depth)) + 5,
             "prompts_sha256": prompts, "experiment": "retrieval", "seed": None}
            for task, length, depth in groups for floor in FLOORS]

def test_make_is_deterministic_and_mixes_the_asked_share(source, tmp_path):
    printed = make(source, tmp_path / "a")
    make(source, tmp_path / "b")
    make(source, tmp_path / "c", "--seed", "2")
    make(source, tmp_path / "d", "--fraction", "0.3")
    for name in ("text/wiki.train.tokens", "test.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert (tmp_path / "a" / name).read_bytes() != (tmp_path / "c" / name).read_bytes()
    # Another mixture, the same test prompts: recipes are compared on one test set.
    assert (tmp_path / "d" / "test.jsonl").read_bytes() == (tmp_path / "a" / "test.jsonl").read_bytes()
    made = json.loads((tmp_path / "a" / "made.json").read_text())
    share = made["inserted_words"] / (made["inserted_words"] + made["train_words"])
    assert FRACTION <= share < FRACTION + 48 / made["train_words"] and "retrieval examples" in printed
    original = (source / "wiki.train.tokens").read_text(encoding="utf-8").splitlines(keepends=True)
    mixed = (tmp_path / "a" / "text" / "wiki.train.tokens").read_text(encoding="utf-8").splitlines(keepends=True)
    it = iter(mixed)  # the original lines, in order, with the examples among them
    assert all(line in it for line in original) and len(mixed) == len(original) + made["inserted"]
    for split in ("valid", "test"):
        assert (tmp_path / "a" / "text" / f"wiki.{split}.tokens").read_bytes() == (source / f"wiki.{split}.tokens").read_bytes()


def test_prompts_past_16l_have_a_file_and_a_stream_of_their_own(source, tmp_path):
    """make --long-examples N: test-long.jsonl holds N passkey and multi-key prompts per length 32L,
    64L, 128L and depth, each holding its (odd-parity) answer as the asked needle; test.jsonl is
    byte for byte the one made without them (the rows scored on it stay valid); a set made before
    them is completed by write_long_tests, the same file as make's."""
    from fairseq_alibi_lab.experiments.retrieval.data import made_otherwise
    from fairseq_alibi_lab.experiments.retrieval.floors import floor_rows
    from fairseq_alibi_lab.experiments.retrieval.prompts import DEPTHS, LONG_MULTIPLES, LONG_TASKS, write_long_tests

    make(source, tmp_path / "a", "--long-examples", "2")
    make(source, tmp_path / "b", "--long-examples", "0")
    assert (tmp_path / "a" / "test.jsonl").read_bytes() == (tmp_path / "b" / "test.jsonl").read_bytes()
    assert not (tmp_path / "b" / "test-long.jsonl").exists()
    tests = [json.loads(line) for line in (tmp_path / "a" / "test-long.jsonl").read_text().splitlines()]
    assert sorted((t["task"], t["length"], t["depth"]) for t in tests) == sorted(
        (task, 48 * m, d) for task in LONG_TASKS for m in LONG_MULTIPLES for d in DEPTHS for _ in range(2))
    assert all(len(t["prompt"].split()) + 2 == t["length"] for t in tests)
    assert all(sum(map(int, f"{int(a):02d}{int(b):02d}")) % 2 == 1 for a, b in (t["answer"].split() for t in tests))
    floors = floor_rows(str(tmp_path / "a" / "test-long.jsonl"))  # refuses a prompt without its answer as a needle
    assert {r["length"] for r in floors} == {48 * m for m in LONG_MULTIPLES}
    assert max(r["max_distance"] for r in floors if r["depth"] == 0.0) > 48 * 100  # the far needles are far
    write_long_tests(str(tmp_path / "b"), str(source), 48, 1, 2)
    assert (tmp_path / "b" / "test-long.jsonl").read_bytes() == (tmp_path / "a" / "test-long.jsonl").read_bytes()
    assert made_otherwise(str(tmp_path / "b"), "made-long.json", length=48, seed=1, examples=2) is None
    assert "examples 2 (wanted 10)" in made_otherwise(str(tmp_path / "b"), "made-long.json", length=48, seed=1, examples=10)


def test_a_set_made_with_other_options_is_named_not_reused(source, tmp_path):
    from fairseq_alibi_lab.experiments.retrieval.data import made_otherwise

    make(source, tmp_path / "a", "--fraction", "0.3")
    wanted = dict(length=48, fraction=0.3, seed=1, examples=2)
    assert made_otherwise(str(tmp_path / "a"), **wanted) is None
    problem = made_otherwise(str(tmp_path / "a"), **dict(wanted, fraction=0.5))
    assert "fraction 0.3 (wanted 0.5)" in problem and "\n" not in problem
    assert "no readable made.json" in made_otherwise(str(tmp_path), **wanted)


def test_test_keys_never_appear_as_answers_in_training(source, tmp_path):
    make(source, tmp_path / "a")
    tests = [json.loads(line) for line in (tmp_path / "a" / "test.jsonl").read_text().splitlines()]
    assert {(t["task"], t["length"], t["depth"]) for t in tests} == {
        (task, 48 * m, d) for task in TASKS for m in (1, 2, 4, 8, 16) for d in (0.0, 0.25, 0.5, 0.75, 1.0)}
    trained = set()
    for line in (tmp_path / "a" / "text" / "wiki.train.tokens").read_text(encoding="utf-8").splitlines():
        words = line.split()
        if words[-3:-2] in (["is"], [":"]) and all(w.isdigit() for w in words[-2:]):  # an example's answer
            trained.add(tuple(words[-2:]))
    assert len(trained) > 20
    assert not trained & {tuple(t["answer"].split()) for t in tests}
    assert all(sum(map(int, f"{int(a):02d}{int(b):02d}")) % 2 == 1 for a, b in (t["answer"].split() for t in tests))


def test_examples_have_the_asked_length_and_the_needle_at_its_depth(source):
    import random

    filler = [w for w in read_words(str(source / "wiki.valid.tokens")) if w != "</s>"]
    for task in TASKS:
        places = []
        for depth in (0.0, 0.5, 1.0):
            prompt, answer = example(task, random.Random(7), filler, 200, depth, 1)
            assert len(prompt) + len(answer) == 200
            text = " ".join(prompt)
            needle = {"passkey": "the pass key is", "multikey": f"the key for {prompt[-2]} is",
                      "kvlookup": " ".join(prompt[-3:])}[task]
            places.append(text.index(needle + " " + " ".join(answer)))
        assert places == sorted(places) and places[0] < places[-1], task
        with pytest.raises(ValueError, match="needs at least"):
            example(task, random.Random(0), filler, shortest(task) - 1, 0.5, 1)
    rng = random.Random(3)
    assert all(sum(map(int, f"{int(a):02d}{int(b):02d}")) % 2 == p for p in (0, 1) for a, b in (key(rng, p) for _ in range(50)))


@pytest.mark.parametrize("flags, message", [
    (["--length", "20"], "the tasks need at least 38 words"),
    (["--fraction", "1.5"], "--fraction must be between 0 and 1"),
    (["--examples", "0"], "--examples must be at least 1"),
])
def test_bad_make_options_are_refused_in_one_line(source, tmp_path, flags, message):
    proc = subprocess.run([sys.executable, "-m", "fairseq_alibi_lab.retrieval", "make", str(tmp_path / "o"), "--source",
                           str(source), *flags], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and message in proc.stderr.splitlines()[-1] and not (tmp_path / "o").exists()


def test_make_refuses_a_folder_that_holds_something(source, tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "mine.txt").write_text("keep")
    proc = subprocess.run([sys.executable, "-m", "fairseq_alibi_lab.retrieval", "make", str(tmp_path / "o"), "--source",
                           str(source)], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and (tmp_path / "o" / "mine.txt").read_text() == "keep"


@pytest.mark.slow
def test_the_retrieval_experiment_runs_through_the_runner_at_toy_size(wt2_slice, source, tmp_path):
    """scripts/experiment.py retrieval at toy size on a retrieval set made from the head of WikiText-2
    (L=40) and binarized with the slice's dictionary: ALiBi trained 4 updates, scored by perplexity
    and by exact match at 40 and 80 tokens (its NTK scaling at 80 only), every task and depth; the
    accuracy table and heatmaps written, and rebuilt the same by --tables; run again, nothing is
    scored twice. Each decoded key is the argmax of fairseq's own forward, token by token, behind
    </s> (checked at 40 tokens, depths 0 and 100%)."""
    from fairseq_alibi.models.build import load_checkpoint
    from reference import naive_greedy

    root = tmp_path / "set"
    make(source, root, "--length", "40", "--long-examples", "3")
    run(["fairseq-preprocess", "--only-source", "--srcdict", os.path.join(wt2_slice, "dict.txt"),
         "--trainpref", root / "text" / "wiki.train.tokens", "--validpref", root / "text" / "wiki.valid.tokens",
         "--destdir", root / "bin", "--workers", "2"])
    out = tmp_path / "out"
    toy = ["--decoder-layers", "1", "--decoder-embed-dim", "32", "--decoder-input-dim", "32", "--decoder-output-dim", "32",
           "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2", "--max-tokens", "1024"]
    command = [sys.executable, "scripts/experiment.py", "retrieval", "--data", str(root / "bin"), "--train-length", "40",
               "--updates", "4", "--lengths", "40", "80", "--seeds", "1", "--models", "alibi", "--out", str(out),
               "--checkpoints", str(tmp_path / "checkpoints"), "--train-flags", " ".join(toy)]
    run(command)
    assert not (tmp_path / "checkpoints" / "alibi-L40-s1" / "checkpoint_best.pt").exists()  # declared: no validation
    rows = [json.loads(line) for line in (out / "retrieval.jsonl").read_text().splitlines()]
    assert sorted((r["scaling"], r["task"], r["length"], r["depth"]) for r in rows) == sorted(
        [("none", t, length, d) for t in TASKS for length in (40, 80) for d in (0.0, 0.25, 0.5, 0.75, 1.0)]
        + [("ntk", t, 80, d) for t in TASKS for d in (0.0, 0.25, 0.5, 0.75, 1.0)])
    assert all(r["n"] == 2 and r["label"] == "ALiBi" and r["updates"] == 4 and r["experiment"] == "retrieval" and
               r["recipe"] == "small" for r in rows)
    from fairseq_alibi.tools.files import data_fingerprint, fingerprint

    assert {(r["prompts_sha256"], r["mixture_sha256"]) for r in rows} == {
        (fingerprint(str(root / "test.jsonl")), data_fingerprint(str(root / "bin"), "train"))}  # what each row was scored with
    assert {r["checkpoint_sha256"] for r in rows if "-s1" in r["checkpoint"]} == {
        fingerprint(str(tmp_path / "checkpoints" / "alibi-L40-s1" / "checkpoint_last.pt"))}
    checkpoint = str(tmp_path / "checkpoints" / "alibi-L40-s1" / "checkpoint_last.pt")
    model, _, task = load_checkpoint(checkpoint, str(root / "bin"), kind="causal LM")
    dictionary = task.source_dictionary
    tests = [json.loads(line) for line in (root / "test.jsonl").read_text().splitlines()]
    for row in (r for r in rows if r["scaling"] == "none" and r["length"] == 40 and r["depth"] in (0.0, 1.0)):
        correct = first = 0
        for t in (t for t in tests if (t["task"], t["length"], t["depth"]) == (row["task"], 40, row["depth"])):
            answer = [dictionary.index(w) for w in t["answer"].split()]
            decoded = naive_greedy(model, dictionary, t["prompt"], len(answer))
            correct += decoded == answer
            first += decoded[0] == answer[0]
        assert row["correct"] == correct and row["accuracy"] == correct / row["n"], row
        assert row["first_correct"] == first and row["first_accuracy"] == first / row["n"], row
    table = (out / "retrieval.md").read_text()
    assert "| ALiBi + NTK |" in table and "chance" in table and all((out / f"retrieval_{t}.png").exists() for t in TASKS)
    # The floors of the very test prompts, written once beside the rows, under every table, and the
    # needles past L (40 tokens) at 80 only.
    floors = [json.loads(line) for line in (out / "floors.jsonl").read_text().splitlines()]
    assert {r["length"] for r in floors} == {40, 80, 160, 320, 640, 1280, 2560, 5120} and "| floor (from the prompts) |" in table
    assert "needles past L only" in table
    perplexity = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if '"unigram"' not in line]
    assert {(r["l_valid"], r["scaling"]) for r in perplexity} == {(40, "none"), (80, "none"), (80, "ntk")}
    (out / "retrieval.md").unlink()
    run([*command, "--tables"])
    assert (out / "retrieval.md").read_text() == table
    # Continued in parallel parts with a second seed: seed 1's part scores again only a row without
    # the first word's count (scored before it was kept), appended; seed 2's rows are merged from its
    # part into OUT's retrieval.jsonl.
    old = {k: v for k, v in rows[0].items() if not k.startswith("first_")}
    (out / "retrieval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [old, *rows[1:]]))
    seeds = command.index("--seeds")
    run([*command[:seeds + 1], "1", "2", *command[seeds + 2:], "--parallel", "2"])
    merged = [json.loads(line) for line in (out / "retrieval.jsonl").read_text().splitlines()]
    second = str(tmp_path / "checkpoints" / "alibi-L40-s2" / "checkpoint_last.pt")
    assert merged[:len(rows)] == [old, *rows[1:]] and len(merged) == 2 * len(rows) + 1
    again = [r for r in merged[len(rows):] if r["checkpoint"] == checkpoint]
    assert len(again) == 1 and {k: v for k, v in again[0].items() if k != "commit"} == {
        k: v for k, v in rows[0].items() if k != "commit"}
    assert {r["checkpoint"] for r in merged[len(rows):]} == {second, checkpoint}
    # Past 16L (test-long.jsonl): the same scorer, each row fingerprinting its own prompts beside the rows
    # of test.jsonl of the same checkpoint; prompts decoded one at a time (MASK_BYTES) as in one batch.
    import fairseq_alibi_lab.experiments.retrieval.score as retrieval

    # Past 16L the runner also writes the loss at each position of the longest window (by_position.jsonl).
    long_tests = str(root / "test-long.jsonl")
    lengths = command.index("--lengths")
    run([*command[:lengths + 1], "40", "80", "1280", *command[lengths + 3:]])
    far = [json.loads(line) for line in (out / "retrieval.jsonl").read_text().splitlines()][len(merged):]
    (window,) = [json.loads(line) for line in (out / "by_position.jsonl").read_text().splitlines()]
    assert (window["label"], window["checkpoint"], window["length"], window["offsets"]) == ("ALiBi", checkpoint, 1280, 2)
    assert len(window["perplexity_by_position"]) == 1280 and window["checkpoint_sha256"] == fingerprint(checkpoint)
    assert "## Perplexity by tokens of context" in (out / "retrieval.md").read_text()
    assert (out / "perplexity_by_context.png").exists()
    assert sorted((r["scaling"], r["task"], r["depth"]) for r in far) == sorted(
        (s, t, d) for s in ("none", "ntk") for t in ("passkey", "multikey") for d in (0.0, 0.25, 0.5, 0.75, 1.0))
    assert {(r["length"], r["n"], r["prompts_sha256"]) for r in far} == {(1280, 3, fingerprint(long_tests))}
    retrieval.MASK_BYTES = 1  # one prompt at a time
    try:
        retrieval.score(checkpoint, str(root / "bin"), long_tests, str(tmp_path / "one.jsonl"), "ALiBi", ("none",), [1280])
    finally:
        retrieval.MASK_BYTES = 2 ** 30
    one = [json.loads(line) for line in (tmp_path / "one.jsonl").read_text().splitlines()]
    kept = ("scaling", "task", "depth", "correct", "first_correct")
    assert sorted(tuple(r[k] for k in kept) for r in one) == sorted(tuple(r[k] for k in kept) for r in far if r["scaling"] == "none")
    # A scoring cut between two groups of a length keeps the groups it finished; scored again, it adds
    # only the others, and the rows are those of the whole scoring.
    import fairseq_alibi.hf.export as export

    built, calls = export.hf_model_of, []

    def cut_at_the_third_group(*args, **kwargs):
        hf, generate = built(*args, **kwargs), None

        def counted(*a, **k):
            calls.append(1)
            if len(calls) == 3:
                raise KeyboardInterrupt
            return generate(*a, **k)
        generate, hf.generate = hf.generate, counted
        return hf
    export.hf_model_of = cut_at_the_third_group
    try:
        with pytest.raises(KeyboardInterrupt):
            retrieval.score(checkpoint, str(root / "bin"), long_tests, str(tmp_path / "cut.jsonl"), "ALiBi", ("none",), [1280])
    finally:
        export.hf_model_of = built
    assert len((tmp_path / "cut.jsonl").read_text().splitlines()) == 2
    retrieval.score(checkpoint, str(root / "bin"), long_tests, str(tmp_path / "cut.jsonl"), "ALiBi", ("none",), [1280])
    resumed = [json.loads(line) for line in (tmp_path / "cut.jsonl").read_text().splitlines()]
    assert sorted(tuple(r[k] for k in kept) for r in resumed) == sorted(tuple(r[k] for k in kept) for r in one)


def test_prompts_past_16l_are_asked_with_the_models_long_scalings_only(tmp_path, monkeypatch):
    """A model with long_scalings (rotary: YaRN, its one scaling above its floor at 4L) is scored on
    test.jsonl with every scaling and on the prompts past 16L with those only; one naming a scaling the
    model lacks is refused when it is declared."""
    import types

    import fairseq_alibi_lab.experiments.retrieval.score as retrieval
    from fairseq_alibi_lab.experiments.base import Model

    asked = []
    monkeypatch.setattr(retrieval, "test_sets", lambda data, length: [
        (os.path.join(data, "test.jsonl"), [40, 80]), (os.path.join(data, retrieval.LONG_TESTS), [1280, 2560])])
    monkeypatch.setattr(retrieval, "in_process_of_its_own", lambda args, what: asked.append(args))
    context = types.SimpleNamespace(out=str(tmp_path), data="set", length=40, row_fields=lambda checkpoint: "{}")
    for model, past_16l in [(Model("Rotary", "rotary", scalings=("ntk", "yarn"), long_scalings=("yarn",)), ["yarn"]),
                            (Model("ALiBi", "alibi", scalings=("ntk",)), ["none", "ntk"])]:
        asked.clear()
        retrieval.score_model(context, types.SimpleNamespace(model=model, checkpoint="c.pt", lengths=(40, 80, 1280)))
        scored = [(a[4], a[a.index("--scalings") + 1:a.index("--lengths")], a[a.index("--lengths") + 1:a.index("--fields")])
                  for a in asked if a[1] == "score"]
        assert scored == [(os.path.join("set", "test.jsonl"), ["none", *model.scalings], ["40", "80"]),
                          (os.path.join("set", retrieval.LONG_TESTS), past_16l, ["1280"])]
    with pytest.raises(ValueError, match="long_scalings ntk not among its scalings"):
        Model("Rotary", "rotary", scalings=("yarn",), long_scalings=("ntk",))


def test_retrieval_claims_average_the_depths_of_each_seed(tmp_path):
    """scripts/claims.py --experiment retrieval: a cell is a model (with its scaling) on one task at
    K x L, each seed's exact match averaged over the depths (the last scoring of a depth winning),
    in percent, higher better; rows from retrieval.jsonl beside the results; a missing file is one line."""
    import json
    import subprocess
    import sys

    from conftest import REPO
    from fairseq_alibi_lab import claims
    from fairseq_alibi_lab.experiments import EXPERIMENTS
    from fairseq_alibi_lab.experiments.retrieval import claims as needles

    def row(label, seed, length, depth, accuracy, scaling="none", task="passkey"):
        return {"label": label, "model": "m", "seed": seed, "checkpoint": f"{label}-s{seed}.pt", "scaling": scaling,
                "task": task, "length": length, "depth": depth, "n": 10, "correct": int(10 * accuracy),
                "accuracy": accuracy, "first_correct": 10, "first_accuracy": 1.0}

    rows = [row("ALiBi", s, 64, d, 1.0) for s in (1, 2, 3) for d in (0.0, 1.0)]
    rows += [row("ALiBi", s, 256, d, a) for s in (1, 2, 3) for d, a in ((0.0, 0.0), (1.0, 0.1 * s))]
    rows += [row("ALiBi", s, 256, d, 0.9, "ntk") for s in (1, 2, 3) for d in (0.0, 1.0)]
    rows.append(row("ALiBi", 1, 256, 1.0, 0.3))  # a rescoring of seed 1's depth 1.0: it wins
    del rows[0]["first_accuracy"]  # a row scored before the first word was counted: left out of that scoring only
    found, length, _ = needles.cells_of(rows)
    # ... where its seed waits (a mean over fewer depths is another number), as a seed whose scoring of
    # a length was cut between its depths does
    assert found[("first key word", "ALiBi", "passkey", 64)] == pytest.approx({f"ALiBi-s{s}.pt": 100.0 for s in (2, 3)})
    cut = [r for r in rows if (r["seed"], r["length"], r["scaling"], r["depth"]) != (3, 256, "ntk", 1.0)]
    assert needles.cells_of(cut)[0][("exact match", "ALiBi + NTK", "passkey", 256)] == pytest.approx(
        {f"ALiBi-s{s}.pt": 90.0 for s in (1, 2)})
    rows[0]["first_accuracy"] = 1.0
    found, length, _ = needles.cells_of(rows)
    assert length == 64 and found[("exact match", "ALiBi", "passkey", 256)] == pytest.approx(
        {"ALiBi-s1.pt": 15.0, "ALiBi-s2.pt": 10.0, "ALiBi-s3.pt": 15.0})
    assert found[("first key word", "ALiBi", "passkey", 256)] == pytest.approx({f"ALiBi-s{s}.pt": 100.0 for s in (1, 2, 3)})
    assert found[("first key word", "ALiBi", "passkey", 64)] == pytest.approx({f"ALiBi-s{s}.pt": 100.0 for s in (1, 2, 3)})
    experiment = EXPERIMENTS["retrieval"]

    def rendered(declared):  # claim / scoring -> its line (the second and third columns: when declared, its family)
        text = claims.render(needles.cells_from(rows, toy_floors(rows), ()), declared)
        return {line.split(" | ")[0].lstrip("| ") + " / " + line.split(" | ")[3]: line for line in text.splitlines()[2:]
                if line.startswith("| ")}

    # the claims on ALiBi's passkey to 4L, which these rows hold whole (a family with a pending line decides nothing)
    lines = rendered([c for c in experiment.claims if {c.a[0], c.b[0]} <= {"ALiBi", "ALiBi + NTK"}
                      and c.a[1] == c.b[1] == "passkey" and max(c.a[2], c.b[2]) <= 4])
    fails = lines["ALiBi fails past L (passkey: L above 4L) / exact match (%)"]
    assert "ALiBi, passkey at 64: 100.00 ± 0.00 (n=3) | ALiBi, passkey at 256: 13.33 ± 2.89 (n=3)" in fails
    assert "| primary |" in fails and "paired t" in fails and fails.endswith("| supported |")
    assert lines["NTK-ALiBi widens ALiBi's field (passkey at 4L) / exact match (%)"].endswith("| supported |")
    # the first key word was a scoring added after the data: exploratory
    first = lines["ALiBi fails past L (passkey: L above 4L) / first key word (%)"]
    assert "| exploratory (post hoc) |" in first and first.endswith("| exploratory (no verdict) |")
    everything = rendered(experiment.claims)  # rotary has no rows here: pending, and so no primary verdict at all
    assert everything["Rotary + YaRN retrieves further than ALiBi (passkey at 4L) / exact match (%)"].endswith(
        f"| {claims.PENDING} |")
    assert everything["ALiBi fails past L (passkey: L above 4L) / exact match (%)"].endswith("pending) |")
    (tmp_path / "results.jsonl").write_text("")
    command = [sys.executable, "scripts/claims.py", str(tmp_path / "results.jsonl"), "--experiment", "retrieval"]
    missing = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert missing.returncode != 0 and len(missing.stderr.strip().splitlines()) == 1 and \
        "the retrieval experiment writes it" in missing.stderr
    (tmp_path / "retrieval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    no_floors = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert no_floors.returncode == 1 and "no floors at" in no_floors.stderr.strip().splitlines()[-1]
    (tmp_path / "floors.jsonl").write_text("".join(json.dumps(r) + "\n" for r in toy_floors(rows)))
    printed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert printed == claims.render(needles.cells_from(rows, toy_floors(rows), ()), experiment.claims)
    # --compare: an undeclared comparison of two cells on one task, by the same rule and test as the
    # declared claim on those cells (NTK-ALiBi's at 4L here), under the name it was asked by.
    compared = [line for line in subprocess.run(command + ["--compare", "ALiBi + NTK@4", "ALiBi@4", "--task", "passkey"], cwd=REPO,
                capture_output=True, text=True, check=True).stdout.splitlines()[2:] if line.startswith("| ")]
    declared = [line for name, line in lines.items() if name.startswith("NTK-ALiBi widens ALiBi's field (passkey")]
    # the floors add the scorings over needles past L, which --compare asks too and the claim was not declared on
    assert len(compared) == 4
    compared = [line for line in compared if line.split(" | ")[3] in {d.split(" | ")[3] for d in declared}]

    def measured(line):  # scoring, cells, spread, test: not when it was declared, its family, Holm's p or a verdict
        return line.split(" | ")[3:8]
    assert len(compared) == 2 and [measured(line) for line in compared] == [measured(line) for line in declared]
    assert all(" | not declared (asked after the data) | exploratory (post hoc) | " in line for line in compared)
    assert all(line.endswith("| exploratory (no verdict) |") for line in compared)
    assert all(line.startswith("| ALiBi + NTK at 4L above ALiBi at 4L (passkey) | ") for line in compared)
    for flags, message in ((["--compare", "ALiBi + NTK@4", "ALiBi@4"], "--compare on the retrieval rows needs --task"),
                           (["--compare", "Alibi@4", "ALiBi@4", "--task", "passkey"], "no rows of 'Alibi' at 4L"),
                           (["--task", "passkey"], "--task names the task of --compare's cells")):
        refused = subprocess.run(command + flags, cwd=REPO, capture_output=True, text=True)
        assert refused.returncode != 0 and message in refused.stderr.strip().splitlines()[-1], refused.stderr


def test_the_retrieval_table_puts_each_models_perplexity_at_l_beside_its_accuracy(tmp_path):
    """retrieval.report: accuracy (%) per task and length, averaged over the depths, mean ± std over
    the seeds, for the whole key and then its first word; beside it the same checkpoints' validation
    perplexity in blocks of L (a scaling's row shows its model's); rows of checkpoints the experiment
    does not declare are left out; a heatmap per task and scoring."""
    import json
    import statistics

    from fairseq_alibi_lab.experiments.retrieval import floors, report, score

    def scored(seed, length, depth, accuracy, scaling="none", checkpoint=None):
        return {"label": "ALiBi", "model": "m", "seed": seed, "checkpoint": checkpoint or f"a-s{seed}.pt",
                "scaling": scaling, "task": "passkey", "length": length, "depth": depth, "n": 10, "accuracy": accuracy,
                "first_accuracy": min(1.0, 2 * accuracy)}

    def perplexity(seed, value, l_valid=64, stride=0, scaling="none"):
        return {"label": "ALiBi", "model": "m", "seed": seed, "checkpoint": f"a-s{seed}.pt", "split": "valid",
                "train_length": 64, "l_valid": l_valid, "stride": stride, "scaling": scaling, "perplexity": value}

    accuracy = [scored(s, 64, d, 0.1 * s + d / 10) for s in (1, 2) for d in (0.0, 1.0)]
    accuracy += [scored(s, 128, d, 0.0) for s in (1, 2) for d in (0.0, 1.0)]
    accuracy += [scored(s, 128, d, 0.2, "ntk") for s in (1, 2) for d in (0.0, 1.0)]
    accuracy.append(scored(3, 64, 0.0, 1.0, checkpoint="undeclared.pt"))
    (tmp_path / score.ROWS).write_text("".join(json.dumps(r) + "\n" for r in accuracy))
    (tmp_path / floors.FLOOR_ROWS).write_text("".join(json.dumps(r) + "\n" for r in toy_floors(accuracy)))
    rows = [perplexity(1, 200.0), perplexity(2, 210.0), perplexity(1, 150.0, l_valid=128), perplexity(1, 190.0, stride=32)]
    text = report.report(rows, str(tmp_path))
    assert text == (tmp_path / "retrieval.md").read_text()
    exact, first = (text.split("## passkey: " + name)[1].split("##")[0].splitlines() for name in ("exact match", "first key word"))
    at_l = f"{statistics.mean([15.0, 25.0]):.1f} ± {statistics.stdev([15.0, 25.0]):.1f} (n=2)"
    first_at_l = f"{statistics.mean([30.0, 50.0]):.1f} ± {statistics.stdev([30.0, 50.0]):.1f} (n=2)"
    perplexity_at_l = f"205.00 ± {statistics.stdev([200.0, 210.0]):.2f} (n=2)"
    assert f"| ALiBi | {at_l} | 0.0 ± 0.0 (n=2) | {perplexity_at_l} |" in exact
    assert f"| ALiBi + NTK | - | 20.0 ± 0.0 (n=2) | {perplexity_at_l} |" in exact
    assert f"| ALiBi | {first_at_l} | 0.0 ± 0.0 (n=2) | {perplexity_at_l} |" in first
    assert f"| ALiBi + NTK | - | 40.0 ± 0.0 (n=2) | {perplexity_at_l} |" in first
    assert "| model | 64 | 128 | perplexity at L |" in exact and "| chance: 0.01 (one key of 10^4) | 0.01 | 0.01 | |" in exact
    assert "| chance: 1 (one word of 100) | 1 | 1 | |" in first
    assert all((tmp_path / f"retrieval_passkey{suffix}.png").exists() for suffix in ("", "_first"))


def test_floors_are_what_simple_answerers_score_on_the_very_prompts(source, tmp_path):
    """retrieval floors: for each (task, length, depth), a random needle's words (expected), the needle
    nearest the question, the most frequent number (first word) and chance, each checked against the
    prompts read naively here (the needles found by their words, not by floors.py's parser); the
    asked needle's distance from the question in tokens; "Floor", the best answerer that does not pick
    the asked needle out, as the claims read it; one line for a file that is not a test set."""
    import re

    from fairseq_alibi_lab.experiments.retrieval.floors import FLOOR, floor_cells

    make(source, tmp_path / "set")
    floors_path = tmp_path / "floors.jsonl"
    run([sys.executable, "-m", "fairseq_alibi_lab.retrieval", "floors", str(tmp_path / "set" / "test.jsonl"), str(floors_path)])
    rows = {(r["label"], r["task"], r["length"], r["depth"]): r for r in map(json.loads, floors_path.read_text().splitlines())}
    tests = [json.loads(line) for line in (tmp_path / "set" / "test.jsonl").read_text().splitlines()]
    patterns = {"passkey": r"the pass key is (\d+ \d+) \. remember", "multikey": r"the key for \w+ is (\d+ \d+) \.",
                "kvlookup": r"\d+ \d+ : (\d+ \d+) \."}
    for (task, length, depth) in {(t["task"], t["length"], t["depth"]) for t in tests}:
        group = [t for t in tests if (t["task"], t["length"], t["depth"]) == (task, length, depth)]
        random_needle = nearest = 0.0
        distances = []
        for t in group:
            body = " ".join(t["prompt"].split()[:-{"passkey": 10, "multikey": 12, "kvlookup": 5}[task]])
            needles = re.findall(patterns[task], body)
            random_needle += needles.count(t["answer"]) / len(needles)
            nearest += needles[-1] == t["answer"]
            where = body.split().index(t["answer"].split()[0]) if task == "passkey" else None
            if where is not None:
                distances.append(len(t["prompt"].split()) - where)
        assert rows[("Floor: a random needle", task, length, depth)]["accuracy"] == pytest.approx(random_needle / len(group))
        assert rows[("Floor: the needle nearest the question", task, length, depth)]["accuracy"] == pytest.approx(
            nearest / len(group))
        assert rows[("Floor: chance", task, length, depth)]["first_accuracy"] == 0.01
        if distances:
            assert rows[("Floor: chance", task, length, depth)]["min_distance"] == min(distances)
    assert rows[("Floor: a random needle", "multikey", 48, 0.0)]["accuracy"] == pytest.approx(1 / 3, abs=0.2)
    assert rows[("Floor: chance", "passkey", 48, 1.0)]["max_distance"] < 48 < rows[("Floor: chance", "passkey", 192, 0.0)]["min_distance"]
    cells = floor_cells(list(rows.values()), "first_accuracy")
    assert cells[("passkey", "Floor", 48)] == {FLOOR: 0.01}  # one needle: copying it is the task
    best = max(cells[("multikey", f"Floor: {f}", 48)][FLOOR] for f in ("a random needle", "the needle nearest the question", "chance"))
    assert cells[("multikey", "Floor", 48)] == {FLOOR: best}
    (tmp_path / "not-tests.jsonl").write_text(json.dumps({"task": "passkey", "length": 48, "depth": 0.0, "prompt": "a b c d e f g h i j k",
                                                           "answer": "1 2"}) + "\n")
    refused = subprocess.run([sys.executable, "-m", "fairseq_alibi_lab.retrieval", "floors", str(tmp_path / "not-tests.jsonl"),
                              str(tmp_path / "f2.jsonl")], cwd=REPO, capture_output=True, text=True)
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr


def test_a_claim_against_the_floor_takes_the_seeds_spread_and_a_one_sample_test():
    from scipy import stats

    from fairseq_alibi_lab import claims
    from fairseq_alibi_lab.experiments.retrieval.floors import FLOOR

    seeds = {"a-s1": 44.0, "a-s2": 45.0, "a-s3": 46.0}
    found = claims.compare(seeds, {FLOOR: 33.0})
    assert found.spread.startswith("separated") and found.difference == 12.0 and found.p == pytest.approx(
        stats.ttest_1samp([44.0, 45.0, 46.0], 33.0).pvalue) and found.test.startswith("one-sample t")
    assert claims.verdict("higher", found, True, found.p) == "supported"
    assert claims.compare(seeds, {FLOOR: 44.5}).spread.startswith("within")
    assert claims.compare({"a-s1": 1.0}, {FLOOR: 0.5}).missing.startswith("no verdict (n = 1")


def test_seeds_without_spread_get_no_test_and_no_verdict():
    """Three seeds at 0% against a floor of 1% (ALiBi's passkey at 128L): scipy's one-sample t is
    infinite there and its p 0; the table says there is no test, Holm's family leaves it out, and
    a primary line without a test has no verdict."""
    from fairseq_alibi_lab import claims
    from fairseq_alibi_lab.experiments.retrieval.floors import FLOOR

    zeros = {"a-s1": 0.0, "a-s2": 0.0, "a-s3": 0.0}
    found = claims.compare(zeros, {FLOOR: 1.0})
    assert found.p is None and found.test == "one-sample t: no spread, no test" and found.spread.startswith("separated")
    assert claims.verdict("at most", found, True, None) == "no verdict (no test)"
    ntk = {"a-s1": 70.0, "a-s2": 80.0, "a-s3": 90.0}
    shifted = {c: v - 5.0 for c, v in ntk.items()}  # every paired difference 5: no spread either
    assert claims.t_test(ntk, shifted) == ("paired t: no spread, no test", None)
    assert claims.t_test(ntk, zeros)[1] is not None  # the differences spread: a test
    assert claims.t_test({"x-s1": 1.0, "x-s2": 1.0}, {"y-s1": 2.0, "y-s2": 2.0})[1] is None  # Welch, both flat
    assert claims.holm([None, 0.01, 0.04]) == [None, 0.02, 0.04]


def test_accuracy_by_distance_bins_each_group_by_its_needles_distance_then_averages_seeds_and_floors():
    """by_distance against the rule written out by hand: a group's place is the power-of-2 bin of the
    mean of its least and greatest distance; a seed's groups in a bin are averaged, then the floor is
    the best answerer (passkey: chance only; else a random or the nearest needle, chance) over the bin."""
    from fairseq_alibi_lab.experiments.retrieval.report import by_distance

    def floor(task, length, depth, low, high, **scores):
        return [{"label": f"Floor: {name}", "checkpoint": "(floor)", "task": task, "length": length, "depth": depth,
                 "min_distance": low, "max_distance": high, "accuracy": value}
                for name, value in scores.items()]

    floors = (floor("multikey", 64, 0.0, 50, 60, **{"a random needle": 0.3, "the needle nearest the question": 0.1, "chance": 1e-4})
              + floor("multikey", 128, 0.5, 56, 62, **{"a random needle": 0.5, "the needle nearest the question": 0.7, "chance": 1e-4})
              + floor("multikey", 128, 0.0, 120, 126, **{"a random needle": 0.2, "the needle nearest the question": 0.0, "chance": 1e-4})
              + floor("passkey", 64, 0.0, 40, 44, **{"a random needle": 1.0, "the needle nearest the question": 1.0, "chance": 0.01}))
    scored = [{"label": "ALiBi", "model": "alibi_transformer_lm", "checkpoint": f"s{seed}", "task": "multikey",
               "length": length, "depth": depth, "accuracy": value}
              for seed, length, depth, value in ((1, 64, 0.0, 1.0), (1, 128, 0.5, 0.5), (1, 128, 0.0, 0.25),
                                                 (2, 64, 0.0, 0.0), (2, 128, 0.5, 0.0), (2, 128, 0.0, 0.75))]
    models, floors_by_bin = by_distance(scored, floors, "accuracy")
    # distances 55 and 59 -> bin 5 (32-63); 123 -> bin 6 (64-127)
    assert models == {"multikey": {"ALiBi": {5: [0.75, 0.0], 6: [0.25, 0.75]}}}
    # bin 5: random needle (0.3 + 0.5) / 2 = 0.4, nearest (0.1 + 0.7) / 2 = 0.4; bin 6: random 0.2
    assert floors_by_bin["multikey"] == pytest.approx({5: 0.4, 6: 0.2})
    assert floors_by_bin["passkey"] == pytest.approx({5: 0.01})  # one needle: copying it is the task, chance only
    # A seed scored at a group the other lacks (a longer prompt, a run in progress): that group waits.
    extra = dict(scored[0], checkpoint="s2", length=256, depth=0.75, accuracy=1.0)
    floors += floor("multikey", 256, 0.75, 60, 62, **{"a random needle": 0.3})
    assert by_distance([*scored, extra], floors, "accuracy")[0] == models


def test_perplexity_by_context_bins_positions_by_their_tokens_of_context_in_log_space():
    """by_context against the rule by hand: position p (p tokens before it) in bin floor(log2 p) (0 with
    1), the bin's perplexities averaged in log space, one value per checkpoint; the last row of a
    checkpoint wins."""
    import math

    from fairseq_alibi_lab.experiments.retrieval.report import FIRST_HALF, SECOND_HALF, by_context

    def row(checkpoint, values, label="ALiBi"):
        return {"label": label, "checkpoint": checkpoint, "perplexity_by_position": values}

    rows = [row("a", [9.0] * 6), row("a", [100.0, 50.0, 20.0, 10.0, 40.0, 5.0]), row("b", [1.0, 1.0, 4.0, 16.0, 2.0, 8.0]),
            row("c", [3.0] * 6, "NoPE")]
    got = by_context(rows)
    assert set(got) == {"ALiBi", "NoPE"}
    # bins: 0 <- positions 0, 1; 1 <- 2, 3; 2 <- 4, 5
    assert got["ALiBi"][0] == pytest.approx([math.sqrt(100 * 50), 1.0])
    assert got["ALiBi"][1] == pytest.approx([math.sqrt(20 * 10), math.sqrt(4 * 16)])
    assert got["ALiBi"][2] == pytest.approx([math.sqrt(40 * 5), math.sqrt(2 * 8)])
    assert got["NoPE"] == {b: pytest.approx([3.0]) for b in (0, 1, 2, FIRST_HALF, SECOND_HALF)}
    # the halves: positions 0-2 and 3-5
    assert got["ALiBi"][FIRST_HALF] == pytest.approx([(100 * 50 * 20) ** (1 / 3), 4 ** (1 / 3)])
    assert got["ALiBi"][SECOND_HALF] == pytest.approx([(10 * 40 * 5) ** (1 / 3), (16 * 2 * 8) ** (1 / 3)])


def test_a_learned_slope_models_slopes_and_reaches_are_read_from_its_checkpoint(tmp_path):
    """learned_slopes against the rule by hand: a checkpoint of learned_alibi's module with set log
    slopes gives m_h = exp(s_h) and reach 1/m_h, beside the paper's 2^-1..2^-8; the row says what it
    is; recorded once however often asked; tabulated as mean ± sample std over seeds; a checkpoint
    without learned slopes refused in one line."""
    import math
    import statistics

    import torch

    from fairseq_alibi.positions.learned_alibi import LearnedAlibi
    from fairseq_alibi_lab import learned_slopes
    from fairseq_alibi_lab.results import identity_missing

    def checkpoint(name, logs, seed):
        module = LearnedAlibi(8)
        with torch.no_grad():
            module.log_slopes.copy_(torch.tensor(logs))
        path = str(tmp_path / name)
        torch.save({"cfg": {"model": {"_name": "transformer_lm"}, "task": {"tokens_per_sample": 64}, "common": {"seed": seed}},
                    "model": {"decoder.learned_alibi.log_slopes": module.log_slopes.detach(), "decoder.other": torch.zeros(2)},
                    "optimizer_history": [{"num_updates": 10}]}, path)
        return path

    logs = [[0.5, -0.2, -0.9, -1.3, -2.1, -2.2, -3.0, -3.2], [0.4, -0.1, -1.0, -1.2, -2.0, -2.4, -2.9, -3.5]]
    paths = [checkpoint(f"s{seed}.pt", values, seed) for seed, values in ((1, logs[0]), (2, logs[1]))]
    fields = {"experiment": "retrieval", "recipe": "small", "train_flags": ""}
    row = learned_slopes.slope_row(paths[0], "ALiBi, learned slopes", fields)
    assert row["slopes"] == pytest.approx([math.exp(v) for v in logs[0]], rel=1e-6)
    assert row["reaches"] == pytest.approx([math.exp(-v) for v in logs[0]], rel=1e-6)
    assert row["initial_slopes"] == [2.0 ** -(h + 1) for h in range(8)]
    assert (row["seed"], row["updates"], row["train_length"]) == (1, 10, 64)
    assert identity_missing(row) == []
    out = tmp_path / "out"
    out.mkdir()
    for path in (*paths, paths[0]):
        learned_slopes.record_row(str(out), path, "ALiBi, learned slopes", fields)
    assert len((out / learned_slopes.ROWS).read_text().splitlines()) == 2
    lines = learned_slopes.table(str(out), set(paths))
    slope_line = next(line for line in lines if line.startswith("| ALiBi, learned slopes: slope"))
    reach_line = next(line for line in lines if line.startswith("| ALiBi, learned slopes: reach"))
    first = [math.exp(logs[0][0]), math.exp(logs[1][0])]
    assert slope_line.split(" | ")[1:3] == ["2", f"{statistics.mean(first):.3f} ± {statistics.stdev(first):.3f}"]
    last = [math.exp(-logs[0][7]), math.exp(-logs[1][7])]
    assert reach_line.rstrip(" |").split(" | ")[-1] == f"{statistics.mean(last):.1f} ± {statistics.stdev(last):.1f}"
    assert "| ALiBi (fixed): reach | | 2 | 4 | 8 | 16 | 32 | 64 | 128 | 256 |" in lines
    assert learned_slopes.table(str(out), {"elsewhere.pt"}) == []
    plain = str(tmp_path / "plain.pt")
    torch.save({"cfg": {}, "model": {"decoder.other": torch.zeros(2)}}, plain)
    with pytest.raises(SystemExit, match=r"^error: .*plain.pt has no learned ALiBi slopes"):
        learned_slopes.slope_row(plain, "x", fields)


def test_the_claims_audit_dates_a_cell_by_its_retired_rows_at_its_length_too(tmp_path):
    """A checkpoint trained again (its rows retired) keeps its cells' history: a claim declared after a
    retired row of its cell's path and length was seen is post hoc; retired rows at other lengths of
    that path do not date the cell (a claim at 32L declared before any row there is not post hoc)."""
    from fairseq_alibi_lab.claims import Cells, Claim, audit
    from fairseq_alibi_lab.experiments.retrieval.claims import located

    P = "first key word, needles past L"  # a scoring declared with the experiment (no scorings_declared)

    dates = {"old": "2026-01-01", "claim": "2026-01-02", "new": "2026-01-03"}
    ckpt = "c/s1.pt"
    (tmp_path / "retrieval.jsonl").write_text(json.dumps({"checkpoint": ckpt, "commit": "new", "length": 2048}) + "\n")
    (tmp_path / "retired.jsonl").write_text("".join(json.dumps({"checkpoint": ckpt, "commit": "old", "length": n}) + "\n"
                                                    for n in (64, 1024)))
    found = {(P, "ALiBi", "passkey", 1024): {ckpt: 40.0}, (P, "ALiBi", "passkey", 2048): {ckpt: 10.0},
             (P, "Floor", "passkey", 2048): {"(floor)": 1.0}}
    claims = (Claim("at 16L", ("ALiBi", "passkey", 16), ("ALiBi", "passkey", 16), "higher", (P,), declared="claim",
                    after_data=True),
              Claim("at 32L", ("ALiBi", "passkey", 32), ("Floor", "passkey", 32), "at most", (P,), declared="claim"))
    rows, retired = [str(tmp_path / "retrieval.jsonl")], [str(tmp_path / "retired.jsonl")]
    found = Cells(found, located(64), tuple(rows))
    report, wrong = audit(found, claims, rows, date=dates.get, retired=retired)
    assert wrong == 0, report
    assert "| at 16L | claim | 2026-01-02 | old | 2026-01-01 | yes | the same |" in report
    assert "| at 32L | claim | 2026-01-02 | new | 2026-01-03 | no | the same |" in report
    # without them the 16L cell looks new (its post hoc declaration then reads as merely conservative)
    report, _ = audit(found, claims, rows, date=dates.get)
    assert "| at 16L | claim | 2026-01-02 | new | 2026-01-03 | no | post hoc as declared (conservative) |" in report


def test_the_claims_audit_dates_a_claim_on_a_new_arm_by_the_new_arms_first_row(tmp_path):
    """A claim on an arm added later against a baseline scored long before could first be decided when the new
    arm had a row: declared between the two it is declared before its data; after both, post hoc; with the new
    arm not scored yet, it waits."""
    from fairseq_alibi_lab.claims import Cells, Claim, audit
    from fairseq_alibi_lab.experiments.retrieval.claims import located

    P = "first key word, needles past L"
    dates = {"baseline": "2026-01-01", "claim": "2026-01-02", "new": "2026-01-03", "late": "2026-01-04"}
    rows = tmp_path / "retrieval.jsonl"
    rows.write_text("".join(json.dumps({"checkpoint": c, "commit": commit, "length": 2048}) + "\n"
                            for c, commit in (("alibi/s1.pt", "baseline"), ("new/s1.pt", "new"))))
    found = Cells({(P, "ALiBi", "passkey", 2048): {"alibi/s1.pt": 10.0}, (P, "New", "passkey", 2048): {"new/s1.pt": 30.0}},
                  located(64), (str(rows),))
    before = Claim("new beats ALiBi", ("New", "passkey", 32), ("ALiBi", "passkey", 32), "higher", (P,), declared="claim")
    after = Claim("new beats ALiBi, late", ("New", "passkey", 32), ("ALiBi", "passkey", 32), "higher", (P,),
                  declared="late", after_data=True)
    conservative = Claim("new beats ALiBi, kept post hoc", ("New", "passkey", 32), ("ALiBi", "passkey", 32), "higher",
                         (P,), declared="claim", after_data=True)
    report, wrong = audit(found, (before, after, conservative), [str(rows)], date=dates.get)
    assert wrong == 0, report
    assert "| new beats ALiBi, kept post hoc | claim | 2026-01-02 | new | 2026-01-03 | no | post hoc as declared (conservative) |" in report
    assert audit(found, (dataclasses.replace(after, after_data=False),), [str(rows)], date=dates.get)[1] == 1
    assert "| new beats ALiBi | claim | 2026-01-02 | new | 2026-01-03 | no | the same |" in report
    assert "| new beats ALiBi, late | late | 2026-01-04 | new | 2026-01-03 | yes | the same |" in report
    pending = Cells({(P, "ALiBi", "passkey", 2048): {"alibi/s1.pt": 10.0}}, located(64), (str(rows),))
    report, wrong = audit(pending, (before,), [str(rows)], date=dates.get)
    assert wrong == 0 and "| new beats ALiBi | claim | 2026-01-02 | - | - | no | the same |" in report, report


def test_the_claims_audit_refuses_in_one_line_without_the_history_that_dates_its_commits(tmp_path):
    """A shallow clone or a copy without .git once audited every claim 'the same', 'post hoc: no'."""
    from fairseq_alibi_lab.claims import Cells, Claim, audit
    from fairseq_alibi_lab.experiments.retrieval.claims import located

    P = "first key word, needles past L"
    (tmp_path / "retrieval.jsonl").write_text(json.dumps({"checkpoint": "c/s1.pt", "commit": "abc1234", "length": 1024}) + "\n")
    found = Cells({(P, "ALiBi", "passkey", 1024): {"c/s1.pt": 40.0}}, located(64), ())
    claims = (Claim("at 16L", ("ALiBi", "passkey", 16), ("ALiBi", "passkey", 16), "higher", (P,), declared="def5678"),)
    for dates in ({"def5678": "2026-01-02"}, {"abc1234": "2026-01-01"}):  # a row's commit, then the claim's, unknown
        with pytest.raises(SystemExit, match=r"^error: --audit needs the git history that holds commit \w+ .*full clone"):
            audit(found, claims, [str(tmp_path / "retrieval.jsonl")], date=dates.get)


@pytest.mark.parametrize("edit, message", [
    ({"accuracy": float("nan")}, "accuracy nan is not a possible measurement"),
    ({"accuracy": 1.5}, "accuracy 1.5 is not a possible measurement"),
    ({"perplexity": -3.0}, "perplexity -3.0 is not a possible measurement"),
    ({"first_correct": 12, "n": 10}, "first_correct 12 of n 10 prompts"),
])
def test_a_row_with_an_impossible_value_stops_tables_and_verdicts_in_one_line(tmp_path, edit, message):
    """A hand-edited NaN accuracy once gave 'nan ± nan ... not separated' and shrank the Holm family; a
    negative perplexity was averaged in. Read or written, such a row is refused, naming its line."""
    from fairseq_alibi_lab.result_rows import append_lines, read_rows

    good = {"label": "ALiBi", "seed": 1, "accuracy": 0.5, "first_correct": 5, "n": 10, "perplexity": 200.0}
    path = tmp_path / "retrieval.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, **edit}) + "\n")
    with pytest.raises(SystemExit, match=rf"^error: .*retrieval.jsonl line 2: {re.escape(message)}"):
        read_rows(str(path))
    with pytest.raises(SystemExit, match=r"^error: .*not recorded in"):
        append_lines(str(tmp_path / "new.jsonl"), [json.dumps({**good, **edit})])
    assert not (tmp_path / "new.jsonl").exists()


def test_tables_and_claims_refuse_floors_that_are_not_of_the_rows_prompts(tmp_path):
    """The tables once took an OUT/floors.jsonl of other prompts, or of two prompt sets, and a missing one
    dropped the floor rows unsaid (ALiBi's passkey floor 40.00 -> 50.00, rc 0)."""
    from fairseq_alibi_lab.experiments.retrieval.floors import FLOOR_ROWS, floors_problem, read_floors

    scored = [{"task": "passkey", "length": n, "depth": d, "prompts_sha256": "ours", "checkpoint": "a.pt"}
              for n in (64, 256) for d in (0.0, 1.0)]
    floors = toy_floors(scored, prompts="ours")
    path = str(tmp_path / FLOOR_ROWS)
    assert floors_problem(scored, floors, path) is None
    cases = [([], "no floors at"), (toy_floors(scored, prompts="theirs"), "the floors of other prompts (theirs) than the rows' (ours)"),
             (floors + toy_floors(scored[:2], prompts="theirs"), "2 prompt sets at passkey, 64 tokens"),
             (toy_floors(scored[:2], prompts="ours"), "no floor of passkey at 256 tokens")]
    for held, message in cases:
        (tmp_path / FLOOR_ROWS).write_text("".join(json.dumps(r) + "\n" for r in held))
        if not held:
            os.remove(path)
        with pytest.raises(SystemExit, match=r"^error: .*" + re.escape(message)):
            read_floors(str(tmp_path), scored)
    # rows scored before their prompts were recorded: checked by the rest (one set, every length)
    old = [{k: v for k, v in r.items() if k != "prompts_sha256"} for r in scored]
    assert floors_problem(old, toy_floors(scored, prompts="theirs"), path) is None


def test_scoring_refuses_in_one_line_prompts_past_a_learned_position_table_and_prompts_not_of_their_label(tmp_path):
    """A GPT-2 (learned positions, 32 here) asked prompts of 64 tokens once died on an IndexError; a
    hand-edited prompt labelled 64 tokens that held 40 was reported at 64."""
    from fairseq.data import Dictionary
    from transformers import GPT2Config, GPT2LMHeadModel

    from fairseq_alibi.hf.import_gpt2 import import_gpt2
    from fairseq_alibi.hf.tokenizer import word_level_tokenizer
    from fairseq_alibi_lab.experiments.retrieval.score import score

    dictionary = Dictionary()
    for i in range(40):
        dictionary.add_symbol(f"w{i}")
    GPT2LMHeadModel(GPT2Config(vocab_size=len(dictionary), n_positions=32, n_embd=16, n_layer=1, n_head=2,
                               eos_token_id=2, bos_token_id=2, pad_token_id=1)).save_pretrained(tmp_path / "hf")
    word_level_tokenizer(dictionary).save_pretrained(tmp_path / "hf")
    import_gpt2(str(tmp_path / "hf"), str(tmp_path / "gpt2"))

    def prompts(length, words):
        return "".join(json.dumps({"task": "passkey", "length": length, "depth": 0.0, "prompt": " ".join(["w5"] * (words - 2)),
                                   "answer": "w1 w2"}) + "\n" for _ in range(2))
    (tmp_path / "long.jsonl").write_text(prompts(64, 64))
    with pytest.raises(SystemExit, match=r"^error: .*learned 32 positions, prompts of 64 tokens are past them: score lengths up to 32"):
        score(str(tmp_path / "gpt2" / "checkpoint.pt"), str(tmp_path / "gpt2"), str(tmp_path / "long.jsonl"),
              str(tmp_path / "out.jsonl"))
    (tmp_path / "edited.jsonl").write_text(prompts(32, 32) + prompts(64, 40))
    with pytest.raises(SystemExit, match=r"^error: .*edited.jsonl prompt 3 is labelled 64 tokens but holds 40"):
        score(str(tmp_path / "gpt2" / "checkpoint.pt"), str(tmp_path / "gpt2"), str(tmp_path / "edited.jsonl"),
              str(tmp_path / "out.jsonl"))
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.slow  # subprocesses: the fast suite stays under 3 minutes
def test_the_retrieval_workers_help_gives_the_codes_defaults():
    """Its --help once showed a --fraction default of 0.1 where the code used 0.5."""
    from fairseq_alibi_lab.experiments.retrieval import data as retrieval

    make = subprocess.run([sys.executable, "-m", "fairseq_alibi_lab.retrieval", "make", "--help"], capture_output=True,
                          text=True, cwd=REPO).stdout.split("options:")[1]
    for flag, default in (("fraction", retrieval.FRACTION), ("seed", retrieval.TASK_SEED), ("examples", retrieval.EXAMPLES),
                          ("long-examples", retrieval.LONG_EXAMPLES)):
        assert f"default {default})" in " ".join(make.split(f"--{flag}")[1].split("--")[0].split()), flag
