"""The experiment layer without training: recipes and "finished" (fairseq_alibi_lab/recipes.py), the
declarations (scripts/experiment.py), and the seed statistics of the tables (scripts/results.py)."""
import json
import os
import re
import statistics
import subprocess
import sys

import pytest
import torch

from conftest import REPO, run

from fairseq_alibi import methods  # noqa: E402
from fairseq_alibi.commands import mistakes  # noqa: E402
from fairseq_alibi.tools import dictionaries, files  # noqa: E402
from fairseq_alibi_lab import result_rows  # noqa: E402
from fairseq_alibi_lab import processes  # noqa: E402
from fairseq_alibi_lab import recipes  # noqa: E402
from fairseq_alibi_lab import results  # noqa: E402
from fairseq_alibi_lab import experiments as experiment  # noqa: E402  (the declarations)


def fake_checkpoint(path, arch="alibi_transformer_lm_small", length=64, updates=10):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save({"cfg": {"model": {"_name": arch}, "task": {"tokens_per_sample": length}},
                "optimizer_history": [{"num_updates": updates}]}, path)


def test_a_run_is_finished_when_its_last_checkpoint_reached_max_update(tmp_path):
    status = recipes.run_status
    assert status(tmp_path / "none", "alibi_transformer_lm_small", 64, 100) == ("new", 0)
    fake_checkpoint(tmp_path / "run" / "checkpoint_last.pt", updates=40)
    assert status(tmp_path / "run", "alibi_transformer_lm_small", 64, 100) == ("resume", 40)
    assert status(tmp_path / "run", "alibi_transformer_lm_small", 64, 40) == ("finished", 40)
    with pytest.raises(recipes.RunConflict, match="holds another run .alibi_transformer_lm_small at L=64"):
        status(tmp_path / "run", "rotary_transformer_lm_small", 64, 40)
    assert status(tmp_path / "run", "rotary_transformer_lm_small", 32, 40, other_ok=True) == ("finished", 40)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "checkpoint_last.pt").write_bytes(b"truncated")
    with pytest.raises(recipes.RunConflict, match="is unreadable: move it away"):
        status(tmp_path / "bad", "alibi_transformer_lm_small", 64, 40)


def test_a_run_started_with_other_flags_is_refused_not_resumed_nor_called_finished(tmp_path):
    """The flags a run was started with are kept (recipes.RUN_FLAGS); a rerun with another recipe
    (more or fewer updates, another learning rate) is refused, where bookkeeping flags may change."""
    status, conflict = recipes.run_status, recipes.RunConflict
    flags = ["--arch", "alibi_transformer_lm_small", "--max-update", "40", "--lr", "0.003", "--adam-betas", "(0.9,0.98)",
             "--num-workers", "0", "--adaptive-input-cutoff", "20,40"]
    fake_checkpoint(tmp_path / "run" / "checkpoint_last.pt", updates=40)
    recipes.record_flags(tmp_path / "run", flags)
    arch = ("alibi_transformer_lm_small", 64)
    assert status(tmp_path / "run", *arch, 40, flags=flags) == ("finished", 40)
    moved = [f if f != "0" else "2" for f in flags] + ["--save-dir", "elsewhere", "--no-progress-bar"]
    assert status(tmp_path / "run", *arch, 40, flags=moved) == ("finished", 40)
    assert status(tmp_path / "run", *arch, 40, flags=[*flags, "--lr", "0.003"]) == ("finished", 40)  # last wins
    for other, differ in ((["--max-update", "50"], "--max-update 40 then, 50 now"),
                          (["--lr", "0.001"], "--lr 0.003 then, 0.001 now"),
                          (["--fp16"], "--fp16 not given then, given now")):
        with pytest.raises(conflict, match=re.escape(f"started with other flags ({differ}): choose another SAVE_DIR")):
            status(tmp_path / "run", *arch, int(recipes.last_value([*flags, *other], "--max-update")),
                   flags=[*flags, *other])
    assert status(tmp_path / "run", *arch, 50, other_ok=True, flags=[*flags, "--max-update", "50"]) == ("resume", 40)
    # A run from before the flags were kept: its checkpoint's own --max-update.
    torch.save({"cfg": {"model": {"_name": arch[0]}, "task": {"tokens_per_sample": 64},
                        "optimization": {"max_update": 1400}}, "optimizer_history": [{"num_updates": 700}]},
               tmp_path / "old.pt")
    (tmp_path / "old").mkdir()
    os.replace(tmp_path / "old.pt", tmp_path / "old" / "checkpoint_last.pt")
    assert status(tmp_path / "old", *arch, 1400, flags=["--lr", "1"]) == ("resume", 700)
    with pytest.raises(conflict, match="--max-update 1400 then, 2000 now"):
        status(tmp_path / "old", *arch, 2000, flags=["--max-update", "2000"])


def test_recipes_are_written_once_and_read_by_train_sh():
    small = recipes.recipe("small", 64)
    assert recipes.last_value(small, "--max-update") == "1400" and recipes.last_value(small, "--lr") == "0.003"
    paper = recipes.recipe("wiki103", 3072, 2)
    assert recipes.last_value(paper, "--max-tokens") == "3072" and recipes.last_value(paper, "--update-freq") == "12"
    with pytest.raises(ValueError, match="needs 1, 2, 4 or 8 GPUs"):
        recipes.recipe("wiki103", 512, 3)
    for script in ("scripts/train.sh", "fairseq_alibi_lab/train.py"):  # train.sh's logic is train.py's
        text = open(os.path.join(REPO, script)).read()
        assert "--lr 0.003" not in text and "286000" not in text
    assert "recipes.recipe(preset" in open(os.path.join(REPO, "fairseq_alibi_lab", "train.py")).read()
    masked = recipes.recipe("masked_lm", 64, 1, 1800)  # its schedule follows the updates
    assert [recipes.last_value(masked, f) for f in ("--warmup-updates", "--total-num-update", "--max-update")] == [
        "180", "1800", "1800"]
    mlm_sh = open(os.path.join(REPO, "examples", "wikitext2", "mlm.sh")).read()
    assert "--lr" not in mlm_sh and "experiment.py\" mlm" in mlm_sh  # the runner's declaration and recipe
    synthetic_sh = open(os.path.join(REPO, "examples", "synthetic", "run.sh")).read()
    assert "--lr" not in synthetic_sh and "experiment.py\" synthetic" in synthetic_sh
    assert recipes.last_value(recipes.recipe("synthetic", 0, 1, 2000), "--total-num-update") == "2000"


def test_declared_experiments_name_known_methods_once():
    for name, declared in experiment.EXPERIMENTS.items():
        runs = [(experiment.slug(m.label), m.train_multiple) for m in declared.models]  # one save directory each
        assert len(set(runs)) == len(runs), name
        for model in declared.models:
            known = {"masked_lm": ("alibi_roberta_small", "littlebird_roberta_small"),
                     "synthetic": ("alibi_transformer_small", "transformer"),
                     "gpt2_small": ("alibi", "learned")}.get(  # scripts/train.sh's methods of the preset
                declared.recipe, (*methods.CAUSAL_METHODS, "sinusoidal"))
            if model.start and not model.method:  # a prepared checkpoint, scored as it is
                assert declared.stages.prepared, (name, model)
            else:
                assert model.method in known, (name, model)
        assert recipes.recipe(declared.recipe, declared.train_length)
    comparison = experiment.EXPERIMENTS["comparison"]
    assert len(comparison.models) >= 8 and len(comparison.seeds) >= 3 and set(comparison.strides) == {"0", "/2"}


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def row(label, seed, l_valid, ppl, checkpoint=None, stride=0):
    return {"label": label, "model": "alibi_transformer_lm_small", "train_length": 64, "seed": seed,
            "checkpoint": checkpoint or f"ck/{label}-s{seed}/checkpoint_last.pt", "split": "valid",
            "l_valid": l_valid, "stride": stride, "stride_rule": str(stride), "scaling": "none", "perplexity": ppl}


def test_tables_give_mean_and_sample_std_over_seeds_with_n(tmp_path):
    values = {1: 200.0, 2: 210.0, 3: 205.5}
    rows = [row("ALiBi", seed, 64, ppl) for seed, ppl in values.items()]
    rows += [row("ALiBi", seed, 128, ppl + 1) for seed, ppl in values.items() if seed != 3]  # one seed missing there
    rows += [row("NoPE", 1, 64, 300.0), row("NoPE", 1, 64, 301.0)]  # a rerun of the same run: the last wins
    (l_valids, lines), = results.tables(results.load([write_rows(tmp_path / "r.jsonl", rows)])).values()
    assert l_valids == [64, 128]
    assert sorted(lines[("ALiBi", 64)][64]) == sorted(values.values()) and lines[("NoPE", 64)][64] == [301.0]
    table = results.markdown(l_valids, lines)
    mean, std = statistics.mean(values.values()), statistics.stdev(values.values())
    assert f"| ALiBi 64 | 3 | {mean:.2f} ± {std:.2f} | " in table
    assert f"{statistics.mean([201.0, 211.0]):.2f} ± {statistics.stdev([201.0, 211.0]):.2f} (n=2) |" in table
    assert "| NoPE 64 | 1 | 301.00 |  |" in table
    results.write_tables(results.load([str(tmp_path / "r.jsonl")]), str(tmp_path / "t"))
    header, alibi = (tmp_path / "t" / "table_valid_stride0.csv").read_text().splitlines()[:2]
    assert header == "method,train_length,64,128,std_64,std_128,n_64,n_128"
    assert [float(x) for x in alibi.split(",")[2:]] == pytest.approx([mean, 206.0, std, statistics.stdev([201.0, 211.0]), 3, 2])


def test_two_runs_with_one_label_and_seed_are_not_taken_for_two_seeds(tmp_path):
    rows = [row("ALiBi", 1, 64, 200.0, "a/x/checkpoint_last.pt"), row("ALiBi", 1, 64, 250.0, "b/y/checkpoint_last.pt")]
    (_, lines), = results.tables(results.load([write_rows(tmp_path / "r.jsonl", rows)])).values()
    assert sorted(lines) == [("ALiBi (x/checkpoint_last.pt)", 64), ("ALiBi (y/checkpoint_last.pt)", 64)]
    # paths alike in their last two parts are told apart by as many parts as it takes
    rows = [row("ALiBi", 1, 64, 200.0, "a/lm/checkpoint_last.pt"), row("ALiBi", 1, 64, 250.0, "b/lm/checkpoint_last.pt")]
    (_, lines), = results.tables(results.load([write_rows(tmp_path / "s.jsonl", rows)])).values()
    assert lines == {("ALiBi (a/lm/checkpoint_last.pt)", 64): {64: [200.0]}, ("ALiBi (b/lm/checkpoint_last.pt)", 64): {64: [250.0]}}


@pytest.mark.parametrize("tool, argv, gpus, message", [
    ("train", ["--fp16"], 0, "--fp16 needs a GPU and none was found"),
    ("train", ["--bf16", "--cpu"], 1, "--bf16 needs a GPU"),
    ("train", ["--fp16"], 1, None),
    ("train", ["--tokens-per-sample", "0"], 0, "--tokens-per-sample must be a positive integer, got '0'"),
    ("train", ["--tokens-per-sample=-3"], 0, "got '-3'"),
    ("train", ["--tokens-per-sample", "64", "--tokens-per-sample", "32"], 0, None),  # the last one counts
    ("eval_lm", ["--tokens-per-sample", "32", "--context-window", "32"], 0, "--context-window 32 must be a whole number below"),
    ("eval_lm", ["--context-window", "1024"], 0, "below --tokens-per-sample 1024"),  # fairseq's default length
    ("eval_lm", ["--tokens-per-sample", "32", "--context-window", "16"], 0, None),
    ("train", ["--tokens-per-sample", "32", "--context-window", "32"], 0, None),  # not a training flag
    ("train", ["--max-update", "0"], 0, "--max-update must be a positive integer, got '0' (0 is fairseq's no limit"),
    ("train", ["--max-update=-1"], 0, "got '-1'"),
    ("eval_lm", ["--max-update", "0"], 0, None),  # not an evaluation flag
    ("train", ["--fp16"], None, None),  # GPUs not known: only --cpu says there is none
    ("train", ["--fp16", "--cpu"], None, "--fp16 needs a GPU"),
])
def test_mistakes_fairseq_would_crash_on_are_named(tool, argv, gpus, message):
    found = mistakes.common_mistake(tool, argv, gpus)
    assert found == message if message is None else message in found


def test_experiment_runner_refuses_the_presets_environment_variables_it_would_ignore(tmp_path):
    """L=128 scripts/experiment.py main (or mlm.sh, littlebird.sh: the runner's) would train the
    declaration's L: refused, nothing started."""
    import subprocess

    for variable, option, command in [("L", "--train-length", ["python", "scripts/experiment.py", "main"]),
                                      ("UPDATES", "--updates", ["examples/wikitext2/mlm.sh"]),
                                      ("L_VALID", "--lengths", ["examples/wikitext2/littlebird.sh"])]:
        proc = subprocess.run([*command, "--out", tmp_path / "out"], cwd=REPO,
                              capture_output=True, text=True, env=dict(os.environ, **{variable: "128"}))
        assert proc.returncode == 2 and f"{variable}=128 is not read by the experiment runner" in proc.stderr
        assert f"use {option}" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "out").exists()


def test_synthetic_tasks_are_made_once_and_other_options_over_them_are_refused(tmp_path):
    import subprocess

    def make(*flags):
        return subprocess.run(["python", "examples/synthetic/make_tasks.py", tmp_path / "text", "--train", "50",
                               "--per-bucket", "3", *flags], cwd=REPO, capture_output=True, text=True)

    assert make().returncode == 0 and json.loads((tmp_path / "text" / "options.json").read_text())["train"] == 50
    made = {p.name: p.read_bytes() for p in (tmp_path / "text").iterdir()}
    again = make()
    assert again.returncode == 0 and "already holds these tasks" in again.stdout
    other = make("--seed", "2")
    assert other.returncode == 1 and "holds tasks made with other options (--seed 1 then, 2 now)" in other.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "text").iterdir()} == made
    assert sorted(os.listdir(tmp_path)) == ["text"]  # no temporary directory left
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("a user's")
    refused = subprocess.run(["python", "examples/synthetic/make_tasks.py", tmp_path / "mine"], cwd=REPO,
                             capture_output=True, text=True)
    assert refused.returncode == 1 and "holds other files" in refused.stderr
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]


def test_a_training_of_no_limit_is_refused(tmp_path):
    """fairseq takes --max-update 0 as no limit: a run that would never be finished. Both trainers
    ask fairseq_alibi/commands/mistakes.py (one rule)."""
    import subprocess

    proc = subprocess.run(["scripts/train_once.sh", tmp_path / "save", "toy", "--", "fairseq-train", "data",
                           "--max-update", "0"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.strip() == (
        "error: --max-update must be a positive integer, got '0' (0 is fairseq's no limit: a run that never ends)")
    assert not (tmp_path / "save").exists()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dict.txt").write_text("".join(f"w{i} 1\n" for i in range(10000)))
    proc = subprocess.run(["scripts/train.sh", "alibi", "32", tmp_path / "data", tmp_path / "lm", "small", "--",
                           "--max-update", "0"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.strip().endswith("got '0' (0 is fairseq's no limit: a run that never ends)")
    assert not (tmp_path / "lm").exists()


def test_train_once_reads_finished_from_the_checkpoint_of_any_model_not_from_a_log(tmp_path):
    """A masked LM's or translation model's checkpoint (its config an argparse.Namespace), finished,
    without the train.log that once decided it: left as it is, the command not run again."""
    import argparse
    import subprocess

    save = tmp_path / "mlm"
    save.mkdir()
    args = argparse.Namespace(arch="alibi_roberta_small", tokens_per_sample=64)
    torch.save({"cfg": {"model": args, "task": args}, "optimizer_history": [{"num_updates": 600}]},
               save / "checkpoint_last.pt")
    command = ["scripts/train_once.sh", save, "the masked LM", "--", "false", "--max-update"]
    done = subprocess.run([*command, "600"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0 and "already trained" in done.stdout
    more = subprocess.run([*command, "700"], cwd=REPO, capture_output=True, text=True)  # runs `false`: fails
    assert more.returncode == 1 and "training the masked LM failed" in more.stderr
    bare = subprocess.run(command[:-1], cwd=REPO, capture_output=True, text=True)
    assert bare.returncode == 1 and "needs --max-update N" in bare.stderr
    # A new run's flags are kept; a rerun with others is refused before anything runs.
    fresh = tmp_path / "fresh"
    started = subprocess.run(["scripts/train_once.sh", fresh, "the masked LM", "--", "true", "--max-update", "5",
                              "--lr", "1"], cwd=REPO, capture_output=True, text=True)
    assert started.returncode == 0 and json.loads((fresh / "train_flags.json").read_text()) == {
        "--max-update": "5", "--lr": "1"}
    fake_checkpoint(fresh / "checkpoint_last.pt", updates=3)
    other = subprocess.run(["scripts/train_once.sh", fresh, "the masked LM", "--", "false", "--max-update", "5",
                            "--lr", "2"], cwd=REPO, capture_output=True, text=True)
    assert other.returncode == 1 and "started with other flags (--lr 1 then, 2 now)" in other.stderr
    assert "CONTINUE_RUN=1" in other.stderr  # the advice the script reads:
    continued = subprocess.run(["scripts/train_once.sh", fresh, "the masked LM", "--", "true", "--max-update", "5",
                                "--lr", "2"], cwd=REPO, capture_output=True, text=True, env=dict(os.environ, CONTINUE_RUN="1"))
    assert continued.returncode == 0, continued.stderr


def test_the_documents_experiment_scores_every_model_with_its_articles_apart_and_packed():
    import ast

    from fairseq_alibi_lab import jobs

    declared = experiment.EXPERIMENTS["documents"]
    context = jobs.Context("documents", declared, declared.train_length, declared.seeds, 100, "out", "checkpoints")
    assert declared.documents and {m.method for m in declared.models} == {"alibi", "rotary"}
    apart = [m for m in declared.models if "--document-separator" in m.flags]
    assert len(apart) == 2 and all(m.flags[m.flags.index("--document-separator") + 1] == "<doc>" for m in apart)
    for model in declared.models:
        scorings = dict(jobs.build(context, model, 1).scorings)
        assert set(scorings) == {f"{model.label}, scored apart", f"{model.label}, scored packed"}
        overrides = {label: ast.literal_eval(flags[1]) for label, flags in scorings.items()}
        assert overrides[f"{model.label}, scored apart"] == {"document_separator": "<doc>"}
        assert overrides[f"{model.label}, scored packed"] == {"document_separator": None}
    main = experiment.EXPERIMENTS["main"]
    plain = jobs.Context("main", main, main.train_length, main.seeds, 100, "out", "checkpoints")
    assert jobs.build(plain, main.models[0], 1).scorings == (("Sinusoidal", ()),)


def test_one_trainer_per_save_directory_and_a_stopped_one_leaves_no_orphan(tmp_path):
    """train_once.sh and train.sh refuse a directory whose lock another trainer holds (the runner's trainers,
    WAIT_FOR_RUN=1, wait for it); stopping train_once.sh (SIGTERM) stops the training it started, and the lock
    goes with it."""
    import fcntl
    import signal
    import subprocess
    import sys
    import time

    save = tmp_path / "run"
    pid_file = tmp_path / "trainer.pid"
    trainer = [sys.executable, "-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
               "time.sleep(120)", "--max-update", "5"]
    first = subprocess.Popen(["scripts/train_once.sh", save, "the first", "--", *trainer], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.05)
    second = subprocess.run(["scripts/train_once.sh", save, "the second", "--", *trainer], cwd=REPO,
                            capture_output=True, text=True)
    assert second.returncode == 1 and "another training is running on" in second.stderr
    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.txt").write_text("".join(f"w{i} 1\n" for i in range(10000)))
    train_sh = subprocess.run(["scripts/train.sh", "alibi", "32", data, save, "small"], cwd=REPO,
                              capture_output=True, text=True)
    assert train_sh.returncode == 1 and "another training is running on" in train_sh.stderr.strip().splitlines()[-1]
    # the runner's trainers (WAIT_FOR_RUN=1) wait for the holder instead, and go on once it is gone
    said = tmp_path / "waiting.out"
    with open(said, "w") as out:
        waiting = subprocess.Popen(["scripts/train.sh", "alibi", "32", data, save, "small"], cwd=REPO, text=True,
                                   stdout=out, stderr=subprocess.PIPE, env=dict(os.environ, WAIT_FOR_RUN="1"))
    for _ in range(1200):  # until it has reached the lock (a loaded machine starts Python slowly)
        if "waiting for the training running on" in said.read_text() or waiting.poll() is not None:
            break
        time.sleep(0.05)
    assert "waiting for the training running on" in said.read_text() and waiting.poll() is None

    first.send_signal(signal.SIGTERM)
    _, errors = first.communicate(timeout=30)
    assert first.returncode == 143 and "stopped: rerun to resume the first" in errors
    pid = int(pid_file.read_text())
    for _ in range(100):  # the trainer is gone, not orphaned
        if not os.path.exists(f"/proc/{pid}") or " Z " in open(f"/proc/{pid}/stat").read():
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the training outlived train_once.sh")
    _, errors = waiting.communicate(timeout=120)
    assert "another training is running" not in errors  # it went on once the lock was free
    with open(save / ".train.lock") as lock:  # free again
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_dictionaries_are_compared_by_their_words_not_their_size(tmp_path):
    data, same, other, save = (tmp_path / name for name in ("data", "same", "other", "save"))
    for path, text in [(data, "the 9\nof 5\nand 3\n"), (same, "the 1\nof 1\nand 1 #fairseq:overwrite\n"),
                       (other, "the 9\nand 5\nof 3\n")]:
        path.mkdir()
        (path / "dict.txt").write_text(text)
    assert dictionaries.difference(data / "dict.txt", same / "dict.txt") is None  # counts and flags differ only
    assert "line 2 of dict.txt is 'of' there, 'and' here" in dictionaries.difference(data / "dict.txt", other / "dict.txt")
    save.mkdir()
    checkpoint = str(save / "checkpoint_last.pt")
    assert dictionaries.check(checkpoint, str(other)) is None  # nothing kept: nothing to compare
    assert dictionaries.keep(str(data), str(save)) is None and (save / "dict.txt").read_text() == "the 9\nof 5\nand 3\n"
    assert "another dictionary" in dictionaries.check(checkpoint, str(other))
    assert dictionaries.check(checkpoint, str(same)) is None
    assert "holds a run on another dictionary" in dictionaries.keep(str(other), str(save))
    assert (save / "dict.txt").read_text() == "the 9\nof 5\nand 3\n" and not list(save.glob("dict.txt*.part"))


SCRIPTS = ["scripts/eval.sh", "scripts/train.sh", "scripts/train_once.sh", "scripts/setup.sh",
           "scripts/prepare-wikitext.sh", "examples/wikitext2/run.sh", "examples/wikitext2/compare.sh",
           "examples/wikitext2/convert.sh", "examples/wikitext2/trade.sh", "examples/wikitext2/mlm.sh",
           "examples/wikitext2/littlebird.sh", "examples/synthetic/run.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_answers_help_and_starts_nothing(script, tmp_path):
    """--help prints the usage and starts nothing (the presets: the runner's). Run from another directory, with a clean copy of nothing:
    what it would have created (checkpoints, runs, data) does not appear."""
    import subprocess

    before = {name: sorted(os.listdir(os.path.join(REPO, name))) for name in ("checkpoints", "runs", "data-bin")
              if os.path.isdir(os.path.join(REPO, name))}
    shown = subprocess.run([os.path.join(REPO, script), "--help"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0 and script.split("/")[-1] in shown.stdout + " ".join(SCRIPTS) and shown.stdout.strip()
    assert not any(step in shown.stdout for step in ("== [", "== training", "already prepared"))  # nothing began
    after = {name: sorted(os.listdir(os.path.join(REPO, name))) for name in before}
    assert after == before and os.listdir(tmp_path) == []


def test_each_tool_refuses_a_checkpoint_of_another_kind_naming_the_tool_that_takes_it(tmp_path, monkeypatch):
    """A masked LM or a translation model (argparse-era configs) given to the causal LM's scorers,
    and a causal LM to the others' (build.load_checkpoint's kind): one line, which kind, which tool."""
    import argparse
    import subprocess

    from fairseq_alibi.commands import cli

    def fake(name, task, cfg_form):
        path = tmp_path / f"{name}.pt"
        if cfg_form:
            state = {"cfg": {"model": {"_name": "alibi_transformer_lm_small"}, "task": {"_name": task}}}
        else:
            state = {"args": argparse.Namespace(task=task, arch=name), "cfg": None}
        torch.save({**state, "optimizer_history": [{"num_updates": 1}], "model": {}}, path)
        return path

    masked, translation, causal = fake("mlm", "masked_lm", False), fake("mt", "translation", False), fake("lm", "language_modeling", True)
    # What fairseq saves for a masked LM: a dict config whose model part is an argparse Namespace.
    saved_mlm = tmp_path / "saved_mlm.pt"
    torch.save({"cfg": {"model": argparse.Namespace(arch="alibi_roberta_small", task="masked_lm"),
                        "task": {"_name": "masked_lm"}}, "model": {}}, saved_mlm)
    from fairseq_alibi.checks import ConfigError
    from fairseq_alibi.commands.convert_checkpoint import convert_state

    for path, kind in [(masked, "a masked LM"), (saved_mlm, "a masked LM"), (translation, "an encoder-decoder")]:
        with pytest.raises(ConfigError, match=f"is {kind} checkpoint: only causal language models"):
            convert_state(torch.load(path, weights_only=False), replace_positions=True, name=str(path))
    from fairseq_alibi.tools.checkpoints import wrong_kind
    assert wrong_kind(torch.load(causal, weights_only=False), "lm.pt", "causal LM") is None
    assert wrong_kind(torch.load(masked, weights_only=False), "m.pt", "causal LM") == \
        "m.pt is a masked LM checkpoint, not a causal LM: score it with scripts/eval_mlm.py"
    assert "examples/synthetic/exact_match.py" in wrong_kind(torch.load(translation, weights_only=False), "t", "masked LM")
    assert "scripts/eval.sh" in wrong_kind(torch.load(causal, weights_only=False), "c", "encoder-decoder")

    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.txt").write_text("w 1\n")
    (data / "valid.idx").write_bytes(b"")
    proc = subprocess.run(["scripts/eval.sh", masked, data, tmp_path / "r.jsonl", "64"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].endswith("score it with scripts/eval_mlm.py")
    assert not (tmp_path / "r.jsonl").exists()
    monkeypatch.setattr("sys.argv", ["fairseq-alibi-eval-lm", str(data), "--path", str(translation)])
    monkeypatch.setattr(cli, "_run", lambda module: pytest.fail("fairseq-eval-lm was started"))
    with pytest.raises(SystemExit, match="is an encoder-decoder checkpoint, not a causal LM: score it with examples/synthetic/exact_match.py"):
        cli.eval_lm()


@pytest.mark.parametrize("line, message", [
    ('{"exit": 0, "seconds": 12.5, "peak_mib": 300}', "is not a result of this kind (no model, split, train_length, "
                                                       "checkpoint, l_valid, perplexity, stride)"),
    (json.dumps({k: v for k, v in row("ALiBi", 1, 64, 1.0).items() if k != "perplexity"}),
     "is not a result of this kind (no perplexity)"),
    (json.dumps(row("ALiBi", 1, 64, float("nan"))), "has perplexity nan, not a finite number"),
    ("[1, 2]", "is not a result (not a JSON object)"),
    ('{"checkpoint": "x", "l_valid": 6', "is not a JSON line"),
])
def test_tables_refuse_a_line_that_is_not_a_scored_row_in_one_line(tmp_path, line, message):
    good = json.dumps(row("ALiBi", 1, 64, 200.0))
    path = tmp_path / "r.jsonl"
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(SystemExit, match=re.escape(f"{path} line 2 {message}")):
        results.load([str(path)])


def test_tables_refuse_masked_token_and_causal_perplexities_together_and_write_nothing(tmp_path):
    import subprocess

    causal = write_rows(tmp_path / "lm.jsonl", [row("ALiBi", 1, 64, 200.0)])
    masked = write_rows(tmp_path / "mlm.jsonl", [{**row("ALiBi bialibi", 1, 64, 9.0), "masked_tokens": 1000}])
    out = tmp_path / "out"
    proc = subprocess.run(["python", "scripts/results.py", causal, masked, "--out", out], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert "mlm.jsonl holds masked-token perplexities and" in proc.stderr and not out.exists()


def test_a_stride_rule_means_one_stride_and_one_row_name_wherever_it_is_read():
    """eval.sh's rules: "0" nonoverlapping, "S" S tokens, "/K" L_valid // K (named L_valid/K in
    rows); the scoring plan (evaluate.py) drops a stride longer than L_valid."""
    stride = result_rows.stride
    assert [stride(rule, 100) for rule in ("0", "32", "/2", "/3")] == [
        (0, "0"), (32, "32"), (50, "L_valid/2"), (33, "L_valid/3")]
    from fairseq_alibi_lab.evaluate import plan
    jobs, skipped = plan("alibi_transformer_lm", 64, [64, 100], ["0", "/3", "80"], ["none"], "")
    assert [(l_valid, s, rule, context) for l_valid, s, rule, context, *_ in jobs] == [
        (64, 0, "0", 0), (64, 21, "L_valid/3", 43), (100, 0, "0", 0), (100, 33, "L_valid/3", 67), (100, 80, "80", 20)]
    assert skipped == ["stride 80 > L_valid 64"]


def test_a_write_that_fails_leaves_the_previous_file_and_no_partial_one(tmp_path):
    written_whole = files.written_whole
    target = tmp_path / "table.md"
    target.write_text("the finished table\n")
    with pytest.raises(SystemExit, match=re.escape(f"could not write {target} (No space left on device): its previous version is kept")):
        with written_whole(target) as partial, open(partial, "w") as f:
            f.write("half a tab")
            raise OSError(28, "No space left on device")
    assert target.read_text() == "the finished table\n" and os.listdir(tmp_path) == ["table.md"]
    with written_whole(target) as partial, open(partial, "w") as f:
        f.write("the new table\n")
    assert target.read_text() == "the new table\n" and os.listdir(tmp_path) == ["table.md"]


def test_append_problem_names_each_out_it_refuses_and_creates_nothing(tmp_path):
    """The one check of every tool's OUT: a .jsonl file it may create or append to."""
    (tmp_path / "d.jsonl").mkdir()
    (tmp_path / "ro.jsonl").write_text("")
    (tmp_path / "ro.jsonl").chmod(0o444)
    assert result_rows.append_problem(str(tmp_path / "new" / "rows.jsonl")) is None  # its directory is made on append
    assert result_rows.append_problem(str(tmp_path / "rows.txt")) == f"{tmp_path}/rows.txt is not a .jsonl file, where result rows are appended"
    assert result_rows.append_problem(str(tmp_path / "d.jsonl")) == f"{tmp_path}/d.jsonl is a directory"
    if os.geteuid() != 0:  # root may write anything
        assert result_rows.append_problem(str(tmp_path / "ro.jsonl")) == f"{tmp_path}/ro.jsonl is read-only"
    with pytest.raises(SystemExit, match=r"^error: cannot append to .*rows.txt \(.*\): give another OUT$"):
        result_rows.require_appendable(str(tmp_path / "rows.txt"))
    assert sorted(os.listdir(tmp_path)) == ["d.jsonl", "ro.jsonl"]


def test_a_row_appended_after_a_cut_line_stays_whole(tmp_path):
    """An interrupted append leaves a line without its end: the next rows begin on a line of their
    own (read back whole), the cut line stays as it was and is skipped."""
    out = tmp_path / "results.jsonl"
    out.write_text('{"l_valid": 64, "split": "valid"}\n{"checkpoint": "x", "mod')
    result_rows.append_lines(str(out), ['{"l_valid": 128, "split": "valid"}'])
    assert out.read_text().splitlines()[1:] == ['{"checkpoint": "x", "mod', '{"l_valid": 128, "split": "valid"}']
    assert [r["l_valid"] for r in result_rows.read_rows(str(out))] == [64, 128]
    result_rows.append_lines(str(out), ['{"l_valid": 256, "split": "valid"}'])  # a whole last line: nothing added
    assert [r["l_valid"] for r in result_rows.read_rows(str(out))] == [64, 128, 256] and len(out.read_text().splitlines()) == 4


def test_a_results_row_stands_for_its_measurement_only_with_its_identity(tmp_path):
    """result_rows.Measured and identity_problem: a row's scoring overrides are part of what it measured
    (older rows, without the field, stand for any); a row recording another checkpoint file or other
    data than the one now at hand is named, a row recording none is not."""
    row = {"label": "ALiBi", "checkpoint": "c.pt", "updates": 10, "l_valid": 64, "stride_rule": "0",
           "scaling": "none", "split": "valid"}
    key = result_rows.measurement("ALiBi", "c.pt", 10, 64, "0", "none", "valid")
    with_overrides = result_rows.measurement("ALiBi", "c.pt", 10, 64, "0", "none", "valid", "{'a': 1}")
    assert key in result_rows.Measured([row]) and with_overrides in result_rows.Measured([row])  # an older row
    new = dict(row, model_overrides=None, checkpoint_sha256="1" * 16, data_sha256="2" * 16)
    assert key in result_rows.Measured([new]) and with_overrides not in result_rows.Measured([new])
    assert result_rows.overrides_text("{'b': 2, 'a': 1}") == "{'a': 1, 'b': 2}" and result_rows.overrides_text("{}") is None
    same = {"checkpoint_sha256": "1" * 16, "data_sha256": "2" * 16}
    assert result_rows.identity_problem([row, new], "c.pt", same, "out.jsonl") is None
    assert result_rows.identity_problem([new], "c.pt", dict(same, checkpoint_sha256=None), "out.jsonl") is None  # file not here
    assert "scored on other data" in result_rows.identity_problem([new], "c.pt", dict(same, data_sha256="3" * 16), "out.jsonl")
    assert result_rows.identity_problem([new], "other.pt", dict(same, data_sha256="3" * 16), "out.jsonl") is None
    (tmp_path / "a").write_bytes(b"abc")
    import hashlib
    assert files.fingerprint(str(tmp_path / "a")) == hashlib.sha256(b"abc").hexdigest()[:16]


def test_two_writers_of_one_file_at_once_each_install_it_whole(tmp_path):
    """The ranks of one training each keep the data's dictionary in SAVE_DIR at the same moment
    (scripts/train.sh): interleaved writes of one target both succeed, and it ends whole."""
    written_whole = files.written_whole
    target = tmp_path / "dict.txt"
    with written_whole(target) as first, open(first, "w") as f:
        f.write("the 9\n")
        with written_whole(target) as second, open(second, "w") as g:
            g.write("the 9\nof 5\n")
        assert target.read_text() == "the 9\nof 5\n"
        f.write("of 5\n")
    assert target.read_text() == "the 9\nof 5\n" and os.listdir(tmp_path) == ["dict.txt"]


def test_two_runners_started_together_prepare_the_data_one_after_the_other(tmp_path):
    """Two scripts/experiment.py on two --out, started at once: the second's preparation waits for
    the first's (data-bin/.prepare.lock), so it finds the folders made instead of racing to build
    them (it crashed on the other's rename)."""
    import threading
    import time

    inside, overlaps = [], []

    def prepare(name):
        def body():
            overlaps.append(bool(inside))
            inside.append(name)
            time.sleep(0.3)
            inside.remove(name)
            return name, name
        return body

    got = {}
    threads = [threading.Thread(target=lambda n=n: got.update({n: processes.one_preparation_at_a_time(
        prepare(n), str(tmp_path / "data-bin"))})) for n in ("first", "second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {"first": ("first", "first"), "second": ("second", "second")}
    assert overlaps == [False, False]


def test_a_converted_checkpoint_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """torch.save's zip writer reports a full disk as a RuntimeError after writing part of the file:
    no truncated checkpoint is left for a retry to refuse as existing."""
    from fairseq_alibi.commands import convert_checkpoint

    source = tmp_path / "lm.pt"
    torch.save({"cfg": {"model": {"_name": "alibi_transformer_lm", "arch": "alibi_transformer_lm_small"},
                        "task": {"_name": "language_modeling"}}, "model": {}}, source)
    real_save = torch.save

    def full_disk(obj, path):
        with open(path, "wb") as f:
            f.write(b"PK\x03\x04 half a checkpoint")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 31232 vs 31124")

    monkeypatch.setattr(convert_checkpoint.torch, "save", full_disk)
    with pytest.raises(SystemExit, match=re.escape(f"could not write {tmp_path / 'new.pt'} (torch.save: [enforce fail")):
        convert_checkpoint.main([str(source), str(tmp_path / "new.pt")])
    assert sorted(os.listdir(tmp_path)) == ["lm.pt"]
    monkeypatch.setattr(convert_checkpoint.torch, "save", real_save)
    convert_checkpoint.main([str(source), str(tmp_path / "new.pt")])  # the retry writes it
    assert torch.load(tmp_path / "new.pt", weights_only=False)["cfg"]["model"]["_name"] == "alibi_transformer_lm"


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="Linux autogroup scheduling only")
def test_the_runners_children_yield_as_the_runner_does_under_nice():
    """`nice python scripts/experiment.py ...`: its trainers and scorers run in their own sessions,
    each a new scheduling group where the process's nice would not count; the group gets it."""
    import subprocess

    code = ("import subprocess, sys; import fairseq_alibi_lab.processes as e; "
            "p = subprocess.Popen(['sleep', '5'], start_new_session=True)\n"
            "with e.stopped_together(p): print(open(f'/proc/{p.pid}/autogroup').read()); p.kill()")
    shown = subprocess.run(["nice", "-n", "7", sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    expected = min(os.nice(0) + 7, 19)  # nice adds to the niceness it is run with (a test run under nice, say)
    assert shown.returncode == 0 and shown.stdout.strip().endswith(f"nice {expected}"), shown.stderr[-500:]


def test_one_flag_reader_keeps_what_argparse_keeps():
    """fairseq_alibi/tools/flags.py, which the recipes, the run records and the mistakes all read through:
    the last value wins, a switch is empty, --flag=value, several words, positionals left out."""
    from fairseq_alibi.tools.flags import flag_values, last_value

    argv = ["data-bin", "--lr", "0.1", "--fp16", "--lr=0.2", "--lengths", "64", "128", "--max-update", "5", "--lr", "-1"]
    assert flag_values(argv) == {"--lr": "-1", "--fp16": "", "--lengths": "64 128", "--max-update": "5"}
    assert last_value(argv, "--max-update") == "5" and last_value(argv, "--seed", "1") == "1"
    assert mistakes.common_mistake("train", ["--max-update", "0"], 0).startswith("--max-update must be a positive")


TOY_EXPERIMENT = '''
from fairseq_alibi_lab.experiments.base import Experiment, Model, Stages, register


def report(rows, out):  # a stage of its own: a table from the declared runs' rows
    labels = sorted({row["label"] for row in rows if row.get("model") != "unigram"})
    with open(out + "/toy.md", "w") as f:
        f.write(" ".join(labels))
    return "toy report: " + " ".join(labels)


register("toy", Experiment("A toy: ALiBi at L=16, scored at L and 2L.", (Model("ALiBi", "alibi"),),
                           train_length=16, seeds=(1,), multiples=(1, 2), strides=("0",), stages=Stages(report=report)))

if __name__ == "__main__":
    from fairseq_alibi_lab.experiment_cli import cli

    cli()
'''


@pytest.mark.slow
def test_an_experiment_is_one_file(wt2_slice, tmp_path):
    """CONTRIBUTING's "adding an experiment": one file that declares an experiment (with a stage of
    its own) runs end to end through the runner: trained, scored at each declared length, the floor
    row, the tables and its own report. Then a second checkpoint of the same cell: refused until
    --retire moves the first one's rows to retired.jsonl with the reason."""
    from conftest import TOY

    toy = tmp_path / "toy_experiment.py"
    toy.write_text(TOY_EXPERIMENT)
    out = tmp_path / "out"
    printed = run(["python", toy, "toy", "--data", wt2_slice, "--updates", "4", "--out", out, "--checkpoints",
                   tmp_path / "checkpoints", "--train-flags", " ".join(["--max-tokens", "1024", *TOY])])
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    scored = {(r["label"], r["l_valid"]) for r in rows if r["model"] != "unigram"}
    assert scored == {("ALiBi", 16), ("ALiBi", 32)} and {r["l_valid"] for r in rows if r["model"] == "unigram"} == {16, 32}
    assert all(r["experiment"] == "toy" and r["updates"] == 4 for r in rows if r["model"] != "unigram")
    assert (out / "toy.md").read_text() == "ALiBi" and "toy report: ALiBi" in printed
    assert (out / "table_valid_stride0.md").exists()
    # The same cell again on another checkpoint file (retrained, say): its rows are refused, not mixed,
    # until the old ones are retired explicitly, kept with the reason.
    checkpoint = tmp_path / "checkpoints" / "alibi-L16-s1" / "checkpoint_last.pt"
    state = torch.load(checkpoint, weights_only=False)
    torch.save(dict(state, retrained=True), checkpoint)
    again = [*map(str, ["python", toy, "toy", "--data", wt2_slice, "--updates", "4", "--out", out, "--checkpoints",
                        tmp_path / "checkpoints", "--train-flags", " ".join(["--max-tokens", "1024", *TOY])])]
    refused = subprocess.run(again, cwd=REPO, capture_output=True, text=True)
    assert refused.returncode == 1 and "scored on another checkpoint file" in refused.stderr and "--retire WHY" in refused.stderr
    run([*again, "--retire", "the checkpoint was replaced"])
    retired = [json.loads(line) for line in (out / "retired.jsonl").read_text().splitlines()]
    assert sorted((r["l_valid"], r["retired"]) for r in retired) == [(16, "the checkpoint was replaced"),
                                                                     (32, "the checkpoint was replaced")]
    rescored = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    new_sha = {r["checkpoint_sha256"] for r in rescored if r["model"] != "unigram"}
    assert len(new_sha) == 1 and new_sha != {r["checkpoint_sha256"] for r in retired}
    assert sorted(r["l_valid"] for r in rescored if r["model"] != "unigram") == [16, 32]
    # The same command again (a stopped run continued as the runner says): the new rows stay, none retired.
    printed = run([*again, "--retire", "the checkpoint was replaced"])
    assert "0 rows retired" in printed and "2 rows scored on the checkpoints here kept" in printed
    assert (out / "retired.jsonl").read_text().count("\n") == 2
    assert [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()] == rescored
    # Declared twice (two files, one name): refused when declared, not when run.
    from fairseq_alibi_lab.experiments import Experiment, register

    with pytest.raises(ValueError, match="declared twice"):
        register("main", Experiment("again", ()))


def test_the_lab_calls_its_stages_as_modules_and_nothing_imports_the_runner_back():
    """Issue 66's shape, kept: no lab module runs a stage through scripts/ or examples/ by path or an
    environment variable, none imports a stage by name, and only the runner's command line imports
    the runner (no import loops the import graph cannot show)."""
    import glob

    lab = os.path.join(REPO, "fairseq_alibi_lab")
    for path in glob.glob(os.path.join(lab, "**", "*.py"), recursive=True):
        text = open(path).read()
        name = os.path.relpath(path, REPO)
        assert not re.search(r"\"(scripts|examples)\",(\s*\"[\w-]+\",)*\s*\"[\w-]+\.(py|sh)\"", text), name
        assert not re.search(r"import_module\(\s*self\.", text), name
        assert not re.search(r"env\.update\(|LABEL=|ROW_FIELDS=", text), name
        if not name.endswith(("experiment_cli.py", "runner.py")):
            assert not re.search(r"^\s*(from fairseq_alibi_lab import [\w, ]*\brunner\b|from fairseq_alibi_lab\.runner import|"
                                 r"import fairseq_alibi_lab\.runner)", text, re.M), name


def test_a_scaling_whose_slopes_the_models_kernel_does_not_take_is_scored_on_sdpa():
    """A model trained with --attention-kernel separable once failed a whole scoring job at its one dynamic
    NTK scoring (per-query slopes: sdpa's alone); its other scorings keep the model's own kernel."""
    from fairseq_alibi_lab.evaluate import plan

    def overrides(kernel, scaling):
        jobs, _ = plan("alibi_transformer_lm", 64, [256], ["0"], [scaling], "", kernel=kernel)
        return jobs[0][-1]

    assert overrides("separable", "dynamic_ntk")["attention_kernel"] == "sdpa"
    assert overrides("blocked", "dynamic_ntk")["attention_kernel"] == "sdpa"
    for kernel, scaling in (("auto", "dynamic_ntk"), ("sdpa", "dynamic_ntk"), ("separable", "ntk"), ("separable", "none")):
        assert "attention_kernel" not in overrides(kernel, scaling), (kernel, scaling)


def test_a_length_temperature_at_test_time_is_a_scaling_of_every_plugin_model():
    """SCALING=logn (the queries scaled) and logn_logit (the whole logit) set the temperature's options,
    L the checkpoint's training length, past L only; the logit form on a kernel that cannot scale each
    query's bias (blocked) is scored on sdpa; a stock model, or a config without the option, is refused."""
    from fairseq_alibi_lab.evaluate import check_scalings, plan

    def overrides(kernel, scaling, method="alibi"):
        jobs, skipped = plan(f"{method}_transformer_lm", 64, [64, 256], ["0"], [scaling], "", kernel=kernel)
        assert [job[0] for job in jobs] == [256] and skipped  # L itself is left out: the factor is 1 there
        return jobs[0][-1]

    assert overrides("auto", "logn") == {"length_temperature": "logn", "length_temperature_form": "qk",
                                         "length_temperature_length": 64}
    assert overrides("auto", "logn_logit", "kerple")["length_temperature_form"] == "logit"
    assert overrides("blocked", "logn_logit")["attention_kernel"] == "sdpa"
    assert "attention_kernel" not in overrides("blocked", "logn") and "attention_kernel" not in overrides("separable", "logn_logit")
    check_scalings("c.pt", "rotary_transformer_lm", True, ["logn"], True)
    for name, has, why in (("transformer_lm", True, "applies to the plugin's causal models"),
                           ("alibi_transformer_lm", False, "predates the length temperature.*convert_checkpoint"),
                           ("rotary_transformer_lm", False, "predates the length temperature.*retrain")):
        with pytest.raises(SystemExit, match=why):
            check_scalings("c.pt", name, True, ["logn_logit"], has)


@pytest.mark.slow
def test_eval_sh_scores_dynamic_ntk_on_a_model_trained_with_the_separable_kernel(toy_checkpoint, wt2_slice, tmp_path):
    import torch

    state = torch.load(toy_checkpoint, weights_only=False)
    state["cfg"]["model"]["attention_kernel"] = "separable"
    torch.save(state, tmp_path / "separable.pt")
    out = tmp_path / "out.jsonl"
    done = subprocess.run(["scripts/eval.sh", str(tmp_path / "separable.pt"), wt2_slice, str(out), "64"], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "SCALING": "dynamic_ntk"})
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["l_valid"], r["scaling"]) for r in rows] == [(64, "dynamic_ntk")] and rows[0]["perplexity"] > 1


def test_a_full_disk_that_torch_or_safetensors_reports_is_one_line_naming_the_path(tmp_path):
    """Their full disk is no OSError with a file name: the line once named no path."""
    from fairseq_alibi.tools.files import folder_written_whole, one_line_on_disk_faults, written_whole

    @one_line_on_disk_faults
    def export(out):
        with folder_written_whole(out) as partial:
            open(os.path.join(partial, "model.safetensors"), "wb").write(b"half")
            raise Exception("Error while serializing: IoError(Os { code: 28, kind: StorageFull })")  # safetensors' own

    @one_line_on_disk_faults
    def table(out):
        with written_whole(out) as partial:
            open(partial, "w").write("half")
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 31232 vs 31124")

    for write, out, message in ((export, tmp_path / "exported", "cannot use {} (No space left on device)"),
                                (table, tmp_path / "table.md", "could not write {} (No space left on device): nothing was written")):
        with pytest.raises(SystemExit, match=re.escape(message.format(out))):
            write(str(out))
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_eval_sh_takes_a_checkpoint_of_fairseqs_argparse_era_layout(toy_checkpoint, wt2_slice, tmp_path):
    """A checkpoint whose config is fairseq's old `args` Namespace (as fairseq, convert_checkpoint and
    the export take) was refused by eval.sh: it scores as its dataclass-layout twin."""
    from fairseq import options

    from fairseq_alibi import plugin  # noqa: F401
    from fairseq_alibi_lab.recipes import RUN_FLAGS, TRAINING_DATA
    from fairseq_alibi_lab.train import TRAINING

    flags = json.loads(open(os.path.join(os.path.dirname(toy_checkpoint), RUN_FLAGS)).read())
    argv = [word for flag, value in flags.items() if flag not in (TRAINING_DATA, "--user-dir")
            for word in [flag, *value.split()]]
    args = options.parse_args_and_arch(options.get_training_parser(), [wt2_slice, *TRAINING, *argv, "--tokens-per-sample", "32"])
    state = torch.load(toy_checkpoint, weights_only=False)
    torch.save({"args": args, "model": state["model"], "optimizer_history": state["optimizer_history"],
                "extra_state": state["extra_state"]}, tmp_path / "args.pt")
    scores = {}
    for name, path in (("cfg", toy_checkpoint), ("args", str(tmp_path / "args.pt"))):
        out = tmp_path / f"{name}.jsonl"
        run(["scripts/eval.sh", path, wt2_slice, str(out), "32 64"], cwd=REPO)
        scores[name] = [(r["l_valid"], r["perplexity"]) for r in map(json.loads, out.read_text().splitlines())]
    assert scores["args"] == scores["cfg"] and len(scores["cfg"]) == 2


@pytest.mark.slow
def test_eval_sh_says_what_it_scores_before_each_scoring(toy_checkpoint, wt2_slice, tmp_path):
    """eval.sh (and the runner's scoring, which is this code) once scored for minutes in silence."""
    done = subprocess.run(["scripts/eval.sh", toy_checkpoint, wt2_slice, str(tmp_path / "out.jsonl"), "32 64", "0 /2"],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    progress = [line for line in done.stderr.splitlines() if line.startswith("scoring ")]
    assert [line.split(" (")[0] for line in progress] == [
        f"scoring alibi_transformer_lm_small at L_valid {n}, stride {rule}" for n in (32, 64) for rule in ("0", "L_valid/2")]
    assert [line.split(" (")[1].split(",")[0] for line in progress] == ["1/4", "2/4", "3/4", "4/4"]


def test_a_training_says_its_updates_and_time_left_once_a_minute(capsys):
    """The runner once printed nothing between a training's validations; now, at most once a minute,
    its updates and the time left at the rate since its first update was reported."""
    import io
    import types

    from fairseq_alibi_lab.processes import follow

    lines = [f"2026-12-06 | INFO | train_inner | epoch 001:  {n} / 700 loss=5.0, num_updates={n}, lr=0.001\n"
             for n in range(100, 1001, 50)]
    times = iter([0.0, *[10.0 * i for i in range(len(lines))]])  # began, then one line each 10 s
    proc = types.SimpleNamespace(stdout=iter(["starting\n", *lines]))
    log = io.StringIO()
    follow(proc, log, "", updates=1000, clock=lambda: next(times))
    printed = capsys.readouterr().out.splitlines()
    # 50 updates each 10 s from the first report (update 100 at 0 s): 60 s later at update 400, 120 s at 700
    assert printed == ["    400/1000 updates (1m00s so far, about 2m00s left)",
                       "    700/1000 updates (2m00s so far, about 1m00s left)",
                       "    1000/1000 updates (3m00s so far, about 0m00s left)"]
    assert log.getvalue() == "starting\n" + "".join(lines)


def test_committed_experiments_train_and_score_on_the_kernels_of_their_rows():
    """auto now trains learned slopes and FoX and evaluates ALiBi past 512 tokens on the separable kernel
    (issue 93). Every model of every experiment with committed rows (the main job among them) resolves, in
    training at its length and in evaluation at each length it is scored at, to the kernel
    auto-no-separable picks, the rule those rows were made under: a rerun trains and scores as they did,
    digit for digit. Those experiments name that rule (Experiment.kernel_rule), and the runner passes it
    to each plugin model before the model's own flags. An experiment made under today's auto (long-context-
    recipes) says so in its declaration and in every one of its rows (attention_kernel)."""
    import dataclasses

    from fairseq_alibi.kernels import choose_kernel
    from fairseq_alibi.positions import METHODS
    from fairseq_alibi.positions.position_method import build_method
    from fairseq_alibi.tools.flags import last_value
    from fairseq_alibi_lab.experiments import BEFORE_SEPARABLE, COMMITTED, EXPERIMENTS, base
    from fairseq_alibi_lab.train import model_flags

    x, checked, moved = torch.zeros(1, 1, 128), set(), set()
    for name, experiment in EXPERIMENTS.items():
        folder = os.path.join(REPO, COMMITTED if name == "main" else os.path.join(COMMITTED, name))
        if not os.path.isdir(folder):
            continue
        if experiment.kernel_rule == "auto" and any(model.method in METHODS for model in experiment.models):
            with open(os.path.join(folder, "results.jsonl")) as f:
                recorded = {row.get("attention_kernel") for row in map(json.loads, f) if row.get("updates")}
            assert recorded == {"auto"}, (name, recorded)
            continue
        for model in experiment.models:
            if model.method not in METHODS:  # stock fairseq models and encoders: no plugin kernel
                assert base.kernel_flags(experiment, model) == [], (name, model.label)
                if model.method and recipes.RECIPE_KIND[experiment.recipe] == "causal LM":  # a stock twin (TWIN_METHODS)
                    assert "--user-dir" not in model_flags(model.method, experiment.recipe, list(METHODS)), (name, model.label)
                continue
            assert experiment.kernel_rule == BEFORE_SEPARABLE, name
            plain = dataclasses.replace(model, flags=tuple(f for f in model.flags if "{" not in f), start="")
            flags = experiment_runner_flags(experiment, plain)
            first = len(experiment.train_flags)  # the experiment's flags, then the rule, then the model's own
            assert flags[first:first + 2] == base.kernel_flags(experiment, model) == ["--attention-kernel", BEFORE_SEPARABLE]
            rule = last_value(flags, "--attention-kernel", "auto")
            positions = build_method(model.method, METHODS[model.method].Config(), 8, 16, 128)
            length = experiment.train_length * model.train_multiple
            cases = [(True, length)] + [(False, k * experiment.train_length) for k in base.multiples(experiment, model)]
            for training, tokens in cases:
                with torch.set_grad_enabled(training):
                    ran = choose_kernel(rule, positions, x, tokens, False, False)
                    assert ran == choose_kernel(BEFORE_SEPARABLE, positions, x, tokens, False, False), (name, model.label)
                    if choose_kernel("auto", positions, x, tokens, False, False) != ran:
                        moved.add((name, model.label))
            checked.add((name, model.label))
    assert ("main", "ALiBi") in checked
    assert {("main", "ALiBi"), ("comparison", "FoX (forget gate)"), ("retrieval", "ALiBi, learned slopes")} <= moved


def experiment_runner_flags(declared, model):
    """The flags the runner gives `model` of experiment `declared` (no prepared checkpoint named)."""
    from fairseq_alibi_lab import jobs

    context = jobs.Context("test", declared, declared.train_length, declared.seeds, 100, "out", "checkpoints")
    return list(jobs.build(context, model, 1).flags)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["comparison", "retrieval-2025"])
def test_the_runner_imports_neither_torch_nor_fairseq(name, tmp_path):
    """The runner is a process per invocation and per parallel part; the trainers and scorers it starts
    import torch and fairseq (about 3 s of CPU each here), it needs neither: the committed tables rebuilt, of
    an experiment naming a kernel rule (its plugin models told from the stock twins by name) and of one
    drawing retrieval's figures (each ALiBi head's reach)."""
    import shutil

    out = tmp_path / name
    shutil.copytree(os.path.join(REPO, "examples", "wikitext2", "results", name), out)
    code = ("import runpy, sys\n"
            f"sys.argv = ['scripts/experiment.py', {name!r}, '--tables', '--out', {str(out)!r}]\n"
            "try:\n    runpy.run_path('scripts/experiment.py', run_name='__main__')\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "print('imported:', sorted(m for m in ('torch', 'fairseq') if m in sys.modules))\n")
    printed = run([sys.executable, "-c", code])
    assert "| ALiBi" in printed and printed.strip().splitlines()[-1] == "imported: []", printed[-2000:]
