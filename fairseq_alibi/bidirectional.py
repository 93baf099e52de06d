"""Bidirectional (encoder) ALiBi: five variants of the bias an encoder adds to q.k / sqrt(d_h).
Pure torch, no fairseq import.

i is the query's position, j the key's, m_h the paper's slopes (alibi.alibi_slopes). Keys with
j < i are "past" (left of the query), j > i "future" (right of it).

- symmetric: -m_h |i - j| (fork issue #5 option 1; MPT, x-transformers, JinaBERT). Blind to
  direction: every layer commutes with reversing the input.
- one_sided: heads 0 .. H/2-1 look only left, -m'_h (i - j) for j <= i and -inf after; heads
  H/2 .. H-1 only right, -m'_h (j - i) for j >= i and -inf before; m' the slopes of H/2 heads,
  used by both halves (fork issue #5 option 2). H even.
- learned: -p_h (i - j) before the query, -f_h (j - i) after it, p_h = exp(log_past_h),
  f_h = exp(log_future_h) learned per head (fork issue #5 option 3). The exponential keeps them
  slopes (positive); both start at log m_h, i.e. the model starts as symmetric ALiBi, a known
  good encoder, rather than at the issue's random draw.
- ruoss: -m_h (|i - j| - 0.5 [j < i]) (Ruoss et al., ACL 2023): keys on the left get half a
  unit of distance back, which breaks the symmetry at no cost in parameters.
- bialibi (LittleBird, Lee et al. 2022, section 3): -D[i, j] with D = 0 on the diagonal, alpha_h
  in row 0 and column 0 (the first token: <s> in a masked LM), past_h (i - j) for keys before the
  query and future_h (j - i) for keys after it, all three learned per head. past_h and future_h
  are exp of parameters started at log m_h (so they stay slopes); alpha_h is a constant, not a
  slope (either sign allowed), started at 0: the first token starts out as a global token seen
  at no distance by every query. It is anchored at index 0, so inputs must not be left-padded.
"""

import torch
from torch import Tensor, nn

from .alibi import alibi_slopes
from .positions import PositionMethod, per_head

VARIANTS = ("symmetric", "one_sided", "learned", "ruoss", "bialibi")
LEARNED = ("learned", "bialibi")  # variants with trainable parameters


def check_variant(variant: str, num_heads: int):
    """ValueError naming the fix if `variant` cannot run with `num_heads` heads."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown encoder ALiBi variant {variant!r}: use one of {', '.join(VARIANTS)}")
    if num_heads < 1:
        raise ValueError(f"encoder ALiBi needs at least one attention head, got {num_heads}")
    if variant == "one_sided" and num_heads % 2:
        raise ValueError(f"one_sided ALiBi gives half the heads to each side: the head count must be "
                         f"even, got {num_heads}")


def two_sided_bias(past: Tensor, future: Tensor, query_pos: Tensor, key_pos: Tensor) -> Tensor:
    """(heads, ..., Tq, Tk): -past_h (i - j) for keys before the query, -future_h (j - i) after it,
    0 at j = i. past, future: (heads,) non-negative slopes; query_pos (..., Tq), key_pos (..., Tk)."""
    offset = key_pos.unsqueeze(-2).float() - query_pos.unsqueeze(-1).float()  # j - i, < 0 before the query
    slope = torch.where(offset < 0, per_head(past, offset), per_head(future, offset))
    return -slope * offset.abs()


def one_sided_bias(slopes: Tensor, query_pos: Tensor, key_pos: Tensor) -> Tensor:
    """(2 * len(slopes), ..., Tq, Tk): the first half of the heads looks left, the second right,
    each with `slopes`; the other side is -inf (the diagonal stays, so no row is empty)."""
    left = two_sided_bias(slopes, slopes, query_pos, key_pos)
    offset = key_pos.unsqueeze(-2) - query_pos.unsqueeze(-1)
    return torch.cat([left.masked_fill(offset > 0, float("-inf")), left.masked_fill(offset < 0, float("-inf"))])


class EncoderAlibi(PositionMethod):
    """One variant's parameters (if any) and its bias for given positions: a position method
    (positions/'s interface) for encoders, registered as `alibi` (checkpoint keys *.alibi.*)."""

    name = "alibi"

    def __init__(self, variant: str, num_heads: int):
        super().__init__()
        check_variant(variant, num_heads)
        self.variant = variant
        slopes = torch.tensor(alibi_slopes(num_heads // 2 if variant == "one_sided" else num_heads))
        if variant in LEARNED:
            self.log_past = nn.Parameter(slopes.log())
            self.log_future = nn.Parameter(slopes.log())
            if variant == "bialibi":
                self.first_token = nn.Parameter(torch.zeros(num_heads))
        else:  # not persistent: checkpoints hold only what was learned
            self.register_buffer("slopes", slopes, persistent=False)

    def past_future_slopes(self):
        """(past, future) slopes, (heads,) each, of the variants with two sides (not one_sided)."""
        if self.variant in LEARNED:
            return self.log_past.exp(), self.log_future.exp()
        return self.slopes, self.slopes

    def forward(self, query_pos: Tensor, key_pos: Tensor) -> Tensor:
        """(heads, ..., Tq, Tk) fp32 bias for queries at query_pos (..., Tq) and keys at key_pos
        (..., Tk), positions from 0; leading dims (LittleBird's blocks) are kept."""
        if self.variant == "one_sided":
            return one_sided_bias(self.slopes, query_pos, key_pos)
        past, future = self.past_future_slopes()
        bias = two_sided_bias(past, future, query_pos, key_pos)
        query, key = query_pos.unsqueeze(-1), key_pos.unsqueeze(-2)
        if self.variant == "ruoss":
            before = (key < query).float()
            bias = bias + 0.5 * per_head(self.slopes, before) * before
        if self.variant == "bialibi":
            first = ((query == 0) | (key == 0)) & (query != key)
            bias = torch.where(first, -per_head(self.first_token, first), bias)
        return bias

    def bias(self, query_pos: Tensor, key_pos: Tensor) -> Tensor:
        return self(query_pos, key_pos)

    def square(self, length: int, device=None) -> Tensor:
        """(heads, T, T) for a whole input of `length` tokens."""
        positions = torch.arange(length, device=device)
        return self(positions, positions)

