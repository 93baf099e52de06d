"""Every causal position method (positions/) against its formula written out naively, and its
model's invariances: any batch equals each row alone, the cache equals the full forward past the
training length, no logit reads a later token, heads that are not a power of 2, gradients into
learned parameters, and one-line refusals at build. Rotary's scalings against their formulas."""
import argparse
import math

import pytest
import torch

from conftest import TINY, build_model, random_tokens
from reference import assert_reordered_cache_is_the_full_forward, assert_same_logits, naive_bias, naive_model
from fairseq_alibi.checks import ConfigError
from fairseq_alibi.models.factory import causal_positions
from fairseq_alibi.positions import Fire, Kerple, Sandwich
from fairseq_alibi.rotary_angles import apply_rotary, rotary_angles, rotary_frequencies

# Each method and flags that make its position-dependent parts matter at test lengths (FIRE's
# threshold 8: positions past 8 take the progressive interpolation, as past the training length).
METHODS = {
    "alibi": [],
    "rotary": [],
    "t5_bias": ["--t5-num-buckets", "8", "--t5-max-distance", "12"],
    "nope": [],
    "kerple_log": ["--kerple-variant", "log"],
    "kerple_power": ["--kerple-variant", "power"],
    "sandwich": [],
    "fire": ["--fire-init-threshold", "8"],
    "learned_alibi": [],
    "fox": [],
}
# 6 heads of dimension 4: a head count that is not a power of 2.
SIX_HEADS = ["--decoder-embed-dim", "24", "--decoder-input-dim", "24", "--decoder-output-dim", "24",
             "--decoder-attention-heads", "6"]


def args_of(**fields):
    """A model config as --model-overrides leaves it (argparse never sees it): the tiny dimensions."""
    base = dict(decoder_attention_heads=4, decoder_embed_dim=32, t5_num_buckets=32, t5_max_distance=128)
    return argparse.Namespace(**{**base, **fields})


def model(method, *flags, seed=0):
    torch.manual_seed(seed)
    arch = method.split("_")[0] if method.startswith("kerple") else method
    return build_model(f"{arch}_transformer_lm", extra=[*TINY, *METHODS[method], *flags])


def perturb(m):
    """Learned position parameters (of a model or a position module) away from their initial
    values, so that tests see them used."""
    torch.manual_seed(1)
    positions = m.decoder.positions if hasattr(m, "decoder") else m
    with torch.no_grad():
        for name, p in positions.named_parameters():
            p.mul_(1 + 0.3 * torch.rand_like(p))
        # Data-dependent biases (FoX's gates start near-constant, f = 1/2): made to vary with the data.
        for layer in getattr(getattr(m, "decoder", None), "layers", ()):
            for p in (layer.self_attn.layer_bias.parameters() if layer.self_attn.layer_bias is not None else ()):
                p.add_(torch.randn_like(p) * 0.5)
    return m


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("heads,head_dim", [(8, 4), (6, 8)])
def test_bias_is_the_formula_written_out(method, heads, head_dim):
    """Every (head, query, key) of the module's bias against the formula, for 8 heads and for 6
    (not a power of 2)."""
    name = method.split("_")[0] if method.startswith("kerple") else method
    flags = METHODS[method]
    fields = {flags[k].lstrip("-").replace("-", "_"): flags[k + 1] for k in range(0, len(flags), 2)}
    fields = {k: (int(v) if v.isdigit() else v) for k, v in fields.items()}
    torch.manual_seed(0)
    positions, _ = causal_positions(name, args_of(decoder_attention_heads=heads, decoder_embed_dim=heads * head_dim,
                                                  **fields))
    perturb(positions)
    T = 20
    with torch.no_grad():
        bias = positions.bias(torch.arange(T), torch.arange(T))
    naive = naive_bias(positions, heads, head_dim)  # after: KERPLE clamps its parameters before use
    if bias is None:
        assert method in ("rotary", "nope", "fox") and not positions.has_bias
        return
    assert bias.shape == (heads, T, T) and bias.dtype == torch.float32
    expected = torch.tensor([[[naive(h, i, j) for j in range(T)] for i in range(T)] for h in range(heads)])
    lower = torch.ones(T, T, dtype=torch.bool).tril()
    torch.testing.assert_close(bias[:, lower], expected[:, lower], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", list(METHODS))
def test_whole_model_matches_the_naive_equation(method):
    m, d = model(method, *SIX_HEADS)
    perturb(m)
    tokens = random_tokens(len(d), 2, 14)
    with torch.no_grad():
        torch.testing.assert_close(m(tokens)[0], naive_model(m, tokens), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("method", list(METHODS))
def test_a_batch_equals_each_row_alone_and_no_logit_reads_a_later_token(method):
    m, d = model(method)
    perturb(m)
    tokens = random_tokens(len(d), 4, 24)
    changed = tokens.clone()
    changed[:, 15:] = random_tokens(len(d), 4, 9, seed=5)
    with torch.no_grad():
        batched = m(tokens)[0]
        alone = torch.cat([m(tokens[i:i + 1])[0] for i in range(4)])
        later = m(changed)[0]
    torch.testing.assert_close(batched, alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(later[:, :15], batched[:, :15], rtol=0, atol=1e-6)
    assert not torch.allclose(later[:, 15:], batched[:, 15:])


SCALED_ROTARY = {
    "linear": ["--rotary-scaling", "linear", "--rotary-scaling-factor", "3"],
    "ntk": ["--rotary-scaling", "ntk", "--rotary-scaling-factor", "3"],
    "yarn": ["--rotary-scaling", "yarn", "--rotary-scaling-factor", "4", "--rotary-train-length", "8"],
}


@pytest.mark.parametrize("variant", [*METHODS, *(f"rotary_{s}" for s in SCALED_ROTARY)])
def test_incremental_decoding_equals_the_full_forward_past_the_training_length(variant):
    """24 tokens, 3x FIRE's threshold and YaRN's training length: every position of the cache
    path against the full forward."""
    method, flags = (variant, []) if variant in METHODS else ("rotary", SCALED_ROTARY[variant.split("_")[1]])
    m, d = model(method, *flags)
    perturb(m)
    assert_same_logits(m, m, random_tokens(len(d), 3, 24), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["kerple_log", "kerple_power", "fire", "learned_alibi", "fox", "t5_bias"])
def test_gradients_reach_the_learned_position_parameters(method):
    m, d = model(method)
    m.train()
    m(random_tokens(len(d), 2, 24))[0].float().pow(2).mean().backward()
    named = dict(m.decoder.positions.named_parameters())
    named.update({f"layer {n}: {name}": p for n, layer in enumerate(m.decoder.layers)
                  if layer.self_attn.layer_bias is not None for name, p in layer.self_attn.layer_bias.named_parameters()})
    assert named
    for name, p in named.items():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_kerple_parameters_start_as_the_official_code_and_stay_in_range():
    torch.manual_seed(3)
    log = Kerple(1000, "log")
    assert 0 < log.r1.min() and log.r1.max() <= 2 and log.r1.max() > 1.5  # U(0, 2)
    assert 0 < log.r2.min() and log.r2.max() <= 1  # U(0, 1)
    power = Kerple(1000, "power")
    assert power.r2.max() > 1.5 and power.r2.max() <= 2 and power.r1.max() <= 1
    with torch.no_grad():
        power.r1.fill_(-1.0)
        power.r2.fill_(5.0)
    bias = power.bias(torch.arange(5), torch.arange(5))
    assert float(power.r1.min()) == pytest.approx(1e-2) and float(power.r2.max()) == 2.0
    torch.testing.assert_close(bias[0, 4, 0], torch.tensor(-1e-2 * 4.0**2))


def test_sandwich_is_zero_at_distance_zero_and_scaled_per_head():
    s = Sandwich(4, 8)
    bias = s.bias(torch.arange(6), torch.arange(6))
    assert torch.equal(bias.diagonal(dim1=1, dim2=2), torch.zeros(4, 6))
    # head h (1-based) divides the same cosine sum by 8h/H: heads are multiples of each other
    torch.testing.assert_close(bias[0] / bias[3], torch.full((6, 6), 4.0).masked_fill(torch.eye(6, dtype=torch.bool), float("nan")),
                               equal_nan=True)


def test_fire_normalises_by_the_query_position_past_its_threshold():
    """Below the threshold L the normaliser is psi(L) for every query; past it, psi(i): a key at
    the same fraction of a longer past gets the same bias (progressive interpolation)."""
    f = Fire(2, init_threshold=4.0, init_c=1.0)
    bias = f.bias(torch.arange(40), torch.arange(40))
    torch.testing.assert_close(bias[:, 2, 0], bias[:, 3, 1])  # i < L: plain function of i - j
    x_at = lambda i, j: math.log(abs(i - j) + 1) / (math.log(max(4, i) + 1) + 1e-6)  # noqa: E731
    for (i, j), (k, n) in [((9, 0), (19, 0)), ((39, 0), (19, 0))]:
        assert x_at(i, j) == pytest.approx(x_at(k, n), rel=1e-5)  # the whole past maps to 1
        torch.testing.assert_close(bias[:, i, j], bias[:, k, n])


def test_fire_evaluates_long_inputs_in_chunks_of_rows_with_the_same_bias(monkeypatch):
    f = Fire(4, init_threshold=16.0)
    with torch.no_grad():
        whole = f.bias(torch.arange(300), torch.arange(300))
        monkeypatch.setattr(Fire, "CHUNK_PAIRS", 300 * 7)  # 7 rows a chunk: 43 chunks, the last short
        chunked = f.bias(torch.arange(300), torch.arange(300))
    torch.testing.assert_close(chunked, whole, rtol=0, atol=0)


@pytest.mark.parametrize("method", ["alibi", "t5_bias"])
def test_auto_and_sdpa_give_the_same_logits_on_long_inputs(method):
    """Two backends on the same weights: past 512 tokens auto evaluates ALiBi and T5 bias with the
    blocked CPU kernel; the logits are the dense mask's."""
    from fairseq_alibi.kernels import BLOCKED_ABOVE

    m, d = model(method)
    tokens = random_tokens(len(d), 1, BLOCKED_ABOVE + 40)
    with torch.no_grad():
        auto = m(tokens)[0]
        m.decoder.attention_kernel = "sdpa"
        dense = m(tokens)[0]
    torch.testing.assert_close(auto, dense, rtol=1e-4, atol=1e-5)


# --- rotary scaling against its formulas --------------------------------------------------------


def hf_style_yarn(d, base, s, L, beta_fast=32, beta_slow=1):
    """YaRN as the paper and Hugging Face's _compute_yarn_parameters define it, written out per dimension."""
    def dim_of(turns):
        return d * math.log(L / (turns * 2 * math.pi)) / (2 * math.log(base))
    low, high = max(math.floor(dim_of(beta_fast)), 0), min(math.ceil(dim_of(beta_slow)), d - 1)
    high = high + 0.001 if low == high else high
    thetas = []
    for k in range(d // 2):
        theta = base ** (-2 * k / d)
        ramp = min(max((k - low) / (high - low), 0.0), 1.0)
        thetas.append(theta / s * ramp + theta * (1 - ramp))
    return thetas, 0.1 * math.log(s) + 1


@pytest.mark.parametrize("d,base,s,L", [(16, 10000.0, 4.0, 64), (64, 10000.0, 8.0, 512), (128, 500000.0, 2.0, 2048)])
def test_rotary_scalings_are_their_formulas(d, base, s, L):
    plain = [base ** (-2 * k / d) for k in range(d // 2)]
    linear, t = rotary_frequencies(d, base, "linear", s)
    assert t == 1 and linear.tolist() == pytest.approx([x / s for x in plain], rel=1e-12)
    ntk, t = rotary_frequencies(d, base, "ntk", s)
    assert t == 1 and ntk.tolist() == pytest.approx([(base * s ** (d / (d - 2))) ** (-2 * k / d) for k in range(d // 2)], rel=1e-12)
    yarn, t = rotary_frequencies(d, base, "yarn", s, L)
    expected, temperature = hf_style_yarn(d, base, s, L)
    assert yarn.tolist() == pytest.approx(expected, rel=1e-12) and t == pytest.approx(temperature)
    # the fastest dimension keeps its frequency, the slowest is interpolated
    assert yarn[0] == pytest.approx(plain[0]) and yarn[-1] == pytest.approx(plain[-1] / s)


def test_rotary_angles_under_yarn_carry_the_temperature_into_every_logit():
    positions = torch.arange(10)
    cos, sin = rotary_angles(positions, 8, scaling="yarn", factor=4.0, train_length=4)
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    plain_cos, plain_sin = rotary_angles(positions, 8, scaling="yarn", factor=1.0, train_length=4)
    theta, temperature = rotary_frequencies(8, 10000.0, "yarn", 4.0, 4)
    assert temperature == pytest.approx(0.1 * math.log(4) + 1)
    torch.testing.assert_close((cos**2 + sin**2).double(), torch.full((10, 4), temperature**2, dtype=torch.float64))
    qr, kr = apply_rotary(q[None], cos[3:4], sin[3:4])[0], apply_rotary(k[None], cos[1:2], sin[1:2])[0]
    angle = 2 * theta  # i - j = 2
    even, odd = q.view(4, 2).unbind(-1)
    ke, ko = k.view(4, 2).unbind(-1)
    expected = temperature**2 * ((even * ke + odd * ko) * angle.cos() + (even * ko - odd * ke) * angle.sin()).sum()
    assert float(qr @ kr) == pytest.approx(float(expected), rel=1e-5)
    assert torch.equal(plain_cos, rotary_angles(positions, 8)[0])  # factor 1: plain rotary


def test_scaled_rotary_changes_nothing_at_factor_one_and_the_long_inputs_otherwise():
    tokens = random_tokens(54, 2, 24)
    plain, _ = model("rotary")
    with torch.no_grad():
        reference = plain(tokens)[0]
        for name in SCALED_ROTARY:
            one, _ = model("rotary", *SCALED_ROTARY[name][:2], "--rotary-scaling-factor", "1", "--rotary-train-length", "8")
            torch.testing.assert_close(one(tokens)[0], reference)
            scaled, _ = model("rotary", *SCALED_ROTARY[name])
            assert not torch.allclose(scaled(tokens)[0], reference, atol=1e-4)


# --- refused at build, in one line --------------------------------------------------------------


@pytest.mark.parametrize("method,fields,message", [
    ("rotary", dict(rotary_scaling="yarn", rotary_scaling_factor=-2.0, rotary_train_length=64), "at least 1"),
    ("rotary", dict(rotary_scaling="linear", rotary_scaling_factor=0.5), "at least 1"),
    ("rotary", dict(rotary_scaling="yarn", rotary_scaling_factor=4.0), "needs rotary_train_length"),
    ("rotary", dict(rotary_scaling="cubic"), "unknown --rotary-scaling 'cubic'"),
    ("rotary", dict(rotary_base=0.0), "finite number above 1"),
    ("rotary", dict(rotary_base=-1.0), "finite number above 1"),
    ("rotary", dict(rotary_base=float("inf")), "--rotary-base must be a finite number"),
    ("rotary", dict(decoder_embed_dim=36, decoder_attention_heads=4), "must be even"),
    ("alibi", dict(alibi_scaling="linear", alibi_scaling_factor=-4.0), "must be positive"),
    ("alibi", dict(alibi_scaling="ntk", alibi_scaling_factor=0.5), "at least 1"),
    ("alibi", dict(alibi_train_length=-5), "positive integer"),
    ("alibi", dict(alibi_attention="flsh"), "unknown --alibi-attention"),
    ("kerple", dict(kerple_variant="cubic"), "unknown --kerple-variant 'cubic': use one of log, power"),
    ("sandwich", dict(decoder_embed_dim=36, decoder_attention_heads=4), "must be even"),
    ("fire", dict(fire_init_c=0.0), "must start positive"),
    ("fire", dict(fire_init_threshold=float("inf")), "--fire-init-threshold must be a finite number"),
    ("fire", dict(fire_init_c=float("nan")), "--fire-init-c must be a finite number"),
    ("fox", dict(attention_kernel="blocked"), "takes sdpa or separable only"),
    ("fox", dict(attention_kernel="flash"), "takes sdpa or separable only"),
    ("t5_bias", dict(t5_num_buckets=1), "--t5-num-buckets"),
])
def test_bad_options_are_refused_in_one_line_at_build(method, fields, message):
    with pytest.raises(ConfigError, match=message) as err:
        causal_positions(method, args_of(**fields))
    assert "\n" not in str(err.value.code) and "Traceback" not in str(err.value.code)


@pytest.mark.parametrize("method,flags", [
    ("rotary", ["--rotary-scaling-factor", "-2", "--rotary-scaling", "linear"]),
    ("kerple_log", ["--decoder-attention-heads", "3"]),
    ("fire", ["--fire-mlp-width", "0"]),
])
def test_bad_flags_are_refused_in_one_line_when_the_model_is_built(method, flags):
    with pytest.raises(ConfigError) as err:
        model(method, *flags)
    assert "\n" not in str(err.value.code)


def test_small_and_wiki103_architectures_have_alibis_dimensions():
    from fairseq.models import ARCH_CONFIG_REGISTRY

    shapes = lambda m: {k: tuple(v.shape) for k, v in m.state_dict().items()}  # noqa: E731
    alibi = shapes(build_model("alibi_transformer_lm_small", vocab=12000)[0])
    for method in ("nope", "kerple", "sandwich", "fire"):
        ours = shapes(build_model(f"{method}_transformer_lm_small", vocab=12000)[0])
        own = {k for k in ours if k not in alibi}
        assert {k: v for k, v in ours.items() if k not in own} == alibi
        assert all(k.startswith(f"decoder.{method}.") for k in own) and bool(own) == (method in ("kerple", "fire"))
        assert f"{method}_transformer_lm_wiki103" in ARCH_CONFIG_REGISTRY


def test_every_registered_method_appears_wherever_methods_are_listed():
    """Adding a method is adding a file to positions/: its architectures, these tests' table (so every
    test above covers it) and the methods tables of the README and docs/methods.md all list it (the
    lab's lists: tests/lab/test_lab_layout.py)."""
    from conftest import REPO
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_alibi.plugin  # noqa: F401
    from fairseq_alibi.positions import METHODS as REGISTERED

    documented = [open(f"{REPO}/{page}").read() for page in ("README.md", "docs/methods.md")]
    for method in REGISTERED:
        for suffix in ("", "_small", "_wiki103"):
            assert f"{method}_transformer_lm{suffix}" in ARCH_MODEL_REGISTRY, method
        assert any(name == method or name.startswith(f"{method}_") for name in METHODS), method
        assert all(f"| `{method}` |" in page for page in documented), method


@pytest.mark.parametrize("method", ["alibi", "fox", "rotary"])
def test_the_cache_reordered_as_beam_search_does_equals_the_full_forward(method):
    """Beam search reorders the cache between steps (fairseq's reorder_incremental_state): what a
    method keeps per key (FoX: its cumulated gates) follows its row."""
    m, d = model(method)
    perturb(m)
    assert_reordered_cache_is_the_full_forward(m, random_tokens(len(d), 3, 16), torch.tensor([2, 0, 0]))


def test_the_math_positions_and_kernels_import_without_fairseq():
    """The library apart from fairseq: importing the registries loads torch, not fairseq; `import
    fairseq_alibi.plugin` registers the models."""
    import subprocess
    import sys

    code = ("import sys, fairseq_alibi.positions, fairseq_alibi.kernels, fairseq_alibi.methods, fairseq_alibi.attention_options, "
            "fairseq_alibi.tools.checkpoints, fairseq_alibi.tools.files; assert 'fairseq' not in sys.modules, 'fairseq imported'; "
            "import fairseq_alibi.plugin; from fairseq.models import ARCH_MODEL_REGISTRY; "
            "assert 'fox_transformer_lm_small' in ARCH_MODEL_REGISTRY")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_fox_evaluates_long_inputs_in_blocks_of_rows_with_the_same_bias(monkeypatch):
    """Without gradients FoX's c_i - c_j is made a block of query rows at a time: the same logits."""
    from fairseq_alibi.positions.fox import ForgetGate

    m, d = model("fox")
    perturb(m)
    tokens = random_tokens(len(d), 2, 40)
    with torch.no_grad():
        whole = m(tokens)[0]
        monkeypatch.setattr(ForgetGate, "CHUNK_PAIRS", 40 * 7)  # blocks of 7 rows
        torch.testing.assert_close(m(tokens)[0], whole, rtol=0, atol=0)


@pytest.mark.parametrize("cached", [0, 9])
def test_fox_blocks_of_rows_hold_c_i_minus_c_j_to_the_diagonal_and_minus_inf_past_the_blocks(cached, monkeypatch):
    """The blocked bias against the formula written out: c_i - c_j (fp64, then fp32) for every key a
    query sees; past its causal diagonal (masked by attention) the formula up to its block's last
    query's diagonal and -inf after it; with `cached` keys before the new tokens (query i at
    position cached + i) and left padding in one row."""
    from fairseq_alibi.positions.fox import ForgetGate

    torch.manual_seed(0)
    gate, new, heads = ForgetGate(16, 4), 23, 4
    gate.proj.weight.data.normal_(0, 1)
    x, padding = torch.randn(new, 2, 16), torch.zeros(2, cached + new, dtype=torch.bool)
    padding[1, :3] = True
    state = torch.randn(2, heads, cached, dtype=torch.float64).cumsum(-1) if cached else None
    monkeypatch.setattr(ForgetGate, "CHUNK_PAIRS", (cached + new) * 5)  # blocks of 5 rows, the last short
    with torch.no_grad():
        bias, c = gate(x, None, None, padding, state)
    assert bias.shape == (2, heads, new, cached + new)
    for i in range(new):
        block_end = min(new, i // 5 * 5 + 5)
        for j in range(cached + new):
            if j < cached + block_end:
                assert torch.equal(bias[:, :, i, j], (c[..., cached + i] - c[..., j]).float()), (i, j)
            else:
                assert torch.isneginf(bias[:, :, i, j]).all(), (i, j)
