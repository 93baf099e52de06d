"""The attention-sink experiment's measurement (experiments/attention_sinks/): each head's mass on the first
token and on nothing against the naive attention's weights (tests/reference.py), its rows from the command,
and its table from rows."""
import json
import sys

import pytest
import torch

from conftest import TINY, build_model, random_tokens
from reference import naive_model
from fairseq_alibi_lab.experiments.attention_sinks import stages
from fairseq_alibi_lab.experiments.attention_sinks.measure import masses


@pytest.mark.parametrize("flags", [(), ("--sink-logit",), ("--stick-breaking",), ("--output-gate", "elementwise")])
def test_the_masses_are_the_naive_weights_first_column_and_remainder(flags):
    """Over 5 blocks of 12 tokens (two batches of 3 and 2): the first key's mean weight and the weight given to
    nothing (1 - the row's sum), over queries 6..11, per layer and head, as the naive attention gives them."""
    torch.manual_seed(0)
    model, d = build_model("alibi_transformer_lm" if "--stick-breaking" not in flags else "nope_transformer_lm",
                           extra=[*TINY, *flags])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".options." in name:
                p.add_(torch.randn_like(p))  # a sink logit away from 0
    model.eval()
    blocks = random_tokens(len(d), 5, 12)
    first, nothing = masses(model, blocks, batch=3)
    weights = []
    naive_model(model, blocks, weights=weights)
    layers = len(model.decoder.layers)
    naive = torch.stack([torch.stack(weights[layer::layers]) for layer in range(layers)])  # (layers, blocks, heads, T, T)
    torch.testing.assert_close(first.float(), naive[..., 6:, 0].mean(dim=(1, 3)), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(nothing.float(), (1 - naive[..., 6:, :].sum(-1)).mean(dim=(1, 3)), rtol=1e-4, atol=1e-5)
    if flags == ("--sink-logit",):
        assert nothing.min() > 1e-4
    else:  # softmax's rows, and stick-breaking's (its remainder on the query's own key), sum to 1
        assert nothing.abs().max() < 1e-6


def rows_of(label, checkpoint, values):
    return [{"label": label, "checkpoint": checkpoint, "split": "valid", "length": 8, "queries": "4..7", "layer": layer,
             "head": head, "first_token": first, "nothing": nothing} for (layer, head), (first, nothing) in values.items()]


def test_the_table_is_the_seeds_mean_and_std_and_each_heads_mean(tmp_path):
    measured = (rows_of("ALiBi", "a1", {(0, 0): (0.5, 0.0), (0, 1): (0.1, 0.0)})
                + rows_of("ALiBi", "a2", {(0, 0): (0.3, 0.0), (0, 1): (0.1, 0.0)})
                + rows_of("ALiBi", "a2", {(0, 0): (0.7, 0.0), (0, 1): (0.1, 0.0)})  # a re-measurement: the last wins
                + rows_of("Sink", "s1", {(0, 0): (0.05, 0.4), (0, 1): (0.01, 0.6)})
                + rows_of("Other", "x1", {(0, 0): (0.9, 0.0), (0, 1): (0.9, 0.0)}))  # not a declared run: left out
    (tmp_path / stages.ROWS).write_text("".join(json.dumps(r) + "\n" for r in measured))
    runs = [{"checkpoint": c} for c in ("a1", "a2", "s1")]
    text = stages.report(runs, str(tmp_path))
    assert text == (tmp_path / "sink-mass.md").read_text()
    lines = text.splitlines()
    assert "evenly over the keys it sees gives the first token 0.159 on average" in text  # 1/5 .. 1/8
    # ALiBi: means of heads 0.3 and 0.4 (0.35 ± 0.071), largest 0.5 and 0.7, sink heads 1 and 1
    assert "| ALiBi | 2 | 0.350 ± 0.071 (n=2) | 0.600 ± 0.141 (n=2) | 1.0 ± 0.0 (n=2) | 0.000 ± 0.000 (n=2) |" in lines
    assert "| Sink | 2 | 0.030 (n=1) | 0.050 (n=1) | 0.0 (n=1) | 0.500 (n=1) |" in lines
    assert "| ALiBi | 0 | 0.600 | 0.100 |" in lines and "| Sink | 0 | 0.050 | 0.010 |" in lines
    assert "| Sink | 0 | 0.400 | 0.600 |" in lines and "| ALiBi | 0 | 0.000 |" not in lines  # nothing, per head
    assert "Other" not in text
    assert stages.report([{"checkpoint": "none"}], str(tmp_path)) is None


@pytest.mark.slow
def test_the_command_writes_a_row_per_layer_and_head_and_refuses_bad_input(toy_checkpoint, wt2_slice, tmp_path):
    """On the toy checkpoint (trained at L=32): 4 blocks of 16 from the validation stream, the rows' masses those
    of masses() on the same blocks; a bad --length refused in one line, nothing written."""
    import subprocess

    from conftest import REPO, run
    from fairseq_alibi.models.build import load_checkpoint
    from fairseq_alibi_lab.stream_eval import stream_tokens

    out = tmp_path / "sinks.jsonl"
    command = [sys.executable, "-m", "fairseq_alibi_lab.experiments.attention_sinks.measure", toy_checkpoint, wt2_slice,
               str(out)]
    printed = run([*command, "--length", "16", "--blocks", "4", "--label", "toy"])
    assert "toy: 4 blocks of 16: first-token mass" in printed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    model, _, task = load_checkpoint(toy_checkpoint, wt2_slice, kind="causal LM")
    inputs, _ = stream_tokens(wt2_slice, "valid", task.source_dictionary)
    first, nothing = masses(model, inputs[:64].view(4, 16))
    assert [(r["layer"], r["head"]) for r in rows] == [(l, h) for l in range(first.size(0)) for h in range(first.size(1))]
    for r in rows:
        assert r["first_token"] == pytest.approx(float(first[r["layer"], r["head"]]), abs=1e-6)
        assert r["nothing"] == pytest.approx(0, abs=1e-5) and r["train_length"] == 32 and r["label"] == "toy"
        assert r["blocks"] == 4 and r["queries"] == "8..15" and r["commit"]
    refused = subprocess.run([*command, "--length", "1"], cwd=REPO, capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.splitlines()[-1].endswith("--length must be at least 2, got 1")
    assert len(out.read_text().splitlines()) == len(rows)
