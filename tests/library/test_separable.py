"""The separable kernel (kernels/separable.py): ALiBi, learned slopes and FoX as extra query/key
columns on PyTorch's fused causal attention, against the dense reference: the naive formula in
fp64 for one call (8L and 128L), the same weights on the sdpa path for whole models (logits and
every gradient, the slopes' and the gates' included), packed documents, a cache, half precision."""
import contextlib
import math

import pytest
import torch

from conftest import TINY, build_model, random_tokens
from reference import assert_same_logits
from test_documents import SEPARATOR, VOCAB
from test_documents import model as document_model
from test_position_methods import perturb
from fairseq_alibi.alibi_bias import alibi_slopes
from fairseq_alibi.checks import ConfigError
from fairseq_alibi.documents import find_documents
from fairseq_alibi.kernels import KERNELS, choose_kernel, takes_bias
from fairseq_alibi.kernels.separable import SKIPPED, SPLITS, SeparableAttend, skip_reach, split

L = 64  # the lab's training length: 8L and 128L below


def naive(q, k, v, slopes, rows=512):
    """softmax(q k^T / sqrt(d) - m_h (i - j), future -inf) v in fp64, queries the last T of S keys,
    `rows` queries at a time (memory)."""
    q, k, v = q.double(), k.double(), v.double()
    query_len, key_len = q.size(2), k.size(2)
    out = []
    for start in range(0, query_len, rows):
        i = torch.arange(key_len - query_len + start, key_len - query_len + min(start + rows, query_len))[:, None].double()
        j = torch.arange(key_len)[None, :].double()
        scores = q[:, :, start:start + rows] @ k.transpose(-1, -2) / q.size(-1) ** 0.5
        scores = scores - slopes.double()[:, None, None] * (i - j)
        out.append(scores.masked_fill(j > i, float("-inf")).softmax(-1) @ v)
    return torch.cat(out, 2)


def dense(q, k, v, slopes, dtype=None):
    """The dense path: SDPA with the (heads, T, T) mask in the inputs' dtype."""
    from fairseq_alibi.alibi_bias import alibi_mask

    dtype = dtype or q.dtype
    return torch.nn.functional.scaled_dot_product_attention(
        q.to(dtype), k.to(dtype), v.to(dtype), attn_mask=alibi_mask(slopes, q.size(2), k.size(2)).to(dtype))


# The paper's slopes for 8 heads: the steepest and the gentlest (two heads keep 128L's fp64 reference small).
EDGE_SLOPES = torch.tensor([alibi_slopes(8)[0], alibi_slopes(8)[-1]])


def tolerance(dense_error, span, slope, dtype=torch.float32):
    """The separable kernel's bound: the dense path's own error plus the rounding of the largest
    term it carries (slope x half the span, relative to the middle key) in the fp32 accumulator,
    times the head dimension's scale (a few ulps of that magnitude per logit)."""
    return 2 * dense_error + 16 * slope * span / 2 * 2.0**-24 + 1e-7


class Inputs(dict):
    """length -> (q, k, v, the formula's output in fp64), each made once, when first asked for."""

    def __missing__(self, length):
        torch.manual_seed(length)
        q, k, v = (torch.randn(1, 2, length, 16) for _ in range(3))
        self[length] = (q, k, v, naive(q, k, v, EDGE_SLOPES))
        return self[length]


@pytest.fixture(scope="module")
def inputs():
    return Inputs()


@pytest.mark.parametrize("length", [8 * L, pytest.param(128 * L, marks=pytest.mark.slow)], ids=["8L", "128L"])
def test_alibi_as_key_columns_equals_the_formula_in_fp32(length, inputs):
    slopes = EDGE_SLOPES
    q, k, v, exact = inputs[length]
    dense_error = (dense(q, k, v, slopes).double() - exact).abs().max().item()
    got = SeparableAttend(slopes).attend(q, k, v, 0.0)
    error = (got.double() - exact).abs().max().item()
    assert error <= tolerance(dense_error, length, max(slopes).item())


@pytest.mark.parametrize("magnitude,opposed", [(1.0, False), (3.0, False), (2.0, True)])
def test_the_keys_a_head_skips_weigh_less_than_the_bound_in_every_row(magnitude, opposed):
    """skip_reach's promise, checked in fp64 on every row: the keys past a head's reach weigh at most
    SKIPPED (2^-24) of the row together; inputs three times larger reach further. opposed: each query's
    own key points away from it (its own logit far below the row's others: the bound's worst case)."""
    torch.manual_seed(1)
    heads, length = 8, 1024
    q, k = (magnitude * torch.randn(1, heads, length, 16) for _ in range(2))
    if opposed:
        k = -q + 0.1 * k
    slopes = torch.tensor(alibi_slopes(heads))
    reach = skip_reach(q, k, slopes, 16 ** -0.5)
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    scores = (q.double() @ k.double().transpose(-1, -2)) / 4 - slopes.double()[:, None, None] * (i - j)
    weights = scores.masked_fill(j > i, float("-inf")).softmax(-1)[0]
    for h in range(heads):
        skipped = weights[h].masked_fill(i - j <= reach[h], 0).sum(-1)
        assert skipped.max().item() <= SKIPPED, (h, reach[h], skipped.max().item())
    if magnitude == 1.0 and not opposed:  # the steepest head skips most keys; larger inputs reach further
        assert min(reach) < length / 8 and skip_reach(3 * q, 3 * k, slopes, 0.25)[0] > 4 * reach[0]


@pytest.mark.parametrize("length,magnitude", [(1000, 1.0), (2048, 2.0), pytest.param(8192, 1.0, marks=pytest.mark.slow)])
def test_evaluation_skipping_keys_per_head_equals_the_formula(length, magnitude, monkeypatch):
    """ALiBi's evaluation on CPU skips, per head, the keys its bias silences (chunks of its reach, the
    last one partial at 1,000 tokens): the output is the fp64 formula's within the dense path's own
    error plus the bound on what was skipped (2 x SKIPPED x max|v|) and the rounding of the terms it
    carries (a chunk's: at most the slope times the chunk); heads that skip nothing read every key."""
    import fairseq_alibi.kernels.separable as kernel

    chunked = []
    original = kernel.by_chunks
    monkeypatch.setattr(kernel, "by_chunks", lambda *a: chunked.append(a[5]) or original(*a))
    torch.manual_seed(length)
    slopes = torch.tensor(alibi_slopes(8))
    batch = 2 if length <= 2048 else 1  # the fp64 formula at 8,192 tokens: 0.5 GiB a head
    if length > 2048:  # the two steepest of the 8 heads (which skip) and the flattest: the formula's time is per head
        slopes = slopes[[0, 1, 7]]
    heads = len(slopes)
    q, k = (magnitude * torch.randn(batch, heads, length, 16) for _ in range(2))
    v = torch.randn(batch, heads, length, 16)
    exact = naive(q, k, v, slopes)
    with torch.no_grad():
        got = SeparableAttend(slopes).attend(q, k, v, 0.0).double()
        dense_error = (dense(q, k, v, slopes).double() - exact).abs().max().item()
    assert len(chunked) >= 2 and all(c < length / 3 for c in chunked)
    bound = 2 * dense_error + 2 * SKIPPED * v.abs().max().item() + tolerance(0, length, slopes[0].item())
    assert (got - exact).abs().max().item() <= bound


@pytest.mark.parametrize("query_len", [1, 7, 40])
def test_queries_of_a_cache_are_bottom_right_aligned(query_len):
    """T = 1 sees every key; 1 < T < S PyTorch's lower-right causal mask."""
    torch.manual_seed(query_len)
    heads, key_len = 4, 40
    q = torch.randn(2, heads, query_len, 8)
    k, v = torch.randn(2, heads, key_len, 8), torch.randn(2, heads, key_len, 8)
    slopes = torch.tensor(alibi_slopes(heads))
    exact = naive(q, k, v, slopes)
    torch.testing.assert_close(SeparableAttend(slopes).attend(q, k, v, 0.0).double(), exact, rtol=1e-5, atol=1e-5)


def test_split_columns_sum_back_to_the_fp32_terms():
    """Half precision: the terms (up to 2^14 here) over SPLITS columns, each exact in its dtype,
    sum back to fp32's precision; one bf16 column alone would be off by up to 32."""
    terms = torch.arange(0, 2**14, 0.37, dtype=torch.float32)
    for dtype in (torch.float16, torch.bfloat16):
        parts = split(terms, dtype, SPLITS[dtype])
        total = sum(p.float() for p in parts)
        assert (total - terms).abs().max() <= terms.abs().max() * 2.0**-20
    assert (terms.to(torch.bfloat16).float() - terms).abs().max() > 8


@pytest.mark.slow  # 8,192 tokens in fp64: make test, not the edit-test loop
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_precision_is_as_close_to_fp32_as_the_dense_half_path(dtype, inputs):
    """At 128L with the paper's steepest slope the terms reach 2,048: split over columns, the
    kernel's half-precision output is as close to the exact one as the dense mask in half precision."""
    slopes = EDGE_SLOPES
    q, k, v, exact = inputs[128 * L]
    got = SeparableAttend(slopes).attend(q.to(dtype), k.to(dtype), v.to(dtype), 0.0)
    dense_error = (dense(q, k, v, slopes, dtype).double() - exact).abs().max().item()
    assert (got.double() - exact).abs().max().item() <= 1.5 * dense_error


def twins(method, *flags, separator=None):
    """The same (perturbed) weights on the sdpa path and on the separable kernel."""
    if separator:
        return (document_model(method, "--attention-kernel", "sdpa", *flags, separator=separator)[0],
                *document_model(method, "--attention-kernel", "separable", *flags, separator=separator))
    models = []
    for kernel in ("sdpa", "separable"):
        torch.manual_seed(0)
        m, d = build_model(f"{method}_transformer_lm", vocab=VOCAB, extra=[*TINY, "--attention-kernel", kernel, *flags])
        models.append(perturb(m))
    return (*models, d)


def gradients(m, tokens):
    torch.manual_seed(0)  # the same dropout masks for both
    m.train()
    m.zero_grad()
    m(tokens)[0].logsumexp(-1).mean().backward()
    m.eval()
    return {name: p.grad for name, p in m.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("separator", [None, pytest.param(SEPARATOR, marks=pytest.mark.slow)], ids=["packed", "documents"])
@pytest.mark.parametrize("method", ["alibi", "learned_alibi", "fox"])
def test_a_model_on_the_separable_kernel_gives_the_dense_logits_and_gradients(method, separator, monkeypatch):
    """Logits and every parameter's gradient, the learned slopes' and FoX's gates' own included,
    as on the dense path; with packed documents, rows of 1, 2 and 4 documents batched together."""
    import fairseq_alibi.kernels.separable as kernel

    calls = []
    original = kernel.causal_attention
    monkeypatch.setattr(kernel, "causal_attention", lambda *a, **k: calls.append(1) or original(*a, **k))
    reference, separable, d = twins(method, separator=separator)
    tokens = random_tokens(VOCAB + 3, 3, 70, seed=5)
    if separator:
        tokens[1, 30] = d.index(SEPARATOR)
        tokens[2, [3, 4, 50]] = d.index(SEPARATOR)
    assert_same_logits(separable, reference, tokens)
    expected, got = gradients(reference, tokens), gradients(separable, tokens)
    assert set(got) == set(expected)
    own = {"alibi": [], "learned_alibi": ["decoder.learned_alibi.log_slopes"],
           "fox": [n for n in expected if "layer_bias" in n]}[method]
    assert all(expected[name].norm() > 0 for name in own) and (own or method == "alibi")
    for name, grad in expected.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-4, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")
    assert calls  # the kernel ran (not left to sdpa)


@pytest.mark.parametrize("method", ["alibi", "learned_alibi", "fox"])
def test_decoding_a_token_at_a_time_gives_the_full_forward(method):
    _, separable, d = twins(method)
    tokens = random_tokens(VOCAB + 3, 2, 20, seed=2)
    with torch.no_grad():
        full = separable(tokens)[0]
        state = {}
        steps = torch.cat([separable(tokens[:, : t + 1], incremental_state=state)[0] for t in range(20)], dim=1)
    torch.testing.assert_close(steps, full, rtol=1e-4, atol=1e-5)


def test_the_kernel_takes_per_key_biases_only_and_says_why_in_one_line():
    from fairseq_alibi.positions import METHODS
    from fairseq_alibi.positions.position_method import build_method

    def positions(method, **options):
        return build_method(method, METHODS[method].Config(**options), 4, 8, 32)

    for method, options in [("kerple", {}), ("t5_bias", {}), ("fire", {}),
                            ("alibi", dict(alibi_scaling="dynamic_ntk", alibi_train_length=8))]:
        assert "separable" in takes_bias("separable", positions(method, **options))
    for method in ("alibi", "learned_alibi", "fox", "nope", "rotary"):
        assert takes_bias("separable", positions(method)) is None
    with pytest.raises(ConfigError, match="separable") as err:  # asked for by name: refused when built
        build_model("kerple_transformer_lm", vocab=VOCAB, extra=[*TINY, "--attention-kernel", "separable"])
    assert "\n" not in str(err.value.code)


def test_auto_trains_a_bias_with_gradients_on_it_on_cpu_and_its_earlier_rule_never():
    """auto's rule (benchmarks/separable-cpu.md, auto-separable-cpu.md): on CPU it trains learned slopes
    and FoX on the separable kernel, at every length (the dense mask differentiates heads x T x S; the
    blocked kernel gives the slopes no gradient), evaluates FoX on it (5-7x the dense mask's speed), and
    ALiBi's slopes (fixed or learned) past 512 tokens (each head skipping the keys its bias silences, faster there than blocked:
    benchmarks/kernels-cpu.md); fixed-slope ALiBi's training and the methods it cannot add stay where
    they were. auto-no-separable, the rule before it (what the committed experiments trained and
    scored with), never picks it; a kernel named as a rule is refused."""
    x = torch.zeros(1, 1, 32)
    learned = build_model("learned_alibi_transformer_lm", vocab=VOCAB, extra=TINY)[0].decoder.positions
    fox = build_model("fox_transformer_lm", vocab=VOCAB, extra=TINY)[0].decoder.positions
    alibi = build_model("alibi_transformer_lm", vocab=VOCAB, extra=TINY)[0].decoder.positions
    kerple = build_model("kerple_transformer_lm", vocab=VOCAB, extra=TINY)[0].decoder.positions
    for length in (64, 1024):
        with torch.enable_grad():
            assert choose_kernel("auto", learned, x, length, False, True) == "separable"  # dropout too
            assert choose_kernel("auto", fox, x, length, False, False) == "separable"
            assert choose_kernel("auto-no-separable", learned, x, length, False, False) == "sdpa"
            assert choose_kernel("auto-no-separable", fox, x, length, False, False) == "sdpa"
            assert choose_kernel("auto", kerple, x, length, False, False) == "sdpa"  # not a per-key term
            assert choose_kernel("auto", alibi, x, length, False, False) == ("sdpa" if length <= 512 else "blocked")
        with torch.no_grad():
            for rule, long in (("auto", "separable"), ("auto-no-separable", "blocked")):
                for slopes in (learned, alibi):
                    assert choose_kernel(rule, slopes, x, length, False, False) == ("sdpa" if length <= 512 else long)
            assert choose_kernel("auto", fox, x, length, False, False) == "separable"
            assert choose_kernel("auto-no-separable", fox, x, length, False, False) == "sdpa"
            assert choose_kernel("auto", alibi, x.double(), length, False, False) == ("sdpa" if length <= 512 else "separable")
            assert choose_kernel("auto", alibi, x.bfloat16(), length, False, False) == ("sdpa" if length <= 512 else "blocked")
    with torch.enable_grad():
        assert choose_kernel("auto", learned, x, 64, True, False) == "sdpa"  # padding: the dense mask
        assert choose_kernel("separable", learned, x, 64, True, False) == "sdpa"
    from fairseq_alibi.kernels import KERNEL_NAMES, Kernel, register

    assert KERNEL_NAMES[:2] == ("auto", "auto-no-separable")
    impostor = Kernel()
    impostor.name = "auto-no-separable"
    with pytest.raises(ValueError, match="named as an auto rule"):
        register(impostor)


def test_query_entry_is_a_power_of_two_at_least_sqrt_d():
    for dim in (4, 16, 24, 64, 72, 128):
        entry = 2.0 ** math.ceil(math.log2(dim) / 2)
        assert entry >= dim**0.5 and math.log2(entry).is_integer()


def test_denormals_are_flushed_inside_the_kernel_only_and_change_nothing_fp32_keeps(monkeypatch):
    """A term column spreads the logits into fp32's denormal range, where PyTorch's fused CPU backward
    slows (benchmarks/RESULTS.md); the kernel flushes the calling thread's denormals while it attends,
    forward and backward, and leaves them unflushed after. Bound: a softmax weight under 2^-126 becomes
    0, which moves an output or gradient by less than 2^-126 x S x max|v|: against the same kernel
    without flushing, equal to 1e-30; against the dense path, within the kernel's own bound."""
    from fairseq_alibi.kernels import separable

    torch.manual_seed(0)
    heads, length, dim = 4, 256, 16
    slopes = torch.tensor([0.5, 0.7, 0.9, 1.1])  # 256 x 1.1: logits spread past exp's denormal range
    q, k, v = (torch.randn(2, heads, length, dim).requires_grad_() for _ in range(3))
    grad = torch.randn(2, heads, length, dim)

    def run(attend):
        for x in (q, k, v):
            x.grad = None
        out = attend()
        out.backward(grad)
        return [out.detach(), *(x.grad.clone() for x in (q, k, v))]

    flushed = run(lambda: SeparableAttend(slopes).attend(q, k, v, 0.0))
    assert (torch.tensor([1e-39]) * 1.0).item() != 0.0  # the thread's denormals are kept again after the kernel
    expected = run(lambda: dense(q, k, v, slopes))
    monkeypatch.setattr(separable, "flushed", contextlib.nullcontext)
    unflushed = run(lambda: SeparableAttend(slopes).attend(q, k, v, 0.0))
    for a, b, c in zip(flushed, unflushed, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-30)
        torch.testing.assert_close(a, c, rtol=0, atol=tolerance(0, length, float(slopes.max())))
