"""The ALiBi model against the paper's equation written out naively, and its invariances."""
import pytest
import torch

from conftest import TINY, build_model, random_tokens
from reference import assert_same_logits, naive_attention, naive_model
from fairseq_alibi.alibi_bias import alibi_slopes
from fairseq_alibi.checks import ConfigError
from fairseq_alibi.twins import SMALL_TWIN_FLAGS
from fairseq_alibi.models.attention import attention_bias, position_mask


def mask_of(dec, query_len, key_len, dtype=torch.float32):
    """The decoder's dense mask for these lengths, through its cache as a forward gets it."""
    return position_mask(dec.positions, query_len, key_len, dtype, "cpu", True, dec.mask_cache)


@pytest.mark.parametrize("heads", [4, 6])
@pytest.mark.parametrize("prenorm", [True, False])
def test_whole_model_matches_naive_equation(prenorm, heads):
    torch.manual_seed(0)
    dims = ["--decoder-embed-dim", "24", "--decoder-input-dim", "24", "--decoder-output-dim", "24"]
    flags = [f for f in TINY if prenorm or f != "--decoder-normalize-before"]
    model, d = build_model(extra=[*flags, *dims, "--decoder-attention-heads", str(heads)])
    tokens = random_tokens(len(d), 3, 13)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens)[0], naive_model(model, tokens), rtol=1e-4, atol=1e-5)


def test_one_attention_layer_matches_naive_equation(tiny_model):
    dec = tiny_model.decoder
    attn = dec.layers[0].self_attn
    x = torch.randn(9, 2, attn.embed_dim)  # T x B x C, as fairseq passes it
    bias = attention_bias(dec.positions, x, 9, 9, None, causal=True)
    with torch.no_grad():
        got, _ = attn(x, x, x, attn_mask=bias)
        slopes = alibi_slopes(attn.num_heads)
        for b in range(2):
            expected = naive_attention(attn, x[:, b], lambda h, i, j: -slopes[h] * (i - j))
            torch.testing.assert_close(got[:, b], expected, rtol=1e-4, atol=1e-5)


def test_future_tokens_never_change_earlier_outputs(tiny_model):
    tokens = random_tokens(54, 1, 20)
    changed = tokens.clone()
    changed[0, 12:] = random_tokens(54, 1, 8, seed=1)
    with torch.no_grad():
        a, b = tiny_model(tokens)[0], tiny_model(changed)[0]
    torch.testing.assert_close(a[:, :12], b[:, :12], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, 12:], b[:, 12:])


def test_incremental_decoding_matches_full_forward(tiny_model):
    """x-transformers' test_kv_cache idea: logits step by step with the cache == one full pass."""
    assert_same_logits(tiny_model, tiny_model, random_tokens(54, 3, 16), rtol=1e-5, atol=1e-5)


def test_incremental_decoding_applies_the_bias():
    """Guard against the fork's bug (no bias when decoding): a zero-slope model must differ."""
    torch.manual_seed(0)
    model, d = build_model(extra=TINY)
    tokens = random_tokens(len(d), 1, 10)
    with torch.no_grad():
        state = {}
        for t in range(10):
            with_bias = model(tokens[:, : t + 1], incremental_state=state)[0]
        model.decoder.positions.slopes.zero_()
        state = {}
        for t in range(10):
            without = model(tokens[:, : t + 1], incremental_state=state)[0]
    assert not torch.allclose(with_bias, without, atol=1e-3)


def test_batch_of_eight_equals_eight_batches_of_one(tiny_model):
    tokens = random_tokens(54, 8, 24)
    with torch.no_grad():
        batched = tiny_model(tokens)[0]
        single = torch.cat([tiny_model(tokens[i : i + 1])[0] for i in range(8)])
    torch.testing.assert_close(batched, single, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_does_not_change_real_tokens(tiny_model, side):
    pad = tiny_model.decoder.padding_idx
    short, long = random_tokens(54, 1, 7), random_tokens(54, 1, 11, seed=3)
    filler = torch.full((1, 4), pad)
    padded = torch.cat([short, filler] if side == "right" else [filler, short], dim=1)
    with torch.no_grad():
        out = tiny_model(torch.cat([padded, long]))[0]
        alone = tiny_model(short)[0]
    real = out[0, :7] if side == "right" else out[0, 4:]
    torch.testing.assert_close(real, alone[0], rtol=1e-5, atol=1e-5)


def test_any_length_runs_without_configuration(tiny_model):
    # trained length is irrelevant: no position table, no mask sized by --tokens-per-sample
    with torch.no_grad():
        out = tiny_model(random_tokens(54, 2, 700))[0]
    assert torch.isfinite(out).all()
    assert tiny_model.max_positions() >= 2**31 - 1


def test_documented_twin_flags_give_the_same_parameters():
    ours, _ = build_model("alibi_transformer_lm_small", vocab=12000)
    twin, _ = build_model("transformer_lm", vocab=12000, extra=SMALL_TWIN_FLAGS.split()[2:])
    shapes = lambda m: {k: tuple(v.shape) for k, v in m.state_dict().items()}  # noqa: E731
    assert shapes(ours) == shapes(twin)  # the sinusoid has no parameters in fairseq 0.12.3
    assert ours.decoder.embed_positions is None
    assert type(twin.decoder.embed_positions).__name__ == "SinusoidalPositionalEmbedding"


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--decoder-learned-pos"], "--decoder-learned-pos adds position embeddings"),
        (["--decoder-attention-heads", "0"], "must be at least 1"),
        (["--decoder-attention-heads", "7"], "must be divisible by"),
        (["--character-embeddings"], "--character-embeddings is not supported"),
    ],
)
def test_bad_configuration_is_a_one_line_error(flags, message):
    with pytest.raises(ConfigError) as err:
        build_model(extra=[*TINY, *flags])
    text = str(err.value.code)
    assert message in text and "\n" not in text


def test_mask_is_accepted_by_the_fused_attention_kernel(tiny_model):
    """A mask shape the fused kernel refuses silently falls back to the unfused path (6x slower
    on CPU at L=512): the decoder's mask must run with only the fused kernel allowed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    mask_of(tiny_model.decoder, 100, 100)  # cache a larger mask first
    mask = mask_of(tiny_model.decoder, 64, 64)  # a slice of it
    heads = tiny_model.decoder.layers[0].self_attn.num_heads
    q = k = v = torch.randn(3, heads, 64, 8)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fused = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    with sdpa_kernel(SDPBackend.MATH):
        reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(fused, reference, rtol=1e-5, atol=1e-5)


def test_mask_does_not_grow_with_batch_size(tiny_model, monkeypatch):
    """Every layer receives one (1, heads, T, T) mask, whatever the batch size."""
    from fairseq_alibi.models.attention import RelativeSelfAttention

    shapes = []
    original = RelativeSelfAttention.forward

    def recording_forward(self, query, key, value, **kwargs):
        shapes.append(tuple(kwargs["attn_mask"].mask.shape))
        return original(self, query, key, value, **kwargs)

    monkeypatch.setattr(RelativeSelfAttention, "forward", recording_forward)
    with torch.no_grad():
        for batch in (1, 8):
            tiny_model(random_tokens(54, batch, 20))
    heads = tiny_model.decoder.layers[0].self_attn.num_heads
    assert shapes == [(1, heads, 20, 20)] * (2 * len(tiny_model.decoder.layers))


def test_cached_mask_serves_shorter_batches_and_follows_slope_changes(tiny_model):
    from fairseq_alibi.alibi_bias import alibi_mask

    dec = tiny_model.decoder
    long, short = mask_of(dec, 30, 30), mask_of(dec, 20, 20)
    assert torch.equal(short, alibi_mask(dec.positions.slopes, 20, 20)[None])
    assert short.data_ptr() == long.data_ptr()  # a view of the cached mask, not a rebuild
    dec.positions.slopes.mul_(0.5)  # e.g. slope interpolation at inference
    torch.testing.assert_close(mask_of(dec, 20, 20), alibi_mask(dec.positions.slopes, 20, 20)[None])
    assert mask_of(dec, 20, 20, torch.float16).dtype == torch.float16


@pytest.mark.parametrize("argv", [["--alibi-scaling", "linear", "--alibi-scaling-factor", "4"],
                                  ["--rotary-scaling=yarn"], ["--alibi-train-length", "64"]])
def test_the_training_entry_point_refuses_evaluation_only_options(argv, monkeypatch):
    """fairseq-alibi-train (train.sh refuses them too): a model trained with scaled slopes would
    then be scored, and labelled, as unscaled."""
    from fairseq_alibi.commands import cli

    monkeypatch.setattr("sys.argv", ["fairseq-alibi-train", "data-bin/x", "--arch", "alibi_transformer_lm", *argv])
    monkeypatch.setattr(cli, "_run", lambda module: pytest.fail("fairseq-train was started"))
    with pytest.raises(SystemExit, match="is for evaluation .* not training: drop it") as stopped:
        cli.train()
    assert argv[0].split("=")[0] in str(stopped.value.code)


def test_a_model_recording_another_dictionary_is_refused_when_built():
    """--dictionary-sha256 (every plugin model's option; scripts/train.sh sets it to the data's):
    built over the dictionary it records, the model builds; over another of the same size (two
    words swapped), it is refused in one line. The fingerprint is the words' sha256, written out."""
    import hashlib

    from fairseq_alibi.tools import dictionaries

    words = [f"w{i}" for i in range(50)]  # build_model's dictionary
    assert dictionaries.fingerprint(words) == hashlib.sha256("\n".join(words).encode()).hexdigest()[:16]
    build_model("kerple_transformer_lm", 50, [*TINY, "--dictionary-sha256", dictionaries.fingerprint(words)])
    swapped = [words[1], words[0], *words[2:]]
    with pytest.raises(ConfigError, match="trained on another dictionary than the data's"):
        build_model("alibi_transformer_lm", 50, [*TINY, "--dictionary-sha256", dictionaries.fingerprint(swapped)])
