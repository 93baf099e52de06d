"""Perplexity by position in the window (fairseq_alibi_lab/by_position.py): the blocks at every offset
against each token's window computed alone, for a relative and an absolute method."""
import json
import math
import subprocess
import sys

import pytest
import torch

from conftest import REPO, TINY, build_model, run
from fairseq_alibi_lab.by_position import loss_by_position


def naive(model, inputs, targets, length):
    """Each kept token t, at each position p, from the window inputs[t - p .. t - p + length) alone."""
    n = len(targets)
    losses = torch.zeros(length, dtype=torch.float64)
    kept = range(length - 1, n - length + 1)
    with torch.no_grad():
        for p in range(length):
            for t in kept:
                out = model(inputs[None, t - p:t - p + length])
                logp = model.get_normalized_probs(out, log_probs=True)[0, p]
                losses[p] -= logp[targets[t]].item()
    return losses / len(kept)


@pytest.mark.parametrize("arch", ["alibi_transformer_lm", "transformer_lm"])
def test_each_position_is_the_tokens_own_window_computed_alone(arch):
    torch.manual_seed(0)
    model, _ = build_model(arch, extra=TINY)
    targets = torch.randint(4, 54, (40,))
    inputs = torch.cat([targets.new_tensor([2]), targets[:-1]])
    length = 6
    got, tokens = loss_by_position(model, inputs, targets, length, batch=3)
    assert tokens == 40 - 2 * length + 2
    assert got.tolist() == pytest.approx(naive(model, inputs, targets, length).tolist(), rel=1e-5)
    assert len({round(v, 6) for v in got.tolist()}) == length  # each position its own number, not one mean


def test_fewer_offsets_average_the_tokens_that_fell_at_each_position():
    """--offsets N: blocks start at k x L // N only; each position is the mean over the kept tokens
    that sat there, each from its own window computed alone; offsets = L is the default."""
    torch.manual_seed(0)
    model, _ = build_model(extra=TINY)
    targets = torch.randint(4, 54, (40,))
    inputs = torch.cat([targets.new_tensor([2]), targets[:-1]])
    length, n = 6, 40
    full, _ = loss_by_position(model, inputs, targets, length, batch=3)
    assert loss_by_position(model, inputs, targets, length, batch=3, offsets=length)[0].tolist() == full.tolist()
    got, tokens = loss_by_position(model, inputs, targets, length, batch=2, offsets=2)
    sums, counts = [0.0] * length, [0] * length
    with torch.no_grad():
        for offset in (0, 3):
            for start in range(offset, n - length + 1, length):
                logp = model.get_normalized_probs(model(inputs[None, start:start + length]), log_probs=True)[0]
                for p in range(length):
                    if length - 1 <= start + p <= n - length:
                        sums[p] -= logp[p, targets[start + p]].item()
                        counts[p] += 1
    assert got.tolist() == pytest.approx([s / c for s, c in zip(sums, counts)], rel=1e-5)
    assert tokens == min(counts)


def test_too_short_a_text_is_refused():
    model, _ = build_model(extra=TINY)
    with pytest.raises(ValueError, match="at least 11 are needed"):
        loss_by_position(model, torch.arange(4, 14), torch.arange(4, 14), 6)


@pytest.mark.slow
def test_the_script_prints_and_appends_the_positions(toy_checkpoint, wt2_slice, tmp_path):
    """scripts/by_position.py on the toy checkpoint (trained at L=32) over the slice's first 200
    validation tokens: its row is the function's, run here on the same model and tokens."""
    from fairseq_alibi.models.build import load_checkpoint
    from fairseq_alibi_lab.stream_eval import stream_tokens

    out = tmp_path / "positions.jsonl"
    printed = run([sys.executable, "scripts/by_position.py", toy_checkpoint, wt2_slice, "--length", "16",
                   "--limit", "200", "--out", str(out), "--label", "toy", "--fields", '{"experiment": "toy", "recipe": "tiny", "train_flags": ""}'])
    assert "170 tokens at each of 16 positions" in printed and "positions    0-15" in printed
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    model, _, task = load_checkpoint(toy_checkpoint, wt2_slice, kind="causal LM")
    inputs, targets = stream_tokens(wt2_slice, "valid", task.source_dictionary, 200)
    loss, _ = loss_by_position(model, inputs, targets, 16)
    assert row["perplexity_by_position"] == pytest.approx([math.exp(v) for v in loss.tolist()], rel=1e-6)
    assert row["perplexity_stride_1"] == row["perplexity_by_position"][-1] and row["tokens"] == 170
    assert row["train_length"] == 32 and row["label"] == "toy" and row["command"].startswith("python scripts/by_position.py ")
    from fairseq_alibi_lab.results import identity_missing
    assert identity_missing(row) == []  # what every committed row must say (tests/lab/test_rebuild.py)
    refused = subprocess.run([sys.executable, "scripts/by_position.py", toy_checkpoint, wt2_slice, "--length", "16",
                              "--limit", "20"], cwd=REPO, capture_output=True, text=True)
    assert refused.returncode == 2 and "at least 2 x --length - 1 = 31 tokens" in refused.stderr.splitlines()[-1]
    short = subprocess.run([sys.executable, "scripts/by_position.py", toy_checkpoint, wt2_slice, "--length", "8000"],
                           cwd=REPO, capture_output=True, text=True)  # the split itself is too short: one line
    assert short.returncode == 1 and short.stderr.splitlines()[-1].startswith("error: the valid split: ")
    assert "at least 15999 are needed" in short.stderr.splitlines()[-1] and "Traceback" not in short.stderr


@pytest.mark.slow
def test_a_window_past_a_learned_position_table_is_one_line(learned_checkpoint, wt2_slice):
    """The learned twin (its table ends at its training length, 32) once died on an IndexError at 64."""
    proc = subprocess.run([sys.executable, "scripts/by_position.py", str(learned_checkpoint), wt2_slice, "--length", "64"],
                          cwd=REPO, capture_output=True, text=True)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and last.endswith("learned 32 positions; give --length 32 or less"), proc.stderr[-1500:]
