"""The library's scripts and tools end to end, each run as a user runs it: scripts/train.sh and eval.sh
(two processes training as one, a stock model scored past its length, a fork checkpoint refused),
separate_articles.py with packed documents, a preset refused, the GPT-2 stand-in, and the GPT-2
experiment through the runner."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest
import torch

from conftest import REPO, TOY, run


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_equal_one_with_update_freq_2(wt2_slice, tmp_path):
    common = ["--max-update", "4", "--max-tokens", "512", "--seed", "3", "--disable-validation", *TOY]
    one = tmp_path / "one"
    run(["scripts/train.sh", "alibi", "32", wt2_slice, one, "small", "--", *common, "--update-freq", "2"])
    two = tmp_path / "two"
    init = f"tcp://127.0.0.1:{free_port()}"
    logs = [tmp_path / f"rank{rank}.log" for rank in (0, 1)]
    procs = [
        subprocess.Popen(["scripts/train.sh", "alibi", "32", wt2_slice, two, "small", "--", *common,
                          "--distributed-world-size", "2", "--distributed-rank", str(rank),
                          "--distributed-init-method", init, "--distributed-backend", "gloo",
                          "--distributed-no-spawn"],
                         cwd=REPO, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        for rank, log in zip((0, 1), logs)
    ]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and any(p.poll() is None for p in procs) and not any(p.poll() for p in procs):
        time.sleep(1)
    for p in procs:  # a rank that failed leaves the other waiting for it at init: end it, and say why
        if p.poll() is None:
            p.kill()
            p.wait()
    outputs = [log.read_text() for log in logs]
    assert all(p.returncode == 0 for p in procs), outputs[0][-3000:] + outputs[1][-3000:]
    assert "distributed init (rank 1)" in "".join(outputs)
    a = torch.load(one / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    b = torch.load(two / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert a["optimizer_history"][-1]["num_updates"] == b["optimizer_history"][-1]["num_updates"] == 4
    for name, weight in a["model"].items():
        if name.endswith("_float_tensor"):  # AdaptiveInput's uninitialized dtype marker
            continue
        torch.testing.assert_close(weight, b["model"][name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.slow
def test_eval_script_extends_a_stock_sinusoidal_model_past_its_length(sinusoidal_checkpoint, wt2_slice, tmp_path):
    """The twin trained at L=32 evaluates at 128 through scripts/eval.sh (which raises its
    max_target_positions); no such override is needed, or made, for ALiBi."""
    out = tmp_path / "r.jsonl"
    run(["scripts/eval.sh", sinusoidal_checkpoint, wt2_slice, out, "128"])
    row = json.loads(out.read_text())
    assert row["model"] == "transformer_lm" and row["l_valid"] == 128 and row["perplexity"] > 1


@pytest.mark.slow
def test_eval_script_refuses_an_unconverted_fork_checkpoint(fork_checkpoint, wt2_slice, tmp_path):
    proc = subprocess.run(["scripts/eval.sh", fork_checkpoint, wt2_slice, tmp_path / "r.jsonl", "64"],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "convert it first with python -m fairseq_alibi.commands.convert_checkpoint" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.slow
def test_trains_and_scores_through_fairseq_with_articles_kept_apart_and_packed(tmp_path):
    """scripts/separate_articles.py on the first lines of WikiText-2, fairseq-train (scripts/train.sh)
    with --document-separator '<doc>', fairseq-eval-lm (scripts/eval.sh) with the documents kept
    apart and, by --model-overrides, packed; nonoverlapping and sliding, past L."""
    import json
    import math
    import os

    from conftest import REPO, TOY, find_wikitext2, run

    for split, lines in [("train", 3000), ("valid", 400)]:
        with open(os.path.join(find_wikitext2(), f"wiki.{split}.tokens")) as f:
            (tmp_path / f"{split}.head").write_text("".join(next(f) for _ in range(lines)))
        printed = run(["python", "scripts/separate_articles.py", tmp_path / f"{split}.head", tmp_path / f"{split}.tokens"])
        assert "articles" in printed
    assert "\n <doc> \n = Frank <unk> = \n" in (tmp_path / "valid.tokens").read_text()
    run(["fairseq-preprocess", "--only-source", "--trainpref", tmp_path / "train.tokens", "--validpref",
         tmp_path / "valid.tokens", "--destdir", tmp_path / "bin", "--workers", "2"])
    save = tmp_path / "alibi"
    run(["scripts/train.sh", "alibi", "32", tmp_path / "bin", save, "small", "--", "--max-update", "3",
         "--max-tokens", "1024", *TOY, "--document-separator", "<doc>"])
    out = tmp_path / "results.jsonl"
    for label, overrides in [("apart", "{}"), ("packed", "{'document_separator': None}")]:
        run(["scripts/eval.sh", save / "checkpoint_last.pt", tmp_path / "bin", out, "32 128", "0 /2", "--",
             "--model-overrides", overrides], env=dict(os.environ, LABEL=label), cwd=REPO)
    rows = {(r["label"], r["l_valid"], r["stride"]): r["perplexity"] for r in map(json.loads, out.read_text().splitlines())}
    assert len(rows) == 8 and all(math.isfinite(p) and p > 1 for p in rows.values())
    for l_valid, stride in [(32, 0), (128, 0), (128, 64)]:  # the split holds article ends: some windows differ
        assert rows[("apart", l_valid, stride)] != rows[("packed", l_valid, stride)]


def test_the_bloom_small_preset_is_alibis_only(tmp_path):
    (tmp_path / "dict.txt").write_text("".join(f"w{i} 1\n" for i in range(20)))
    proc = subprocess.run(["scripts/train.sh", "rotary", "32", str(tmp_path), str(tmp_path / "save"), "bloom_small"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode != 0 and "bloom_small preset is ALiBi's" in proc.stderr, proc.stderr
    assert not (tmp_path / "save").exists()


@pytest.mark.slow
def test_the_gpt2_standin_trains_resumes_and_imports(wt2_slice, tmp_path):
    """examples/wikitext2/gpt2_standin.py at toy size: stopped after 10 updates and run again to 20, it
    gives the uninterrupted run's weights; its folder imports with the slice's ids."""
    from transformers import GPT2LMHeadModel

    from fairseq_alibi.hf.import_gpt2 import import_gpt2

    toy = ["--length", "16", "--dim", "16", "--layers", "1", "--heads", "2", "--tokens", "128"]
    script = os.path.join(REPO, "examples", "wikitext2", "gpt2_standin.py")
    run([sys.executable, script, wt2_slice, str(tmp_path / "whole"), "--updates", "20", *toy])
    run([sys.executable, script, wt2_slice, str(tmp_path / "parts"), "--updates", "20", *toy, "--stop-after", "10"])
    assert not (tmp_path / "parts" / "config.json").exists()
    assert "resuming at update 10" in run([sys.executable, script, wt2_slice, str(tmp_path / "parts"), "--updates", "20", *toy])
    whole, parts = (GPT2LMHeadModel.from_pretrained(tmp_path / name).state_dict() for name in ("whole", "parts"))
    for key in whole:
        torch.testing.assert_close(parts[key], whole[key], rtol=0, atol=0)
    import_gpt2(str(tmp_path / "whole"), str(tmp_path / "imported"))
    assert (tmp_path / "imported" / "dict.txt").read_text() .split()[::2] == [
        line.split()[0] for line in open(os.path.join(wt2_slice, "dict.txt"))]


@pytest.mark.slow
def test_the_gpt2_experiment_runs_through_the_runner_at_toy_size(wt2_slice, tmp_path):
    """scripts/experiment.py gpt2-alibi at toy size (L=16): a stand-in GPT-2 (trained here for 3
    updates, which the runner then finds finished), imported and converted by the runner; the GPT-2
    scored at L only (its learned positions end there), the two recoveries of the conversion at L
    and 2L, both strides; the GPT-2 continued and the recoveries trained 2 updates from their start
    (fine-tuned: the counter starts at 0), the import with none; run again,
    nothing is trained or scored again. Seed 2: every row records it, the import's too."""
    checkpoints, out = tmp_path / "checkpoints", tmp_path / "out"
    toy = ["--length", "16", "--dim", "16", "--layers", "1", "--heads", "2", "--tokens", "64", "--updates", "3"]
    run([sys.executable, os.path.join(REPO, "examples", "wikitext2", "gpt2_standin.py"), wt2_slice,
         str(checkpoints / "gpt2-standin-L16-s2"), *toy, "--seed", "2"])
    flags = ["--decoder-layers", "1", "--decoder-embed-dim", "16", "--decoder-input-dim", "16", "--decoder-output-dim", "16",
             "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2", "--max-tokens", "64",
             "--disable-validation"]  # fairseq-train's end-of-run validation: minutes at this batch size
    models = ["gpt-2-imported", "gpt-2-continued", "gpt-2-alibi-recovered", "gpt-2-alibi-recovered-with-distillation"]
    command = [sys.executable, "scripts/experiment.py", "gpt2-alibi", "--data", wt2_slice, "--train-length", "16",
               "--updates", "2", "--lengths", "16", "32", "--seeds", "2", "--checkpoints", str(checkpoints),
               "--out", str(out), "--models", *models, "--train-flags", " ".join(flags)]
    printed = run(command)
    assert "importing it" in printed and "training the GPT-2 stand-in" in printed
    assert "\n    scoring GPT-2 (imported) at L_valid 16, stride 0 (1/" in printed  # the scorer's progress, shown
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if '"unigram"' not in line]
    scored = {(r["label"], r["l_valid"], r["stride_rule"], r["updates"]) for r in rows}
    expected = {(label, lv, rule, updates) for label, lengths, updates in [
        ("GPT-2 (imported)", (16,), 0), ("GPT-2 continued", (16,), 2), ("GPT-2 -> ALiBi, recovered", (16, 32), 2), ("GPT-2 -> ALiBi, recovered with distillation", (16, 32), 2)]
        for lv in lengths for rule in ("0", "L_valid/2")}
    assert scored == expected and len(rows) == len(expected)
    assert {r["seed"] for r in rows} == {2}  # the import and its conversion record the stand-in's seed
    imported = str(checkpoints / "gpt2-imported-L16-s2")
    assert {r["checkpoint"] for r in rows if r["label"] == "GPT-2 (imported)"} == {os.path.join(imported, "checkpoint.pt")}
    assert {r["model"] for r in rows} == {"transformer_lm", "alibi_transformer_lm_gpt2_small"}
    for name, start, arch in [("gpt-2-continued", "checkpoint.pt", "transformer_lm"),
                              ("gpt-2-alibi-recovered", "converted-alibi.pt", "alibi_transformer_lm_gpt2_small"),
                              ("gpt-2-alibi-recovered-with-distillation", "converted-alibi.pt", "alibi_transformer_lm_gpt2_small")]:
        trained = json.loads((checkpoints / f"{name}-L16-s2" / "train_flags.json").read_text())
        assert trained["--finetune-from-model"] == os.path.join(imported, start) and trained["--arch"] == arch
        assert trained.get("--teacher-path") == (os.path.join(imported, "checkpoint.pt") if "distillation" in name else None)
    table = (out / "table_valid_stride0.md").read_text()
    assert "GPT-2 -> ALiBi, recovered with distillation" in table and "Unigram" in table
    again = run(command)
    assert "importing it" not in again and "training the GPT-2 stand-in" not in again
    assert len((out / "results.jsonl").read_text().splitlines()) == len(rows) + 4  # + the floor's rows


@pytest.mark.slow
def test_the_gpt2_experiment_takes_the_comparisons_alibi_from_its_committed_rows(wt2_slice, tmp_path):
    """The comparison's ALiBi is shown from examples/wikitext2/results/comparison/results.jsonl:
    nothing trained or scored, each seed's rows relabelled; a seed it lacks is refused in one line."""
    out = tmp_path / "out"
    command = [sys.executable, "scripts/experiment.py", "gpt2-alibi", "--data", wt2_slice, "--models",
               "alibi-from-scratch-comparison", "--out", str(out), "--checkpoints", str(tmp_path / "none")]
    printed = run(command)
    assert "comparison's run (its committed rows): nothing to do" in printed
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if '"unigram"' not in line]
    committed = [json.loads(line) for line in open(os.path.join(REPO, "examples", "wikitext2", "results", "comparison",
                                                                "results.jsonl"))]
    alibi = sorted((r["seed"], r["l_valid"], r["stride_rule"], r["perplexity"]) for r in committed
                   if r.get("label") == "ALiBi" and r["scaling"] == "none")
    assert sorted((r["seed"], r["l_valid"], r["stride_rule"], r["perplexity"]) for r in rows) == alibi and len(alibi) == 30
    assert {r["label"] for r in rows} == {"ALiBi from scratch (comparison)"}
    assert "ALiBi from scratch (comparison)" in (out / "table_valid_stride0.md").read_text()
    refused = subprocess.run([*command[:-4], "--out", str(tmp_path / "other"), "--seeds", "4"], cwd=REPO,
                             capture_output=True, text=True)
    assert refused.returncode != 0 and refused.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "run scripts/experiment.py comparison --models alibi --seeds 4" in refused.stderr
