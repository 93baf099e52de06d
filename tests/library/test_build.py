"""models/build.py: the model the tests build (fairseq's parsed arguments) is the one fairseq-train builds (its
config conversion)."""
import pytest
import torch

from conftest import TINY
from fairseq_alibi.models.build import build_model


# Every plugin architecture family, with the options whose parsing differs most between the two paths (choices,
# booleans, per-method options): the test helper's fast path against fairseq-train's own config conversion.
BUILT_BOTH_WAYS = [
    *[(f"{method}_transformer_lm", "language_modeling", TINY) for method in
      ("alibi", "rotary", "t5_bias", "nope", "kerple", "sandwich", "fire", "learned_alibi", "fox")],
    ("alibi_transformer_lm", "language_modeling", [*TINY, "--output-gate", "headwise", "--sink-logit",
                                                   "--length-temperature", "logn", "--length-temperature-length", "8"]),
    ("rotary_transformer_lm", "language_modeling", [*TINY, "--rotary-scaling", "yarn", "--rotary-scaling-factor", "4",
                                                    "--rotary-train-length", "8"]),
    ("gpt2_transformer_lm", "language_modeling", ["--decoder-layers", "2", "--decoder-embed-dim", "32",
                                                  "--decoder-attention-heads", "4", "--decoder-ffn-embed-dim", "64"]),
    ("alibi_roberta_small", "masked_lm", ["--encoder-alibi", "one_sided"]),
    ("littlebird_roberta_small", "masked_lm", []),
    ("alibi_transformer_small", "translation", ["--encoder-alibi", "symmetric"]),
]


@pytest.mark.parametrize("arch,task,flags", BUILT_BOTH_WAYS, ids=[f"{a}-{len(f)}" for a, _, f in BUILT_BOTH_WAYS])
def test_the_tests_fast_build_is_fairseq_trains_model(arch, task, flags):
    """models.build.build_model without hydra (the parsed arguments: what the tests build) gives the model that
    fairseq-train's config conversion gives: the same modules, the same parameters from the same seed."""
    torch.manual_seed(0)
    fast, _ = build_model(arch, 50, flags, task)
    torch.manual_seed(0)
    reference, _ = build_model(arch, 50, flags, task, hydra=True)
    assert repr(fast) == repr(reference)
    fast_state, reference_state = fast.state_dict(), reference.state_dict()
    assert list(fast_state) == list(reference_state)
    assert all(torch.equal(fast_state[name], reference_state[name]) for name in fast_state)
    if task == "language_modeling":
        tokens = torch.randint(4, 54, (2, 12), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            assert torch.equal(fast.eval()(tokens)[0], reference.eval()(tokens)[0])
