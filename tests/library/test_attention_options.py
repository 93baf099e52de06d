"""The attention options (attention_options/: the output gate, the sink logit, selective attention,
stick-breaking) on the methods they compose with: whole models against the attention equation written
out with each paper's formula (tests/reference.py), in one full forward and token by token with the cache;
the cache reordered as beam search does; a batch against each row alone; packed documents against each
document alone; the kernels that take them against the dense path; gradients into their parameters; and
one-line refusals (a kernel by name, two options that each replace softmax, selective attention with
packed documents, the export)."""
import pytest
import torch

from conftest import TINY, build_model, random_tokens
from reference import assert_reordered_cache_is_the_full_forward, assert_same_logits, naive_model
from test_position_methods import perturb
from fairseq_alibi.attention_options import OPTIONS, logit_readers
from fairseq_alibi.checks import ConfigError

FLAGS = {
    "gate": ["--output-gate", "elementwise"],
    "headwise gate": ["--output-gate", "headwise"],
    "sink": ["--sink-logit"],
    "selective": ["--selective-attention"],
    "stick-breaking": ["--stick-breaking"],
}
# (method, options): each option on ALiBi and on rotary, stick-breaking on NoPE as its paper has it, and
# options together (one reading the logits with a gate; the sink with selective; on FoX's data-dependent bias).
CASES = [
    ("alibi", ("gate",)), ("rotary", ("gate",)), ("alibi", ("headwise gate",)),
    ("alibi", ("sink",)), ("rotary", ("sink",)),
    ("alibi", ("selective",)), ("rotary", ("selective",)),
    ("nope", ("stick-breaking",)), ("alibi", ("stick-breaking",)),
    ("alibi", ("sink", "selective", "gate")), ("fox", ("sink", "gate")), ("fox", ("stick-breaking",)),
]


def model(method, options, *more):
    torch.manual_seed(0)
    flags = [flag for name in options for flag in FLAGS[name]]
    m, d = build_model(f"{method}_transformer_lm", extra=[*TINY, *flags, *more])
    perturb(m)
    with torch.no_grad():  # weights a trained model could have: sinks and gates away from their start
        for name, p in m.named_parameters():
            if ".options." in name:
                p.add_(0.5 * torch.randn_like(p))
    return m, d


@pytest.mark.parametrize("method,options", CASES, ids=[f"{m}+{'+'.join(o)}" for m, o in CASES])
def test_a_model_with_options_is_the_papers_equation_written_out(method, options):
    m, d = model(method, options)
    tokens = random_tokens(len(d), 2, 12)
    assert_same_logits(m, lambda t: (naive_model(m, t),), tokens, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("form", ["qk", "logit"])
def test_options_with_a_length_temperature_are_the_equation_written_out(form):
    """A length temperature (its logit form scaling ALiBi's bias per query on the dense mask) under options
    that read the logits: the same logits as both written out, past its L."""
    m, d = model("alibi", ("sink", "selective"), "--length-temperature", "logn", "--length-temperature-form", form,
                 "--length-temperature-length", "4")
    assert_same_logits(m, lambda t: (naive_model(m, t),), random_tokens(len(d), 2, 12), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("options", [("selective",), ("sink", "gate"), ("stick-breaking",)])
def test_the_cache_reordered_as_beam_search_does_equals_the_full_forward(options):
    """What selective attention keeps per key (its accumulation) follows its row when beams reorder."""
    m, d = model("alibi", options)
    assert_reordered_cache_is_the_full_forward(m, random_tokens(len(d), 3, 16), torch.tensor([2, 0, 0]))


@pytest.mark.parametrize("options", [("selective", "gate"), ("sink",), ("stick-breaking",)])
def test_a_batch_is_each_row_alone(options):
    m, d = model("alibi", options)
    tokens = random_tokens(len(d), 8, 20)
    with torch.no_grad():
        together = m(tokens)[0]
        for row in range(8):
            torch.testing.assert_close(together[row:row + 1], m(tokens[row:row + 1])[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", [("gate",), ("sink",), ("stick-breaking",)])
def test_a_packed_row_is_its_documents_alone(options):
    separator = "w49"  # the last word: random_tokens(53, ...) never draws it
    m, d = model("alibi", options, "--document-separator", separator)
    a, b = random_tokens(53, 1, 13, 1), random_tokens(53, 1, 11, 2)
    with torch.no_grad():
        packed = m(torch.cat([a, torch.tensor([[d.index(separator)]]), b], dim=1))[0]
        torch.testing.assert_close(packed[:, 14:], m(b)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", [("selective", "sink"), ("stick-breaking",), ("gate", "sink")])
def test_evaluation_in_blocks_of_query_rows_is_the_whole_forward(options, monkeypatch):
    """Without gradients the dense path runs in blocks of query rows (selective attention's state carried
    from block to block, as from one cached call to the next): the same logits as all rows at once."""
    from fairseq_alibi.attention_options import option

    m, d = model("alibi", options)
    tokens = random_tokens(len(d), 2, 40)
    with torch.no_grad():
        whole = m(tokens)[0]
        monkeypatch.setattr(option, "BLOCK_PAIRS", 7 * 40)  # blocks of 7 rows (at 40 keys)
        torch.testing.assert_close(m(tokens)[0], whole, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel", ["blocked", "separable"])
def test_the_gate_on_a_kernel_equals_the_dense_path(kernel):
    """The gate changes the output, not the weights: every kernel takes it (600 tokens: past where blocked runs)."""
    reference, d = model("alibi", ("gate",), "--attention-kernel", "sdpa")
    other, _ = model("alibi", ("gate",), "--attention-kernel", kernel)
    tokens = random_tokens(len(d), 1, 600)
    with torch.no_grad():
        torch.testing.assert_close(other(tokens)[0], reference(tokens)[0], rtol=1e-4, atol=1e-5)


def test_options_that_read_the_logits_take_the_dense_path_under_auto():
    """Past 512 tokens auto would evaluate ALiBi on separable; with the sink logit it takes the dense mask,
    and the logits are the same as sdpa's named."""
    auto, d = model("alibi", ("sink",))
    named, _ = model("alibi", ("sink",), "--attention-kernel", "sdpa")
    tokens = random_tokens(len(d), 1, 600)
    with torch.no_grad():
        torch.testing.assert_close(auto(tokens)[0], named(tokens)[0], rtol=0, atol=0)


@pytest.mark.parametrize("options", [("gate",), ("sink",), ("selective",), ("stick-breaking",), ("headwise gate",)])
def test_training_reaches_every_parameter(options):
    m, d = model("alibi", options)
    m.train()
    tokens = random_tokens(len(d), 2, 12)
    logits = m(tokens)[0]
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    for name, p in m.named_parameters():
        if ".options." in name or "q_proj" in name:
            assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("flags,message", [
    (["--sink-logit", "--attention-kernel", "separable"], "--attention-kernel separable: --sink-logit reads every logit"),
    (["--stick-breaking", "--attention-kernel", "blocked"], "--attention-kernel blocked: --stick-breaking reads every"),
    (["--sink-logit", "--stick-breaking"], "each replace softmax's weights: choose one"),
    (["--selective-attention", "--document-separator", "w49"], "--selective-attention does not keep packed documents"),
])
def test_what_cannot_work_is_refused_in_one_line(flags, message):
    with pytest.raises(ConfigError, match=message) as error:
        build_model(extra=[*TINY, *flags])
    assert "\n" not in str(error.value)


def test_an_option_given_fairseqs_choice_enum_prints_as_fairseq_train_logs_it():
    """fairseq-train's config gives a choice as its enum, then logs the model's repr: the gate keeps text."""
    from fairseq.dataclass import ChoiceEnum
    from fairseq_alibi.attention_options.output_gate import GATES, OutputGateConfig

    gate = OutputGateConfig(output_gate=ChoiceEnum(list(GATES))("headwise")).build(2, 4, 8)
    assert gate.kind == "headwise" and type(gate.kind) is str
    assert repr(gate).splitlines()[1].strip() == "headwise"


def test_a_model_without_options_has_none():
    plain, _ = build_model(extra=TINY)
    assert all(layer.self_attn.options is None for layer in plain.decoder.layers)


def test_which_options_read_the_logits_is_one_answer_for_names_configs_and_a_layers_modules():
    """logit_readers is what every path asks (the kernel check, the decoder, the layer, the export)."""
    m, _ = model("alibi", ("sink", "selective", "gate"))
    layer_options = m.decoder.layers[0].self_attn.options
    configs = [OPTIONS[name]() for name in layer_options]
    assert logit_readers(layer_options) == logit_readers(list(layer_options)) == logit_readers(configs)
    assert sorted(logit_readers(configs)) == ["--selective-attention", "--sink-logit"]
    assert logit_readers(None) == [] and m.decoder.dense_attention
    gate_only, _ = model("alibi", ("gate",))
    assert logit_readers(gate_only.decoder.layers[0].self_attn.options) == [] and not gate_only.decoder.dense_attention


@pytest.mark.parametrize("method,options,kernel", [
    ("alibi", (), "separable"), ("alibi", (), "blocked"), ("rotary", ("gate",), "auto"), ("alibi", ("sink",), "auto"),
    ("nope", ("stick-breaking",), "auto"), ("fox", (), "separable"), ("alibi", ("selective",), "auto"),
])
def test_recorded_weights_are_the_equation_written_out(method, options, kernel):
    """recording_weights (the sink-mass measurement's): each layer's weights as the naive attention gives them,
    on whatever kernel the model was built with (the dense path while recording); the logits unchanged."""
    from fairseq_alibi.models.attention import recording_weights

    m, d = model(method, options, "--attention-kernel", kernel)
    tokens = random_tokens(len(d), 2, 12)
    expected = []
    naive_model(m, tokens, weights=expected)
    with torch.no_grad():
        plain = m(tokens)[0]
        with recording_weights(m.decoder) as recorded:
            logits = m(tokens)[0]
    torch.testing.assert_close(logits, plain, rtol=1e-4, atol=1e-5)
    layers = len(m.decoder.layers)
    assert [len(weights) for weights in recorded] == [1] * layers
    for layer, (weights,) in enumerate(recorded):
        naive = torch.stack([expected[row * layers + layer] for row in range(len(tokens))])
        torch.testing.assert_close(weights, naive, rtol=1e-4, atol=1e-6)
    assert all(layer.self_attn.recorded_weights is None for layer in m.decoder.layers)
    assert m.decoder.dense_attention == bool(logit_readers(m.decoder.layers[0].self_attn.options))
