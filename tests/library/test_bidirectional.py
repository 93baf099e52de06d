"""Encoder ALiBi: each variant against its formula written as loops, the identities the math must
satisfy (reversal, padding), and the masked-LM and encoder-decoder models built on it."""
import math

import pytest
import torch

from conftest import build_model, random_tokens
from fairseq_alibi.alibi_bias import alibi_slopes
from fairseq_alibi.models.attention import attention_bias
from fairseq_alibi.checks import ConfigError
from fairseq_alibi.bidirectional import VARIANTS, build_variant

INF = float("-inf")


def naive_bias(variant, module, h, i, j):
    """The variant's bias for head h, query i, key j, one entry at a time (bidirectional/'s
    docstring, written out)."""
    if variant in ("symmetric", "ruoss"):
        m = alibi_slopes(len(module.slopes))[h]
        return -m * abs(i - j) + (0.5 * m if variant == "ruoss" and j < i else 0.0)
    if variant == "one_sided":
        half = len(module.slopes)
        m = alibi_slopes(half)[h % half]
        looks_left = h < half
        if (looks_left and j > i) or (not looks_left and j < i):
            return INF
        return -m * abs(i - j)
    past, future = module.log_past[h].exp().item(), module.log_future[h].exp().item()
    if variant == "bialibi" and i != j and (i == 0 or j == 0):
        return -module.first_token[h].item()
    return -past * (i - j) if j < i else -future * (j - i)


def randomize(module, seed=0):
    """Learned variants: parameters away from their start, past != future."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("heads", [2, 8, 12])
def test_each_variant_matches_its_formula(variant, heads):
    module = build_variant(variant, heads)
    randomize(module)
    T = 9
    got = module.square(T)
    assert got.shape == (heads, T, T)
    for h in range(heads):
        for i in range(T):
            for j in range(T):
                expected = naive_bias(variant, module, h, i, j)
                if expected == INF:
                    assert got[h, i, j] == INF, (h, i, j)
                else:
                    assert math.isclose(got[h, i, j].item(), expected, rel_tol=1e-5, abs_tol=1e-5), (h, i, j)
    assert torch.isfinite(got.diagonal(dim1=1, dim2=2)).all()  # no empty row


def test_learned_variants_start_at_the_papers_slopes_and_stay_slopes():
    for variant in ("learned", "bialibi"):
        module = build_variant(variant, 8)
        if variant == "learned":  # starts as symmetric ALiBi
            torch.testing.assert_close(module.square(6), build_variant("symmetric", 8).square(6))
        with torch.no_grad():
            module.log_past.fill_(-50.0)  # any real parameter: the slope stays >= 0
        assert (module.past_future_slopes()[0] >= 0).all()


def test_learned_slopes_gradcheck_in_fp64():
    for variant in ("learned", "bialibi"):
        module = build_variant(variant, 4).double()
        randomize(module)
        positions = torch.arange(7)
        names = [name for name, _ in module.named_parameters()]
        inputs = [p.detach().clone().requires_grad_(True) for p in module.parameters()]
        assert torch.autograd.gradcheck(
            lambda *xs: torch.func.functional_call(module, dict(zip(names, xs)), (positions, positions)), inputs)


def test_one_sided_needs_an_even_head_count():
    with pytest.raises(ConfigError, match="must be even") as err:
        build_model("alibi_roberta_small", extra=["--encoder-alibi", "one_sided", "--encoder-attention-heads", "3",
                                                   "--encoder-embed-dim", "24"], task="masked_lm")
    assert "\n" not in str(err.value.code)


def test_bialibi_refuses_left_padded_sources():
    with pytest.raises(ConfigError, match="pass --left-pad-source"):
        build_model("alibi_transformer_small", extra=["--encoder-alibi", "bialibi"], task="translation")
    build_model("alibi_transformer_small", extra=["--encoder-alibi", "bialibi", "--left-pad-source"],
                task="translation")


def test_position_embeddings_are_refused_with_encoder_alibi():
    with pytest.raises(ConfigError, match="--encoder-learned-pos"):
        build_model("alibi_roberta_small", extra=["--encoder-learned-pos"], task="masked_lm")


# --- the encoder inside the models ---------------------------------------------------------

SMALL = ["--encoder-layers", "2", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
         "--encoder-attention-heads", "4", "--dropout", "0", "--attention-dropout", "0"]


def encoder(variant, seed=0, extra=()):
    """An untrained masked-LM encoder stack (AlibiTransformerEncoder) in eval mode."""
    torch.manual_seed(seed)
    model, d = build_model("alibi_roberta_small", extra=["--encoder-alibi", variant, *SMALL, *extra], task="masked_lm")
    return model.encoder.sentence_encoder, d


def encode(enc, tokens):
    with torch.no_grad():
        return enc(tokens)["encoder_out"][0].transpose(0, 1)  # B x T x C


def test_symmetric_encoder_commutes_with_reversal():
    enc, d = encoder("symmetric")
    tokens = random_tokens(len(d), 2, 13)
    torch.testing.assert_close(encode(enc, tokens.flip(1)), encode(enc, tokens).flip(1), rtol=1e-5, atol=1e-5)
    # ... which is what no other variant does (they see direction)
    for variant in ("one_sided", "ruoss"):
        other, _ = encoder(variant)
        assert not torch.allclose(encode(other, tokens.flip(1)), encode(other, tokens).flip(1), atol=1e-3)


def test_learned_encoder_reversed_equals_swapped_slopes():
    enc, d = encoder("learned")
    randomize(enc.alibi)
    tokens = random_tokens(len(d), 2, 13)
    forward = encode(enc, tokens)
    with torch.no_grad():
        past = enc.alibi.log_past.clone()
        enc.alibi.log_past.copy_(enc.alibi.log_future)
        enc.alibi.log_future.copy_(past)
    torch.testing.assert_close(encode(enc, tokens.flip(1)), forward.flip(1), rtol=1e-5, atol=1e-5)


def test_one_sided_encoder_reversed_equals_swapped_halves():
    enc, d = encoder("one_sided")
    tokens = random_tokens(len(d), 2, 13)
    forward = encode(enc, tokens)
    heads = enc.layers[0].self_attn.num_heads
    head_dim = enc.layers[0].self_attn.head_dim
    # rows (q, k, v) or columns (out) of head h, in the new order: the second half first
    order = torch.cat([torch.arange(heads // 2, heads), torch.arange(heads // 2)])
    dims = (order[:, None] * head_dim + torch.arange(head_dim)).reshape(-1)
    with torch.no_grad():
        for layer in enc.layers:
            attn = layer.self_attn
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
                proj.weight.copy_(proj.weight[dims])
                proj.bias.copy_(proj.bias[dims])
            attn.out_proj.weight.copy_(attn.out_proj.weight[:, dims])
    torch.testing.assert_close(encode(enc, tokens.flip(1)), forward.flip(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_on_either_side_leaves_real_tokens_unchanged(variant):
    torch.manual_seed(0)
    flags = ["--encoder-alibi", variant, "--left-pad-source", *SMALL,
             "--decoder-layers", "1", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64",
             "--decoder-attention-heads", "4"]
    model, d = build_model("alibi_transformer_small", extra=flags, task="translation")
    enc = model.eval().encoder
    pad = d.pad()
    tokens = random_tokens(len(d), 1, 9)
    alone = encode(enc, tokens)[0]
    right = torch.cat([tokens, torch.full((1, 4), pad)], 1)
    torch.testing.assert_close(encode(enc, right)[0, :9], alone, rtol=1e-5, atol=1e-5)
    if variant != "bialibi":  # anchored at index 0: refused with left padding (above)
        left = torch.cat([torch.full((1, 4), pad), tokens], 1)
        torch.testing.assert_close(encode(enc, left)[0, 4:], alone, rtol=1e-5, atol=1e-5)
    # in a batch with a longer sequence
    batch = torch.cat([right, random_tokens(len(d), 1, 13, seed=1)])
    torch.testing.assert_close(encode(enc, batch)[0, :9], alone, rtol=1e-5, atol=1e-5)


def test_zero_slopes_equal_a_stock_encoder_without_positions():
    """Symmetric ALiBi with slopes 0 is fairseq's own encoder with no position embeddings, same
    weights: nothing else differs (post-norm, as RoBERTa)."""
    from fairseq.models.transformer import TransformerConfig, TransformerEncoderBase

    enc, d = encoder("symmetric")
    enc.alibi.slopes.zero_()
    cfg = TransformerConfig.from_namespace(build_model("alibi_roberta_small", extra=SMALL, task="masked_lm")[0].args)
    cfg.no_token_positional_embeddings = True
    stock = TransformerEncoderBase(cfg, d, enc.embed_tokens).eval()
    stock.load_state_dict(enc.state_dict())
    tokens = torch.cat([random_tokens(len(d), 1, 11), torch.cat([random_tokens(len(d), 1, 8), torch.full((1, 3), d.pad())], 1)])
    got, expected = encode(enc, tokens), encode(stock, tokens)
    real = tokens.ne(d.pad())
    torch.testing.assert_close(got[real], expected[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["symmetric", "bialibi"])
def test_a_model_loaded_from_its_state_equals_the_built_one(variant):
    """Through fairseq's load_state_dict (where fairseq 0.12.2 switches on a native fast path that
    would drop the bias), in eval mode."""
    model, d = build_model("alibi_roberta_small", extra=["--encoder-alibi", variant, *SMALL], task="masked_lm")
    randomize(model.encoder.sentence_encoder.alibi)
    torch.manual_seed(1)
    other, _ = build_model("alibi_roberta_small", extra=["--encoder-alibi", variant, *SMALL], task="masked_lm")
    other.load_state_dict(model.state_dict(), strict=True)
    tokens = random_tokens(len(d), 2, 12)
    with torch.no_grad():
        torch.testing.assert_close(other.eval()(tokens)[0], model.eval()(tokens)[0])
    assert not any(getattr(layer, "can_use_fastpath", False) for layer in other.encoder.sentence_encoder.layers)


def test_masked_lm_twins_build_from_the_same_flag():
    sinusoidal, d = build_model("alibi_roberta_small", extra=["--encoder-alibi", "none", *SMALL], task="masked_lm")
    learned, _ = build_model("alibi_roberta_small", extra=["--encoder-alibi", "none", "--encoder-learned-pos", *SMALL],
                             task="masked_lm")
    name = lambda m: type(m.encoder.sentence_encoder.embed_positions).__name__  # noqa: E731
    assert name(sinusoidal) == "SinusoidalPositionalEmbedding" and name(learned) == "LearnedPositionalEmbedding"
    assert sinusoidal.max_positions() > 10**6  # sinusoidal positions extend: evaluate past training


def test_the_nope_encoder_sees_a_bag_of_tokens():
    """--encoder-alibi none --no-token-positional-embeddings: no position embeddings, so permuting
    the input tokens permutes the outputs (an identity the math must satisfy; the sinusoidal twin
    breaks it); with learned positions or an ALiBi variant, the flag is refused at build."""
    from fairseq_alibi.checks import ConfigError

    nope, d = build_model("alibi_roberta_small", extra=["--encoder-alibi", "none", "--no-token-positional-embeddings",
                                                        *SMALL], task="masked_lm")
    sinusoidal, _ = build_model("alibi_roberta_small", extra=["--encoder-alibi", "none", *SMALL], task="masked_lm")
    assert nope.encoder.sentence_encoder.embed_positions is None
    tokens = random_tokens(len(d), 1, 12)
    order = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    for model, equivariant in ((nope, True), (sinusoidal, False)):
        with torch.no_grad():
            out, permuted = model.eval()(tokens)[0], model(tokens[:, order])[0]
        assert torch.allclose(permuted, out[:, order], rtol=1e-4, atol=1e-4) == equivariant
    for extra in (["--encoder-alibi", "none", "--encoder-learned-pos"], ["--encoder-alibi", "symmetric"]):
        with pytest.raises(ConfigError, match="no-token-positional-embeddings"):
            build_model("alibi_roberta_small", extra=[*extra, "--no-token-positional-embeddings", *SMALL], task="masked_lm")


@pytest.mark.parametrize("variant", ["symmetric", "none"])
def test_scale_embedding_multiplies_tokens_by_sqrt_d_and_is_a_no_op_without_position_embeddings(variant):
    """The same weights with and without --scale-embedding: the embedding before its LayerNorm is
    sqrt(d) x tokens (+ positions); after it, an ALiBi encoder (no positions added) is unchanged,
    the sinusoidal twin is not."""
    plain, d = encoder(variant, seed=3)
    scaled, _ = encoder(variant, seed=3, extra=["--scale-embedding"])
    scaled.load_state_dict(plain.state_dict())
    tokens = random_tokens(len(d), 2, 9)
    assert plain.embed_scale == 1.0 and scaled.embed_scale == math.sqrt(32)
    with torch.no_grad():
        raw = plain.embed_tokens(tokens)
        assert (plain.embed_positions is None) == (variant != "none")
        positions = plain.embed_positions(tokens) if variant == "none" else 0
        expected = plain.layernorm_embedding(math.sqrt(32) * raw + positions)
        torch.testing.assert_close(scaled.forward_embedding(tokens)[0], expected)
    same = torch.allclose(encode(scaled, tokens), encode(plain, tokens), rtol=1e-4, atol=1e-4)
    assert same == (variant != "none")


@pytest.mark.parametrize("variant", ["ruoss", "bialibi"])
def test_incremental_decoding_with_cross_attention_equals_teacher_forcing(variant):
    torch.manual_seed(0)
    model, d = build_model("alibi_transformer_small",
                           extra=["--encoder-alibi", variant, "--left-pad-source", *SMALL], task="translation")
    model.eval()
    src = torch.cat([random_tokens(len(d), 1, 10), torch.cat([random_tokens(len(d), 1, 7), torch.full((1, 3), d.pad())], 1)])
    prev = random_tokens(len(d), 2, 8, seed=3)
    with torch.no_grad():
        encoder_out = model.encoder(src)
        full = model.decoder(prev, encoder_out=encoder_out)[0]
        state = {}
        steps = [model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)[0]
                 for t in range(prev.size(1))]
        other_source = model.decoder(prev, encoder_out=model.encoder(src.flip(1)))[0]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(other_source[0], full[0], atol=1e-4)  # cross-attention reads the source


def test_translation_twin_has_the_same_parameters():
    """Stock --arch transformer with TRANSLATION_TWIN_FLAGS is alibi_transformer_small with
    sinusoidal positions: the same parameters, name for name (the symmetric variant learns none)."""
    from fairseq_alibi.twins import TRANSLATION_TWIN_FLAGS

    flags = ["--share-all-embeddings", "--left-pad-source"]
    twin, _ = build_model(TRANSLATION_TWIN_FLAGS.split()[1], extra=[*TRANSLATION_TWIN_FLAGS.split()[2:], *flags],
                          task="translation")
    alibi, _ = build_model("alibi_transformer_small", extra=flags, task="translation")
    shapes = lambda m: {n: tuple(p.shape) for n, p in m.named_parameters()}  # noqa: E731
    assert shapes(twin) == shapes(alibi)
    assert type(twin.encoder.embed_positions).__name__ == "SinusoidalPositionalEmbedding"
    assert alibi.encoder.embed_positions is None and alibi.decoder.embed_positions is None


@pytest.mark.parametrize("variant", VARIANTS)
def test_padded_keys_are_masked_and_every_diagonal_stays_finite(variant):
    """The encoder's bias for a right-padded batch: the variant's values between real tokens,
    -inf on padded keys of every other query, and a finite diagonal (padded queries included), so
    no row is empty."""
    enc, d = encoder(variant)
    tokens = torch.cat([random_tokens(len(d), 1, 9), torch.cat([random_tokens(len(d), 1, 6), torch.full((1, 3), d.pad())], 1)])
    padding = tokens.eq(d.pad())
    x = torch.zeros(9, 2, 32)
    mask = attention_bias(enc.alibi, x, 9, 9, padding, causal=False).mask  # (batch, heads, T, T)
    alone = enc.alibi.square(9)
    assert torch.isfinite(mask.diagonal(dim1=2, dim2=3)).all()
    torch.testing.assert_close(mask[0], alone)
    torch.testing.assert_close(mask[1][:, :6, :6], alone[:, :6, :6])
    off_diagonal = ~torch.eye(9, dtype=torch.bool)
    assert (mask[1][:, :, 6:][:, off_diagonal[:, 6:]] == float("-inf")).all()
