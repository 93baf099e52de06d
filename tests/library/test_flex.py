"""FlexAttention for every bias we have (kernels/flex.py), on CPU, where it runs forward only:
each method's elementwise_bias equals its dense bias; the model through flex gives the dense
path's logits, with packed documents too; and the gradients that reach every parameter through
the very same score_mod and block mask, applied to explicit scores, are the dense path's. On a GPU
tests/library/test_gpu.py runs the compiled kernel's own backward."""
import pytest
import torch
import torch.nn.functional as F

from conftest import random_tokens
from reference import assert_same_logits
from test_documents import SEPARATOR, VOCAB, model, packed_rows
from test_position_methods import METHODS
from fairseq_alibi.alibi_bias import alibi_mask, alibi_slopes
from fairseq_alibi.kernels import KERNELS
from fairseq_alibi.kernels.flex import alibi_block_mask, flex_attention_with_bias

# Every method flex takes: all but FoX (its bias comes from each layer's input: sdpa or separable).
# T5 bias is refused by name on every device (its compiled backward failed on a GPU: GRADIENT_NOT_SHOWN);
# its score function is tested here all the same, with the refusal lifted: on CPU it is exact.
FLEX_METHODS = [name for name in METHODS if name != "fox"]


@pytest.fixture(autouse=True)
def score_functions_of_every_method(monkeypatch):
    import fairseq_alibi.kernels.flex as flex

    monkeypatch.setattr(flex, "GRADIENT_NOT_SHOWN", {})


def test_t5_bias_through_flex_is_refused_in_one_line_until_a_gpu_shows_parity(monkeypatch):
    import fairseq_alibi.kernels.flex as flex
    from fairseq_alibi.checks import ConfigError

    monkeypatch.undo()
    assert "t5_bias" in flex.GRADIENT_NOT_SHOWN
    with pytest.raises(ConfigError, match="flex is not used for T5 bias: .*H100.*use sdpa or auto") as err:
        with_kernel("t5_bias", "flex")
    assert "\n" not in str(err.value.code)
    m, _ = with_kernel("t5_bias", "auto")
    with torch.no_grad():
        from fairseq_alibi.kernels import choose_kernel

        for length in (64, 2048):
            assert choose_kernel("auto", m.decoder.positions, torch.zeros(1, 1, 32), length, False, False) != "flex"


def with_kernel(variant, kernel, separator=None, *flags):
    return model(variant, "--attention-kernel", kernel, *flags, separator=separator)


@pytest.mark.parametrize("variant", [v for v in FLEX_METHODS if v not in ("rotary", "nope")])
def test_the_elementwise_bias_is_the_dense_bias(variant):
    m, _ = with_kernel(variant, "sdpa")
    positions = m.decoder.positions
    queries, keys = torch.arange(40, 90), torch.arange(90)
    heads = torch.arange(positions.bias(queries[:1], keys[:1]).size(0))
    got = positions.elementwise_bias()(heads[:, None, None], queries[None, :, None], keys[None, None, :])
    # FIRE's MLP and Sandwich's sum run in another order elementwise: equal to rounding.
    torch.testing.assert_close(got, positions.bias(queries, keys), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("documents", [False, True], ids=["packed", "documents"])
@pytest.mark.parametrize("variant", FLEX_METHODS)
def test_flex_gives_the_dense_logits_for_every_method(variant, documents):
    separator = SEPARATOR if documents else None
    # FIRE's score_mod runs eagerly under vmap on CPU, an operation per hidden unit: 4 units (of 32)
    # take the same code path at an eighth of the calls. 24 tokens: past its threshold (8), each a
    # cached step too (a flex call per layer).
    narrow = ["--fire-mlp-width", "4"] if variant == "fire" else []
    reference, _ = with_kernel(variant, "sdpa", separator, *narrow)
    flex, d = with_kernel(variant, "flex", separator, *narrow)
    tokens = packed_rows(d, 24) if documents else random_tokens(VOCAB + 3, 2, 24, seed=4)
    assert_same_logits(flex, reference, tokens)


def explicit_flex_attention(calls):
    """flex_attention as explicit scores: the score_mod and the block mask's mask_mod applied to
    broadcast index grids, then softmax (what FlexAttention computes, with autograd's gradients)."""

    def attention(q, k, v, score_mod=None, block_mask=None):
        calls.append(score_mod is not None)
        batch, heads, query_len, dim = q.shape
        grids = (torch.arange(batch)[:, None, None, None], torch.arange(heads)[None, :, None, None],
                 torch.arange(query_len)[None, None, :, None], torch.arange(k.size(2))[None, None, None, :])
        scores = (q @ k.transpose(-1, -2)).float() * dim ** -0.5
        if score_mod is not None:
            scores = score_mod(scores, *grids)
        scores = scores.masked_fill(~block_mask.mask_mod(*grids), float("-inf"))
        return (scores.softmax(-1) @ v.float()).to(q.dtype)

    return attention


@pytest.mark.parametrize("documents", [False, True], ids=["packed", "documents"])
@pytest.mark.parametrize("variant", FLEX_METHODS)
def test_flex_score_functions_give_every_parameter_the_dense_gradient(variant, documents, monkeypatch):
    import torch.nn.attention.flex_attention as flex_module

    calls = []
    monkeypatch.setattr(flex_module, "flex_attention", explicit_flex_attention(calls))
    monkeypatch.setattr(KERNELS["flex"], "unusable", lambda *args: None)  # as on a GPU: training through flex
    separator = SEPARATOR if documents else None
    reference, _ = with_kernel(variant, "sdpa", separator)
    flex, d = with_kernel(variant, "flex", separator)
    tokens = packed_rows(d, 30) if documents else random_tokens(VOCAB + 3, 2, 30, seed=5)
    for m in (reference, flex):
        m.train()
        m.zero_grad()
        F.log_softmax(m(tokens)[0].float(), -1).logsumexp(-1).mean().backward()
    assert calls and all(calls) == (variant not in ("rotary", "nope"))  # flex ran, with the bias
    expected = dict(reference.named_parameters())
    position_params = 0
    for name, p in flex.named_parameters():
        torch.testing.assert_close(p.grad, expected[name].grad, rtol=1e-4, atol=1e-6, msg=name)
        position_params += "positions" in name or "relative_attention_bias" in name or name.startswith(
            tuple(f"decoder.{n}." for n in ("kerple", "fire", "learned_alibi")))
    if variant in ("kerple_log", "kerple_power", "fire", "learned_alibi", "t5_bias"):
        assert position_params > 0  # the learned bias's own parameters were among those compared


def test_training_on_cpu_leaves_flex_to_sdpa_with_the_reason():
    from fairseq_alibi.kernels import unusable

    m, _ = with_kernel("kerple_log", "flex")
    x = torch.zeros(1, 1, 32)
    assert "no FlexAttention backward on CPU" in unusable("flex", m.decoder.positions, x, False)
    with torch.no_grad():
        assert unusable("flex", m.decoder.positions, x, False) is None


def test_alibi_through_flex_skips_the_blocks_its_bias_silenced():
    """At 1024 tokens the steep heads read back only as far as the blocked kernel's rule allows:
    fewer key blocks than the causal mask, the same output as the dense mask."""
    from torch.nn.attention.flex_attention import create_block_mask

    torch.manual_seed(0)
    heads, length = 8, 1024
    q, k, v = (torch.randn(1, heads, length, 16) for _ in range(3))
    slopes = torch.tensor(alibi_slopes(heads))
    skipping = alibi_block_mask(q, k, slopes)
    causal = create_block_mask(lambda b, h, i, j: i >= j, None, heads, length, length, device="cpu")
    assert skipping.sparsity() > causal.sparsity() + 5  # percent of blocks skipped
    with torch.no_grad():
        got = flex_attention_with_bias(q, k, v, lambda h, i, j: -slopes[h] * (i - j), skipping)
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=alibi_mask(slopes, length, length))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_every_sdpa_backend_here_takes_the_plugins_masks_correctly_or_not_at_all():
    """The backend check on this machine's backends (on a GPU: math, efficient, flash, cuDNN): each
    either refuses the masked input or gives fp32 math's output; benchmarks/backends.py writes the
    same check as a table, on the GPU in fp16 and bf16 too."""
    from fairseq_alibi.kernels.sdpa import WRONG_ABOVE, backend_errors, probe_input

    dtypes = [torch.float32] + ([torch.float16, torch.bfloat16] if torch.cuda.is_available() else [])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for dtype in dtypes:
        errors = backend_errors(*probe_input(device, dtype))
        assert errors["math"] is not None
        for name, error in errors.items():
            assert error is None or error < WRONG_ABOVE[dtype], (name, dtype, error)


def test_a_backend_wrong_on_masks_is_never_selected_and_said_once(monkeypatch, caplog):
    import fairseq_alibi.checks as base
    import fairseq_alibi.kernels.sdpa as sdpa

    wrong = []

    def run(backend, q, k, v, mask):  # as if the efficient backend read the mask wrongly
        out = sdpa.F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if backend == sdpa.backends()["efficient"]:
            wrong.append(backend)
            return out + 1
        return out

    monkeypatch.setattr(sdpa, "run_backend", run)
    monkeypatch.setattr(sdpa, "_allowed", {})
    base._warned.clear()
    reference, _ = with_kernel("alibi", "sdpa")
    tokens = random_tokens(VOCAB + 3, 2, 20, seed=6)
    with torch.no_grad():
        expected = reference(tokens)[0]
        assert wrong and len(caplog.text.split("gives wrong results")) == 2
        allowed = sdpa.masked_backends(torch.zeros(1))
        assert sdpa.backends()["efficient"] not in allowed and sdpa.backends()["math"] in allowed
        torch.testing.assert_close(reference(tokens)[0], expected)  # through the kept backends
    assert len(caplog.text.split("gives wrong results")) == 2  # said once
