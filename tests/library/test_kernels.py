"""Every attention kernel gives the reference path's logits; unavailable ones skip or refuse clearly."""
import pytest
import torch

from conftest import TINY, build_model, random_tokens
from reference import assert_same_logits
from fairseq_alibi.alibi_bias import alibi_mask, alibi_slopes, scale_slopes
from fairseq_alibi.checks import ConfigError
from fairseq_alibi.kernels import BLOCK, BLOCKED_ABOVE
from fairseq_alibi.kernels import (BlockedAlibiAttention, blocked_attention, build_kernel, choose_kernel,
                                   flash_available, flash_installed)


def chosen(model, x, length, padding=False):
    """The kernel the model's decoder picks for an input of `length` tokens (x: its dtype and device)."""
    dec = model.decoder
    return choose_kernel(dec.attention_kernel, dec.positions, x, length, padding,
                         dec.training and dec.attention_dropout > 0)


def twins(kernel, dtype=torch.float32, device="cpu"):
    """The same weights under the sdpa reference path and under `kernel`."""
    torch.manual_seed(0)
    reference, d = build_model(extra=[*TINY, "--alibi-attention", "sdpa"])
    torch.manual_seed(0)
    other, _ = build_model(extra=[*TINY, "--alibi-attention", kernel])
    return reference.to(device, dtype), other.to(device, dtype), d


def test_flex_attention_matches_the_reference_path():
    reference, flex, d = twins("flex")
    assert_same_logits(flex, reference, random_tokens(len(d), 2, 24))


def test_auto_uses_the_reference_path_without_flash_attention():
    model, _ = build_model(extra=TINY)
    x = torch.zeros(1, 1)
    expected = "flash" if flash_available(x) is None else "sdpa"
    assert chosen(model, x, 16) == expected


def test_forcing_flash_without_flash_attn_is_a_one_line_error_when_built():
    if flash_installed() is None:
        pytest.skip("flash-attn is installed here")
    with pytest.raises(ConfigError, match="--alibi-attention flash: flash-attn") as err:
        build_model(extra=[*TINY, "--alibi-attention", "flash"])
    assert "\n" not in str(err.value.code)


def test_a_kernel_that_cannot_take_the_input_leaves_it_to_sdpa(monkeypatch, caplog):
    """No configuration error from inside forward: flash on a CPU fp32 input (flash-attn present),
    blocked or flex while training with attention dropout, run as sdpa, with one warning."""
    import fairseq_alibi.checks as base
    import fairseq_alibi.kernels.flash as flash

    monkeypatch.setattr(flash, "flash_installed", lambda: None)  # as if flash-attn were installed
    for kernel, flags, mode in [("flash", [], "eval"), ("blocked", ["--attention-dropout", "0.1"], "train"),
                                ("flex", ["--attention-dropout", "0.1"], "train")]:
        torch.manual_seed(0)
        model, d = build_model(extra=[*TINY, "--alibi-attention", kernel, *flags])
        x = torch.zeros(1, 1)
        getattr(model, mode)()
        caplog.clear()
        base._warned.clear()
        assert chosen(model, x, BLOCK + 8) == "sdpa"
        assert caplog.text.count(f"attention kernel {kernel} cannot run here") == 1
    torch.manual_seed(0)
    reference, d = build_model(extra=[*TINY, "--alibi-attention", "sdpa"])
    torch.manual_seed(0)
    flash, _ = build_model(extra=[*TINY, "--alibi-attention", "flash"])
    assert_same_logits(flash, reference, random_tokens(len(d), 2, 20))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlashAttention-2 needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_flash_attention_matches_the_reference_path_on_gpu(dtype):
    probe = torch.zeros(1, device="cuda", dtype=dtype)
    if flash_available(probe):
        pytest.skip(flash_available(probe))
    reference, flash, d = twins("flash", dtype, "cuda")
    assert_same_logits(flash, reference, random_tokens(len(d), 2, 64).cuda(), rtol=2e-2, atol=2e-2)


def documented_flash_attn_func(q, k, v, dropout_p=0.0, causal=False, alibi_slopes=None):
    """FlashAttention-2's documented semantics, written naively: (B, T, H, d) layout, softmax
    scale 1/sqrt(d), causal aligned bottom-right, bias -slope * |i + S - T - j| (fp32 slopes)."""
    assert causal and alibi_slopes.dtype == torch.float32 and dropout_p == 0.0
    T, S, d = q.size(1), k.size(1), q.size(-1)
    i = torch.arange(T)[:, None] + S - T
    j = torch.arange(S)[None, :]
    bias = -alibi_slopes[:, None, None] * (i - j).abs()
    scores = torch.einsum("bthd,bshd->bhts", q, k) / d**0.5 + bias
    scores = scores.masked_fill(j > i, float("-inf"))
    return torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v)


def test_flash_path_passes_fa2_its_layout_and_slopes(monkeypatch):
    """On CPU the real kernel cannot run: check our call against FA2's documented contract."""
    import fairseq_alibi.kernels.flash as flash

    monkeypatch.setattr(flash, "flash_attn_func", documented_flash_attn_func, raising=False)
    monkeypatch.setattr(flash, "flash_available", lambda x: None)
    monkeypatch.setattr(flash, "flash_installed", lambda: None)
    reference, flash, d = twins("flash")
    assert_same_logits(flash, reference, random_tokens(len(d), 2, 20))


def dense_alibi_attention(q, k, v, slopes):
    """softmax(q k^T / sqrt(d) - m (i - j), future -inf) v, written out in the inputs' dtype."""
    scores = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5 + alibi_mask(slopes, q.size(2), k.size(2)).to(q.dtype)
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("heads", [8, 12])
@pytest.mark.parametrize("query_len,key_len,block", [(1000, 1000, 256), (777, 777, 100), (300, 1037, 64),
                                                     (5, 700, 256), (256, 256, 256), (257, 300, 256)])
@pytest.mark.parametrize("magnitude", [1.0, 6.0])
def test_blocked_alibi_attention_equals_dense_attention(heads, query_len, key_len, block, magnitude):
    """Lengths that are and are not multiples of the block, queries bottom-right aligned (a cache),
    the paper's slopes and NTK-scaled ones, logits that vary little or a lot (the keys each head
    skips depend on it): as exact in fp32 as the dense fp32 mask, against fp64."""
    torch.manual_seed(heads + query_len)
    q, k, v = (torch.randn(2, heads, n, 16) for n in (query_len, key_len, key_len))
    q = q * magnitude
    for slopes in (torch.tensor(alibi_slopes(heads)), scale_slopes(torch.tensor(alibi_slopes(heads)), "ntk", 4.0)):
        exact = dense_alibi_attention(q.double(), k.double(), v.double(), slopes.double())
        dense_error = (dense_alibi_attention(q, k, v, slopes).double() - exact).abs().max()
        out = blocked_attention(q, k, v, alibi_mask(slopes, block, block), 0, far_slopes=slopes, block=block)
        assert (out.double() - exact).abs().max() <= 2 * dense_error + 1e-7


def test_blocked_alibi_attention_skips_the_keys_steep_heads_silenced(monkeypatch):
    """At 4096 tokens the steepest head (m = 1/2) reads a window of keys, the flattest all of them."""
    import fairseq_alibi.kernels.blocked as blocked

    calls = []
    original = blocked.attention_with_lse
    monkeypatch.setattr(blocked, "attention_with_lse",
                        lambda q, k, v, mask, scale: calls.append((q.size(1), k.size(2))) or original(q, k, v, mask, scale))
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 8, 4096, 16) for _ in range(3))
    slopes = torch.tensor(alibi_slopes(8))
    blocked_attention(q, k, v, alibi_mask(slopes, 256, 256), 0, far_slopes=slopes, block=256)
    one_head = [keys for heads, keys in calls if heads == 1]
    assert one_head and min(one_head) < 256  # the steepest head: a window of fewer keys than a block
    assert max(keys for heads, keys in calls) == 4096 - 256  # the last block's far keys, flat heads


@pytest.mark.parametrize("extra,length", [([], 700), (["--decoder-attention-heads", "12",
                                          "--decoder-embed-dim", "48", "--decoder-input-dim", "48",
                                          "--decoder-output-dim", "48"], 530),
                                          (["--alibi-scaling", "linear", "--alibi-scaling-factor", "2"], 530)])
@pytest.mark.parametrize("rule,kernel", [("auto", "separable"), ("auto-no-separable", "blocked")])
def test_auto_evaluates_long_inputs_on_cpu_with_the_separable_or_blocked_kernel(extra, length, rule, kernel):
    """A CPU forward longer than 512 tokens takes the separable kernel (its heads skipping the keys
    their bias silences), or under the rule before it the blocked kernel, with sdpa's logits, in a
    full forward and step by step (the cache path stays on the mask)."""
    torch.manual_seed(0)
    reference, d = build_model(extra=[*TINY, *extra, "--alibi-attention", "sdpa"])
    torch.manual_seed(0)
    model, _ = build_model(extra=[*TINY, *extra, "--alibi-attention", rule])
    x = torch.zeros(1, 1)
    with torch.no_grad():
        assert chosen(model, x, BLOCKED_ABOVE + 1) == kernel
        assert chosen(model, x, BLOCKED_ABOVE) == "sdpa"
    assert_same_logits(model, reference, random_tokens(len(d), 2, length))


@pytest.mark.parametrize("magnitude", [1.0, 6.0])
@pytest.mark.parametrize("query_len,key_len,block", [(700, 700, 256), (300, 650, 64), (600, 600, 100)])
def test_blocked_alibi_gradients_equal_dense_gradients(query_len, key_len, block, magnitude):
    """The backward (the fused kernel's, per part of each block, with the merged log-sum-exp)
    gives the dense path's gradients for q, k and v, as exact in fp32 as dense, against fp64."""
    torch.manual_seed(query_len + block)
    q, k, v = (torch.randn(2, 8, n, 16) for n in (query_len, key_len, key_len))
    q, grad = q * magnitude, torch.randn(2, 8, query_len, 16)
    slopes = torch.tensor(alibi_slopes(8))
    exact = [t.double().requires_grad_() for t in (q, k, v)]
    dense_alibi_attention(*exact, slopes.double()).backward(grad.double())
    dense = [t.clone().requires_grad_() for t in (q, k, v)]
    dense_alibi_attention(*dense, slopes).backward(grad)
    blocked = [t.clone().requires_grad_() for t in (q, k, v)]
    BlockedAlibiAttention.apply(*blocked, alibi_mask(slopes, block, block), slopes, block).backward(grad)
    for b, d, e in zip(blocked, dense, exact):
        assert (b.grad.double() - e.grad).abs().max() <= 2 * (d.grad.double() - e.grad).abs().max() + 1e-6


def test_training_takes_the_blocked_kernel_unless_it_needs_attention_dropout():
    """Training on CPU at L > 512: the blocked kernel, with sdpa's loss gradients for every weight;
    with attention dropout (which it lacks), the mask."""
    torch.manual_seed(0)
    reference, d = build_model(extra=[*TINY, "--alibi-attention", "sdpa"])
    torch.manual_seed(0)
    model, _ = build_model(extra=TINY)
    tokens = random_tokens(len(d), 2, 600)
    grads = []
    for m in (reference, model):
        m.train()
        m.decoder.dropout_module.p = 0.0
        for layer in m.decoder.layers:
            layer.dropout_module.p = layer.activation_dropout_module.p = 0.0
        m(tokens)[0].float().pow(2).mean().backward()
        grads.append({n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None})
    assert chosen(model, torch.zeros(1), 600) == "blocked"
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-4, atol=1e-6, msg=name)
    model.decoder.attention_dropout = 0.1
    assert chosen(model, torch.zeros(1), 600) == "sdpa"


def test_t5_bias_evaluates_long_inputs_with_the_blocked_kernel():
    """T5's bias is one constant per head beyond max_distance: the blocked kernel reads a window
    of max_distance keys from its mask and adds the constant to the rest; logits as the dense mask's."""
    torch.manual_seed(0)
    model, d = build_model("t5_bias_transformer_lm", extra=[*TINY, "--t5-max-distance", "64"])
    tokens = random_tokens(len(d), 2, 700)
    with torch.no_grad():
        blocked = model(tokens)[0]
    with torch.enable_grad():  # the dense mask: gradients flow through it
        dense = model(tokens)[0].detach()
    assert chosen(model, torch.zeros(1), 700) == "sdpa"  # (grad enabled here)
    with torch.no_grad():
        assert chosen(model, torch.zeros(1), 700) == "blocked"
    torch.testing.assert_close(blocked, dense, rtol=1e-4, atol=1e-5)


def test_blocked_kernel_trains_with_attention_dropout_through_sdpa():
    """The blocked kernel has no attention dropout: a model asked for it still trains with it
    (sdpa), and its bare kernel refuses dropout clearly."""
    torch.manual_seed(0)
    model, d = build_model(extra=[*TINY, "--alibi-attention", "blocked", "--attention-dropout", "0.5"])
    model.train()
    tokens = random_tokens(len(d), 1, BLOCKED_ABOVE + 8)
    torch.manual_seed(1)
    a = model(tokens)[0]
    torch.manual_seed(2)
    assert not torch.allclose(a, model(tokens)[0])  # dropout is applied
    assert chosen(model.eval(), torch.zeros(1), BLOCKED_ABOVE + 8) == "blocked"
    bias = build_kernel("blocked", model.decoder.positions, torch.float32)
    with pytest.raises(ValueError, match="no attention dropout"):
        bias.attend(*torch.randn(3, 1, 4, 8, 8), dropout_p=0.1)




def learned_twins(method, kernel):
    """A `method` model under sdpa and the same weights under `kernel` (--attention-kernel)."""
    models = []
    for name in ("sdpa", kernel):
        torch.manual_seed(0)
        models.append(build_model(f"{method}_transformer_lm", extra=[*TINY, "--attention-kernel", name])[0])
    with torch.no_grad():
        for m in models:
            for p in m.decoder.positions.parameters():
                p.mul_(1.5)
    return models


def test_learned_slopes_train_on_sdpa_and_evaluate_on_the_blocked_kernel():
    """A kernel that computes -m (i - j) itself gives learned slopes no gradient: in training the
    model takes sdpa (whose slopes get theirs), at evaluation the blocked kernel with sdpa's logits."""
    reference, blocked = learned_twins("learned_alibi", "blocked")
    x = torch.zeros(1, 1)
    assert chosen(blocked, x, BLOCKED_ABOVE + 1) == "sdpa"  # gradients on: training
    tokens = random_tokens(54, 2, BLOCKED_ABOVE + 40)  # the tiny models: 50 words and 4 specials
    blocked.train()
    blocked(tokens)[0].float().pow(2).mean().backward()
    assert blocked.decoder.positions.log_slopes.grad.abs().sum() > 0
    blocked.eval()
    with torch.no_grad():
        assert chosen(blocked, x, BLOCKED_ABOVE + 1) == "blocked"
    assert_same_logits(blocked, reference, tokens[:, :BLOCKED_ABOVE + 20])


@pytest.mark.parametrize("documents", [False, True])
def test_a_data_dependent_bias_is_never_left_to_a_kernel_that_would_drop_it(documents):
    """FoX's bias comes from each layer's input: auto evaluates it on the separable kernel, which takes
    it as per-key terms (test_separable.py), at every length, with documents too; its rule before that
    kept it on sdpa (never on blocked, where ALiBi goes on long inputs); flash, flex and blocked are
    refused."""
    model, _ = build_model("fox_transformer_lm", extra=TINY)
    x = torch.zeros(1, 1)
    with torch.no_grad():
        for length in (16, BLOCKED_ABOVE + 1):
            assert choose_kernel("auto", model.decoder.positions, x, length, False, False, documents) == "separable"
            assert choose_kernel("auto-no-separable", model.decoder.positions, x, length, False, False, documents) == "sdpa"
    for kernel in ("blocked", "flash", "flex"):
        with pytest.raises(ConfigError, match=f"--attention-kernel {kernel}: FoX .* takes sdpa or separable only"):
            build_model("fox_transformer_lm", extra=[*TINY, "--attention-kernel", kernel])


def test_a_kernel_whose_fallback_would_differ_refuses_instead_of_falling_back(monkeypatch):
    """A kernel declares whether sdpa computes what it does; only then may an input it cannot run
    fall back to sdpa (with a warning); otherwise the model stops with the reason."""
    import fairseq_alibi.kernels.kernel as base

    class Different(base.Kernel):
        name = "different"
        sdpa_computes_the_same = False

        def unusable(self, positions, x, dropout, documents):
            return "never here"

    monkeypatch.setitem(base.KERNELS, "different", Different())
    model, _ = build_model(extra=TINY)
    with pytest.raises(ValueError, match="different cannot run here .never here., and sdpa would compute something else"):
        choose_kernel("different", model.decoder.positions, torch.zeros(1, 1), 16, False, False)
    monkeypatch.setattr(Different, "sdpa_computes_the_same", True)
    assert choose_kernel("different", model.decoder.positions, torch.zeros(1, 1), 16, False, False) == "sdpa"
