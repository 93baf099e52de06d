"""The bidirectional experiment presets end to end at toy size: the masked LM on WikiText-2 with
its fixed evaluation mask, and the synthetic seq2seq tasks decoded by fairseq's generator."""
import json
import math
import os
import re
import subprocess

import pytest
import torch

from conftest import REPO, run, slice_tokens

pytestmark = pytest.mark.slow

ENCODER_TOY = ["--encoder-layers", "2", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
               "--encoder-attention-heads", "4", "--max-tokens", "1024", "--log-interval", "2"]


def test_masked_lm_presets_toy_run_seeds_floor_and_shared_checkpoints(wt2_slice, tmp_path):
    """examples/wikitext2/mlm.sh (scripts/experiment.py mlm) at toy size: an ALiBi encoder with two
    seeds and the learned-position twin (fairseq's own encoder), trained through train_once.sh on
    the masked_lm recipe (fairseq_alibi_lab/recipes.py), scored by eval_mlm.py on its one fixed mask at L
    and 4L with the masked unigram floor; the table is mean ± std over the seeds. Then
    littlebird.sh on the same checkpoints: LittleBird trained, the dense encoder's finished run
    scored, not retrained. (Reruns, resumption: the causal runner test, the same code.)"""
    out, checkpoints = tmp_path / "out", tmp_path / "checkpoints"
    common = ["--data", wt2_slice, "--train-length", "16", "--updates", "4", "--lengths", "16", "64",
              "--checkpoints", checkpoints, "--train-flags", " ".join(ENCODER_TOY)]
    printed = run(["examples/wikitext2/mlm.sh", *common, "--out", out, "--seeds", "1", "2", "--models", "alibi-bialibi"])
    run(["examples/wikitext2/mlm.sh", *common, "--out", out, "--seeds", "1", "--models", "learned-positions"])
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    models = [r for r in rows if r["model"] != "unigram"]
    assert sorted((r["label"], r["seed"], r["l_valid"]) for r in models) == [
        *(("ALiBi bialibi", seed, lv) for seed in (1, 2) for lv in (16, 64)), ("Learned positions", 1, 16),
        ("Learned positions", 1, 64)]
    for r in models:
        assert math.isfinite(r["perplexity"]) and r["updates"] == 4 and r["train_length"] == 16 and r["commit"]
        assert r["experiment"] == "mlm" and r["recipe"] == "masked_lm" and r["stride_rule"] == "0"
    flags = json.loads((checkpoints / "alibi-bialibi-L16-s2" / "train_flags.json").read_text())
    assert flags["--task"] == "masked_lm" and flags["--seed"] == "2" and flags["--total-num-update"] == "4"
    # an encoder's config has no field for its dictionary: train_once.sh records it in the checkpoint
    from fairseq_alibi.tools import dictionaries
    assert dictionaries.check(str(checkpoints / "alibi-bialibi-L16-s2" / "checkpoint_last.pt"), wt2_slice) is None
    assert torch.load(checkpoints / "alibi-bialibi-L16-s2" / "checkpoint_last.pt", weights_only=False)[
        "dictionary_sha256"] == dictionaries.dictionary_fingerprint(wt2_slice)
    # the same masked tokens at every length and for every model, the floor included
    assert len({(r["masked_tokens"], r["mask_seed"]) for r in rows}) == 1
    assert 0.1 < rows[0]["masked_tokens"] / slice_tokens(wt2_slice) < 0.2  # masked_lm's 15%
    floor = {r["l_valid"]: r["perplexity"] for r in rows if r["model"] == "unigram"}
    assert floor[16] == floor[64] and floor[16] > 1  # a toy's models may not beat it: not asserted
    ppl = {(r["label"], r["seed"], r["l_valid"]): r["perplexity"] for r in models}
    assert ppl[("ALiBi bialibi", 1, 16)] != ppl[("ALiBi bialibi", 2, 16)]  # the seed reached training
    values = [ppl[("ALiBi bialibi", seed, 64)] for seed in (1, 2)]
    mean, std = sum(values) / 2, abs(values[0] - values[1]) / 2 ** 0.5
    table = (out / "table_valid_stride0.md").read_text()  # the whole experiment's, not the last invocation's part
    assert "| Learned positions 16 | 1 | " in table and f"| Unigram (add-one) | 1 | {floor[16]:.2f} |" in table
    assert "| ALiBi bialibi 16 | 2 | " in table and f"{mean:.2f} ± {std:.2f} |" in table
    assert f"| ALiBi bialibi 16 | 2 | " in printed and f"{mean:.2f} ± {std:.2f}" in printed
    # LittleBird beside the dense encoder, whose finished run (mlm's checkpoint) is scored, not retrained
    bialibi = snapshot_checkpoint(checkpoints / "alibi-bialibi-L16-s1")
    littlebird = run(["examples/wikitext2/littlebird.sh", *common, "--out", tmp_path / "lb", "--seeds", "1",
                      "--models", "littlebird", "alibi-bialibi"])
    assert "already trained" in littlebird and snapshot_checkpoint(checkpoints / "alibi-bialibi-L16-s1") == bialibi
    lb = {(r["label"], r["l_valid"]): r["perplexity"] for r in map(json.loads, (tmp_path / "lb" / "results.jsonl").open())}
    assert lb[("ALiBi bialibi", 64)] == ppl[("ALiBi bialibi", 1, 64)] and math.isfinite(lb[("LittleBird", 64)])
    assert (checkpoints / "littlebird-L16-s1" / "checkpoint_last.pt").is_file()
    # past a learned-position table (1024 rows): one line, and no row for the lengths before it either
    learned = checkpoints / "learned-positions-L16-s1" / "checkpoint_last.pt"
    past = subprocess.run(["python", "scripts/eval_mlm.py", learned, wt2_slice, tmp_path / "past.jsonl",
                           "--lengths", "16 2048"], cwd=REPO, capture_output=True, text=True)
    assert past.returncode == 1 and "Traceback" not in past.stderr and not (tmp_path / "past.jsonl").exists()
    assert "L_valid 2048 is past" in past.stderr.strip().splitlines()[-1]
    # the data's dictionary is kept beside each model: another corpus's of the same size is refused
    other = same_size_other_dictionary(wt2_slice, tmp_path / "other")
    refused = subprocess.run(["python", "scripts/eval_mlm.py", learned, other, tmp_path / "o.jsonl", "--lengths", "16"],
                             cwd=REPO, capture_output=True, text=True)
    assert refused.returncode == 1 and "trained on another dictionary" in refused.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "o.jsonl").exists()
    # eval_mlm.py's score against the model applied to each block by hand, the mask drawn the same way
    assert ppl[("ALiBi bialibi", 1, 16)] == pytest.approx(
        masked_perplexity_by_hand(checkpoints / "alibi-bialibi-L16-s1" / "checkpoint_last.pt", wt2_slice, 16), rel=1e-4)


def snapshot_checkpoint(save):
    return {name: (save / name).read_bytes() for name in ("checkpoint_last.pt", "train_flags.json")}


def same_size_other_dictionary(data, copy):
    """A copy of a binarized data directory whose dictionary has one word changed: another corpus's
    dictionary of the same size (fairseq would read every index just as well)."""
    import shutil

    shutil.copytree(data, copy)
    words = (copy / "dict.txt").read_text().splitlines()
    (copy / "dict.txt").write_text("\n".join(["zzzother " + words[0].split()[1], *words[1:]]) + "\n")
    return copy


def masked_perplexity_by_hand(checkpoint, data, length):
    """The masked-token perplexity of a masked LM on the valid split in blocks of `length` (<s> and
    length - 1 tokens), the mask drawn as scripts/eval_mlm.py draws it (seed 1, 15%)."""
    import torch
    import torch.nn.functional as F

    import fairseq_alibi.plugin  # noqa: F401
    from fairseq import checkpoint_utils
    from fairseq.data import data_utils

    (model,), _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)], arg_overrides={"data": str(data)})
    model.eval()
    d = task.source_dictionary
    split = data_utils.load_indexed_dataset(os.path.join(data, "valid"), d)
    stream = torch.cat([split[i] for i in range(len(split))])
    masked = torch.rand(stream.shape, generator=torch.Generator().manual_seed(1)) < 0.15
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(stream), length - 1):
            tokens, mask = stream[start:start + length - 1], masked[start:start + length - 1]
            if not mask.any():
                continue
            src = torch.cat([torch.tensor([d.bos()]), tokens.masked_fill(mask, d.index("<mask>"))])[None]
            logits = model(src)[0][0, 1:][mask]
            total += F.cross_entropy(logits, tokens[mask], reduction="sum").item()
            count += int(mask.sum())
    return math.exp(total / count)


def test_synthetic_tasks_preset_toy_run(tmp_path):
    """examples/synthetic/run.sh (scripts/experiment.py synthetic) at toy size: the tasks made and
    binarized once, two models trained through train_once.sh on the synthetic recipe (seed 2: the
    seed reaches the training; seeds and their spread: the causal runner test and
    test_synthetic_table_against_the_rows_by_hand), every (task, bucket) scored by exact match with
    the runner's provenance; a rerun trains and decodes nothing; a scoring cut short continues with
    the buckets it lacks."""
    out, checkpoints, data = tmp_path / "out", tmp_path / "checkpoints", tmp_path / "data"
    task_flags = "--train 300 --valid 30 --per-bucket 4 --train-max 5 --buckets 2"
    command = ["examples/synthetic/run.sh", "--updates", "3", "--models", "alibi-bialibi", "sinusoidal",
               "--seeds", "2", "--out", out, "--checkpoints", checkpoints, "--data", data, "--task-flags", task_flags,
               "--train-flags", " ".join([*ENCODER_TOY, "--decoder-layers", "1", "--decoder-embed-dim", "32",
                                          "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "4"])]
    printed = run(command)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((r["label"], r["seed"], r["task"], r["n_low"]) for r in rows) == sorted(
        (label, 2, task, low) for label in ("ALiBi bialibi", "Sinusoidal") for task in ("add", "copy", "reverse")
        for low in (1, 6))
    assert all(r["updates"] == 3 and r["experiment"] == "synthetic" and r["recipe"] == "synthetic" and r["commit"]
               and r["checkpoint"].endswith(f"-s{r['seed']}/checkpoint_last.pt") for r in rows)
    # the table (test_synthetic_table_against_the_rows_by_hand): 3 updates learn no task, so each is
    # named under it and left out
    assert all(f"- {task}: left out, learned by no model" in printed for task in ("add", "copy", "reverse"))
    assert (out / "table.md").is_file() and "== [2/2] Sinusoidal, seed 2" in printed
    # Test examples that also occur in training are dropped, and counted.
    text = data / "text"
    kept = {(b, task): int(k) for b, task, _, k in (line.split("\t") for line in
                                                     (text / "test_examples.txt").read_text().splitlines()[1:])}
    buckets = {1: "test1", 6: "test2"}
    assert all(r["examples"] == kept[(buckets[r["n_low"]], r["task"])] and 0 <= r["exact"] <= r["examples"] for r in rows)
    assert kept[("test2", "copy")] == 4 and sum(kept[("test1", t)] for t in ("add", "copy", "reverse")) < 12
    train = set((text / "train.src").read_text().splitlines())
    assert not train & set((text / "test1.src").read_text().splitlines())
    assert not (out / "figure.png").exists()  # no task to draw
    # the tasks are what they say, and the test sizes past training are disjoint from training's
    for src, tgt in zip((text / "test2.src").read_text().splitlines(), (text / "test2.tgt").read_text().splitlines()):
        kind, *body = src.split()
        if kind == "add":
            plus = body.index("+")
            assert 6 <= plus <= 10 and int("".join(tgt.split())) == int("".join(body[:plus])) + int("".join(body[plus + 1:]))
        else:
            assert 6 <= len(body) <= 10 and tgt.split() == (body[::-1] if kind == "reverse" else body)
    # fairseq-generate itself decodes the ALiBi encoder-decoder past the training sizes (with its
    # default --required-batch-size-multiple 8, fairseq 0.12 translated only 8 of these 12)
    generated = run(["fairseq-generate", str(data / "bin"), "--path",
                     str(checkpoints / "alibi-bialibi-s2" / "checkpoint_last.pt"), "--user-dir", "fairseq_alibi",
                     "--gen-subset", "test1", "--beam", "2", "--cpu", "--left-pad-source", "--batch-size", "4",
                     "--required-batch-size-multiple", "1"])
    assert generated.count("\nH-") == 12
    assert (checkpoints / "alibi-bialibi-s2" / "dict.src.txt").is_file()  # the run keeps its data's dictionaries
    twin = json.loads((checkpoints / "sinusoidal-s2" / "train_flags.json").read_text())
    assert twin["--seed"] == "2" and twin["--arch"] == "transformer" and twin["--encoder-embed-dim"] == "32"
    # A rerun trains and decodes nothing; a scoring cut short gets exactly its missing bucket back.
    before = (out / "results.jsonl").read_text()
    again = run(command)
    assert again.count("already trained") == 2 and (out / "results.jsonl").read_text() == before
    lines = before.splitlines(keepends=True)
    cut = [line for line in lines if not (json.loads(line)["label"] == "Sinusoidal" and json.loads(line)["seed"] == 2
                                          and json.loads(line)["n_low"] == 6)]
    (out / "results.jsonl").write_text("".join(cut))
    run(command)
    resumed = (out / "results.jsonl").read_text().splitlines(keepends=True)
    assert resumed[:len(cut)] == cut and len(resumed) == len(lines)
    key = lambda line: {k: v for k, v in json.loads(line).items() if k not in ("commit", "machine")}  # noqa: E731
    assert sorted(map(json.dumps, map(key, resumed))) == sorted(map(json.dumps, map(key, lines)))
    # The tasks are made once: other task options over them are refused before anything runs, the
    # results untouched; so is the bash preset's environment variable.
    other = subprocess.run([*map(str, command[:-4]), "--task-flags", task_flags.replace("--train 300", "--train 400")],
                           cwd=REPO, capture_output=True, text=True)
    assert other.returncode == 1 and "holds tasks made with other options (--train 300 then, 400 now)" in other.stderr
    old_style = subprocess.run(["examples/synthetic/run.sh"], cwd=REPO, capture_output=True, text=True,
                               env=dict(os.environ, TASK_FLAGS="--train 400"))
    assert old_style.returncode == 2 and "use --task-flags" in old_style.stderr
    assert (out / "results.jsonl").read_text() == "".join(resumed)


def test_synthetic_table_against_the_rows_by_hand(tmp_path):
    """examples/synthetic/table.py: each cell the mean ± sample std of the seeds' exact match (%);
    a task no model learns in distribution (below 90%) left out and named with its best score; a
    model below 90% on a shown task named."""
    rows = []
    for seed, copy, reverse, add in ((1, 0.95, 0.80, 0.10), (2, 0.97, 0.70, 0.20)):
        for task, in_distribution in (("copy", copy), ("reverse", reverse), ("add", add)):
            for low, accuracy in ((1, in_distribution), (21, in_distribution / 2)):
                rows.append({"label": "ALiBi bialibi", "seed": seed, "checkpoint": f"bialibi-s{seed}/checkpoint_last.pt",
                             "task": task, "n_low": low, "n_high": low + 19, "accuracy": accuracy})
    rows += [{"label": "Sinusoidal", "seed": 1, "task": task, "n_low": 1, "n_high": 20, "accuracy": accuracy}
             for task, accuracy in (("copy", 0.99), ("reverse", 0.95))]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    printed = run(["python3", "examples/synthetic/table.py", str(results), "--out", str(tmp_path / "out")])
    lines = printed.splitlines()
    assert lines[0] == "| model | n | copy n=1-20 | copy n=21-40 | reverse n=1-20 | reverse n=21-40 |"
    copy, half = (95 + 97) / 2, (47.5 + 48.5) / 2
    copy_std, half_std = abs(95 - 97) / 2 ** 0.5, abs(47.5 - 48.5) / 2 ** 0.5
    assert lines[2] == (f"| ALiBi bialibi | 2 | {copy:.1f} ± {copy_std:.1f} | {half:.1f} ± {half_std:.1f} | "
                        f"75.0 ± {10 / 2 ** 0.5:.1f} | 37.5 ± {5 / 2 ** 0.5:.1f} |")
    assert lines[3] == "| Sinusoidal | 1 | 99.0 |  | 95.0 |  |"
    assert lines[5:] == ["- reverse: ALiBi bialibi below 90% in distribution (75.0%): its scores past it say little",
                         "- add: left out, learned by no model (best in distribution 15.0%, ALiBi bialibi; the bar is 90%); "
                         "its rows are in the results"]
    assert (tmp_path / "out" / "table.md").read_text() == printed and (tmp_path / "out" / "figure.png").stat().st_size > 0


@pytest.mark.parametrize("script", ["scripts/eval_mlm.py", "examples/synthetic/exact_match.py"])
def test_evaluation_scripts_refuse_a_file_that_is_not_a_checkpoint_in_one_line(script, wt2_slice, tmp_path):
    import subprocess

    from conftest import REPO

    fake = tmp_path / "checkpoint.pt"
    fake.write_text("not a checkpoint\n")
    buckets = tmp_path / "buckets.txt"
    buckets.write_text("test1\t1\t5\n")
    args = {"scripts/eval_mlm.py": [str(fake), wt2_slice, str(tmp_path / "out.jsonl"), "--lengths", "16"],
            "examples/synthetic/exact_match.py": [str(fake), wt2_slice, str(buckets), str(tmp_path / "out.jsonl"),
                                                  "--label", "x"]}[script]
    proc = subprocess.run(["python3", script, *args], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"error: {fake} could not be loaded as a fairseq checkpoint" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "out.jsonl").exists()
    if script == "scripts/eval_mlm.py":  # the runner's row fields, checked first (result_rows.row_fields)
        proc = subprocess.run(["python3", script, *args, "--fields", "[1]"], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 1 and proc.stderr.startswith("error: --fields must be a JSON object")


def test_unigram_floor_against_the_raw_text_by_hand(wt2_slice, tmp_path):
    """scripts/unigram.py (every token, and --masked-lm: eval_mlm.py's masked tokens) against the
    add-one formula written out on the raw text the slice was binarized from."""
    import collections

    import torch

    raw = os.path.dirname(wt2_slice)
    words = {line.split()[0] for line in open(os.path.join(wt2_slice, "dict.txt"))}
    known = words | {"<s>", "<pad>", "</s>", "<unk>"}  # fairseq's 4 special symbols

    def stream(split):  # fairseq's binarizer: the line's words (unknown ones as <unk>), then </s>
        return [w if w in known else "<unk>" for line in open(os.path.join(raw, f"{split}.tokens"))
                for w in line.split() + ["</s>"]]

    train, valid = collections.Counter(stream("train")), stream("valid")
    mask = torch.rand(len(valid), generator=torch.Generator().manual_seed(1)) < 0.15

    def perplexity(tokens, size):  # size: fairseq's 4 special symbols, the words, (<mask>)
        total = sum(train.values())
        return math.exp(-sum(math.log((train[w] + 1) / (total + size)) for w in tokens) / len(tokens))

    for flags, tokens, size in (([], valid, len(known)),
                                (["--masked-lm"], [w for w, m in zip(valid, mask.tolist()) if m], len(known) + 1)):
        out = tmp_path / f"u{len(flags)}.jsonl"
        run(["python", "scripts/unigram.py", wt2_slice, out, "--lengths", "16 32", *flags])
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["l_valid"] for r in rows] == [16, 32] and rows[0]["tokens"] == len(tokens)
        assert rows[0]["perplexity"] == pytest.approx(perplexity(tokens, size), rel=1e-9)
        assert ("masked_tokens" in rows[0]) == bool(flags)
        # Run again it adds only the rows the file lacks: none, then the new length's.
        before = out.read_text()
        assert "already holds these rows" in run(["python", "scripts/unigram.py", wt2_slice, out, "--lengths", "32 16", *flags])
        assert out.read_text() == before
        run(["python", "scripts/unigram.py", wt2_slice, out, "--lengths", "16 24 32", *flags])
        added = out.read_text()[len(before):].splitlines()
        assert [json.loads(line)["l_valid"] for line in added] == [24]
        assert json.loads(added[0])["perplexity"] == rows[0]["perplexity"]


@pytest.mark.parametrize("args, message", [
    (["{missing}", "{out}", "--lengths", "64"], "has no dict.txt"),
    (["{data}", "{out}", "--lengths", "abc"], "--lengths must be positive integers"),
    (["{data}", "{out}", "--lengths", "64", "--strides", "/0"], "--strides: stride /0: /K slides by L_valid / K"),
    (["{data}", "{out}", "--lengths", "64", "--fields", "notjson"], "--fields must be a JSON object"),
    (["{data}", "{out}.txt", "--lengths", "64"], "is not a .jsonl file"),
    (["{data}", "{out}", "--lengths", "64", "--masked-lm", "--mask-prob", "2"], "--mask-prob must be between 0 and 1"),
    (["{data}", "{out}", "--lengths", "64 10000000"], "L_valid 10000000 is longer than the valid split"),
])
def test_unigram_refuses_bad_arguments_in_one_line_before_writing(wt2_slice, tmp_path, monkeypatch, args, message):
    from fairseq_alibi_lab import unigram
    out = tmp_path / "u.jsonl"
    argv = [a.format(missing=tmp_path / "none", data=wt2_slice, out=out) for a in args]
    monkeypatch.setattr("sys.argv", ["unigram.py", *argv])
    with pytest.raises(SystemExit, match=re.escape(message)):
        unigram.main()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("model", ["alibi_roberta", "alibi_transformer", "littlebird_roberta"])
def test_each_encoder_option_is_declared_once_with_its_default(model):
    """The encoders' own options are their nested Config's fields: the command line offers each
    with the field's default and help, and args that lack them (a checkpoint older than an option)
    get the same defaults when the model is built."""
    import argparse
    import types

    from fairseq.models import MODEL_REGISTRY

    from fairseq_alibi import plugin  # noqa: F401
    from fairseq_alibi.models.encoder import fill_defaults, options

    config = MODEL_REGISTRY[model].Config
    parser = argparse.ArgumentParser()
    MODEL_REGISTRY[model].add_args(parser)
    parsed, bare = parser.parse_args([]), types.SimpleNamespace()
    fill_defaults(bare, config)
    helps = {action.dest: action.help for action in parser._actions}
    for option in options(config):
        assert getattr(parsed, option.name) == getattr(bare, option.name) == option.default
        assert helps[option.name] == option.metadata["help"]
