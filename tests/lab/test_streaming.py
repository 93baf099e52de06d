"""Streaming with attention sinks (StreamingLLM) in the exported model class: the sink cache's
chunked forward against a naive per-query reference written from the rule (query i sees the first
S tokens and the last W; positions inside the cache), past several evictions."""
import math
import os

import pytest
import torch

pytest.importorskip("transformers")

from fairseq_alibi.hf.modeling_fairseq_alibi import FairseqAlibiConfig, FairseqAlibiForCausalLM  # noqa: E402
from fairseq_alibi.rotary_angles import apply_rotary  # noqa: E402

STREAMED = ["alibi", "t5_bias", "kerple", "sandwich", "fire", "learned_alibi", "nope", "rotary"]


def tiny(positions, seed=0, length_temperature=None):
    torch.manual_seed(seed)
    config = FairseqAlibiConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, positions=positions, activation="gelu",
                                length_temperature=length_temperature)
    model = FairseqAlibiForCausalLM(config).eval()
    with torch.no_grad():  # biases, layer norms and learned temperatures away from their start: every term counts
        for name, parameter in model.named_parameters():
            if name.endswith(".bias") or "norm" in name or "log_scale" in name:
                parameter.add_(0.1 * torch.randn_like(parameter) + 0.3 * ("log_scale" in name))
    return model


def tau(attention, n):
    """A length temperature's factor for a query that sees n keys, per head (1 without one), written out:
    logn max(1, ln n / ln L), ssmax exp(a_h) ln n."""
    temperature = attention.temperature
    if temperature is None:
        return torch.ones(attention.heads, 1, 1)
    if temperature.kind == "logn":
        return torch.full((attention.heads, 1, 1), max(1.0, math.log(n) / math.log(temperature.length)))
    return (temperature.log_scale.exp() * math.log(n))[:, None, None]


def reference(model, tokens, sinks, window):
    """Log-probabilities of every token, query by query: query i attends to keys j <= i with j < sinks
    or j > i - window, the query at slot min(i, sinks + window - 1), sink j at j, a window key at
    slot - (i - j); biases and rotations taken from the method at those positions."""
    decoder, method = model.decoder, model.decoder.positions
    x = decoder.embed(tokens, None)
    length = tokens.size(1)
    for layer in decoder.layers:
        attention = layer.self_attn
        h = layer.self_attn_layer_norm(x)
        shape = lambda t: t.view(*t.shape[:2], attention.heads, attention.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = shape(attention.q_proj(h)), shape(attention.k_proj(h)), shape(attention.v_proj(h))
        rows = []
        for i in range(length):
            seen = [j for j in range(i + 1) if j < sinks or j > i - window]
            slot = min(i, sinks + window - 1)
            key_pos = torch.tensor([j if j < sinks else slot - (i - j) for j in seen])
            qi, ki, vi = q[:, :, i:i + 1], k[:, :, seen], v[:, :, seen]
            if method.rotary(key_pos) is not None:
                qi = apply_rotary(qi, *method.rotary(torch.tensor([slot])))
                ki = apply_rotary(ki, *method.rotary(key_pos))
            factor = tau(attention, slot + 1)  # n: the keys the query sees, its slot + 1
            scores = factor * (qi @ ki.transpose(-1, -2)) / math.sqrt(attention.head_dim)
            bias = method.bias(torch.tensor([slot]), key_pos)
            if bias is not None:
                logit = attention.temperature is not None and attention.temperature.form == "logit"
                scores = scores + (factor * bias[None] if logit else bias[None])
            rows.append(scores.softmax(-1) @ vi)
        out = torch.cat(rows, dim=2).transpose(1, 2).reshape(*x.shape)
        x = x + attention.out_proj(out)
        x = x + layer.fc2(layer.activation(layer.fc1(layer.final_layer_norm(x))))
    return model.output_layer(decoder.output(x)).log_softmax(-1)


def streamed(model, tokens, sinks, window, chunks):
    cache, out, start = model.sink_cache(sinks, window), [], 0
    for size in chunks:
        out.append(model(tokens[:, start:start + size], cache=cache).logits.log_softmax(-1))
        start += size
    assert start == tokens.size(1)
    return torch.cat(out, dim=1), cache


@pytest.mark.parametrize("positions", STREAMED)
def test_the_sink_cache_streams_what_the_rule_computes_past_several_evictions(positions):
    """S=2, W=6 over 29 tokens fed in chunks of 1 to 9: every token's log-probabilities equal the
    naive reference's (fp32), the cache never holds more than S + W - 1 keys."""
    model = tiny(positions)
    tokens = torch.randint(4, 40, (2, 29), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, cache = streamed(model, tokens, 2, 6, [1, 3, 9, 1, 1, 5, 7, 2])
        want = reference(model, tokens, 2, 6)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-5)
    assert all(layer.keys.size(-2) == 2 + 6 - 1 for layer in cache.layers) and cache.seen == 29


@pytest.mark.parametrize("positions,kind,form", [("alibi", "ssmax", "logit"), ("alibi", "ssmax", "qk"),
                                                 ("alibi", "logn", "logit"), ("rotary", "logn", "qk"), ("nope", "ssmax", "qk")])
def test_a_length_temperature_streams_with_each_querys_n_its_slot_plus_one(positions, kind, form):
    """A length temperature in the sink cache (S=2, W=6, 29 tokens in chunks): each query's n is the keys it
    sees, its slot + 1, as the reference writes the factor out (L = 4, so that the cache's 7 keys pass it)."""
    model = tiny(positions, length_temperature={"kind": kind, "form": form, "length": 4})
    tokens = torch.randint(4, 40, (2, 29), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, _ = streamed(model, tokens, 2, 6, [1, 3, 9, 1, 1, 5, 7, 2])
        want = reference(model, tokens, 2, 6)
        plain, _ = streamed(tiny(positions), tokens, 2, 6, [29])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-5)
    assert (got - plain).abs().max() > 1e-2  # the temperature counts


@pytest.mark.parametrize("positions", ["alibi", "rotary"])
def test_no_sinks_is_the_plain_window_and_a_cache_longer_than_the_text_is_the_full_forward(positions):
    model = tiny(positions)
    tokens = torch.randint(4, 40, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        window, _ = streamed(model, tokens, 0, 5, [4, 1, 11, 14])
        torch.testing.assert_close(window, reference(model, tokens, 0, 5), rtol=1e-5, atol=2e-5)
        whole, _ = streamed(model, tokens, 4, 40, [7, 23])  # nothing evicted: positions are the text's
        full = model(tokens, use_cache=False).logits.log_softmax(-1)
    torch.testing.assert_close(whole, full, rtol=1e-5, atol=2e-5)


def test_a_batch_streams_as_each_row_alone():
    model = tiny("alibi")
    tokens = torch.randint(4, 40, (3, 25), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        batch, _ = streamed(model, tokens, 1, 4, [5, 1, 19])
        for row in range(3):
            alone, _ = streamed(model, tokens[row:row + 1], 1, 4, [2, 23])
            torch.testing.assert_close(batch[row:row + 1], alone, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("positions", ["alibi", "rotary"])
def test_generate_with_a_sink_cache_is_greedy_decoding_under_the_rule(positions):
    """generate() with the sink cache as past_key_values, 14 tokens past a prompt of 6 with S=1, W=5:
    each token is the argmax of the reference over the text so far."""
    model = tiny(positions)
    prompt = torch.randint(4, 40, (1, 6), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        got = model.generate(prompt, past_key_values=model.sink_cache(1, 5), max_new_tokens=14, do_sample=False,
                             pad_token_id=1)
        text = prompt
        for _ in range(14):
            text = torch.cat([text, reference(model, text, 1, 5)[:, -1:].argmax(-1)], dim=1)
    assert got.tolist() == text.tolist()


@pytest.mark.parametrize("sinks, window, positions, message", [
    (-1, 4, "alibi", "sinks must be a whole number >= 0"),
    (2, 0, "alibi", "window must be a whole number >= 1"),
    (2, 2.5, "alibi", "window must be a whole number >= 1"),
    (2, 4, "sinusoidal", "sinusoidal position embeddings are added to the input"),
    (2, 4, "fox", "depends on every token between key and query"),
])
def test_bad_sink_caches_are_refused_in_one_line(sinks, window, positions, message):
    model = tiny(positions) if positions != "sinusoidal" else FairseqAlibiForCausalLM(FairseqAlibiConfig(
        positions="sinusoidal", max_positions=64))
    with pytest.raises(ValueError, match=message) as error:
        model.sink_cache(sinks, window)
    assert "\n" not in str(error.value)


def test_padded_rows_are_refused_by_the_sink_cache():
    model = tiny("alibi")
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    with pytest.raises(ValueError, match="streams rows without padding"):
        model(torch.full((2, 3), 5), attention_mask=mask, cache=model.sink_cache(1, 4))


@pytest.mark.slow
def test_stream_eval_scores_the_stream_as_the_rule_does(toy_checkpoint, wt2_slice, tmp_path):
    """scripts/stream_eval.py on the toy ALiBi checkpoint (2 layers, trained at L=32) over the first 120
    tokens of the slice's validation stream (behind </s>): for S = 0 and 4 in a cache of 16, fed 5 at a
    time, its perplexity is the naive per-query reference's on the exported model. (With more than one
    layer, S = 0 is not the sliding-window recomputation: a cached token keeps the hidden states it had
    when it came, which the recomputation rebuilds in each window.)"""
    import json
    import subprocess
    import sys

    from conftest import REPO, run
    from fairseq_alibi.models.build import load_checkpoint
    from fairseq_alibi.hf.export import hf_model_of
    from fairseq_alibi_lab.stream_eval import stream_tokens

    out = tmp_path / "stream.jsonl"
    printed = run([sys.executable, "scripts/stream_eval.py", toy_checkpoint, wt2_slice, str(out), "--cache", "16",
                   "--sinks", "0", "4", "--chunk", "5", "--limit", "120", "--label", "toy"])
    assert "sinks 0 + window 16" in printed and "sinks 4 + window 12" in printed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["sinks"], r["window"], r["chunk"], r["tokens"]) for r in rows] == [(0, 16, 5, 120), (4, 12, 5, 120)]
    assert all(r["keys_held"] == 16 - 1 + 5 and r["label"] == "toy" and r["train_length"] == 32 for r in rows)
    model, _, task = load_checkpoint(toy_checkpoint, wt2_slice, kind="causal LM")
    hf = hf_model_of(model, task.source_dictionary, {}).eval()
    inputs, targets = stream_tokens(wt2_slice, "valid", task.source_dictionary, 120)
    assert inputs[0] == task.source_dictionary.eos() and inputs[1:].tolist() == targets[:-1].tolist()
    for row in rows:
        with torch.no_grad():
            log_probs = reference(hf, inputs[None], row["sinks"], row["window"])[0]
        loss = -log_probs.gather(-1, targets[:, None]).sum().item() / len(targets) / math.log(2)
        assert row["loss_base2"] == pytest.approx(loss, rel=1e-5)
    assert rows[0]["perplexity"] != pytest.approx(rows[1]["perplexity"], rel=1e-4)  # the sinks count
    refused = subprocess.run([sys.executable, "scripts/stream_eval.py", toy_checkpoint, wt2_slice, str(out), "--cache", "8",
                              "--sinks", "8"], cwd=REPO, capture_output=True, text=True)
    assert refused.returncode == 2 and "each must be at least 0 and below --cache 8" in refused.stderr.splitlines()[-1]
    assert len(out.read_text().splitlines()) == 2


@pytest.mark.slow
def test_the_streaming_experiment_runs_through_the_runner_at_toy_size(wt2_slice, tmp_path):
    """scripts/experiment.py streaming at toy size (one layer, L=16, 4 updates, a validation split of
    40 lines, no test split: streamed from valid only): ALiBi scored at L in blocks, with a sliding
    window (stride L/2) and with fairseq-eval-lm's exact sliding window (stride 1), and streamed through
    a cache of 16 keys with 0, 1 and 4 sinks; with one layer the window-only stream is that exact
    window (every token sees the 15 before it, positions inside the cache), so fairseq-eval-lm and the
    exported class agree; rerun, nothing is scored twice; --tables rebuilds the table. A model with position embeddings is not streamed, and the table says why."""
    import json
    import shutil
    import subprocess
    import sys

    from conftest import REPO, run
    from fairseq_alibi_lab.experiments.streaming import STREAMED, stages

    data, text = tmp_path / "data", tmp_path / "valid.tokens"
    with open(os.path.join(os.path.dirname(wt2_slice), "valid.tokens")) as f:
        text.write_text("".join(next(f) for _ in range(40)))
    run(["fairseq-preprocess", "--only-source", "--srcdict", os.path.join(wt2_slice, "dict.txt"), "--trainpref", text,
         "--validpref", text, "--destdir", data, "--workers", "1"])
    for suffix in ("bin", "idx"):  # the slice's own training split
        shutil.copy(os.path.join(wt2_slice, f"train.{suffix}"), data / f"train.{suffix}")
    out = tmp_path / "out"
    toy = ["--decoder-layers", "1", "--decoder-embed-dim", "32", "--decoder-input-dim", "32", "--decoder-output-dim", "32",
           "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2", "--max-tokens", "1024",
           "--disable-validation", "--adaptive-input-cutoff", "200,1000", "--adaptive-softmax-cutoff", "200,1000"]
    command = [sys.executable, "scripts/experiment.py", "streaming", "--data", str(data), "--train-length", "16",
               "--updates", "4", "--seeds", "1", "--models", "alibi", "--out", str(out),
               "--checkpoints", str(tmp_path / "checkpoints"), "--train-flags", " ".join(toy)]
    run(command)
    streamed = [json.loads(line) for line in (out / "streaming.jsonl").read_text().splitlines()]
    assert sorted((r["label"], r["sinks"], r["window"], r["cache"]) for r in streamed) == [
        ("ALiBi", 0, 16, 16), ("ALiBi", 1, 15, 16), ("ALiBi", 4, 12, 16)]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if '"unigram"' not in line]
    assert sorted((r["label"], r["l_valid"], r["stride_rule"]) for r in rows) == [
        ("ALiBi", 16, "0"), ("ALiBi", 16, "1"), ("ALiBi", 16, "L_valid/2")]
    window_only = next(r for r in streamed if r["sinks"] == 0)
    sliding = next(r for r in rows if r["stride_rule"] == "1")
    assert window_only["tokens"] == sliding["tokens"] > 1000
    assert window_only["loss_base2"] == pytest.approx(sliding["loss_base2"], rel=1e-5)
    table = (out / "streaming.md").read_text()
    blocks = next(r for r in rows if r["stride_rule"] == "0")["perplexity"]
    half = next(r for r in rows if r["stride_rule"] == "L_valid/2")["perplexity"]
    assert (f"| ALiBi | {blocks:.2f} (n=1) | {half:.2f} (n=1) | {sliding['perplexity']:.2f} (n=1) | "
            f"{window_only['perplexity']:.2f} (n=1) |") in table and "test split" not in table
    (out / "streaming.md").unlink()
    run([*command, "--tables"])
    assert (out / "streaming.md").read_text() == table
    run(command)
    assert len((out / "streaming.jsonl").read_text().splitlines()) == 3
    run([*command, "--parallel", "2"])  # its part begins with OUT's streams: nothing streamed twice
    assert len((out / "streaming.jsonl").read_text().splitlines()) == 3
    # A sinusoidal row beside it: not streamed, and said so.
    twin = dict(rows[0], label="Sinusoidal", model="transformer_lm", checkpoint="twin.pt")
    text = stages.report([*rows, twin], str(out), STREAMED)
    assert "| Sinusoidal | " in text and text.count("cannot stream (position embeddings)") == 3
    # Another split's streams: a table of their own (no blocks were scored there).
    with open(out / "streaming.jsonl", "a") as f:
        f.write(json.dumps(dict(window_only, split="test", perplexity=123.456)) + "\n")
    text = stages.report(rows, str(out), STREAMED)
    assert "## The test split as one text, streamed only" in text and "| ALiBi | 123.46 (n=1) | - | - |" in text


def test_streaming_claims_pair_each_stream_with_its_models_blocks(tmp_path):
    """scripts/claims.py --experiment streaming: each stream (streaming.jsonl beside the results) is a
    cell of its own at L, on the same checkpoints as the model's blocks, so the test is paired; a
    missing streaming.jsonl is one line naming the command."""
    import json
    import subprocess
    import sys

    from conftest import REPO

    def common(label, seed):
        return {"model": "alibi_transformer_lm_small", "label": label, "split": "valid", "train_length": 64,
                "seed": seed, "checkpoint": f"{label}-s{seed}.pt"}

    blocks = [dict(common(label, s), l_valid=64, perplexity=base + s, stride=0, stride_rule="0", scaling="none")
              for label, base in (("ALiBi", 200), ("Rotary", 210)) for s in (1, 2, 3)]
    streams = [dict(common(label, s), cache=64, sinks=sinks, perplexity=base + s + extra)
               for label, base in (("ALiBi", 190), ("Rotary", 400)) for s in (1, 2, 3)
               for sinks, extra in ((0, 0), (1, 0.5 * s), (4, 0.3 + 0.01 * s if label == "ALiBi" else -180))]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in blocks))
    command = [sys.executable, "scripts/claims.py", str(tmp_path / "results.jsonl"), "--experiment", "streaming"]
    missing = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert missing.returncode != 0 and missing.stderr.strip().splitlines() == [
        f"error: no streaming.jsonl beside {tmp_path / 'results.jsonl'}: the streaming experiment writes it (scripts/experiment.py streaming)"]
    (tmp_path / "streaming.jsonl").write_text("".join(json.dumps(r) + "\n" for r in streams))
    text = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True).stdout
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()[2:]}
    beats = lines["ALiBi streamed through a cache of L (window only) beats blocks of L"]
    assert "ALiBi, stream, window only at 64: 192.00 ± 1.00 (n=3) | ALiBi at 64: 202.00 ± 1.00 (n=3)" in beats
    # 10 apart, each seed by exactly 10: the differences do not spread, so no t (R's t.test refuses
    # "essentially constant" data; scipy's p would be 0): no test, so no verdict, whatever the spread says.
    assert "paired t: no spread, no test" in beats and beats.endswith("| no verdict (no test) |")
    # "at most": each seed 0.31-0.33 apart, window only the lower: the paired test shows it after Holm.
    assert lines["ALiBi needs no attention sink (window only no worse than 4 sinks)"].endswith("| supported |")
    assert lines["Rotary needs an attention sink (4 sinks beat window only)"].endswith("| no verdict (no test) |")
    assert lines["ALiBi streams better than rotary (window only)"].endswith("| supported |")
    assert "Welch t" in lines["ALiBi streams better than rotary (window only)"]  # other checkpoints
    assert lines["ALiBi streams better than rotary (4 sinks)"].endswith("| supported |")  # 192.3 against 222


@pytest.mark.parametrize("length, sinks, window, chunk, most", [
    (5, 1, 8, 8, 5),  # a text shorter than the cache: every key, once
    (40, 1, 8, 8, 1 + 7 + 8),  # the kept sink and window - 1, and the chunk's own
    (40, 4, 8, 3, 4 + 7 + 3)])
def test_keys_held_counts_what_a_chunk_sees_never_more_than_the_text(length, sinks, window, chunk, most):
    from fairseq_alibi_lab.stream_eval import stream_score

    tokens = torch.randint(4, 40, (length + 1,))
    _, held = stream_score(tiny("alibi"), tokens[:-1], tokens[1:], sinks, window, chunk)
    assert held == most and held <= length
