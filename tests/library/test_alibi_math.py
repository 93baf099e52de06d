"""Slopes and bias against the paper's closed forms, written out naively."""
import math

import pytest
import torch

from fairseq_alibi.alibi_bias import alibi_mask, alibi_slopes

# log2 of each slope, from the paper (section 3) and its rule for head counts that are not 2^k
# (official-alibi.md, section 2.1).
CLOSED_FORM_LOG2 = {
    1: [-8],
    5: [-2, -4, -6, -8, -1],
    6: [-2, -4, -6, -8, -1, -3],
    8: [-1, -2, -3, -4, -5, -6, -7, -8],
    12: [-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -1.5, -2.5, -3.5],
    16: [-0.5 * k for k in range(1, 17)],
}


@pytest.mark.parametrize("heads", sorted(CLOSED_FORM_LOG2))
def test_slopes_match_closed_form(heads):
    expected = [2.0**e for e in CLOSED_FORM_LOG2[heads]]
    assert alibi_slopes(heads) == pytest.approx(expected, rel=1e-12)


def test_eight_head_slopes_are_the_papers_halves():
    assert alibi_slopes(8) == pytest.approx([1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256])


def test_zero_heads_is_an_error():
    with pytest.raises(ValueError, match="at least one attention head"):
        alibi_slopes(0)


def naive_bias(slopes, query_len, key_len):
    """The paper's bias m * [-(i-1), ..., -1, 0] for each query i, -inf on future keys, looped."""
    offset = key_len - query_len
    out = torch.empty(len(slopes), query_len, key_len)
    for h, m in enumerate(slopes):
        for qi in range(query_len):
            i = qi + offset
            for j in range(key_len):
                out[h, qi, j] = -m * (i - j) if j <= i else -math.inf
    return out


@pytest.mark.parametrize("heads", [1, 5, 8, 12])
@pytest.mark.parametrize("query_len,key_len", [(7, 7), (1, 9), (3, 10)])
def test_mask_matches_naive_formula(heads, query_len, key_len):
    slopes = alibi_slopes(heads)
    got = alibi_mask(torch.tensor(slopes), query_len, key_len)
    assert got.dtype == torch.float32
    # fp32 slopes times integer distances, against the same product in float64: 1 ulp apart at most
    torch.testing.assert_close(got, naive_bias(slopes, query_len, key_len), rtol=1e-6, atol=0)


def test_mask_rows_differ_from_fork_form_only_by_a_constant():
    """The fork's key-index form m*j equals ours up to a per-row shift (softmax-invariant)."""
    slopes = torch.tensor(alibi_slopes(8))
    ours = alibi_mask(slopes, 16, 16)
    fork = slopes[:, None, None] * torch.arange(16.0)[None, None, :] + torch.triu(
        torch.full((16, 16), -math.inf), 1
    )
    assert torch.allclose(torch.softmax(ours, -1), torch.softmax(fork, -1), atol=1e-6)


def test_relative_form_is_exact_in_half_precision_near_the_diagonal():
    slopes = torch.tensor(alibi_slopes(8))
    mask = alibi_mask(slopes, 1, 8192)  # last query of an 8192-token sequence
    near = mask[..., -64:]  # the 64 nearest keys
    assert torch.equal(near.half().float(), near)
    assert torch.equal(near.bfloat16().float(), near)
