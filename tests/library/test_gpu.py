"""On a CUDA GPU (skipped elsewhere; CI has none): every method and kernel in fp16 and bf16 against
the same weights in fp32 on the reference path (SDPA with the dense mask), logits and gradients,
with and without packed documents, at lengths of several FlexAttention blocks; and the README's
claim that the bias stays exact near the diagonal at long lengths in fp16."""
import pytest
import torch

from conftest import random_tokens
from test_documents import SEPARATOR, VOCAB, model
from test_position_methods import METHODS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

HALF = [torch.float16, torch.bfloat16]
# Relative error (‖got - fp32‖ / ‖fp32‖) of a half-precision forward of these small models: about
# ulp/2 per operation (fp16 2^-11, bf16 2^-8) grown over a few layers.
TOLERANCE = {torch.float16: 4e-3, torch.bfloat16: 3e-2}


def relative_error(got, expected):
    got, expected = got.double(), expected.double()
    assert torch.isfinite(got).all()
    return ((got - expected).norm() / expected.norm()).item()


# Two heads of dimension 16: PyTorch compiles FlexAttention for head dimensions of 16 and up.
HEAD_DIM_16 = ["--decoder-attention-heads", "2"]


def pair(variant, kernel, dtype, *flags, separator=None):
    """(the fp32 reference on SDPA, the same weights in `dtype` on `kernel`), on the GPU. Only ALiBi
    takes a kernel by name (--alibi-attention); the other methods run as auto picks."""
    kernels = [["--alibi-attention", "sdpa"], ["--alibi-attention", kernel]] if variant == "alibi" else [[], []]
    reference, d = model(variant, *kernels[0], *flags, separator=separator)
    other, _ = model(variant, *kernels[1], *flags, separator=separator)
    return reference.cuda(), other.to("cuda", dtype), d


def packed(d, length, separator):
    rows = random_tokens(VOCAB + 3, 2, length, seed=3)
    if separator:
        rows[0, [length // 5, length // 2, length // 2 + 1]] = d.index(SEPARATOR)
    return rows.cuda()


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("variant", list(METHODS))
def test_every_method_in_half_precision_gives_the_fp32_logits(variant, dtype):
    reference, half, d = pair(variant, "sdpa", dtype)
    tokens = packed(d, 300, None)
    with torch.no_grad():
        expected = reference(tokens)[0]
        assert relative_error(half(tokens)[0], expected) < TOLERANCE[dtype]
        state = {}  # the cache, a token at a time, in half precision
        steps = torch.cat([half(tokens[:, : t + 1], incremental_state=state)[0] for t in range(48)], dim=1)
    assert relative_error(steps, expected[:, :48]) < TOLERANCE[dtype]


@pytest.mark.parametrize("documents", [False, True], ids=["packed", "documents"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("heads", [HEAD_DIM_16, []], ids=["head-dim-16", "head-dim-4"])
def test_flex_attention_on_the_gpu_gives_the_fp32_logits_and_gradients(heads, dtype, documents):
    """FlexAttention as the plugin runs it on a GPU (compiled, its block mask skipping future and
    other documents' blocks; uncompiled, with a warning, for heads narrower than 16), 600 tokens:
    five blocks of 128."""
    separator = SEPARATOR if documents else None
    reference, flex, d = pair("alibi", "flex", dtype, *heads, separator=separator)
    tokens = packed(d, 600, separator)
    with torch.no_grad():
        expected = reference(tokens)[0]
        assert relative_error(flex(tokens)[0], expected) < TOLERANCE[dtype]
    grads = []
    for m in (reference, flex):
        m.zero_grad()
        m(tokens)[0].float().logsumexp(-1).mean().backward()
        grads.append(m.decoder.embed_tokens.weight.grad)
    assert relative_error(grads[1], grads[0]) < 5 * TOLERANCE[dtype]


@pytest.mark.parametrize("kernel", ["sdpa", "flex", "separable"])
def test_alibi_in_fp16_at_3072_tokens_stays_close_to_fp32(kernel):
    """The bias -m (i - j) is computed in fp32 and added in fp16: exact where it matters (near the
    diagonal), so a long fp16 forward is as close to fp32 as a short one (the fork's key-index
    bias m j, cast to fp16, is off by up to 0.5 logit at 3072)."""
    reference, half, d = pair("alibi", kernel, torch.float16, *HEAD_DIM_16)
    tokens = packed(d, 3072, None)
    with torch.no_grad():
        assert relative_error(half(tokens)[0], reference(tokens)[0]) < TOLERANCE[torch.float16]


def test_auto_evaluates_long_alibi_inputs_with_flex_on_a_gpu_without_flash_attention():
    """Without flash-attn, auto evaluates with compiled flex past 512 tokens (no dense mask), with
    the dense mask below and in training; the logits are the reference path's either way."""
    from fairseq_alibi.kernels import choose_kernel, flash_installed

    if flash_installed() is None:
        pytest.skip("flash-attn is installed here: auto takes flash")
    reference, auto, d = pair("alibi", "auto", torch.float16, *HEAD_DIM_16)
    x = torch.zeros(1, 1, 32, device="cuda", dtype=torch.float16)
    dec = auto.decoder
    assert choose_kernel("auto", dec.positions, x, 600, False, False) == "sdpa"  # training
    with torch.no_grad():
        assert choose_kernel("auto", dec.positions, x, 600, False, False) == "flex"
        assert choose_kernel("auto", dec.positions, x, 512, False, False) == "sdpa"
        tokens = packed(d, 1100, None)
        assert relative_error(auto(tokens)[0], reference(tokens)[0]) < TOLERANCE[torch.float16]


@pytest.mark.parametrize("documents", [False, True], ids=["packed", "documents"])
@pytest.mark.parametrize("variant", [v for v in METHODS if v not in ("fox", "t5_bias")])  # T5: kernels/flex.py refuses it
def test_flex_trains_every_bias_on_the_gpu(variant, documents):
    """Compiled FlexAttention in bf16 with each method's elementwise bias: every parameter's gradient
    (the learned bias's own included) as close to fp32's on the dense path as the dense path's own
    in bf16 (a whole bf16 model's gradients are off by 0.1-0.4 here: the bar is the dense path's)."""
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = 64  # one compiled score_mod per method here; a training has one
    separator = SEPARATOR if documents else None
    models = [model(variant, *HEAD_DIM_16, "--attention-kernel", kernel, separator=separator)[0]
              for kernel in ("sdpa", "sdpa", "flex")]
    _, d = model(variant, *HEAD_DIM_16, separator=separator)
    reference, dense, flex = models[0].cuda(), models[1].to("cuda", torch.bfloat16), models[2].to("cuda", torch.bfloat16)
    tokens = packed(d, 300, separator)
    for m in (reference, dense, flex):
        m.train()
        m.zero_grad()
        m(tokens)[0].float().logsumexp(-1).mean().backward()
    expected, bar = dict(reference.named_parameters()), dict(dense.named_parameters())
    for name, p in flex.named_parameters():
        # A key projection's bias adds q . b to every key of a row, which softmax ignores: its exact
        # gradient is zero, so fp32 gives rounding (~1e-10) and bf16 other rounding (~1e-6), noise
        # against noise (the H100's NoPE failure, relative error 4417, 2026-11-28).
        if name.endswith("self_attn.k_proj.bias"):
            continue
        if expected[name].grad is not None and expected[name].grad.norm() > 0:
            dense_error = relative_error(bar[name].grad, expected[name].grad)
            assert relative_error(p.grad, expected[name].grad) < 1.5 * dense_error + 0.02, name


@pytest.mark.parametrize("backend", ["flash", "efficient", "cudnn"])
@pytest.mark.parametrize("documents", [False, True], ids=["packed", "documents"])
@pytest.mark.parametrize("variant", ["alibi", "learned_alibi", "fox"])
def test_separable_trains_per_key_biases_on_each_fused_backend(variant, documents, backend):
    """The separable kernel in bf16 on one SDPA backend at a time (is_causal, the bias in extra
    q/k columns): every gradient, the slopes' and the gates' own included, as close to fp32's on the
    dense path as the dense path's own in bf16 (the flex test's bar); a backend that does not take
    the input skips with PyTorch's reason."""
    from torch.nn.attention import sdpa_kernel

    from fairseq_alibi.kernels.sdpa import backends

    if backend not in backends():
        pytest.skip(f"this PyTorch has no {backend} backend")
    separator = SEPARATOR if documents else None
    models = [model(variant, *HEAD_DIM_16, "--attention-kernel", kernel, separator=separator)[0]
              for kernel in ("sdpa", "sdpa", "separable")]
    _, d = model(variant, *HEAD_DIM_16, separator=separator)
    reference, dense, separable = (models[0].cuda(), models[1].to("cuda", torch.bfloat16),
                                   models[2].to("cuda", torch.bfloat16))
    tokens = packed(d, 300, separator)
    for m in (reference, dense, separable):
        m.train()
        m.zero_grad()
        torch.manual_seed(0)
        if m is separable:
            try:
                with sdpa_kernel([backends()[backend]]):
                    m(tokens)[0].float().logsumexp(-1).mean().backward()
            except RuntimeError as error:
                pytest.skip(f"{backend} does not take it: {str(error).splitlines()[0][:160]}")
        else:
            m(tokens)[0].float().logsumexp(-1).mean().backward()
    expected, bar = dict(reference.named_parameters()), dict(dense.named_parameters())
    own = 0
    for name, p in separable.named_parameters():
        if name.endswith("self_attn.k_proj.bias"):  # zero by construction (the flex test says why)
            continue
        if expected[name].grad is not None and expected[name].grad.norm() > 0:
            dense_error = relative_error(bar[name].grad, expected[name].grad)
            assert relative_error(p.grad, expected[name].grad) < 1.5 * dense_error + 0.02, name
            own += "learned_alibi" in name or "layer_bias" in name
    assert own > 0 or variant == "alibi"
