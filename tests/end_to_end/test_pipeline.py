"""End to end on a slice of WikiText-2: the scripts, fairseq's CLIs and the hub interface."""
import json
import re
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import REPO, TOY, USER_DIR, bit_identical, run, slice_tokens, snapshot
from fairseq_alibi.tools import dictionaries
from fairseq_alibi.tools import files
from fairseq_alibi_lab import results

pytestmark = pytest.mark.slow


def test_train_short_test_long_without_overrides(toy_checkpoint, wt2_slice, tmp_path):
    """Trained at L=32, evaluated at L=32 and L=256 by plain fairseq-eval-lm: no overrides."""
    for l_valid in (32, 256):
        log = run(["fairseq-eval-lm", wt2_slice, "--user-dir", USER_DIR, "--path", toy_checkpoint,
                   "--tokens-per-sample", str(l_valid), "--gen-subset", "valid", "--num-workers", "0"])
        ppl = float(log.split("Perplexity: ")[1].split()[0])
        assert math.isfinite(ppl) and 1 < ppl < 20000


def test_eval_script_writes_json_lines_and_results_tables(toy_checkpoint, wt2_slice, tmp_path):
    out = tmp_path / "results.jsonl"
    run(["scripts/eval.sh", toy_checkpoint, wt2_slice, out, "32 128", "0 16"])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["l_valid"], r["stride"]) for r in rows] == [(32, 0), (32, 16), (128, 0), (128, 16)]
    for r in rows:
        assert r["model"] == "alibi_transformer_lm_small" and r["train_length"] == 32
        assert r["tokens"] == slice_tokens(wt2_slice) and r["tokens_per_s"] > 0  # every validation token, each once
        assert r["perplexity"] == pytest.approx(2 ** r["loss_base2"], rel=1e-3)
    printed = run(["python", "scripts/results.py", out, "--out", tmp_path / "tables"])
    assert "| ALiBi 32 |" in printed
    for name in ["table_valid_stride0.md", "table_valid_stride0.csv", "figure_valid_stride0.png",
                 "table_valid_stride16.md", "figure_valid_stride16.png"]:
        assert (tmp_path / "tables" / name).stat().st_size > 0
    csv_rows = (tmp_path / "tables" / "table_valid_stride0.csv").read_text().splitlines()
    assert csv_rows[0] == "method,train_length,32,128,std_32,std_128,n_32,n_128"
    assert csv_rows[1].startswith("ALiBi,32,") and csv_rows[1].endswith(",0.0,0.0,1,1")


def evaluate(checkpoint, data, l_valid, context_window, batch_size):
    """fairseq-eval-lm's own steps (fairseq_cli.eval_lm.main), returning the exact mean loss."""
    import fairseq_alibi.plugin  # noqa: F401  (registers the model, as --user-dir does)
    from fairseq import checkpoint_utils, tasks
    from fairseq_cli.eval_lm import eval_lm

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides={"data": data})
    cfg.task.tokens_per_sample = l_valid - context_window
    task = tasks.setup_task(cfg.task)
    task.load_dataset("valid")
    itr = task.eval_lm_dataloader(
        dataset=task.dataset("valid"), max_tokens=None, batch_size=batch_size, context_window=context_window,
        max_positions=models[0].max_positions(),
    )
    return eval_lm(models=[m.eval() for m in models], source_dictionary=task.source_dictionary, batch_iterator=itr)


@pytest.mark.parametrize("l_valid,context_window", [(64, 0), (64, 32)])
def test_eval_loss_does_not_depend_on_batch_size(toy_checkpoint, wt2_slice, l_valid, context_window):
    one = evaluate(toy_checkpoint, wt2_slice, l_valid, context_window, batch_size=1)
    eight = evaluate(toy_checkpoint, wt2_slice, l_valid, context_window, batch_size=8)
    assert float(one["loss"]) == pytest.approx(float(eight["loss"]), rel=1e-5)


def test_scoring_the_output_layer_a_softmax_batch_at_a_time_changes_no_loss(toy_checkpoint, wt2_slice, tmp_path):
    """scripts/eval.sh computes the log-probabilities SOFTMAX_BATCH positions at a time (evaluate.py):
    the loss fairseq's eval_lm gives computing each batch's at once, nonoverlapping and sliding."""
    from fairseq_alibi_lab.evaluate import SOFTMAX_BATCH

    out = tmp_path / "rows.jsonl"
    run(["scripts/eval.sh", toy_checkpoint, wt2_slice, out, "32", "0 8"])
    rows = {r["stride"]: r["loss_base2"] for r in map(json.loads, out.read_text().splitlines())}
    for stride, context in ((0, 0), (8, 24)):
        whole = evaluate(toy_checkpoint, wt2_slice, 32, context, batch_size=64)  # 2,048 positions a batch
        assert 64 * 32 > SOFTMAX_BATCH and rows[stride] == pytest.approx(float(whole["loss"]), rel=1e-5)


def test_hub_interface_samples_and_scores(toy_checkpoint, wt2_slice):
    import fairseq_alibi.plugin  # noqa: F401
    from fairseq_alibi.models.decoder import POSITION_LMS

    hub = POSITION_LMS["alibi"].from_pretrained(
        os.path.dirname(toy_checkpoint), os.path.basename(toy_checkpoint), data_name_or_path=wt2_slice
    )
    torch.manual_seed(0)
    text = hub.sample("The game", beam=1, sampling=True, sampling_topk=10, max_len_b=20)
    assert text.startswith("The game") and len(text.split()) > 2
    scored = hub.score("The game was released in 2010 .")
    assert torch.isfinite(scored["positional_scores"]).all()
    # Greedy generation through fairseq's SequenceGenerator (incremental decoding) must agree
    # with one full forward over the generated text: each generated token is that pass's argmax.
    prompt = hub.encode("The game")[:-1]  # without its end-of-sentence
    hypo = hub.generate(hub.encode("The game"), beam=1, max_len_b=8)[0]["tokens"]
    model = hub.models[0]
    with torch.no_grad():
        inputs = torch.cat([torch.tensor([hub.src_dict.eos()]), hypo[:-1]])[None]
        lprobs = model.get_normalized_probs(model(inputs), log_probs=True)[0]
    generated = hypo[len(prompt) : -1]  # the last token may be a forced end-of-sentence
    assert len(generated) > 0
    assert torch.equal(lprobs.argmax(-1)[len(prompt) : len(prompt) + len(generated)], generated)


def test_interrupted_training_resumes_from_last_checkpoint(wt2_slice, tmp_path):
    cmd = ["scripts/train.sh", "alibi", "32", wt2_slice, str(tmp_path), "small", "--",
           "--max-update", "40", "--max-tokens", "1024", *TOY]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while not (tmp_path / "checkpoint_1_10.pt").exists() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1)  # let the save finish; the run is then between updates 10 and 40
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (tmp_path / "checkpoint_last.pt").exists()
    log = run(cmd)
    resumed_at = int(re.search(r"Loaded checkpoint \S+ \(epoch \d+ @ (\d+) updates\)", log).group(1))
    assert 10 <= resumed_at < 40
    state = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 40
    # Resuming changes nothing: the same run never interrupted ends with the same weights, bit for bit
    # (data order, optimizer and schedule all come back from the checkpoint).
    whole = tmp_path / "uninterrupted"
    run([*cmd[:4], str(whole), *cmd[5:]])
    reference = torch.load(whole / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    assert reference.keys() == state["model"].keys()
    # fairseq's `_float_tensor` buffers are uninitialised placeholders (they only carry a dtype)
    weights = [name for name in reference if not name.endswith("_float_tensor")]
    assert len(weights) > 10 and all(torch.equal(reference[name], state["model"][name]) for name in weights)


def test_validation_during_training_changes_no_weight(toy_checkpoint, wt2_slice, tmp_path):
    """Why an experiment may train with --disable-validation (retrieval's does: its 5600 updates
    validated every 100 spent about a quarter of their wall time on it): the toy checkpoint, validated on
    every save (10, 20, 30), and the same run without validation end with the same weights, bit for
    bit (fairseq seeds each update from --seed and the update number; nothing reads validation)."""
    run(["scripts/train.sh", "alibi", "32", wt2_slice, str(tmp_path), "small", "--", "--max-update", "30",
         "--max-tokens", "1024", *TOY, "--disable-validation"])
    validated, unvalidated = (torch.load(path, map_location="cpu", weights_only=False)
                              for path in (toy_checkpoint, tmp_path / "checkpoint_last.pt"))
    assert validated["extra_state"]["val_loss"] > 0 and unvalidated["extra_state"]["val_loss"] is None
    assert not (tmp_path / "checkpoint_best.pt").exists()  # (no validation, no best)
    reference, unvalidated = validated["model"], unvalidated["model"]
    weights = [name for name in reference if not name.endswith("_float_tensor")]  # (placeholders: a dtype only)
    assert reference.keys() == unvalidated.keys() and len(weights) > 10
    assert all(torch.equal(reference[name], unvalidated[name]) for name in weights)


def test_fairseq_interactive_generates_with_the_plugin(toy_checkpoint, wt2_slice):
    proc = subprocess.run(
        ["fairseq-interactive", wt2_slice, "--task", "language_modeling", "--user-dir", USER_DIR,
         "--path", toy_checkpoint, "--beam", "1", "--max-len-b", "10", "--num-workers", "0"],
        input="The game\n", capture_output=True, text=True, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    hypothesis = [line for line in proc.stdout.splitlines() if line.startswith("H-0")]
    assert hypothesis and "The game" in hypothesis[0] and len(hypothesis[0].split("\t")[-1].split()) > 2


@pytest.mark.parametrize("config", ["wiki103_alibi", "wiki103_sinusoidal"])
def test_hydra_configs_train(config, wt2_slice, tmp_path):
    """The paper's recipe as hydra configs, at toy size (2 updates on CPU)."""
    toy = ["model.decoder_layers=1", "model.decoder_embed_dim=64", "model.decoder_input_dim=64",
           "model.decoder_output_dim=64", "model.decoder_ffn_embed_dim=128",
           "model.adaptive_input_cutoff='2000,10000'", "model.adaptive_softmax_cutoff='2000,10000'"]
    run(["fairseq-hydra-train", "--config-dir", "configs", "--config-name", config, f"task.data={wt2_slice}",
         f"checkpoint.save_dir={tmp_path}", "task.tokens_per_sample=32", "dataset.max_tokens=1024",
         "optimization.max_update=2", "common.fp16=false", "common.cpu=true", "dataset.disable_validation=true",
         *toy])
    state = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["cfg"]["model"]["_name"] == ("alibi_transformer_lm" if "alibi" in config else "transformer_lm")
    assert state["cfg"]["optimizer"]["_name"] == "nag" and state["optimizer_history"][-1]["num_updates"] == 2


def test_experiment_runner_toy_run_seeds_resumes_and_keeps_what_is_done(wt2_slice, tmp_path):
    """scripts/experiment.py end to end at toy size, through examples/wikitext2/compare.sh: ALiBi
    with two seeds trained at L=16, scored at L and 2L, nonoverlapping and sliding, its three
    scalings past L, the unigram floor; the table is mean ± std over the seeds. The seeds run at
    once (--parallel 2: a runner each, their rows merged); run again one at a time, nothing is
    trained or scored again and a finished run's checkpoint is left as it is; --tables rebuilds
    the same table from the rows alone."""
    out, checkpoints = tmp_path / "out", tmp_path / "checkpoints"
    command = ["examples/wikitext2/compare.sh", "--data", wt2_slice, "--train-length", "16", "--updates", "4",
               "--lengths", "16", "32", "--seeds", "1", "2", "--models", "alibi", "--out", out,
               "--checkpoints", checkpoints, "--train-flags", " ".join(["--max-tokens", "1024", *TOY])]
    printed = run([*command, "--parallel", "2"])
    assert printed.count("ended (") == 2 and "FAILED" not in printed
    # Each part records its threads: the caller's OMP_NUM_THREADS, else the cores shared out between the parts.
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // 2))
    for seed in (1, 2):
        (started, *_) = map(json.loads, (out / "parts" / f"alibi-L16-s{seed}" / "runs.jsonl").read_text().splitlines())
        assert started["event"] == "started" and started["omp_num_threads"] == threads
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    models = [r for r in rows if r["model"] != "unigram"]
    runs = {(r["label"], r["seed"], r["scaling"], r["l_valid"], r["stride_rule"]) for r in models}
    expected = {("ALiBi", seed, "none", lv, rule) for seed in (1, 2) for lv in (16, 32) for rule in ("0", "L_valid/2")}
    expected |= {("ALiBi", seed, s, 32, rule) for seed in (1, 2) for s in ("linear", "ntk", "dynamic_ntk")
                 for rule in ("0", "L_valid/2")}  # a = 1 at L: not scored
    assert runs == expected and len(models) == len(expected)
    for r in models:
        assert math.isfinite(r["perplexity"]) and r["stride"] == (0 if r["stride_rule"] == "0" else r["l_valid"] // 2)
        assert r["experiment"] == "comparison" and r["recipe"] == "small" and r["updates"] == 4
        assert r["commit"] and "cores" in r["machine"] and r["checkpoint"].endswith(f"-L16-s{r['seed']}/checkpoint_last.pt")
        assert r["scaling_factor"] == {"none": None, "linear": 2.0, "ntk": 2.0, "dynamic_ntk": 1.0}[r["scaling"]]
    ppl = {(r["label"], r["seed"], r["scaling"], r["l_valid"], r["stride"]): r["perplexity"] for r in models}
    assert ppl[("ALiBi", 1, "none", 32, 0)] != ppl[("ALiBi", 2, "none", 32, 0)]  # the seed reached training
    for scaling in ("linear", "ntk", "dynamic_ntk"):  # the scaling reached the model
        assert ppl[("ALiBi", 1, scaling, 32, 0)] != ppl[("ALiBi", 1, "none", 32, 0)]
    (unigram,) = {r["perplexity"] for r in rows if r["model"] == "unigram"}
    assert 100 < unigram < 5000
    # The table: mean ± sample std over the two seeds, n = 2, and the floor row.
    table = (out / "table_valid_stride0.md").read_text()
    values = [ppl[("ALiBi", seed, "none", 32, 0)] for seed in (1, 2)]
    mean, std = sum(values) / 2, abs(values[0] - values[1]) / 2 ** 0.5
    assert f"| ALiBi 16 | 2 | " in table and f"{mean:.2f} ± {std:.2f}" in table
    assert f"| Unigram (add-one) | 1 | {unigram:.2f} | {unigram:.2f} |" in table
    for label in ("| ALiBi 16 |", "| ALiBi + linear interp. 16 |", "| ALiBi + NTK 16 |", "| ALiBi + dynamic NTK 16 |"):
        assert printed.count(label) == 2  # nonoverlapping and sliding tables
    (out / "table_valid_stride0.md").unlink()
    run([*command, "--tables"])
    assert (out / "table_valid_stride0.md").read_text() == table
    for name in ("table_valid_stride_Lvalid_over_2.csv", "figure_valid_stride0.png", "figure_valid_stride_Lvalid_over_2.png"):
        assert (out / name).stat().st_size > 0
    # Again: nothing trained or scored again, nothing a finished run holds is touched.
    finished = snapshot(checkpoints / "alibi-L16-s1")
    again = run(command)
    assert again.count("nothing to do") == 2
    assert len((out / "results.jsonl").read_text().splitlines()) == len(rows)
    after = snapshot(checkpoints / "alibi-L16-s1")
    assert {k: v for k, v in after.items() if not k.endswith((".log", ".jsonl"))} == {
        k: v for k, v in finished.items() if not k.endswith((".log", ".jsonl"))}
    # In parallel again, each part begins with OUT's rows of its run: nothing is scored again.
    shutil.rmtree(out / "parts")
    run([*command, "--parallel", "2"])
    assert len((out / "results.jsonl").read_text().splitlines()) == len(rows)  # a score again differs (its time)
    # A part of the run (one seed) rebuilds the tables of the whole, never of its part.
    run([*command[:command.index("--seeds")], "--seeds", "1", *command[command.index("--seeds") + 3:], "--tables"])
    assert (out / "table_valid_stride0.md").read_text() == table
    # Rows of another checkpoint file at the same path (retrained since) are not this one's: refused.
    target = checkpoints / "alibi-L16-s1" / "checkpoint_last.pt"
    kept = target.read_bytes()
    state = torch.load(target, map_location="cpu", weights_only=False)
    state["model"]["decoder.layers.0.fc1.bias"] += 1
    torch.save(state, target)
    replaced = subprocess.run([sys.executable, "scripts/experiment.py", "comparison", *map(str, command[1:])], cwd=REPO,
                              capture_output=True, text=True)
    assert replaced.returncode == 1 and "scored on another checkpoint file at that path" in replaced.stderr.splitlines()[-1]
    target.write_bytes(kept)
    # On a machine without the checkpoints (the rows kept in git), the scored runs are not trained again.
    shutil.rmtree(checkpoints)
    elsewhere = run(command)
    assert elsewhere.count("already scored") == 2 and not checkpoints.exists()
    assert len((out / "results.jsonl").read_text().splitlines()) == len(rows)
    # A length their rows lack: refused before anything trains (a new checkpoint's rows could not join them).
    longer = [*command[:command.index("32") + 1], "64", *command[command.index("32") + 1:]]
    orphaned = subprocess.run([sys.executable, "scripts/experiment.py", "comparison", *map(str, longer[1:])], cwd=REPO,
                              capture_output=True, text=True)
    assert orphaned.returncode == 1 and "holds some rows of ALiBi seed 1, ALiBi seed 2" in orphaned.stderr.splitlines()[-1]
    assert not checkpoints.exists() and len((out / "results.jsonl").read_text().splitlines()) == len(rows)
    # ... but not for other data (the same dictionary, another validation split), nor other training flags.
    other = tmp_path / "other-data"
    shutil.copytree(wt2_slice, other)
    for suffix in (".bin", ".idx"):
        shutil.copy(other / f"test{suffix}", other / f"valid{suffix}")
    for changed, why in (([*command[:2], other, *command[3:]], "scored on other data"),
                         ([*command[:-1], command[-1] + " --lr 0.1"], "trained with other --train-flags")):
        refused = subprocess.run([sys.executable, "scripts/experiment.py", "comparison", *map(str, changed[1:])], cwd=REPO,
                                 capture_output=True, text=True)
        assert refused.returncode == 1 and why in refused.stderr.strip().splitlines()[-1], refused.stderr[-1000:]
    assert len((out / "results.jsonl").read_text().splitlines()) == len(rows) and not checkpoints.exists()
    arch = subprocess.run([sys.executable, "scripts/experiment.py", "comparison", *map(str, command[1:-1]),
                           "--arch rotary_transformer_lm_small"], cwd=REPO, capture_output=True, text=True)
    assert arch.returncode == 2 and "--train-flags may not set --arch" in arch.stderr
    seed = subprocess.run([sys.executable, "scripts/experiment.py", "comparison", *map(str, command[1:-1]),
                           command[-1] + " --seed 7"], cwd=REPO, capture_output=True, text=True)
    assert seed.returncode == 2 and "--train-flags may not set --seed" in seed.stderr.strip().splitlines()[-1]
    provenance = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [p["event"] for p in provenance] == ["started", "finished"] * 3 + ["started", "failed", "started", "finished"] + [
        "started", "failed"] * 3  # the refused runs: the orphaned rows, other data, other flags
    assert all(p["command"].startswith("python scripts/experiment.py comparison") for p in provenance)
    assert all(p["started"] == p2["started"] and p2["wall_s"] >= 0 for p, p2 in zip(provenance[::2], provenance[1::2]))


def test_trade_preset_toy_run(wt2_slice, tmp_path):
    """examples/wikitext2/trade.sh (scripts/experiment.py trade) end to end at toy size: ALiBi at
    L=16 scored at 1, 2, 4 and 16 L against the sinusoidal models trained at L and 16L (chosen by
    NAME@K: the four share a label) and scored at their own, two jobs at a time (each by a runner
    of its own, given its one model), each training's time and peak memory measured beside it; and
    the variant keeping L's sequences per update at 2L (twice the tokens) and its control at L given
    the same tokens, side by side in the grid by tokens per update."""
    out, checkpoints = tmp_path / "out", tmp_path / "checkpoints"
    printed = run(["examples/wikitext2/trade.sh", "--data", wt2_slice, "--train-length", "16", "--updates", "4",
                   "--seeds", "1", "--out", out, "--checkpoints", checkpoints, "--parallel", "2",
                   "--models", "alibi", "sinusoidal@1", "sinusoidal@16", "sinusoidal-sequences-per-update-fixed@2",
                   "sinusoidal-at-l-2x-tokens", "--train-flags", " ".join(["--max-tokens", "1024", *TOY])])
    assert sorted(os.listdir(checkpoints)) == ["alibi-L16-s1", "sinusoidal-L16-s1", "sinusoidal-L256-s1",
                                               "sinusoidal-at-l-2x-tokens-L16-s1",
                                               "sinusoidal-sequences-per-update-fixed-L32-s1"]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if '"unigram"' not in line]
    assert sorted((r["model"], r["train_length"], r["l_valid"]) for r in rows) == sorted(
        [*(("alibi_transformer_lm_small", 16, lv) for lv in (16, 32, 64, 256)),
         *(("transformer_lm", lv, lv) for lv in (16, 16, 32, 256))])
    batch = {}  # fairseq's end-of-training line: tokens (wpb) and sequences (bsz) per update
    for name in ("sinusoidal-L16-s1", "sinusoidal-L256-s1", "sinusoidal-sequences-per-update-fixed-L32-s1",
                 "sinusoidal-at-l-2x-tokens-L16-s1"):
        (summary,) = re.findall(r"\| train \| .*\| wpb (\S+) \| bsz (\S+) ", (checkpoints / name / "train.log").read_text())
        batch[name] = tuple(float(x) for x in summary)
    assert batch["sinusoidal-L16-s1"] == (1024, 64) and batch["sinusoidal-L256-s1"] == (1024, 4)
    assert batch["sinusoidal-sequences-per-update-fixed-L32-s1"] == (2048, 64)
    assert batch["sinusoidal-at-l-2x-tokens-L16-s1"] == (2048, 128)  # the same tokens, at L
    for length in (16, 256):
        (call,) = [json.loads(line) for line in (checkpoints / f"sinusoidal-L{length}-s1" / "resources.jsonl").read_text().splitlines()]
        assert call["exit"] == 0 and call["seconds"] > 0 and call["peak_mib"] > 100
    trade, grid_title, grid = (out / "trade.md").read_text().split("\n\n")
    table = [line.split("|")[1:-1] for line in trade.splitlines()[2:]]
    assert [int(r[0]) for r in table] == [16, 256] and all("not measured" not in "".join(r) for r in table)
    ppl = {(r["model"], r["l_valid"]): r["perplexity"] for r in rows}
    assert float(table[1][1]) == round(ppl[("alibi_transformer_lm_small", 256)], 2)
    assert float(table[1][2]) == round(ppl[("transformer_lm", 256)], 2)
    assert "| 256 |" in printed and (out / "trade.png").stat().st_size > 0
    # every sinusoidal model at its own length, by tokens per update: the recipe's row (1024 tokens),
    # and the row of twice the tokens, where the variant at 2L and its control at L sit side by side
    assert grid_title.startswith("Sinusoidal models at their own length L, by tokens per update")
    head, _, *body = grid.splitlines()
    assert head == "| tokens per update | L=16 | L=32 | L=256 |"
    at = {(r["label"], r["train_length"]): r["perplexity"] for r in rows if r["model"] == "transformer_lm"}
    cells = {int(line.split("|")[1]): [c.strip() for c in line.split("|")[2:-1]] for line in body}
    assert sorted(cells) == [1024, 2048]
    assert cells[1024][0].startswith(f"{at['Sinusoidal', 16]:.2f}; 64 seq, ") and cells[1024][1] == ""
    assert cells[1024][2].startswith(f"{at['Sinusoidal', 256]:.2f}; 4 seq, ")
    assert cells[2048][0].startswith(f"{at['Sinusoidal at L, 2x tokens', 16]:.2f}; 128 seq, ")
    assert cells[2048][1].startswith(f"{at['Sinusoidal, sequences per update fixed', 32]:.2f}; 64 seq, ")
    assert cells[2048][2] == "" and all(c.endswith(" s") for row in cells.values() for c in row if c)


def test_trade_table_of_several_seeds(tmp_path):
    """trade_table.report: each side's mean ± sample std over its seeds, the ratios of the means,
    the training cost averaged over the runs (resources.jsonl beside each checkpoint); models of
    other batches in the grid by tokens per update."""
    from fairseq_alibi_lab.trade_table import report
    rows = []
    for seed, (alibi, sinusoidal, seconds) in enumerate([(100, 200, 10), (110, 220, 30)], 1):
        for name, model, length, ppl, cost in (("alibi", "alibi_transformer_lm_small", 64, alibi, seconds),
                                               ("sinusoidal", "transformer_lm", 1024, sinusoidal, 4 * seconds)):
            save = tmp_path / f"{name}-s{seed}"
            save.mkdir()
            (save / "resources.jsonl").write_text(json.dumps({"exit": 0, "seconds": cost, "peak_mib": 100 * seed}) + "\n")
            rows.append({"model": model, "train_length": length, "l_valid": 1024, "perplexity": ppl, "stride": 0,
                         "scaling": "none", "checkpoint": str(save / "checkpoint_last.pt"), "split": "valid"})
    text = report(rows, str(tmp_path / "out"))
    line = text.splitlines()[2]
    assert line.startswith("| 1024 | 105.00 ± 7.07 (n=2) | 210.00 ± 14.14 (n=2) | 0.500 | 20, 80 | 4.00x | 150, 150 | 1.00 |")
    assert len(text.splitlines()) == 3  # no variant, no second table
    # sinusoidal models of another batch (the trade's sequences-per-update variant): every sinusoidal
    # model at its own length in a grid by tokens per update (train_flags.json beside each checkpoint)
    for seed, ppl in ((1, 150), (2, 170)):
        save = tmp_path / f"variant-s{seed}"
        save.mkdir()
        (save / "resources.jsonl").write_text(json.dumps({"exit": 0, "seconds": 300, "peak_mib": 100}) + "\n")
        (save / "train_flags.json").write_text(json.dumps({"--max-tokens": "2048", "--update-freq": "4"}))
        rows.append({"model": "transformer_lm", "label": "Sinusoidal, more sequences", "train_length": 256,
                     "l_valid": 256, "perplexity": ppl, "stride": 0, "scaling": "none",
                     "checkpoint": str(save / "checkpoint_last.pt"), "split": "valid"})
    for seed in (1, 2):
        (tmp_path / f"sinusoidal-s{seed}" / "train_flags.json").write_text(json.dumps({"--max-tokens": "2048"}))
    lines = report(rows, str(tmp_path / "out")).splitlines()
    assert lines[2].startswith("| 1024 | 105.00 ± 7.07 (n=2) | 210.00 ± 14.14 (n=2) |") and lines[3] == ""
    assert lines[4].startswith("Sinusoidal models at their own length L, by tokens per update")
    assert lines[6:] == ["| tokens per update | L=256 | L=1024 |", "|---|---|---|",
                         "| 2048 |  | 210.00 ± 14.14 (n=2); 2 seq, 80 s |",
                         "| 8192 | 160.00 ± 14.14 (n=2); 32 seq, 300 s |  |"]
    # With the files beside a checkpoint gone, OUT's training-resources.csv (written by the report
    # above) still knows its run: the same grid. A run known nowhere is left out, and the grid says how many.
    (tmp_path / "variant-s2" / "train_flags.json").unlink()
    assert report(rows, str(tmp_path / "out")).splitlines()[6:] == lines[6:]
    lines = report(rows, str(tmp_path / "elsewhere")).splitlines()
    assert lines[-3:] == ["| 8192 | 150.00; 32 seq, 300 s |  |", "",
                          "(1 of these runs left out: no train_flags.json beside the checkpoint, nor their tokens per "
                          "update in training-resources.csv)"]


def without_options(checkpoint, keys, tmp_path):
    """(old.pt: the checkpoint as if trained before these options, the path convert_checkpoint writes it to)."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    for key in keys:
        del state["cfg"]["model"][key]
    old, upgraded = tmp_path / "old.pt", tmp_path / "upgraded.pt"
    torch.save(state, old)
    return old, upgraded


def test_scaling_needs_an_alibi_checkpoint_that_knows_the_option(toy_checkpoint, wt2_slice, tmp_path):
    """fairseq drops --model-overrides of fields a checkpoint lacks: eval.sh refuses, and
    convert_checkpoint adds them to checkpoints trained before the option existed."""
    old, upgraded = without_options(toy_checkpoint, ("alibi_scaling", "alibi_scaling_factor", "alibi_train_length"),
                                    tmp_path)
    env = dict(os.environ, ALIBI_SCALING="ntk")
    proc = subprocess.run(["scripts/eval.sh", old, wt2_slice, tmp_path / "r.jsonl", "64"], cwd=REPO,
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 1 and "predates ALiBi scaling" in proc.stderr and "convert_checkpoint" in proc.stderr
    run(["python", "-m", "fairseq_alibi.commands.convert_checkpoint", old, upgraded])
    run(["scripts/eval.sh", upgraded, wt2_slice, tmp_path / "r.jsonl", "64"], env=env)
    run(["scripts/eval.sh", toy_checkpoint, wt2_slice, tmp_path / "r.jsonl", "64"], env=env)
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert rows[0]["scaling"] == "ntk" and rows[0]["scaling_factor"] == 2.0
    assert rows[0]["perplexity"] == rows[1]["perplexity"]  # upgraded == trained with the option


def test_a_length_temperature_at_test_time_scores_a_checkpoint_trained_without_one(toy_checkpoint, wt2_slice, tmp_path):
    """eval.sh SCALING="none logn logn_logit" past L: three rows, each its own number (the temperature
    acts); a checkpoint from before the option is refused in one line, and convert_checkpoint adds it."""
    old, upgraded = without_options(toy_checkpoint, ("length_temperature", "length_temperature_form",
                                                     "length_temperature_length"), tmp_path)
    env = dict(os.environ, SCALING="none logn logn_logit")
    proc = subprocess.run(["scripts/eval.sh", old, wt2_slice, tmp_path / "r.jsonl", "128"], cwd=REPO,
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 1 and "predates the length temperature" in proc.stderr.strip().splitlines()[-1]
    run(["python", "-m", "fairseq_alibi.commands.convert_checkpoint", old, upgraded])
    run(["scripts/eval.sh", upgraded, wt2_slice, tmp_path / "r.jsonl", "128"], env=env)
    rows = {r["scaling"]: r["perplexity"] for r in map(json.loads, (tmp_path / "r.jsonl").read_text().splitlines())}
    assert set(rows) == {"none", "logn", "logn_logit"} and len(set(rows.values())) == 3
    assert all(math.isfinite(p) and p > 1 for p in rows.values())


def test_train_script_never_retrains_a_finished_run_nor_takes_over_another(toy_checkpoint, wt2_slice, tmp_path):
    """Rerunning a finished run leaves it as it is (fairseq would train one more update); a save
    directory holding another run (another method or L) is refused unless CONTINUE_RUN=1."""
    save = os.path.dirname(toy_checkpoint)
    files = snapshot(save)
    same = ["scripts/train.sh", "alibi", "32", wt2_slice, save, "small", "--", "--max-update", "30",
            "--max-tokens", "1024", *TOY]
    assert "already trained (30 updates, --max-update 30)" in run(same)
    for other in (["rotary", "32"], ["alibi", "64"]):
        proc = subprocess.run(["scripts/train.sh", *other, *same[3:]], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert "holds another run (alibi_transformer_lm_small at L=32, 30 updates)" in proc.stderr
    # Another recipe for the same run: not resumed into a model of neither recipe, not called finished.
    for changed in ("40", "20"):
        proc = subprocess.run([*same[:8], changed, *same[9:]], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 1 and f"started with other flags (--max-update 30 then, {changed} now; " \
            f"--total-num-update 30 then, {changed} now)" in proc.stderr, proc.stderr
    assert snapshot(save) == files
    proc = subprocess.run(["scripts/train.sh", "alibi", "64", *same[3:]], cwd=REPO, capture_output=True,
                          text=True, env=dict(os.environ, CONTINUE_RUN="1"))
    assert proc.returncode == 0 and "already trained" in proc.stdout  # past the check, still finished


def eval_script(*args, env=None):
    return subprocess.run(["scripts/eval.sh", *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})))


@pytest.mark.parametrize("case", ["swapped", "out_is_checkpoint", "length_abc", "length_0", "length_negative", "length_none",
                                  "stride_negative", "stride_over_0", "factor_abc", "no_such_split", "nan_weights",
                                  "context_window_flag", "unknown_flag", "bad_override_value", "fairseq_failure",
                                  "longer_than_the_split", "out_is_a_directory", "every_stride_longer_than_the_length",
                                  "row_fields_not_an_object", "row_fields_replacing_a_measurement"])
def test_eval_script_bad_input_is_one_line_and_touches_nothing(case, toy_checkpoint, wt2_slice, tmp_path):
    out = tmp_path / "r.jsonl"
    checkpoint = toy_checkpoint
    args, env = [checkpoint, wt2_slice, out, "32"], {}
    if case == "nan_weights":
        state = torch.load(toy_checkpoint, map_location="cpu", weights_only=False)
        state["model"]["decoder.layers.0.fc1.weight"][0, 0] = float("nan")
        checkpoint = tmp_path / "nan.pt"
        torch.save(state, checkpoint)
        args[0] = checkpoint
    before = open(checkpoint, "rb").read()
    if case == "swapped":
        args = [wt2_slice, checkpoint, out, "32"]
    elif case == "out_is_checkpoint":
        args[2] = checkpoint
    elif case.startswith("length"):
        args[3] = {"length_abc": "abc", "length_0": "0", "length_negative": "-5", "length_none": " "}[case]
    elif case.startswith("stride"):
        args.append({"stride_negative": "-1", "stride_over_0": "/0"}[case])
    elif case == "factor_abc":
        env = {"ALIBI_SCALING": "linear", "ALIBI_SCALING_FACTOR": "abc"}
    elif case == "no_such_split":
        env = {"SPLIT": "dev"}
    elif case == "row_fields_not_an_object":
        env = {"ROW_FIELDS": "[1]"}
    elif case == "row_fields_replacing_a_measurement":
        env = {"ROW_FIELDS": '{"perplexity": 1.0, "experiment": "mine"}'}
    elif case == "context_window_flag":  # at least as long as the window: fairseq would crash
        args += ["0", "--", "--context-window", "40"]
    elif case == "unknown_flag":
        args += ["0", "--", "--bogus"]
    elif case == "bad_override_value":  # argparse never sees it: checked when the model is built
        args += ["0", "--", "--model-overrides", "{'alibi_attention': 'bogus'}"]
    elif case == "fairseq_failure":
        args += ["0", "--", "--max-tokens", "1"]
    elif case == "longer_than_the_split":  # the slice's valid split has about 21k tokens
        args[3] = "32 100000"
    elif case == "out_is_a_directory":  # refused before scoring, not after
        args[2] = tmp_path / "d.jsonl"
        args[2].mkdir()
    elif case == "every_stride_longer_than_the_length":  # nothing to score: said, not an empty success
        args += ["64"]
    proc = eval_script(*args, env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), last
    assert open(checkpoint, "rb").read() == before
    assert not out.exists()  # nothing recorded, not even an empty file
    if case == "longer_than_the_split":
        assert "L_valid 100000 is longer than the valid split" in last
    if case == "length_none":  # an empty list of lengths
        assert last.startswith("error: give at least one L_valid")
    if case == "stride_over_0":
        assert last == "error: stride /0: /K slides by L_valid / K, K a positive integer"
    if case == "out_is_a_directory":
        assert "cannot append to" in last and "d.jsonl" in last
    if case == "every_stride_longer_than_the_length":
        assert "nothing to score" in last and "stride 64 > L_valid 32" in last
    if case == "row_fields_not_an_object":
        assert last.startswith("error: ROW_FIELDS must be a JSON object") and last.endswith("got '[1]'")
    if case == "row_fields_replacing_a_measurement":
        assert last == "error: ROW_FIELDS may add fields to the rows, not replace what they measure: drop perplexity"


def score_many(scorings, data):
    """scripts/evaluate.py's score() on (checkpoint, out, lengths, label) tuples, in a process of its own."""
    code = ("import fairseq_alibi_lab.evaluate as e; "
            f"e.score([e.Scoring(c, o, l, label) for c, o, l, label in {[tuple(map(str, s[:2])) + tuple(s[2:]) for s in scorings]!r}], {str(data)!r})")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)


def test_several_checkpoints_in_one_process_score_as_eval_script_does_and_are_all_checked_first(
        toy_checkpoint, sinusoidal_checkpoint, wt2_slice, tmp_path):
    alone = tmp_path / "alone.jsonl"
    assert eval_script(sinusoidal_checkpoint, wt2_slice, alone, "32").returncode == 0
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    proc = score_many([(toy_checkpoint, first, [16, 32], "toy"), (sinusoidal_checkpoint, second, [32], "twin")], wt2_slice)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in first.read_text().splitlines()]
    assert [(r["label"], r["l_valid"]) for r in rows] == [("toy", 16), ("toy", 32)]
    (twin,) = [json.loads(line) for line in second.read_text().splitlines()]
    (reference,) = [json.loads(line) for line in alone.read_text().splitlines()]
    assert twin["label"] == "twin" and twin["perplexity"] == reference["perplexity"]
    # A bad checkpoint anywhere in the list: refused in one line before anything is scored or written.
    bad = tmp_path / "not-a-checkpoint.pt"
    bad.write_text("hello")
    untouched = tmp_path / "untouched.jsonl"
    proc = score_many([(toy_checkpoint, untouched, [16], "toy"), (bad, second, [16], "bad")], wt2_slice)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ") and str(bad) in proc.stderr
    assert not untouched.exists() and len(second.read_text().splitlines()) == 1


def test_eval_script_on_a_full_disk_says_so_and_keeps_the_result_in_its_message(toy_checkpoint, wt2_slice, tmp_path):
    full = tmp_path / "full.jsonl"
    full.symlink_to("/dev/full")  # every write: ENOSPC
    proc = eval_script(toy_checkpoint, wt2_slice, full, "32")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: could not append to {full} (No space left on device)"), last
    row = json.loads(last.split("to keep by hand: ", 1)[1])
    assert row["l_valid"] == 32 and math.isfinite(row["perplexity"])


@pytest.mark.parametrize("case,message", [
    ("length_0", "L: '0' is not a positive integer"),
    ("length_abc", "L: 'abc' is not a positive integer"),
    ("scaling_in_training", "--alibi-scaling is for evaluation"),
    ("fp16_on_cpu", "--fp16 needs a GPU and none was found"),
    ("small_vocabulary", "adaptive cutoffs 2000,10000 need at least 10000 words"),
    ("world_size_without_gpus", "asks for 2 processes, but this machine has no GPU"),
])
def test_train_script_bad_input_is_one_line(case, message, wt2_slice, tmp_path):
    if case == "world_size_without_gpus" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    data, length, flags = wt2_slice, "32", []
    env = dict(os.environ, WORLD_SIZE="2") if case == "world_size_without_gpus" else None
    if case.startswith("length"):
        length = case.split("_")[1]
    elif case == "scaling_in_training":
        flags = ["--alibi-scaling", "ntk"]
    elif case == "fp16_on_cpu":
        flags = ["--fp16"]
    elif case != "world_size_without_gpus":
        data = tmp_path / "tiny"
        data.mkdir()
        (data / "dict.txt").write_text("".join(f"w{i} 1\n" for i in range(500)))
    proc = subprocess.run(["scripts/train.sh", "alibi", length, data, tmp_path / "save", "small", "--", *flags],
                          cwd=REPO, capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert message in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "save").exists()


def test_eval_script_checks_and_merges_model_overrides(toy_checkpoint, wt2_slice, tmp_path):
    out = tmp_path / "r.jsonl"
    typo = eval_script(toy_checkpoint, wt2_slice, out, "32", "--", "--model-overrides", "{'alibi_scalling': 'ntk'}")
    assert typo.returncode == 1 and "Traceback" not in typo.stderr
    assert "did you mean 'alibi_scaling'?" in typo.stderr.strip().splitlines()[-1] and not out.exists()
    # A known key is passed on, merged with the scaling this script sets (a=2 at L_valid 64).
    ok = eval_script(toy_checkpoint, wt2_slice, out, "64", "--", "--model-overrides", "{'alibi_attention': 'sdpa'}",
                     env={"ALIBI_SCALING": "ntk"})
    assert ok.returncode == 0, ok.stderr[-2000:]
    plain = eval_script(toy_checkpoint, wt2_slice, out, "64", env={"ALIBI_SCALING": "ntk"})
    assert plain.returncode == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["scaling_factor"] == 2.0 and rows[0]["perplexity"] == rows[1]["perplexity"]
    # What each row scored: the checkpoint file's and the data's fingerprints, the scoring's own overrides.
    assert {r["checkpoint_sha256"] for r in rows} == {files.fingerprint(toy_checkpoint)}
    assert {r["data_sha256"] for r in rows} == {files.data_fingerprint(wt2_slice, "valid")}
    assert [r["model_overrides"] for r in rows] == ["{'alibi_attention': 'sdpa'}", None]
    # Two scorings, not a rerun: unlabelled they are two table rows; under one label, refused.
    assert {k[2] for k in results.keyed(rows)} == {"ALiBi + NTK", "ALiBi {'alibi_attention': 'sdpa'} + NTK"}
    with pytest.raises(SystemExit, match="scored with other --model-overrides .* give each scoring its own LABEL"):
        results.keyed([dict(r, label="ALiBi") for r in rows])


def test_results_script_names_a_truncated_line(toy_checkpoint, wt2_slice, tmp_path):
    out = tmp_path / "r.jsonl"
    run(["scripts/eval.sh", toy_checkpoint, wt2_slice, out, "32"])
    with open(out, "a") as f:
        f.write('{"checkpoint": "x", "mod')  # what an interrupted append leaves
    proc = subprocess.run(["python", "scripts/results.py", out, "--out", tmp_path / "t"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"error: {out} line 2 is not a JSON line (left by an interrupted run, or " \
        "not a results file?): delete that line and rerun"


def readme_block(marker):
    """The first ```python block of README.md after the line containing `marker`."""
    text = open(os.path.join(REPO, "README.md")).read()
    after = text[text.index(marker):]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_hub_example_runs_from_another_directory(toy_checkpoint, wt2_slice, tmp_path):
    """The README's Python example (load, score raw text, sample and greedy generation past L),
    with its paths pointed at the toy model, run outside the repository."""
    code = readme_block("Load a trained model from Python")
    code = code.replace('"checkpoints/main/alibi-L64-s1"', repr(os.path.dirname(toy_checkpoint)))
    code = code.replace('"data-bin/wikitext-2"', repr(wt2_slice))  # absolute: os.path.join keeps them
    (tmp_path / "example.py").write_text(code)
    printed = run(["python", tmp_path / "example.py"], cwd=tmp_path)
    assert "perplexity of the sentence:" in printed and "continuation:" in printed
    tokens = int(re.search(r"generated (\d+) tokens", printed).group(1))
    promised = int(re.search(r"a greedy one of (\d+) tokens", open(os.path.join(REPO, "README.md")).read()).group(1))
    assert tokens == promised  # past the toy's training length L=32, as the README's past 64


def test_plugin_tools_work_from_any_directory(toy_checkpoint, wt2_slice, tmp_path):
    log = run(["fairseq-alibi-eval-lm", wt2_slice, "--path", toy_checkpoint, "--tokens-per-sample", "64",
               "--num-workers", "0"], cwd=tmp_path)
    assert "Perplexity: " in log
    assert "Please install tensorboardX" not in log  # fairseq's speech tasks ask at every start without it
    # Stock fairseq with the README's relative --user-dir works from the repository root only.
    proc = subprocess.run(["fairseq-eval-lm", wt2_slice, "--user-dir", "fairseq_alibi", "--path", toy_checkpoint],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode != 0


def test_training_writes_tensorboard_logs(toy_checkpoint):
    events = os.listdir(os.path.join(os.path.dirname(toy_checkpoint), "tensorboard", "train"))
    assert any(name.startswith("events.out.tfevents") for name in events)


def test_experiment_runner_stopped_by_sigterm_leaves_no_trainer_running(wt2_slice, tmp_path):
    """SIGTERM to scripts/experiment.py stops the training it started too (train.sh's process, which
    runs fairseq-train: an orphan would go on writing checkpoint_last.pt under a rerun's feet)."""
    save = tmp_path / "checkpoints" / "alibi-L16-s1"
    proc = subprocess.Popen(
        ["python", "scripts/experiment.py", "comparison", "--data", wt2_slice, "--train-length", "16",
         "--updates", "100000", "--lengths", "16", "--seeds", "1", "--models", "alibi", "--out", tmp_path / "out",
         "--checkpoints", tmp_path / "checkpoints", "--train-flags", " ".join(["--max-tokens", "1024", *TOY])],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(600):  # until fairseq-train has started logging
        if (save / "train.log").exists() and "num_updates" in (save / "train.log").read_text():
            break
        time.sleep(0.2)
    trainer = ["pgrep", "-f", f"fairseq_alibi_lab.train alibi 16 .* {save} "]  # its command line: METHOD L DATA SAVE_DIR
    assert subprocess.run(trainer, capture_output=True, text=True).stdout.split(), "the training did not start"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "stopped: run the same command again" in err
    invocations = [json.loads(line) for line in (tmp_path / "out" / "runs.jsonl").read_text().splitlines()]
    assert [i["event"] for i in invocations] == ["started", "stopped"] and invocations[1]["wall_s"] > 0
    time.sleep(1)
    assert not subprocess.run(trainer, capture_output=True, text=True).stdout.split()


def swapped_dictionary(wt2_slice, tmp_path):
    """A copy of the slice's data whose dict.txt has the same words, two of them swapped (lines 11, 12)."""
    import shutil

    other = tmp_path / "other"
    shutil.copytree(wt2_slice, other)
    lines = (other / "dict.txt").read_text().splitlines(keepends=True)
    lines[10], lines[11] = lines[11], lines[10]
    (other / "dict.txt").write_text("".join(lines))
    return other


def refused_wherever_copied(checkpoint, other, tmp_path):
    """The checkpoint copied alone, or beside OTHER's dict.txt, is refused by eval.sh on OTHER's data."""
    import shutil

    for where in (tmp_path / "alone", other):
        where.mkdir(exist_ok=True)
        shutil.copy(checkpoint, where / "copied.pt")
        proc = eval_script(where / "copied.pt", other, tmp_path / "copied.jsonl", "32")
        assert proc.returncode == 1 and not (tmp_path / "copied.jsonl").exists()
        assert "was trained on another dictionary" in proc.stderr.strip().splitlines()[-1], proc.stderr[-1000:]


def test_another_dictionary_of_the_same_size_is_refused_by_every_reader(toy_checkpoint, wt2_slice, tmp_path):
    """Data whose dict.txt has the same number of words, two of them swapped: eval.sh, a fine-tune
    from the checkpoint (train.sh) and distillation from it refuse in one line, touching nothing."""
    other = swapped_dictionary(wt2_slice, tmp_path)
    assert (other / "dict.txt").stat().st_size == (Path(wt2_slice) / "dict.txt").stat().st_size
    out = tmp_path / "r.jsonl"
    proc = eval_script(toy_checkpoint, other, out, "32")
    assert proc.returncode == 1 and not out.exists()
    assert "was trained on another dictionary" in proc.stderr.strip().splitlines()[-1] and "line 11" in proc.stderr
    for extra in (["--finetune-from-model", toy_checkpoint],
                  ["--criterion", "lm_distillation", "--teacher-path", toy_checkpoint, "--max-update", "1"]):
        save = tmp_path / f"save-{len(extra)}"
        proc = subprocess.run(["scripts/train.sh", "alibi", "32", other, save, "small", "--", "--max-tokens", "1024",
                               *TOY, *map(str, extra)], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 1 and "was trained on another dictionary" in proc.stderr, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr and not (save / "checkpoint_last.pt").exists()
    assert eval_script(toy_checkpoint, wt2_slice, out, "32").returncode == 0  # its own data: scored
    # The dictionary is recorded inside the checkpoint too: copied alone, or beside the other
    # data's dict.txt, it is still refused.
    assert torch.load(toy_checkpoint, weights_only=False)["cfg"]["model"]["dictionary_sha256"] == \
        dictionaries.dictionary_fingerprint(wt2_slice)
    refused_wherever_copied(toy_checkpoint, other, tmp_path)


def test_a_stock_twin_records_its_dictionary_inside_its_checkpoint(sinusoidal_checkpoint, wt2_slice, tmp_path):
    """A stock model's config has no field for the dictionary: train.sh writes it as a top-level entry
    of every checkpoint when the training ends, which fairseq loads past and every reader checks
    (copied alone, or beside another corpus's dict.txt of the same size: refused); recording again
    changes nothing, and a checkpoint recording another dictionary is never rewritten."""
    import shutil

    state = torch.load(sinusoidal_checkpoint, weights_only=False)
    assert "dictionary_sha256" not in state["cfg"]["model"]
    assert state["dictionary_sha256"] == dictionaries.dictionary_fingerprint(wt2_slice)
    other = swapped_dictionary(wt2_slice, tmp_path)
    refused_wherever_copied(sinusoidal_checkpoint, other, tmp_path)
    save = tmp_path / "save"
    save.mkdir()
    shutil.copy(sinusoidal_checkpoint, save / "checkpoint_last.pt")
    before = (save / "checkpoint_last.pt").read_bytes()
    assert dictionaries.record(str(save), wt2_slice) is None and (save / "checkpoint_last.pt").read_bytes() == before
    assert "was trained on another dictionary" in dictionaries.record(str(save), str(other))
    assert (save / "checkpoint_last.pt").read_bytes() == before
    del state["dictionary_sha256"]  # one from before it was recorded: recorded now, the rest as it was
    torch.save(state, save / "checkpoint_last.pt")
    assert dictionaries.record(str(save), wt2_slice) is None
    again = torch.load(save / "checkpoint_last.pt", weights_only=False)
    assert again["dictionary_sha256"] == dictionaries.dictionary_fingerprint(wt2_slice)
    assert again["model"].keys() == state["model"].keys()
    assert all(bit_identical(again["model"][name], weight) for name, weight in state["model"].items())


def test_an_evaluation_batch_runs_a_bounded_number_of_positions_at_every_stride():
    """fairseq-eval-lm's --max-tokens counts a block's new tokens only: the batch is sized so that
    it runs 16,384 positions in blocks and 32,768 with a sliding window, at stride L/2 as at stride 1
    (at stride 1, 16,384 new tokens were 16,384 blocks of L positions: 140 GB at L=64)."""
    from fairseq_alibi_lab.evaluate import batch_tokens

    assert batch_tokens(64, 0) == batch_tokens(64, 32) == 16384  # the batches every committed score used
    assert batch_tokens(64, 63) == 512 and batch_tokens(32768, 0) == 32768
    for l_valid in (16, 64, 100, 1024, 16384):
        for context in (0, l_valid // 2, l_valid - 1):
            new = l_valid - context
            blocks = batch_tokens(l_valid, context) // new
            assert blocks >= 1 and blocks * l_valid <= max(32768, l_valid)
