"""The length temperature (length_temperature.py): its factor against the formula, whole models against
the attention equation written out with it (both forms, both kinds, a method with a bias, one from the
data and one without), the cache against the full forward, every kernel that takes it against the dense
path, and one-line refusals where a kernel or the export cannot take it."""
import math

import pytest
import torch

from conftest import TINY, build_model, random_tokens
from reference import assert_same_logits, naive_model
from fairseq_alibi.checks import ConfigError
from fairseq_alibi.length_temperature import LengthTemperature

L = 8  # the length the factors are 1 at; the tokens below run to 3L


def flags(kind, form="qk", *more):
    return [*TINY, "--length-temperature", kind, "--length-temperature-form", form,
            "--length-temperature-length", str(L), *more]


def model(method, kind, form, *more):
    torch.manual_seed(0)
    m, d = build_model(f"{method}_transformer_lm", extra=flags(kind, form, *more))
    torch.manual_seed(1)
    with torch.no_grad():  # weights a trained model could have: every factor and bias away from its start
        for name, p in m.named_parameters():
            if "log_scale" in name or "layer_bias" in name or "learned_alibi" in name:
                p.add_(0.3 * torch.randn_like(p))
    return m, d


def test_the_factors_are_the_formulas():
    keys = torch.arange(1, 4 * L + 1)
    logn = LengthTemperature("logn", "qk", L, 4)(keys)
    assert logn.shape == (1, 1, 4 * L, 1)
    assert logn.flatten().tolist() == pytest.approx([max(1.0, math.log(n) / math.log(L)) for n in range(1, 4 * L + 1)])
    ssmax = LengthTemperature("ssmax", "qk", L, 4)
    with torch.no_grad():
        ssmax.log_scale.copy_(torch.tensor([0.0, -1.0, 0.5, -math.log(math.log(L))]))
    got = ssmax(torch.stack([keys, keys]))  # a batch of rows (packed documents: each its own counts)
    assert got.shape == (2, 4, 4 * L, 1)
    for h, a in enumerate([0.0, -1.0, 0.5, -math.log(math.log(L))]):
        assert got[1, h, :, 0].tolist() == pytest.approx([math.exp(a) * math.log(n) for n in range(1, 4 * L + 1)], rel=1e-6)
    assert LengthTemperature("ssmax", "qk", L, 4)(torch.tensor([L])).flatten().tolist() == pytest.approx([1.0] * 4)


@pytest.mark.parametrize("method", ["alibi", "fox", "rotary"])
@pytest.mark.parametrize("kind,form", [("logn", "qk"), ("logn", "logit"), ("ssmax", "qk"), ("ssmax", "logit")])
def test_a_model_with_a_temperature_is_the_equation_written_out(method, kind, form):
    """Logits past L (3L tokens) against naive_model (softmax of tau q.k / sqrt(d) + b, or tau times the
    whole logit), in one full forward and token by token with the cache; on sdpa (the dense mask)."""
    m, d = model(method, kind, form, "--attention-kernel", "sdpa")
    tokens = random_tokens(len(d), 2, 3 * L)
    assert_same_logits(m, lambda t: (naive_model(m, t),), tokens, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("method", ["alibi", "learned_alibi", "fox"])
@pytest.mark.parametrize("form", ["qk", "logit"])
def test_the_separable_kernel_takes_the_temperature_as_the_dense_path(method, form):
    """The separable kernel scales each query's term column (logit form): the dense path's logits, and in
    training every gradient (ssmax's factors included)."""
    reference, d = model(method, "ssmax", form, "--attention-kernel", "sdpa")
    separable, _ = model(method, "ssmax", form, "--attention-kernel", "separable")
    tokens = random_tokens(len(d), 3, 3 * L)
    assert_same_logits(separable, reference, tokens)
    grads = []
    for m in (reference, separable):
        m.zero_grad()
        m(tokens)[0].float().pow(2).mean().backward()
        grads.append({n: p.grad for n, p in m.named_parameters() if p.grad is not None})
    assert any("log_scale" in n for n in grads[0]) and set(grads[0]) == set(grads[1])
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, rtol=1e-4, atol=1e-6, msg=lambda msg, name=name: f"{name}: {msg}")


@pytest.mark.parametrize("method", ["alibi", "fox"])
def test_packed_documents_count_each_querys_keys_in_its_document(method):
    """With packed documents a query's n is its place in its document + 1: the separable kernel (each
    document its own sequence, the factors gathered with it) gives the dense path's logits, and a
    document's logits do not depend on the one before it."""
    from test_documents import SEPARATOR, packed_rows
    from test_documents import model as document_model

    more = ["--length-temperature", "logn", "--length-temperature-form", "logit", "--length-temperature-length", "4"]
    reference, d = document_model(method, "--attention-kernel", "sdpa", *more)
    separable, _ = document_model(method, "--attention-kernel", "separable", *more)
    tokens = packed_rows(d, 36)
    assert_same_logits(separable, reference, tokens)
    first = int((tokens[0] == d.index(SEPARATOR)).nonzero()[-1]) + 1  # the last document of row 0 starts here
    with torch.no_grad():
        whole, alone = reference(tokens[:1])[0][0, first:], reference(tokens[:1, first - 1:])[0][0, 1:]
    torch.testing.assert_close(whole, alone, rtol=1e-4, atol=1e-5)


def test_auto_takes_a_kernel_that_scales_the_bias_and_blocked_takes_the_qk_form():
    """Past 512 tokens on CPU auto would evaluate ALiBi on separable; with the logit form it still does
    (separable scales its columns), and blocked, which adds the bias itself, is refused by name; the qk
    form (the queries scaled) runs on blocked with the dense path's logits."""
    from fairseq_alibi.kernels import choose_kernel

    with pytest.raises(ConfigError, match="--attention-kernel blocked: it cannot scale the bias per query") as error:
        build_model(extra=flags("logn", "logit", "--attention-kernel", "blocked"))
    assert "\n" not in str(error.value)
    for form in ("qk", "logit"):
        m, _ = build_model(extra=flags("logn", form))
        dec = m.decoder
        with torch.no_grad():
            assert choose_kernel(dec.attention_kernel, dec.positions, torch.zeros(1, 1), 600, False, False,
                                 scaled=dec.bias_scaled) == "separable"
            assert choose_kernel("auto-no-separable", dec.positions, torch.zeros(1, 1), 600, False, False,
                                 scaled=dec.bias_scaled) == ("blocked" if form == "qk" else "sdpa")
    reference, d = model("alibi", "logn", "qk", "--attention-kernel", "sdpa")
    blocked, _ = model("alibi", "logn", "qk", "--attention-kernel", "blocked")
    tokens = random_tokens(len(d), 1, 600)
    with torch.no_grad():
        torch.testing.assert_close(blocked(tokens)[0], reference(tokens)[0], rtol=1e-4, atol=1e-5)


def test_bad_options_and_the_export_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="needs --length-temperature-length") as error:
        build_model(extra=[*TINY, "--length-temperature", "logn"])
    assert "\n" not in str(error.value)
    from fairseq_alibi.hf.export import CannotExport, refuse_unsupported

    m, _ = build_model(extra=flags("ssmax"))
    refuse_unsupported(m.decoder, "this model")  # exported (tests/library/test_hf.py), unless beside an option or FoX
    for arch, more in (("alibi", ["--output-gate", "elementwise"]), ("fox", [])):
        m, _ = build_model(f"{arch}_transformer_lm", extra=flags("ssmax", "qk", *more))
        with pytest.raises(CannotExport, match="length temperature") as error:
            refuse_unsupported(m.decoder, "this model")
        assert "\n" not in str(error.value)
    plain, _ = build_model(extra=TINY)
    assert all(layer.self_attn.temperature is None for layer in plain.decoder.layers)
    refuse_unsupported(plain.decoder, "this model")  # without one: nothing to refuse
