"""What every encoder ALiBi variant shares: the interface (positions/'s, for encoders), the two bias
shapes the variants are made of, and the registry. Pure torch, no fairseq import.

A variant is one class, registered under its --encoder-alibi name (`@register("ruoss")`): its
constructor takes the head count, checks it (ValueError, once, when the model is built:
factory.encoder_positions) and makes its parameters; forward(query_pos, key_pos) is its bias.
"""
from typing import Dict

import torch
from torch import Tensor, nn

from fairseq_alibi.alibi_bias import alibi_slopes
from fairseq_alibi.positions import PositionMethod, per_head

DEFAULT = "symmetric"  # --encoder-alibi's default (models/encoder.py's options take it from here)


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
    """A variant's parameters (if any) and its bias for given positions: a position method for
    encoders, registered as `alibi` (checkpoint keys *.alibi.*). The fixed variants keep the paper's
    slopes as a buffer, not persistent: checkpoints hold only what was learned."""

    name = "alibi"
    variant = ""  # the registry's name (register)
    first_token_anchored = False  # its first-token term sits at index 0: inputs must not be left-padded

    def __init__(self, num_heads: int):
        super().__init__()
        if num_heads < 1:
            raise ValueError(f"encoder ALiBi needs at least one attention head, got {num_heads}")
        self.register_buffer("slopes", torch.tensor(alibi_slopes(num_heads)), persistent=False)

    def past_future_slopes(self):
        """(past, future) slopes, (heads,) each (LittleBird's window takes them)."""
        return self.slopes, self.slopes

    def forward(self, query_pos: Tensor, key_pos: Tensor) -> Tensor:
        """(heads, ..., Tq, Tk) fp32 bias for queries at query_pos (..., Tq) and keys at key_pos
        (..., Tk), positions from 0; leading dims (LittleBird's blocks) are kept."""
        raise NotImplementedError

    def bias(self, query_pos: Tensor, key_pos: Tensor) -> Tensor:
        return self(query_pos, key_pos)

    def square(self, length: int, device=None) -> Tensor:
        """(heads, T, T) for a whole input of `length` tokens."""
        positions = torch.arange(length, device=device)
        return self(positions, positions)


class LearnedSlopes(EncoderAlibi):
    """Slopes learned per head and side, p_h = exp(log_past_h), f_h = exp(log_future_h) (the
    exponential keeps them slopes), both started at log m_h: the model starts as symmetric ALiBi."""

    def __init__(self, num_heads: int):
        super().__init__(num_heads)
        slopes = self.slopes.clone()
        del self.slopes  # learned instead
        self.log_past = nn.Parameter(slopes.log())
        self.log_future = nn.Parameter(slopes.log())

    def past_future_slopes(self):
        return self.log_past.exp(), self.log_future.exp()

    def forward(self, query_pos: Tensor, key_pos: Tensor) -> Tensor:
        return two_sided_bias(*self.past_future_slopes(), query_pos, key_pos)


# --encoder-alibi name -> variant class, in registration order (the package imports every file here).
VARIANT_CLASSES: Dict[str, type] = {}
VARIANTS = []  # their names (filled as they register; the package's list once it is imported)


def register(variant: str):
    """Class decorator: the variant's --encoder-alibi name."""

    def add(cls):
        if variant in VARIANT_CLASSES:
            raise ValueError(f"encoder ALiBi variant {variant!r} registered twice")
        cls.variant = variant
        VARIANT_CLASSES[variant] = cls
        VARIANTS.append(variant)
        return cls

    return add


def build_variant(variant: str, num_heads: int) -> EncoderAlibi:
    """The variant's module for `num_heads` heads; every check a ValueError naming the fix."""
    if variant not in VARIANT_CLASSES:
        raise ValueError(f"unknown encoder ALiBi variant {variant!r}: use one of {', '.join(VARIANTS)}")
    return VARIANT_CLASSES[variant](num_heads)
