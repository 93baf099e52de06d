"""Giving a stock (learned or sinusoidal position) LM ALiBi: the conversion, and the distillation
criterion that fine-tunes the converted model against the original."""
import hashlib
import json
import math
import os
import re
import subprocess
import sys

import pytest
import torch

from conftest import REPO, TOY, bit_identical, run
from fairseq_alibi.distillation import cross_entropy_terms, distillation_terms


# --- the math, against the definition written out per token (fp64) ---------------------------

def hand_distillation(student, teacher, keep, temperature):
    """sum over kept tokens of T^2 sum_v p_t(v) (log p_t(v) - log p_s(v)), p = softmax(log p / T)."""
    total = 0.0
    for b in range(student.size(0)):
        for t in range(student.size(1)):
            if not keep[b, t]:
                continue
            p_s = [math.exp(x / temperature) for x in student[b, t].tolist()]
            p_t = [math.exp(x / temperature) for x in teacher[b, t].tolist()]
            z_s, z_t = sum(p_s), sum(p_t)
            total += temperature**2 * sum(
                (pt / z_t) * (math.log(pt / z_t) - math.log(ps / z_s)) for ps, pt in zip(p_s, p_t))
    return total


@pytest.mark.parametrize("temperature", [1.0, 2.0, 0.5])
def test_distillation_term_matches_the_definition_on_a_padded_batch(temperature):
    g = torch.Generator().manual_seed(0)
    student = torch.randn(2, 5, 7, generator=g, dtype=torch.float64).log_softmax(-1)
    teacher = torch.randn(2, 5, 7, generator=g, dtype=torch.float64).log_softmax(-1)
    keep = torch.tensor([[True] * 5, [True, True, True, False, False]])  # row 2 right-padded
    got = distillation_terms(student, teacher, keep, temperature)
    assert (got[1, 3:] == 0).all()
    assert got.sum().item() == pytest.approx(hand_distillation(student, teacher, keep, temperature), rel=1e-9)


def test_distillation_term_is_zero_when_teacher_equals_student():
    log_probs = torch.randn(3, 4, 11, dtype=torch.float64).log_softmax(-1)
    keep = torch.ones(3, 4, dtype=torch.bool)
    assert distillation_terms(log_probs, log_probs.clone(), keep, 2.0).abs().max() < 1e-12


def test_cross_entropy_terms_are_the_negative_target_log_probs():
    log_probs = torch.randn(2, 3, 5, dtype=torch.float64).log_softmax(-1)
    target = torch.tensor([[1, 4, 0], [2, 2, 3]])
    keep = torch.tensor([[True, True, True], [True, False, True]])
    got = cross_entropy_terms(log_probs, target, keep)
    for b in range(2):
        for t in range(3):
            assert got[b, t] == (-log_probs[b, t, target[b, t]] if keep[b, t] else 0)


# --- conversion ---------------------------------------------------------------------------------


def load(path):
    from fairseq import checkpoint_utils
    import fairseq_alibi.plugin  # noqa: F401  (the plugin's models)

    models, _ = checkpoint_utils.load_model_ensemble([str(path)])
    return models[0].eval()


def convert(source, target, *flags):
    return subprocess.run(["python", "-m", "fairseq_alibi.commands.convert_checkpoint", *flags, str(source), str(target)],
                          cwd=REPO, capture_output=True, text=True)


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(params=["sinusoidal", "learned"])
def stock(request):
    return request.getfixturevalue(f"{request.param}_checkpoint"), request.param


@pytest.mark.slow
def test_conversion_needs_the_flag_and_then_keeps_every_other_weight(stock, tmp_path):
    source, positions = stock
    before = digest(source)
    refused = convert(source, tmp_path / "out.pt")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "--replace-positions" in refused.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "out.pt").exists()

    done = convert(source, tmp_path / "alibi.pt", "--replace-positions")
    assert done.returncode == 0, done.stderr
    assert digest(source) == before  # the source is read, never written
    original = torch.load(source, map_location="cpu", weights_only=False)
    converted = torch.load(tmp_path / "alibi.pt", map_location="cpu", weights_only=False)
    position_keys = {k for k in original["model"] if k.startswith("decoder.embed_positions.")}
    if positions == "learned":
        assert position_keys == {"decoder.embed_positions.weight"}
    else:  # fairseq 0.12 no longer saves the sinusoid's dtype marker; the fork's checkpoints have it
        assert position_keys <= {"decoder.embed_positions._float_tensor"}
    assert set(converted["model"]) == set(original["model"]) - position_keys
    for key, weight in converted["model"].items():
        assert bit_identical(weight, original["model"][key]), key
    assert converted["cfg"]["model"]["_name"] == "alibi_transformer_lm"
    provenance = converted["fairseq_alibi_conversion"]
    assert provenance["source"] == str(source) and provenance["source_positions"] == positions
    assert provenance["dropped_weights"] == sorted(position_keys)


@pytest.mark.slow
def test_converted_model_with_zero_slopes_is_the_stock_model_without_positions(stock, tmp_path):
    source, _ = stock
    assert convert(source, tmp_path / "alibi.pt", "--replace-positions").returncode == 0
    alibi, original = load(tmp_path / "alibi.pt"), load(source)
    alibi.decoder.positions.slopes.zero_()
    original.decoder.embed_positions = None  # what is left of the stock model without positions
    tokens = torch.randint(4, 1000, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = alibi.get_normalized_probs(alibi(tokens), log_probs=True)
        expected = original.get_normalized_probs(original(tokens), log_probs=True)
        with_slopes = load(tmp_path / "alibi.pt")
        biased = with_slopes.get_normalized_probs(with_slopes(tokens), log_probs=True)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert (biased - expected).abs().max() > 1e-2  # the slopes do change the model


@pytest.mark.slow
def test_conversion_is_idempotent_and_never_overwrites(sinusoidal_checkpoint, tmp_path):
    once, twice = tmp_path / "once.pt", tmp_path / "twice.pt"
    assert convert(sinusoidal_checkpoint, once, "--replace-positions").returncode == 0
    done = convert(once, twice, "--replace-positions")
    assert done.returncode == 0 and "already an ALiBi checkpoint" in done.stderr
    a = torch.load(once, map_location="cpu", weights_only=False)
    b = torch.load(twice, map_location="cpu", weights_only=False)
    assert a["cfg"] == b["cfg"] and a["fairseq_alibi_conversion"] == b["fairseq_alibi_conversion"]
    assert a["model"].keys() == b["model"].keys() and all(bit_identical(a["model"][k], b["model"][k]) for k in a["model"])

    before = digest(once)
    link = tmp_path / "same-file.pt"
    os.symlink(once, link)
    for target in (once, link, twice):  # the source under another name, an existing file
        refused = convert(once, target, "--replace-positions")
        assert refused.returncode == 1 and "exists" in refused.stderr and "Traceback" not in refused.stderr
    assert digest(once) == before

    (tmp_path / "junk.pt").write_text("not a checkpoint")
    refused = convert(tmp_path / "junk.pt", tmp_path / "x.pt")
    assert refused.returncode == 1 and "not a readable checkpoint" in refused.stderr
    assert "Traceback" not in refused.stderr


# --- the criterion ------------------------------------------------------------------------------

def lm_task(checkpoint, data, tokens_per_sample=32):
    from fairseq import checkpoint_utils, tasks
    import fairseq_alibi.plugin  # noqa: F401  (the plugin's models)

    cfg = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))["cfg"]
    cfg.task.data = data
    cfg.task.tokens_per_sample = tokens_per_sample
    return tasks.setup_task(cfg.task)


def padded_sample(pad, seed=0):
    """Two rows of 12 tokens, the second right-padded after 7 (inputs and targets)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(4, 2000, (2, 13), generator=g)
    tokens[1, 8:] = pad
    source, target = tokens[:, :-1].clone(), tokens[:, 1:].clone()
    return {"net_input": {"src_tokens": source, "src_lengths": torch.tensor([12, 8])},
            "target": target, "ntokens": int(target.ne(pad).sum())}


def criterion(task, teacher, weight=0.5, temperature=2.0):
    from fairseq_alibi.models.distillation_criterion import LMDistillationCriterion

    return LMDistillationCriterion(task, str(teacher), weight, temperature, sentence_avg=False)


@pytest.fixture(scope="module")
def converted_checkpoint(sinusoidal_checkpoint, tmp_path_factory):
    path = tmp_path_factory.mktemp("converted") / "alibi.pt"
    assert convert(sinusoidal_checkpoint, path, "--replace-positions").returncode == 0
    return path


@pytest.mark.slow
def test_full_log_probs_equal_fairseqs_adaptive_softmax(converted_checkpoint):
    from fairseq_alibi.models.distillation_criterion import full_log_probs

    model = load(converted_checkpoint)
    assert model.decoder.adaptive_softmax is not None
    tokens = torch.randint(4, 2000, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        net_output = model(tokens)
        expected = model.get_normalized_probs(net_output, log_probs=True)  # fairseq's, in place
        got = full_log_probs(model, net_output)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_weight_zero_is_plain_cross_entropy_with_adaptive_softmax(converted_checkpoint, sinusoidal_checkpoint, wt2_slice):
    from fairseq.criterions.adaptive_loss import AdaptiveLoss

    task = lm_task(converted_checkpoint, wt2_slice)
    sample = padded_sample(task.source_dictionary.pad())
    grads = []
    for crit in (criterion(task, sinusoidal_checkpoint, weight=0.0), AdaptiveLoss(task, sentence_avg=False)):
        student = load(converted_checkpoint)
        student.train()
        torch.manual_seed(0)
        student.decoder.dropout_module.p = 0.0  # so both passes see the same network
        loss, sample_size, log = crit(student, sample)
        loss.backward()
        # No gradient (None) where the stock loss skips a tail cluster no target falls in: zero.
        grads.append((loss.detach(), sample_size, {n: p.grad if p.grad is not None else torch.zeros_like(p)
                                                   for n, p in student.named_parameters()}))
    (ours, n_ours, g_ours), (stock, n_stock, g_stock) = grads
    assert n_ours == n_stock == 19  # 12 + 7 real targets
    assert ours.item() == pytest.approx(stock.item(), rel=1e-5)
    assert sum(g.abs().sum() > 0 for g in g_stock.values()) > 10
    for name in g_ours:
        torch.testing.assert_close(g_ours[name], g_stock[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.slow
def test_distillation_term_against_the_two_models_by_hand(converted_checkpoint, sinusoidal_checkpoint, wt2_slice):
    task = lm_task(converted_checkpoint, wt2_slice)
    pad = task.source_dictionary.pad()
    sample = padded_sample(pad, seed=1)
    student = load(converted_checkpoint)
    crit = criterion(task, sinusoidal_checkpoint, weight=0.5, temperature=2.0)
    with torch.no_grad():
        loss, sample_size, log = crit(student, sample)
    # By hand: each model's full-vocabulary distribution, which must be a distribution...
    teacher = load(sinusoidal_checkpoint)
    with torch.no_grad():
        s = student.get_normalized_probs(student(**sample["net_input"]), log_probs=True).double()
        t = teacher.get_normalized_probs(teacher(**sample["net_input"]), log_probs=True).double()
    torch.testing.assert_close(s.logsumexp(-1), torch.zeros(2, 12, dtype=torch.float64), atol=1e-4, rtol=0)
    keep = sample["target"].ne(pad)
    # ... then the definition per token, padding skipped, and the mix.
    distill = hand_distillation(s, t, keep, 2.0)
    nll = -sum(s[b, i, sample["target"][b, i]].item() for b in range(2) for i in range(12) if keep[b, i])
    assert log["distill_loss"].item() == pytest.approx(distill, rel=1e-4)
    assert log["nll_loss"].item() == pytest.approx(nll, rel=1e-5)
    assert loss.item() == pytest.approx(0.5 * nll + 0.5 * distill, rel=1e-4)
    assert sample_size == log["ntokens"] == 19


@pytest.mark.slow
def test_blocks_of_tokens_give_what_the_whole_batch_gives(converted_checkpoint, sinusoidal_checkpoint, wt2_slice):
    """The criterion works through blocks of tokens (304 at this slice's 13.8k words); 2 x 500
    tokens, four blocks, against both models' full distributions computed at once, in fp64."""
    task = lm_task(converted_checkpoint, wt2_slice, tokens_per_sample=32)
    pad = task.source_dictionary.pad()
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(4, 2000, (2, 501), generator=g)
    tokens[1, 400:] = pad
    sample = {"net_input": {"src_tokens": tokens[:, :-1]}, "target": tokens[:, 1:], "ntokens": 899}
    student, teacher = load(converted_checkpoint), load(sinusoidal_checkpoint)
    teacher.decoder.embed_positions.max_positions = 1000  # past its length: only to get many tokens
    crit = criterion(task, sinusoidal_checkpoint, weight=0.3, temperature=1.5)
    crit.teacher.decoder.embed_positions.max_positions = 1000
    with torch.no_grad():
        loss, _, log = crit(student, sample)
        s = student.get_normalized_probs(student(tokens[:, :-1]), log_probs=True).double()
        t = teacher.get_normalized_probs(teacher(tokens[:, :-1]), log_probs=True).double()
    keep = sample["target"].ne(pad)
    assert 2**22 // len(task.target_dictionary) < 500  # several blocks indeed
    assert log["nll_loss"].item() == pytest.approx(cross_entropy_terms(s, sample["target"], keep).sum().item(), rel=1e-5)
    assert log["distill_loss"].item() == pytest.approx(distillation_terms(s, t, keep, 1.5).sum().item(), rel=1e-4)


@pytest.mark.slow
def test_teacher_is_no_parameter_and_follows_the_student(sinusoidal_checkpoint, converted_checkpoint, wt2_slice):
    task = lm_task(converted_checkpoint, wt2_slice)
    crit = criterion(task, sinusoidal_checkpoint)
    assert list(crit.parameters()) == [] and crit.state_dict() == {}
    crit.train()  # what the trainer does every step: must not reach the teacher
    assert not crit.teacher.training and not any(p.requires_grad for p in crit.teacher.parameters())
    # teacher = student: no distillation term, however the two are loaded
    same = load(sinusoidal_checkpoint).double()
    sample = padded_sample(task.source_dictionary.pad())
    loss, _, log = crit(same, sample)
    assert next(crit.teacher.parameters()).dtype == torch.float64  # followed the student's dtype
    assert abs(log["distill_loss"].item()) < 1e-9
    loss.backward()
    assert all(p.grad is None for p in crit.teacher.parameters())


@pytest.mark.slow
@pytest.mark.parametrize("flags,message", [
    (["--distill-weight", "1.5"], "--distill-weight must lie in [0, 1]"),
    (["--distill-temperature", "0"], "--distill-temperature must be positive"),
    (["--teacher-path", "/nonexistent.pt"], "is not a file"),
    (["--tokens-per-sample", "64"], "distil at --tokens-per-sample <= 32"),
])
def test_bad_distillation_settings_are_one_line(flags, message, sinusoidal_checkpoint, converted_checkpoint,
                                                wt2_slice, tmp_path):
    proc = subprocess.run(
        ["scripts/train.sh", "alibi", "32", wt2_slice, tmp_path, "small", "--", "--max-update", "1",
         "--criterion", "lm_distillation", "--teacher-path", str(sinusoidal_checkpoint), *TOY, *flags],
        cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert message in proc.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_distillation_training_saves_no_teacher_and_resumes(sinusoidal_checkpoint, converted_checkpoint, wt2_slice,
                                                            tmp_path):
    def train(updates, **env):
        return run(["scripts/train.sh", "alibi", "32", wt2_slice, tmp_path, "small", "--",
                    "--finetune-from-model", str(converted_checkpoint), "--max-update", str(updates),
                    "--max-tokens", "1024", "--criterion", "lm_distillation",
                    "--teacher-path", str(sinusoidal_checkpoint), *TOY, "--save-interval-updates", "4"],
                   env=dict(os.environ, **env))

    log = train(4)
    assert re.search(r"distill_loss [\d.]+", log) and re.search(r"valid .*nll_loss [\d.]+ .*ppl [\d.]+", log)
    state = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    student_keys = set(torch.load(converted_checkpoint, map_location="cpu", weights_only=False)["model"])
    assert set(state["model"]) == student_keys  # the student's weights, nothing of the teacher's
    assert state.get("criterion") is None
    assert state["optimizer_history"][-1]["num_updates"] == 4  # counted from the conversion

    # More updates are another recipe (train.sh refuses it) unless told to continue; it resumes from
    # checkpoint_last.pt, not from the converted model again.
    log = train(8, CONTINUE_RUN="1")
    assert re.search(r"Loaded checkpoint \S+checkpoint_last.pt \(epoch \d+ @ 4 updates\)", log)
    state = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 8


def test_recovery_curve_scores_the_from_scratch_run_sparsely_before_the_fine_tuning_window(tmp_path):
    from fairseq_alibi_lab.experiments.conversion.recovery import kept_checkpoints
    for updates in range(10, 170, 10):  # a from-scratch run of 160 updates, one kept every 10; the teacher's 120
        (tmp_path / f"checkpoint_{updates // 50 + 1}_{updates}.pt").touch()
    (tmp_path / "checkpoint_last.pt").touch()
    scored = lambda **kw: [int(p.rsplit("_", 1)[1][:-3]) for p in kept_checkpoints(str(tmp_path), 120, 10, **kw)]  # noqa: E731
    assert scored(scratch=True) == [40, 80, 120, 130, 140, 150, 160]  # every 4th before 120, then each
    assert scored() == list(range(10, 170, 10))  # a fine-tune: every kept checkpoint, in update order


@pytest.mark.slow
def test_the_conversion_experiment_runs_through_the_runner_at_toy_size(wt2_slice, tmp_path):
    """scripts/experiment.py conversion at toy size (L=16, scored at 2L, both strides, one seed: the
    runner's seeds and reruns are tested in test_pipeline.py): a teacher of 10 updates (trained here,
    which the runner finds finished), converted by the runner; the fine-tunes, the teacher continued
    (10 updates) and ALiBi from scratch (10 + 10, and its checkpoint kept at 10, one run); the
    recovery curve and the continuations."""
    checkpoints, out = tmp_path / "checkpoints", tmp_path / "out"
    toy = ["--max-tokens", "1024", *TOY, "--disable-validation"]
    run(["scripts/train.sh", "sinusoidal", "16", wt2_slice, str(checkpoints / "sinusoidal-L16"), "small", "--",
         "--max-update", "10", *toy])
    command = [sys.executable, "scripts/experiment.py", "conversion", "--data", wt2_slice, "--train-length", "16",
               "--updates", "10", "--lengths", "32", "--seeds", "1", "--checkpoints", str(checkpoints),
               "--out", str(out), "--train-flags", " ".join([*toy, "--save-interval-updates", "10"])]
    printed = run(command)
    assert "training the sinusoidal teacher" not in printed and "done training" in printed
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    labels = ["Sinusoidal teacher (1400)", "Converted, not fine-tuned", "Converted + 200 CE", "Converted + 200 distill",
              "Sinusoidal teacher continued (+ 200)", "ALiBi from scratch (1400)", "ALiBi from scratch (1600)"]
    assert sorted((r["label"], r["stride_rule"]) for r in rows) == sorted(
        (label, rule) for label in [*labels, "Unigram (add-one)"] for rule in ("0", "L_valid/2"))
    assert all(math.isfinite(r["perplexity"]) and r["l_valid"] == 32 for r in rows)
    ppl = {r["label"]: r for r in rows if r["stride_rule"] == "0"}
    continued = ppl["Sinusoidal teacher continued (+ 200)"]
    assert continued["model"] == "transformer_lm" and continued["updates"] == 10
    assert continued["perplexity"] != ppl["Sinusoidal teacher (1400)"]["perplexity"]  # it trained
    assert ppl["Converted, not fine-tuned"]["updates"] == 10  # the teacher's, kept by the conversion
    scratch, kept = ppl["ALiBi from scratch (1600)"], ppl["ALiBi from scratch (1400)"]
    assert (scratch["updates"], kept["updates"]) == (20, 10) and kept["checkpoint"].endswith("_10.pt")
    assert os.path.dirname(kept["checkpoint"]) == os.path.dirname(scratch["checkpoint"])  # one run
    trained = json.loads((checkpoints / "finetune-distill-L16-s1" / "train_flags.json").read_text())
    assert trained["--teacher-path"] == str(checkpoints / "sinusoidal-L16" / "checkpoint_last.pt")
    assert trained["--finetune-from-model"] == str(checkpoints / "converted-L16.pt")
    recovery = [json.loads(line) for line in (out / "recovery.jsonl").read_text().splitlines()]
    assert sorted((r["label"], r["updates"]) for r in recovery) == sorted(
        [*((name, 10) for name in ("ce", "continued", "distill", "scratch")), ("scratch", 20), ("teacher", 10),
         ("converted", 10)])
    table = (out / "recovery.md").read_text()
    assert "| 0 |" in table and re.search(r"\| 10 \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \|", table)
    generation = (out / "generation.md").read_text()
    assert generation.count("**") == 10 and "Prompt (8 tokens)" in generation
    # Past L for every ALiBi model; the teacher stops at its 16 positions (8 of the prompt, 7 new, 1 end).
    assert generation.count(", 16 tokens):") == 4 and "(transformer_lm, 7 tokens (stopped at its 16 positions))" in generation
    for name in ("recovery.png", "figure_valid_stride0.png", "table_valid_stride0.md"):
        assert (out / name).stat().st_size > 0


def test_gpt2_schedules_rule_picks_the_highest_peak_that_does_not_set_the_gpt2_back():
    """gpt2-schedule's declared rule, on rows: the highest no-warm-up peak whose continued GPT-2 is no
    worse than the imported one at L (nonoverlapping), else the lowest; rows at other lengths, strides
    or splits do not count; missing rows are one line naming the run."""
    from fairseq_alibi_lab.experiments.conversion.gpt2 import IMPORTED
    from fairseq_alibi_lab.experiments.conversion.schedule import PEAKS, chosen_peak, continued

    def row(label, perplexity, **other):
        return dict({"label": label, "checkpoint": f"{label}.pt", "split": "valid", "stride": 0, "l_valid": 64,
                     "train_length": 64, "perplexity": perplexity}, **other)

    def rows(imported, *peaks):
        return [row(IMPORTED, imported), *(row(continued(p), x) for p, x in zip(PEAKS, peaks)),
                row(continued(PEAKS[0]), 1.0, stride=32), row(continued(PEAKS[0]), 1.0, l_valid=1024)]

    assert chosen_peak(rows(200.0, 210.0, 199.0, 198.0)) == PEAKS[1]  # the highest that is no worse
    assert chosen_peak(rows(200.0, 200.0, 190.0, 180.0)) == PEAKS[0]  # equal counts as no worse
    assert chosen_peak(rows(200.0, 230.0, 220.0, 201.0)) == PEAKS[-1]  # none: the lowest
    with pytest.raises(SystemExit, match="gpt2-schedule"):
        chosen_peak(rows(200.0, 210.0))


def test_gpt2_alibi_2_fine_tunes_with_the_peak_gpt2_schedules_committed_rows_chose():
    """The declared schedule of gpt2-alibi-2 is the rule's answer on gpt2-schedule's committed rows, and
    every fine-tune of gpt2-alibi-2 takes it (no warm-up, that peak)."""
    from fairseq_alibi_lab.experiments import EXPERIMENTS
    from fairseq_alibi_lab.experiments.conversion.schedule import PEAK, chosen_peak
    from fairseq_alibi_lab.result_rows import read_rows

    rows = read_rows(os.path.join(REPO, "examples", "wikitext2", "results", "gpt2-schedule", "results.jsonl"))
    assert chosen_peak(rows) == PEAK
    tuned = [m for m in EXPERIMENTS["gpt2-alibi-2"].models if m.start and m.method]
    assert len(tuned) == 3 and all(" ".join(m.flags).startswith(f"--lr {PEAK} --warmup-updates 0") for m in tuned)


def test_the_deconfounded_experiments_wall_time_table_takes_each_trainings_longest_call(tmp_path):
    """wall_time against the files by hand: per model, the longest successful measured call of each
    seed's training, mean ± std over seeds; untrained rows (updates 0) and unmeasured runs left out;
    the measurements kept in training-resources.csv, so the table rebuilds once the checkpoints are gone."""
    import shutil

    from fairseq_alibi_lab.experiments.conversion.wall_time import wall_time

    rows = [{"label": "GPT-2 (imported)", "checkpoint": str(tmp_path / "ck" / "imported-s1" / "checkpoint.pt"), "updates": 0}]
    for seed, calls in ((1, (100.0, 5.0)), (2, (140.0,))):
        save = tmp_path / "ck" / f"ce-s{seed}"
        save.mkdir(parents=True)
        (save / "resources.jsonl").write_text("".join(json.dumps({"exit": 0, "seconds": c, "peak_mib": 300.0}) + "\n" for c in calls))
        rows.append({"label": "CE", "checkpoint": str(save / "checkpoint_last.pt"), "updates": 200, "machine": "cpu"})
    save = tmp_path / "ck" / "kd-s1"
    save.mkdir(parents=True)
    (save / "resources.jsonl").write_text(json.dumps({"exit": 0, "seconds": 90.0, "peak_mib": 300.0}) + "\n")
    rows.append({"label": "KD", "checkpoint": str(save / "checkpoint_last.pt"), "updates": 200, "machine": "cpu"})
    out = tmp_path / "out"
    table = wall_time(rows, str(out))
    assert "| CE | 200 | 120 ± 28 | 2 | cpu |" in table and "imported" not in table
    assert "| KD | 200 | 90 | 1 | cpu |" in table  # one run: no spread shown
    shutil.rmtree(tmp_path / "ck")
    assert wall_time(rows, str(out)) == table
