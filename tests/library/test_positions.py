"""Rotary, T5 bias and ALiBi slope scaling: each against its formula written out naively, and
each method's model against the naive equation, full forward and with the incremental cache."""
import math

import pytest
import torch

from conftest import TINY, build_model, random_tokens
from reference import assert_same_logits, naive_model, naive_rotate, naive_t5_bucket
from fairseq_alibi.alibi_bias import alibi_slopes, dynamic_factors, ntk_exponents, scale_slopes
from fairseq_alibi.models.attention import position_mask
from fairseq_alibi.checks import ConfigError
from fairseq_alibi.rotary_angles import apply_rotary, rotary_angles
from fairseq_alibi.t5_buckets import t5_buckets

# --- rotary -----------------------------------------------------------------------------------


@pytest.mark.parametrize("head_dim,base", [(8, 10000.0), (16, 10000.0), (6, 500.0)])
def test_rotary_is_the_closed_form_rotation(head_dim, base):
    positions = torch.tensor([0, 1, 7, 300, 5000])
    x = torch.randn(len(positions), head_dim, dtype=torch.float64)
    got = apply_rotary(x, *rotary_angles(positions, head_dim, base))
    expected = torch.stack([naive_rotate(x[n], int(p), base) for n, p in enumerate(positions)])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_rotary_score_depends_only_on_the_distance():
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)

    def score(i, j):
        qi = apply_rotary(q[None], *rotary_angles(torch.tensor([i]), 16))[0]
        kj = apply_rotary(k[None], *rotary_angles(torch.tensor([j]), 16))[0]
        return float(qi @ kj)

    for i, j in [(5, 2), (9, 0), (40, 40)]:
        for shift in (1, 100, 3000):
            assert score(i, j) == pytest.approx(score(i + shift, j + shift), rel=1e-4, abs=1e-4)
    assert score(5, 2) != pytest.approx(score(5, 3), rel=1e-3)  # and it does depend on it


# --- T5 bias ----------------------------------------------------------------------------------


@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (16, 64), (8, 20)])
def test_t5_buckets_match_the_naive_definition(num_buckets, max_distance):
    distance = torch.arange(-5, 1000)
    expected = torch.tensor([naive_t5_bucket(int(n), num_buckets, max_distance) for n in distance])
    got = t5_buckets(distance, num_buckets, max_distance)
    assert torch.equal(got, expected)
    assert got.max() == num_buckets - 1 and bool((got[1:] >= got[:-1]).all())  # monotone, all used


# --- ALiBi slope scaling ----------------------------------------------------------------------


def ntk_alibi_formula(H, a):
    """keezen/ntk_alibi: m_h = 1 / (2^(8h/H) * a^((h-1)/(H-1))), h = 1..H (power-of-2 H)."""
    return [1 / (2 ** (8 * h / H) * a ** ((h - 1) / (H - 1))) for h in range(1, H + 1)]


# 12 heads: the paper's slopes (2^-1 .. 2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5). NTK-ALiBi as
# defined here: each slope divided by a^t, t = its place between the steepest (2^-0.5, t = 0) and
# the flattest (2^-8, t = 1) on a log2 scale: t = (-0.5 - log2 m) / 7.5.
TWELVE_LOG2 = [-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -1.5, -2.5, -3.5]


@pytest.mark.parametrize("a", [2.0, 4.0, 16.0])
@pytest.mark.parametrize("heads", [8, 12, 16])
def test_scaled_slopes_match_the_formulas(heads, a):
    slopes = torch.tensor(alibi_slopes(heads), dtype=torch.float64)
    linear = scale_slopes(slopes, "linear", a)
    ntk = scale_slopes(slopes, "ntk", a)
    torch.testing.assert_close(linear, slopes / a)
    if heads == 12:
        expected = [2**e / a ** ((-0.5 - e) / 7.5) for e in TWELVE_LOG2]
    else:
        expected = ntk_alibi_formula(heads, a)
    torch.testing.assert_close(ntk, torch.tensor(expected, dtype=torch.float64))
    steepest, flattest = slopes.argmax(), slopes.argmin()
    assert ntk[steepest] == slopes[steepest] and ntk[flattest] == pytest.approx(float(slopes[flattest]) / a)
    assert torch.equal(ntk.argsort(), slopes.argsort())  # heads keep their order
    assert torch.equal(scale_slopes(slopes, "none", a), slopes)


def test_one_head_ntk_is_linear_and_factor_one_changes_nothing():
    one = torch.tensor(alibi_slopes(1))
    torch.testing.assert_close(scale_slopes(one, "ntk", 3.0), one / 3)
    assert torch.equal(ntk_exponents(one), torch.ones(1))
    for heads in (5, 8, 12):
        slopes = torch.tensor(alibi_slopes(heads))
        torch.testing.assert_close(scale_slopes(slopes, "ntk", 1.0), slopes)


def test_dynamic_factor_is_per_query_and_one_within_the_training_length():
    factors = dynamic_factors(torch.arange(10), train_length=4, factor=1.0)
    assert factors.tolist() == [max(1.0, (i + 1) / 4) for i in range(10)]
    assert dynamic_factors(torch.arange(3), 4, factor=2.0).tolist() == [1.0, 1.0, 1.5]


def test_bad_scaling_is_refused():
    with pytest.raises(ValueError, match="unknown slope scaling"):
        scale_slopes(torch.ones(2), "cubic", 2.0)
    with pytest.raises(ValueError, match="must be positive"):
        scale_slopes(torch.ones(2), "linear", 0.0)


# --- the models -------------------------------------------------------------------------------


def model(method, *flags, heads=4, seed=0):
    torch.manual_seed(seed)
    return build_model(f"{method}_transformer_lm", extra=[*TINY, "--decoder-attention-heads", str(heads), *flags])


@pytest.mark.parametrize("method", ["rotary", "t5_bias"])
@pytest.mark.parametrize("prenorm", [True, False])
def test_baseline_models_match_the_naive_equation(method, prenorm):
    flags = ["--t5-num-buckets", "8", "--t5-max-distance", "12"] if method == "t5_bias" else []
    m, d = model(method, *flags)
    m.decoder.layers.apply(lambda mod: setattr(mod, "normalize_before", prenorm) if hasattr(mod, "normalize_before") else None)
    tokens = random_tokens(len(d), 2, 20)  # 20 > max_distance: the shared last bucket is used
    with torch.no_grad():
        torch.testing.assert_close(m(tokens)[0], naive_model(m, tokens), rtol=1e-4, atol=1e-5)


SCALED = {
    "rotary": [],
    "t5_bias": ["--t5-num-buckets", "8", "--t5-max-distance", "12"],
    "alibi_linear": ["--alibi-scaling", "linear", "--alibi-scaling-factor", "3"],
    "alibi_ntk": ["--alibi-scaling", "ntk", "--alibi-scaling-factor", "3"],
    "alibi_dynamic_ntk": ["--alibi-scaling", "dynamic_ntk", "--alibi-train-length", "4"],
}


@pytest.mark.parametrize("variant", list(SCALED))
def test_incremental_decoding_matches_full_forward(variant):
    m, d = model(variant.split("_")[0] if variant.startswith("alibi") else variant, *SCALED[variant])
    assert_same_logits(m, m, random_tokens(len(d), 3, 24), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", list(SCALED))
def test_batch_and_padding_do_not_change_real_tokens(variant):
    m, d = model(variant.split("_")[0] if variant.startswith("alibi") else variant, *SCALED[variant])
    pad = m.decoder.padding_idx
    short, long = random_tokens(len(d), 1, 7), random_tokens(len(d), 1, 11, seed=3)
    with torch.no_grad():
        alone = m(short)[0][0]
        for padded in (torch.cat([short, torch.full((1, 4), pad)], 1), torch.cat([torch.full((1, 4), pad), short], 1)):
            out = m(torch.cat([padded, long]))[0][0]
            real = out[:7] if padded[0, 0] != pad else out[4:]
            if variant in ("alibi_dynamic_ntk",) and padded[0, 0] == pad:
                continue  # left padding shifts positions, and dynamic a depends on the position
            torch.testing.assert_close(real, alone, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("heads", [4, 8])
def test_scaled_alibi_models_use_the_scaled_slopes(heads):
    base = torch.tensor(alibi_slopes(heads))
    for scaling in ("linear", "ntk"):
        m, _ = model("alibi", "--alibi-scaling", scaling, "--alibi-scaling-factor", "5", heads=heads)
        torch.testing.assert_close(m.decoder.positions.slopes, scale_slopes(base, scaling, 5.0))
    # dynamic: row i of the mask uses a_i = max(1, (i + 1) / 4), written out entry by entry
    m, _ = model("alibi", "--alibi-scaling", "dynamic_ntk", "--alibi-train-length", "4", heads=heads)
    mask = position_mask(m.decoder.positions, 10, 10, torch.float32, "cpu", causal=True)[0]
    t = ntk_exponents(base)
    for h in range(heads):
        for i in range(10):
            a = max(1.0, (i + 1) / 4)
            for j in range(10):
                expected = -float(base[h]) / a ** float(t[h]) * (i - j) if j <= i else -math.inf
                assert mask[h, i, j].item() == pytest.approx(expected, rel=1e-5)
    # and the incremental rows are the same rows
    torch.testing.assert_close(position_mask(m.decoder.positions, 3, 10, torch.float32, "cpu", causal=True)[0], mask[:, 7:])


def test_scaling_changes_long_inputs_only_as_defined():
    tokens = random_tokens(54, 2, 12)
    plain, _ = model("alibi")
    with torch.no_grad():
        reference = plain(tokens)[0]
        one, _ = model("alibi", "--alibi-scaling", "ntk", "--alibi-scaling-factor", "1")
        torch.testing.assert_close(one(tokens)[0], reference)  # a = 1: the trained model
        dyn, _ = model("alibi", "--alibi-scaling", "dynamic_ntk", "--alibi-train-length", "8")
        out = dyn(tokens)[0]
        torch.testing.assert_close(out[:, :8], reference[:, :8])  # within the training length
        assert not torch.allclose(out[:, 8:], reference[:, 8:])  # beyond it, flatter slopes


@pytest.mark.parametrize(
    "method,flags,message",
    [
        ("alibi", ["--alibi-scaling", "dynamic_ntk"], "needs alibi_train_length"),
        ("alibi", ["--alibi-scaling", "linear", "--alibi-scaling-factor", "0"], "must be positive"),
        ("alibi", ["--alibi-scaling", "dynamic_ntk", "--alibi-train-length", "4", "--alibi-attention", "flash"], "per-query"),
        ("rotary", ["--decoder-embed-dim", "36", "--decoder-input-dim", "36", "--decoder-output-dim", "36",
                    "--decoder-attention-heads", "4"], "must be even"),
        ("t5_bias", ["--t5-num-buckets", "8", "--t5-max-distance", "3"], "--t5-max-distance"),
        ("rotary", ["--decoder-learned-pos"], "which rotary replaces"),
    ],
)
def test_bad_configurations_are_one_line_errors(method, flags, message):
    with pytest.raises(ConfigError, match=message) as err:
        m, d = build_model(f"{method}_transformer_lm", extra=[*TINY, *flags])
        m(random_tokens(len(d), 1, 4))  # some are only known at the first forward
    assert "\n" not in str(err.value.code)


@pytest.mark.parametrize("method", ["rotary", "t5_bias"])
def test_small_architectures_are_the_alibi_small_model_plus_their_own_parameters(method):
    ours, _ = build_model(f"{method}_transformer_lm_small", vocab=12000)
    alibi, _ = build_model("alibi_transformer_lm_small", vocab=12000)
    shapes = lambda m: {k: tuple(v.shape) for k, v in m.state_dict().items()}  # noqa: E731
    extra = {k: v for k, v in shapes(ours).items() if k not in shapes(alibi)}
    assert {k: v for k, v in shapes(ours).items() if k in shapes(alibi)} == shapes(alibi)
    assert extra == ({} if method == "rotary" else {"decoder.relative_attention_bias.weight": (32, 8)})
