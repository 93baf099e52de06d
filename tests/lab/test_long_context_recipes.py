"""The long-context recipes experiment (fairseq_alibi_lab/experiments/long_context_recipes.py): the curriculum's
first stage as a prepared checkpoint, its second stage continuing it (train.py --continue-from), the
inclusion rule's seeds, and the retrieval scorer's fairseq decoding (a length temperature's models too)."""
import argparse
import json
import os
import sys

import pytest
import torch

from conftest import REPO, run
from reference import naive_greedy

from fairseq_alibi_lab import curriculum, inclusion, jobs, train
from fairseq_alibi_lab.experiments import EXPERIMENTS
from fairseq_alibi_lab.experiments.base import Inclusion

NAME = "long-context-recipes"


def context(out="out", checkpoints="ck", updates=5600):
    declared = EXPERIMENTS[NAME]
    return jobs.Context(NAME, declared, 64, declared.seeds, updates, str(out), str(checkpoints))


def test_the_curriculum_continues_the_first_stages_kept_checkpoint_for_the_same_updates():
    """The runs at L keep their checkpoint after 75% of the updates (4,200 of 5,600, a multiple of the
    recipe's save interval); the second stage continues that file at 4L to the same 5,600 updates, so both
    arms train on the same tokens (batches are counted in tokens); the job needs the first stage made."""
    ctx = context()
    by_label = {m.label: m for m in EXPERIMENTS[NAME].models}
    alibi = jobs.build(ctx, by_label["ALiBi"], 1)
    assert alibi.flags[alibi.flags.index("--keep-interval-updates-pattern") + 1] == "4200" and not alibi.needs
    second = jobs.build(ctx, by_label["ALiBi, L then 4L"], 1)
    assert second.needs == ("alibi_first",) and second.train_length == 256 and second.train_updates == alibi.train_updates
    start = second.flags[second.flags.index("--continue-from") + 1]
    assert start == os.path.join("ck", "alibi-L64-s1", "checkpoint_?_4200.pt")  # the pattern until the first stage ran
    assert 4200 % 100 == 0 and curriculum.kept_updates(0.75, 5600) == 4200
    with pytest.raises(ValueError, match="must leave updates to both stages"):
        curriculum.kept_updates(1.0, 5600)
    yarn = jobs.build(ctx, by_label["Rotary, L then 4L with YaRN"], 1)
    assert yarn.needs == ("rotary_first",) and yarn.flags[yarn.flags.index("--rotary-train-length") + 1] == "64"
    ssmax = jobs.build(ctx, by_label["ALiBi, learned temperature (SSMax)"], 1)
    assert ssmax.flags[ssmax.flags.index("--length-temperature-length") + 1] == "64"  # "{L}": the experiment's L


def test_continue_from_is_fairseqs_continue_once_on_the_first_launch_only(tmp_path):
    """The second stage's first launch continues the first stage's file (weights, optimizer, schedule,
    update count) with a fresh data iterator (another length's batches); once it has saved, it resumes
    from its own checkpoint; a missing start, or a fine-tune beside it, is one line."""
    start, save = tmp_path / "first.pt", tmp_path / "second"
    save.mkdir()
    torch.save({"cfg": {"model": {"_name": "alibi_transformer_lm_small"}, "task": {"tokens_per_sample": 64}}}, start)
    flags = ["--lr", "1", "--continue-from", str(start), "--seed", "2"]
    data = os.path.join(REPO, "no-such-data")
    assert train.continuing(["--lr", "1"], str(save), data) == ["--lr", "1"]
    assert train.continuing(flags, str(save), data) == ["--lr", "1", "--seed", "2", "--continue-once", str(start),
                                                          "--reset-dataloader"]
    (save / "checkpoint_last.pt").write_bytes(b"saved")
    assert train.continuing(flags, str(save), data) == ["--lr", "1", "--seed", "2"]
    with pytest.raises(SystemExit, match="no checkpoint there"):
        train.continuing(["--continue-from", str(tmp_path / "none.pt")], str(save), data)
    with pytest.raises(SystemExit, match="leave out --finetune-from-model"):
        train.continuing([*flags, "--finetune-from-model", str(start)], str(save), data)


def test_a_fine_tune_may_take_an_inference_only_scaling_and_a_training_from_scratch_may_not():
    from fairseq_alibi.commands.cli import inference_only_flag

    assert inference_only_flag(["--rotary-scaling", "yarn"]) == "--rotary-scaling"
    for continuing in ("--continue-from", "--finetune-from-model", "--continue-once"):
        assert inference_only_flag([continuing, "x.pt", "--rotary-scaling", "yarn"]) is None


def test_an_excluded_seed_is_scored_at_l_only_and_the_next_seed_takes_its_place(tmp_path):
    """inclusion.seeds_to_try: the declared seeds, and one more for each known excluded one, within the
    rule's most; the runner's jobs score an excluded checkpoint at L only."""
    from fairseq_alibi_lab import runner

    rule = Inclusion(lambda c, j: None, 0.2, "test", wanted=3, most=5)
    assert inclusion.seeds_to_try(rule, [1, 2, 3], lambda s: False) == [1, 2, 3]
    assert inclusion.seeds_to_try(rule, [1, 2, 3], lambda s: s == 2) == [1, 2, 3, 4]
    assert inclusion.seeds_to_try(rule, [1, 2, 3], lambda s: s >= 2) == [1, 2, 3, 4, 5]  # most: 5 tried
    args = argparse.Namespace(train_length=None, seeds=None, updates=None, lengths=None, out=str(tmp_path / "out"),
                              checkpoints=str(tmp_path / "ck"), models=["alibi"], train_flags=[], data=None, task_flags=[])
    the_runner = runner.Runner(NAME, EXPERIMENTS[NAME], args)
    excluded_checkpoint = jobs.build(the_runner.context, EXPERIMENTS[NAME].models[0], 2).checkpoint
    os.makedirs(args.out)
    with open(os.path.join(args.out, inclusion.EXCLUDED), "w") as f:
        f.write(json.dumps({"label": "ALiBi", "seed": 2, "checkpoint": excluded_checkpoint, "value": 0.1,
                            "at_least": 0.2, "rule": "test"}) + "\n")
    planned = the_runner.jobs(the_runner.models, the_runner.context.seeds, replace=True)
    assert [job.seed for job in planned] == [1, 2, 3, 4, 5, 6]
    assert [job.lengths for job in planned if job.seed == 2] == [(64,)]
    assert all(len(job.lengths) == 8 for job in planned if job.seed != 2)
    assert [job.seed for job in the_runner.jobs(the_runner.models, (1, 2), replace=False)] == [1, 2]  # --seeds: those only
    assert "| ALiBi | 2 | 10.0% |" in "\n".join(inclusion.table(args.out))


def test_an_excluded_seeds_record_says_what_it_excluded_and_a_retire_run_again_keeps_a_new_trainings(tmp_path, monkeypatch):
    """The runner's exclusion row carries what the job's rows record (results.identity_missing: nothing), so a
    --retire of its path run again after a stop keeps the new training's exclusion (its checkpoint_sha256 is the
    file's now) and retires one of another file, as it does the rows."""
    import dataclasses

    from fairseq_alibi.tools.files import fingerprint
    from fairseq_alibi_lab import result_rows, results, runner

    args = argparse.Namespace(train_length=None, seeds=None, updates=None, lengths=None, out=str(tmp_path / "out"),
                              checkpoints=str(tmp_path / "ck"), models=["nope"], train_flags=["--lr", "1"], data=None,
                              task_flags=[])
    the_runner = runner.Runner(NAME, EXPERIMENTS[NAME], args)
    data = tmp_path / "set"
    data.mkdir()
    for name in ("dict.txt", "train.idx", "train.bin", "valid.idx", "valid.bin"):
        (data / name).write_text(name)
    monkeypatch.setattr(the_runner.kind, "training_data", lambda context, length: str(data))
    the_runner.context = dataclasses.replace(the_runner.context, data=str(data))
    rule = dataclasses.replace(EXPERIMENTS[NAME].inclusion, measure=lambda context, job: 0.1)
    the_runner.experiment = dataclasses.replace(EXPERIMENTS[NAME], inclusion=rule)
    the_runner.stages = dataclasses.replace(the_runner.stages, score=None)
    monkeypatch.setattr(the_runner, "evaluate", lambda job: False)  # its rows at L: scored elsewhere
    job = jobs.build(the_runner.context, the_runner.models[0], 3)
    os.makedirs(os.path.dirname(job.checkpoint))
    with open(job.checkpoint, "wb") as f:
        f.write(b"trained")
    os.makedirs(args.out)
    assert the_runner.screened(job).lengths == (64,)
    (row,) = result_rows.read_rows(os.path.join(args.out, inclusion.EXCLUDED))
    assert results.identity_missing(row) == []
    assert (row["checkpoint_sha256"], row["train_flags"], row["experiment"], row["value"]) == (
        fingerprint(job.checkpoint), "--lr 1", NAME, 0.1)
    names = the_runner.scored_files()
    assert result_rows.retire(args.out, names, {job.checkpoint: fingerprint(job.checkpoint)}, "again") == (0, 1)
    with open(job.checkpoint, "wb") as f:
        f.write(b"trained again")
    assert result_rows.retire(args.out, names, {job.checkpoint: fingerprint(job.checkpoint)}, "again") == (1, 0)
    assert inclusion.excluded(args.out) == {}


def test_a_second_stages_rows_are_checked_against_the_data_it_trained_on(tmp_path, monkeypatch):
    """The runner's identity of a job's rows (result_rows.identity_problem): a model trained at 4L on the
    experiment's own 4L set is this run's when its rows record that set, not the set at L that every model is
    scored on (the curriculum's rows were refused as 'trained on other data' after its first scoring)."""
    import dataclasses

    from fairseq_alibi.tools.files import data_fingerprint
    from fairseq_alibi_lab import runner

    sets = {}
    for length in (64, 256):
        sets[length] = tmp_path / f"set-{length}"
        sets[length].mkdir()
        for name in ("dict.txt", "train.idx", "train.bin", "valid.idx", "valid.bin"):
            (sets[length] / name).write_text(f"{name} of the set at {length}")
    args = argparse.Namespace(train_length=None, seeds=None, updates=None, lengths=None, out=str(tmp_path / "out"),
                              checkpoints=str(tmp_path / "ck"), models=["alibi", "alibi-l-then-4l"], train_flags=[],
                              data=None, task_flags=[])
    the_runner = runner.Runner(NAME, EXPERIMENTS[NAME], args)
    monkeypatch.setattr(the_runner.kind, "training_data", lambda context, length: str(sets[length]))
    the_runner.context = dataclasses.replace(the_runner.context, data=str(sets[64]))
    at_l, curriculum = (jobs.build(the_runner.context, model, 1) for model in the_runner.models)
    assert (at_l.train_length, curriculum.train_length) == (64, 256)
    assert the_runner.identity(at_l)["train_data_sha256"] == data_fingerprint(str(sets[64]), "train")
    assert the_runner.identity(curriculum)["train_data_sha256"] == data_fingerprint(str(sets[256]), "train")
    assert the_runner.identity(curriculum)["data_sha256"] == data_fingerprint(str(sets[64]), "valid")  # scored at L's


@pytest.mark.slow
def test_the_curriculum_runs_through_the_runner_at_toy_size(wt2_slice, tmp_path):
    """scripts/experiment.py long-context-recipes at toy size (L=40, 8 updates) asked for the curriculum alone:
    its first stage (ALiBi at L) is trained first and keeps its checkpoint after 6 updates; the second stage
    continues that file at 160 tokens to update 8 (Adam's step count goes on from 6: the optimizer continued,
    not started again), and is scored by perplexity and by the fairseq model's own greedy decoding, each
    decoded key the argmax of its full forward, token by token."""
    from fairseq_alibi.models.build import load_checkpoint

    source = tmp_path / "source"
    source.mkdir()
    from conftest import find_wikitext2

    for split, lines in [("train", 2000), ("valid", 300), ("test", 50)]:
        with open(os.path.join(find_wikitext2(), f"wiki.{split}.tokens"), encoding="utf-8") as f:
            (source / f"wiki.{split}.tokens").write_text("".join(next(f) for _ in range(lines)), encoding="utf-8")
    root = tmp_path / "set"
    run([sys.executable, "-m", "fairseq_alibi_lab.retrieval", "make", str(root), "--source", str(source), "--length", "40",
         "--examples", "2", "--long-examples", "1"])
    run(["fairseq-preprocess", "--only-source", "--srcdict", os.path.join(wt2_slice, "dict.txt"),
         "--trainpref", root / "text" / "wiki.train.tokens", "--validpref", root / "text" / "wiki.valid.tokens",
         "--destdir", root / "bin", "--workers", "2"])
    toy = ["--decoder-layers", "1", "--decoder-embed-dim", "32", "--decoder-input-dim", "32", "--decoder-output-dim", "32",
           "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2", "--max-tokens", "1024",
           "--save-interval-updates", "2"]
    out, checkpoints = tmp_path / "out", tmp_path / "ck"
    run([sys.executable, "scripts/experiment.py", NAME, "--data", str(root / "bin"), "--train-length", "40", "--updates", "8",
         "--lengths", "40", "--seeds", "1", "--models", "alibi-l-then-4l", "--out", str(out), "--checkpoints",
         str(checkpoints), "--train-flags", " ".join(toy)])
    first = checkpoints / "alibi-L40-s1"
    kept = [name for name in os.listdir(first) if name.startswith("checkpoint_") and name.endswith("_6.pt")]
    assert len(kept) == 1, sorted(os.listdir(first))
    second = torch.load(checkpoints / "alibi-l-then-4l-L160-s1" / "checkpoint_last.pt", weights_only=False)
    assert second["cfg"]["task"]["tokens_per_sample"] == 160
    assert second["optimizer_history"][-1]["num_updates"] == 8
    assert {int(s["step"]) for s in second["last_optimizer_state"]["state"].values()} == {8}
    rows = [json.loads(line) for line in (out / "retrieval.jsonl").read_text().splitlines()]
    assert {(r["label"], r["length"], r["decoder"], r["train_length"]) for r in rows} == {("ALiBi, L then 4L", 40, "fairseq", 160)}
    checkpoint = str(checkpoints / "alibi-l-then-4l-L160-s1" / "checkpoint_last.pt")
    model, _, task = load_checkpoint(checkpoint, str(root / "bin"), kind="causal LM")
    dictionary = task.source_dictionary
    tests = [json.loads(line) for line in (root / "test.jsonl").read_text().splitlines()]
    for row in (r for r in rows if r["depth"] in (0.0, 1.0)):
        first_right = 0
        for t in (t for t in tests if (t["task"], t["length"], t["depth"]) == (row["task"], 40, row["depth"])):
            answer = [dictionary.index(w) for w in t["answer"].split()]
            first_right += naive_greedy(model, dictionary, t["prompt"], len(answer))[0] == answer[0]
        assert row["first_correct"] == first_right, row
    perplexity = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if '"unigram"' not in line]
    assert {(r["label"], r["l_valid"]) for r in perplexity} == {("ALiBi, L then 4L", 40)}
    # streamed through a cache of its last training length (4L), each sink count, on the split the set has
    streams = [json.loads(line) for line in (out / "streaming.jsonl").read_text().splitlines()]
    assert sorted((r["label"], r["cache"], r["sinks"], r["split"], r["checkpoint"]) for r in streams) == [
        ("ALiBi, L then 4L", 160, sinks, "valid", checkpoint) for sinks in (0, 1, 4)]


@pytest.mark.parametrize("extra", [
    ("--length-temperature", "ssmax", "--length-temperature-length", "8"),
    ("--length-temperature", "logn", "--length-temperature-form", "logit", "--length-temperature-length", "8"),
    ("--adaptive-softmax-cutoff", "20,40"),  # an adaptive softmax: its log-probabilities, the last positions only
])
def test_the_fairseq_decoder_counts_what_greedy_decoding_counts_in_one_forward(extra):
    """score.teacher_forced on models the export refuses (a learned temperature, a test-time one) and on an
    adaptive softmax: greedy decoding (the model's full forward, its argmax token by token) matches an
    answer exactly, and by its first word, on the very prompts teacher_forced says it does, and a batch
    predicts what its prompts predict alone. Weights moved off their start; answers half the model's own
    greedy words (so some match) and half not."""
    from conftest import TINY, build_model
    from fairseq_alibi_lab.experiments.retrieval.score import teacher_forced

    torch.manual_seed(0)
    flags = [f for f in TINY if f != "--share-decoder-input-output-embed" or "--adaptive-softmax-cutoff" not in extra]
    model, _ = build_model(vocab=60, extra=[*flags, *extra])
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(0.3 * torch.randn_like(p))
    prompts = torch.randint(4, 60, (6, 30))

    def greedy(ids, new=2):
        for _ in range(new):
            log_probs = model.get_normalized_probs(model(ids), log_probs=True)
            ids = torch.cat([ids, log_probs[:, -1:].argmax(-1)], dim=1)
        return ids[0, -new:]

    with torch.no_grad():
        decoded = [greedy(prompts[i:i + 1]) for i in range(6)]
        answers = torch.stack([decoded[0], decoded[1], torch.stack([decoded[2][0], (decoded[2][1] + 1) % 60]),
                               (decoded[3] + 1) % 60, decoded[4].flip(0), torch.stack([(decoded[5][0] + 1) % 60, decoded[5][1]])])
        predicted = teacher_forced(model, prompts, answers)
        for i in range(6):
            assert (predicted[i] == answers[i]).all().item() == (decoded[i] == answers[i]).all().item(), i
            assert (predicted[i, 0] == answers[i, 0]).item() == (decoded[i][0] == answers[i, 0]).item(), i
            assert teacher_forced(model, prompts[i:i + 1], answers[i:i + 1])[0].tolist() == predicted[i].tolist()
        assert 2 <= sum((predicted[i] == answers[i]).all().item() for i in range(6)) < 6  # both outcomes seen


def test_the_headline_table_counts_the_included_seeds_needles_past_the_field_and_each_arms_whole_cost(tmp_path):
    """summary.md from rows written out by hand: the first key word's depth mean over the needles more than
    1,024 tokens from the question only (a near needle's 100% left out), mean ± std over the seeds; the
    curriculum's cost its first stage's 75% share of the run at L's mean and its own; a test-time arm's row
    beside its training's; the floors of the prompts and the unigram under it."""
    from fairseq_alibi_lab.experiments.long_context_recipes import ARMS, CURRICULUM
    from fairseq_alibi_lab.experiments.long_context_recipes.summary import summary
    from fairseq_alibi_lab.experiments.retrieval.floors import FLOOR_ROWS
    from fairseq_alibi_lab.experiments.retrieval.score import ROWS
    from test_retrieval import toy_floors

    out = tmp_path / "out"
    out.mkdir()
    scored = []
    for label, checkpoint, value in (("ALiBi", "a1", 0.4), ("ALiBi", "a2", 0.6), (CURRICULUM, "c1", 0.9), (CURRICULUM, "c2", 0.7)):
        for task in ("passkey", "multikey"):
            for length in (64, 2048, 8192):
                for depth in (0.0, 0.25, 0.5, 0.75, 1.0):
                    near = length * (1 - depth) + 5 <= 1024
                    scored.append({"label": label, "checkpoint": checkpoint, "scaling": "none", "task": task, "length": length,
                                   "depth": depth, "n": 10, "accuracy": 0.0, "first_accuracy": 1.0 if near else value,
                                   "prompts_sha256": "toy", "model": "alibi_transformer_lm_small"})
    (out / ROWS).write_text("".join(json.dumps(r) + "\n" for r in scored))
    (out / FLOOR_ROWS).write_text("".join(json.dumps(r) + "\n" for r in toy_floors(scored)))
    rows = [{"label": label, "model": "alibi_transformer_lm_small", "checkpoint": c, "l_valid": lv, "stride": 0,
             "split": "valid", "scaling": scaling, "perplexity": p, "updates": 5600, "seed": int(c[1])}
            for label, c, lv, scaling, p in (("ALiBi", "a1", 64, "none", 160.0), ("ALiBi", "a2", 64, "none", 170.0),
                                             ("ALiBi", "a1", 2048, "ntk", 150.0), ("ALiBi", "a2", 2048, "ntk", 152.0),
                                             (CURRICULUM, "c1", 64, "none", 165.0), (CURRICULUM, "c2", 64, "none", 167.0))]
    rows += [{"model": "unigram", "l_valid": lv, "stride": 0, "perplexity": 1244.36} for lv in (64, 2048)]
    text = summary(rows, str(out), ARMS, {CURRICULUM: ("ALiBi", 0.75)}, 5600,
                   {"ALiBi": {"a1": 1000.0, "a2": 1200.0}, CURRICULUM: {"c1": 300.0, "c2": 320.0}})
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert lines["ALiBi"] == "| ALiBi | 11.5M | 1100 ± 141 | 165.00 ± 7.07 | - | 50.0 ± 14.1 | 50.0 ± 14.1 | 50.0 ± 14.1 | 50.0 ± 14.1 |"
    assert lines[CURRICULUM].startswith(f"| {CURRICULUM} | 11.5M | 1135 ± 14 | 166.00 ± 1.41 | - | 80.0 ± 14.1 |")
    assert lines["ALiBi + NTK"].startswith("| ALiBi + NTK | 11.5M | 1100 ± 141 | - | 151.00 ± 1.41 |")  # its training's cost
    assert lines["floor of the prompts (perplexity: the unigram's)"] == \
        "| floor of the prompts (perplexity: the unigram's) | | | 1244.36 | 1244.36 | 1.0 | 1.0 | 1.0 | 1.0 |"
    assert (out / "summary.md").read_text() == text
    # each seed's values, which the means are made of: a test-time arm's with its training's seed and seconds
    each = (out / "by_seed.md").read_text()
    assert "| ALiBi | 1 | 1000 | 160.00 | - | 40.0 | 40.0 | 40.0 | 40.0 |" in each
    assert "| ALiBi | 2 | 1200 | 170.00 | - | 60.0 | 60.0 | 60.0 | 60.0 |" in each
    assert "| ALiBi + NTK | 1 | 1000 | - | 150.00 |" in each and "| ALiBi + NTK | 2 | 1200 | - | 152.00 |" in each
    assert f"| {CURRICULUM} | 2 | 320 | 167.00 | - | 70.0 |" in each  # its own seconds; summary.md adds the first stage's
    assert "Excluded" not in each
    (out / "excluded.jsonl").write_text(json.dumps({"label": "NoPE", "seed": 3, "checkpoint": "n3", "value": 0.1,
                                                    "rule": "the passkey's first word at L"}) + "\n")
    summary(rows, str(out), ARMS, {CURRICULUM: ("ALiBi", 0.75)}, 5600, {})
    assert (out / "by_seed.md").read_text().endswith("| model | seed | value at L |\n|---|---|---|\n| NoPE | 3 | 10.0% |\n")


def test_the_streams_table_shows_the_rules_two_arms_once_every_trained_arm_has_its_seeds(tmp_path):
    """streaming.md from rows written out by hand: before every trained arm has its included seeds scored at 32L,
    no arm is the rule's (the arms still short named); then the two with the highest mean passkey first word past
    the field at 32L (over the needles more than 1,024 tokens away only), first, their streams and blocks of the
    cache's length as mean ± std; the other streamed arm apart, as beyond the rule."""
    from fairseq_alibi_lab.experiments.long_context_recipes import streams
    from fairseq_alibi_lab.experiments.retrieval.floors import FLOOR_ROWS
    from fairseq_alibi_lab.experiments.retrieval.score import ROWS
    from test_retrieval import toy_floors

    out = tmp_path / "out"
    out.mkdir()
    arms = {"A": ("a", 0.1, 64), "B": ("b", 0.5, 64), "C": ("c", 0.3, 256)}  # label: (checkpoints, passkey, cache)
    scored, rows, streamed = [], [], []
    for label, (stem, value, cache) in arms.items():
        for seed in (1, 2):
            checkpoint = f"{stem}{seed}"
            for depth in (0.0, 0.25, 0.5, 0.75, 1.0):
                near = 2048 * (1 - depth) + 5 <= 1024
                scored.append({"label": label, "checkpoint": checkpoint, "scaling": "none", "task": "passkey",
                               "length": 2048, "depth": depth, "n": 10, "accuracy": 0.0, "prompts_sha256": "toy",
                               "first_accuracy": 1.0 if near else value + 0.1 * seed, "model": "alibi_transformer_lm_small"})
                scored.append(dict(scored[-1], length=64, first_accuracy=1.0))
            rows.append({"label": label, "model": "alibi_transformer_lm_small", "checkpoint": checkpoint, "l_valid": cache,
                         "stride": 0, "split": "valid", "scaling": "none", "perplexity": 100.0 + seed, "updates": 5600})
            streamed += [{"label": label, "checkpoint": checkpoint, "seed": seed, "split": split, "sinks": sinks, "cache": cache,
                          "perplexity": 90.0 + seed + sinks} for split in ("valid", "test") for sinks in (0, 1, 4)]
    (out / ROWS).write_text("".join(json.dumps(r) + "\n" for r in scored))
    (out / FLOOR_ROWS).write_text("".join(json.dumps(r) + "\n" for r in toy_floors(scored)))
    (out / streams.ROWS).write_text("".join(json.dumps(r) + "\n" for r in streamed))
    assert streams.report(rows[:1], str(out), ("A", "B", "C"), 2).count("not decided yet: A, B, C lack 2") == 1
    text = streams.report(rows, str(out), ("A", "B", "C"), 2)
    chosen, beyond = text.split("Streamed beyond the rule")
    assert "B 65.0%, C 45.0%" in chosen  # the depths past the field only: 0.5 + 0.1 seed, not the near ones' 1.0
    assert "| B | 64 | 101.50 ± 0.71 | 91.50 ± 0.71 | 92.50 ± 0.71 | 95.50 ± 0.71 | 91.50 ± 0.71 |" in chosen
    assert "| C | 256 |" in chosen and "| A |" not in chosen
    assert "| A | 64 | 101.50 ± 0.71 |" in beyond
    each = beyond.split("Each seed:")[1]
    assert "| A | 1 | 64 | 101.00 | 91.00 | 92.00 | 95.00 | 91.00 | 92.00 | 95.00 |" in each
    assert each.index("| A | 2 |") < each.index("| B | 1 |") < each.index("| C | 2 |")  # the declared order, then seeds
    assert (out / "streaming.md").read_text() == text


def test_a_trainer_the_runner_starts_waits_for_a_run_another_part_holds(tmp_path, monkeypatch):
    """In parallel, the curriculum's part may train the first stage (its kept checkpoint missing) while that stage's
    own job starts: the second to reach the run waits for the lock and then finds the run finished, where a user's
    second trainer is refused. hold_run(wait=True) returns once the holder lets go; the runner's trainers wait."""
    import threading
    import time

    from fairseq_alibi_lab import recipes, runner

    held = recipes.hold_run(str(tmp_path))
    with pytest.raises(recipes.RunConflict, match="another training is running"):
        recipes.hold_run(str(tmp_path))
    got = []
    waiter = threading.Thread(target=lambda: got.append(recipes.hold_run(str(tmp_path), wait=True)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive() and not got  # waiting while the other holds it
    os.close(held)
    waiter.join(timeout=10)
    assert got and not waiter.is_alive()
    os.close(got[0])

    envs = []

    class Started:  # the trainer's process, as the runner sees it
        def __init__(self, command, env=None, **kwargs):
            envs.append(env)
            self.stdout, self.returncode, self.pid = iter(()), 0, -1  # no such process: nothing to renice

        def wait(self):
            return 0

        def poll(self):
            return 0

    args = argparse.Namespace(train_length=None, seeds=None, updates=None, lengths=None, out=str(tmp_path / "out"),
                              checkpoints=str(tmp_path / "ck"), models=["alibi"], train_flags=[], data=None, task_flags=[])
    the_runner = runner.Runner(NAME, EXPERIMENTS[NAME], args)
    monkeypatch.setattr(runner.subprocess, "Popen", Started)
    monkeypatch.setattr(runner, "follow", lambda *a, **k: None)
    monkeypatch.setattr(the_runner, "training_data", lambda length: str(tmp_path / "data"))
    monkeypatch.setattr(the_runner.kind, "train_command", lambda context, job, data: (["trainer"], None))
    the_runner.train(jobs.build(the_runner.context, the_runner.models[0], 1))
    assert envs and envs[0]["WAIT_FOR_RUN"] == "1"
    assert os.environ.get("WAIT_FOR_RUN") != "1"  # a user's trainer (train.sh) is refused, not made to wait
