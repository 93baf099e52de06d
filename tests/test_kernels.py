"""Every attention kernel gives the reference path's logits; unavailable ones skip or refuse clearly."""
import pytest
import torch

from conftest import TINY, build_model, random_tokens
from reference import assert_same_logits
from fairseq_alibi.decoder import ConfigError
from fairseq_alibi.kernels import flash_available


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
    assert model.decoder.choose_kernel(x, None) == expected


def test_forcing_flash_where_it_cannot_run_is_a_one_line_error():
    _, model, d = twins("flash")
    if flash_available(torch.zeros(1)) is None:
        pytest.skip("flash-attn can run here")
    with pytest.raises(ConfigError, match="--alibi-attention flash cannot run") as err:
        model(random_tokens(len(d), 1, 8))
    assert "\n" not in str(err.value.code)


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
    import fairseq_alibi.alibi_lm as alibi_lm
    import fairseq_alibi.kernels as kernels

    monkeypatch.setattr(kernels, "flash_attn_func", documented_flash_attn_func, raising=False)
    monkeypatch.setattr(alibi_lm, "flash_available", lambda x: None)
    reference, flash, d = twins("flash")
    assert_same_logits(flash, reference, random_tokens(len(d), 2, 20))
