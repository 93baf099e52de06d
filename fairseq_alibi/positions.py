"""Position methods, each one module with one small interface (x-transformers' `rel_pos(i, j)` in
spirit). Pure torch, no fairseq import; every check is a ValueError raised by the constructor.

What attention asks of a method (attention.attention_bias is the only caller):
- bias(query_pos, key_pos): the additive bias, (heads, ..., Tq, Tk) in fp32, for queries at
  query_pos (..., Tq) and keys at key_pos (..., Tk), positions counted from 0 (the leading dims
  let every row have its own positions). Defined for every pair: attention masks the future of
  a causal model and padded keys itself, in place (so bias returns a new tensor, never a
  buffer). None: the method adds no bias (has_bias False).
- rotary(positions): cos, sin (*positions.shape, head_dim / 2) that rotate queries and keys at
  these positions, or None.
- linear_slopes: (heads,) m if the bias is exactly -m_h (i - j) (ALiBi without per-query
  scaling): kernels that compute that bias themselves (FlashAttention-2, FlexAttention, the
  blocked CPU kernel) take it from here. None otherwise.
- constant_beyond(): (window, (heads,) value) if the bias is one constant per head for every
  distance i - j >= window (T5's last bucket), which the blocked kernel uses at evaluation. None
  otherwise.
- name: the attribute the model registers it under (its checkpoint keys: decoder.<name>.*).

Causal methods (for decoders): NoPositions, Alibi, Rotary, T5Bias, Kerple, Sandwich, Fire. The
encoder's are bidirectional.EncoderAlibi's five variants, with the same interface.
"""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .alibi import alibi_slopes, check_scaling, dynamic_factors, ntk_exponents, scale_slopes
from .rotary import check_rotary, rotary_angles
from .t5_bias import check_buckets, t5_buckets


def per_head(values: Tensor, like: Tensor) -> Tensor:
    """(heads,) -> (heads, 1, ..., 1), to broadcast against `like` (..., Tq, Tk)."""
    return values.view(-1, *([1] * like.dim()))


def signed_distance(query_pos: Tensor, key_pos: Tensor) -> Tensor:
    """(..., Tq, Tk) fp32: i - j, >= 0 for the keys a causal query sees."""
    return query_pos.unsqueeze(-1).float() - key_pos.unsqueeze(-2).float()


def heads_first(bias: Tensor) -> Tensor:
    """(..., Tq, Tk, heads) -> (heads, ..., Tq, Tk)."""
    return bias.permute(-1, *range(bias.dim() - 1))


class PositionMethod(nn.Module):
    """The interface's defaults: no bias, no rotation, no kernel shortcuts. Nothing here calls
    anything: attention.attention_bias asks the method, the method never calls back."""

    name = "positions"
    has_bias = True
    linear_slopes: Optional[Tensor] = None

    def bias(self, query_pos: Tensor, key_pos: Tensor) -> Optional[Tensor]:
        return None

    def rotary(self, positions: Tensor) -> Optional[Tuple[Tensor, Tensor]]:
        return None

    def constant_beyond(self) -> Optional[Tuple[int, Tensor]]:
        return None


class NoPositions(PositionMethod):
    """NoPE (Kazemnejad et al., NeurIPS 2023, arXiv:2305.19466): no position information at all;
    the causal mask alone tells a token what came before it."""

    name = "nope"
    has_bias = False


class Alibi(PositionMethod):
    """ALiBi (Press et al. 2022): -m_h (i - j), the paper's slopes (alibi.alibi_slopes), optionally
    rescaled at inference (alibi.scale_slopes: linear, ntk statically; dynamic_ntk per query)."""

    name = "alibi"

    def __init__(self, heads: int, scaling: str = "none", factor: float = 1.0, train_length: Optional[int] = None):
        super().__init__()
        check_scaling(scaling, factor)
        if scaling == "dynamic_ntk" and not (train_length and train_length >= 1):
            raise ValueError(f"dynamic_ntk slope scaling needs the training length, got {train_length}")
        self.scaling, self.factor, self.train_length = scaling, float(factor), train_length
        slopes = torch.tensor(alibi_slopes(heads), dtype=torch.float32)
        if scaling in ("linear", "ntk"):  # static: the same slopes for every query
            slopes = scale_slopes(slopes, scaling, factor)
        # A buffer so that .to(device) moves it; not persistent: checkpoints stay stock-shaped.
        self.register_buffer("slopes", slopes, persistent=False)

    @property
    def linear_slopes(self) -> Optional[Tensor]:
        return None if self.scaling == "dynamic_ntk" else self.slopes

    def query_slopes(self, query_pos: Tensor) -> Tensor:
        """(heads,) or, under dynamic scaling, (heads, ..., Tq): a per query (alibi.dynamic_factors)."""
        if self.scaling != "dynamic_ntk":
            return self.slopes
        factors = dynamic_factors(query_pos, self.train_length, self.factor)  # (..., Tq)
        return per_head(self.slopes.float(), factors) / factors[None] ** per_head(ntk_exponents(self.slopes), factors)

    def bias(self, query_pos, key_pos):
        distance = -signed_distance(query_pos, key_pos)  # j - i
        slopes = self.query_slopes(query_pos).float()
        slopes = per_head(slopes, distance) if slopes.dim() == 1 else slopes.unsqueeze(-1)
        return slopes * distance  # -m (i - j)


class Rotary(PositionMethod):
    """Rotary (RoFormer; the paper's baseline): queries and keys rotated by their positions, no
    bias; scaled at inference by rotary.ROTARY_SCALINGS (linear, ntk, yarn)."""

    name = "rotary"
    has_bias = False

    def __init__(self, head_dim: int, base: float = 10000.0, scaling: str = "none", factor: float = 1.0,
                 train_length: Optional[int] = None):
        super().__init__()
        check_rotary(head_dim, scaling, factor, train_length)
        self.head_dim, self.base = head_dim, base
        self.scaling, self.factor, self.train_length = scaling, float(factor), train_length

    def rotary(self, positions):
        return rotary_angles(positions, self.head_dim, self.base, self.scaling, self.factor, self.train_length)


class T5Bias(PositionMethod):
    """T5's relative bias (Raffel et al. 2020; the paper's baseline): a learned scalar per head and
    log-bucket of i - j (t5_bias.t5_buckets), shared by the layers."""

    name = "relative_attention_bias"  # checkpoint key decoder.relative_attention_bias.weight

    def __init__(self, heads: int, num_buckets: int = 32, max_distance: int = 128, init_std: float = 1.0):
        super().__init__()
        check_buckets(num_buckets, max_distance)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.weight = nn.Parameter(torch.empty(num_buckets, heads))
        nn.init.normal_(self.weight, std=init_std)  # T5's: std d^-0.5

    def bias(self, query_pos, key_pos):
        buckets = t5_buckets(signed_distance(query_pos, key_pos).long(), self.num_buckets, self.max_distance)
        return heads_first(F.embedding(buckets, self.weight)).float()

    def constant_beyond(self):
        return self.max_distance, self.weight[self.num_buckets - 1]


KERPLE_VARIANTS = ("log", "power")


class Kerple(PositionMethod):
    """KERPLE (Chi et al., NeurIPS 2022, arXiv:2205.09921): a conditionally positive definite kernel
    of |i - j| with two parameters per head,

        log:   -r1_h log(1 + r2_h |i - j|)        r1, r2 > 0
        power: -r1_h |i - j|^r2_h                 r1 > 0, 0 < r2 <= 2

    initialised as the official code (chijames/KERPLE, ParallelKerpleLog/ParallelKerplePower): the
    scale-2 draw first (log: r1 ~ U(0, 2), then r2 ~ U(0, 1); power: the exponent r2 ~ U(0, 2),
    then r1 ~ U(0, 1)), and, as there, clamped in place to [1e-2, (2)] before each use, so a
    parameter pushed out of range by a step comes back to its bound and keeps its gradient. (NeMo's
    older copy kept the coefficient as a plain zero tensor: a bias of 0, always.)"""

    name = "kerple"
    eps = 1e-2

    def __init__(self, heads: int, variant: str = "log"):
        super().__init__()
        if variant not in KERPLE_VARIANTS:
            raise ValueError(f"unknown KERPLE variant {variant!r}: use one of {', '.join(KERPLE_VARIANTS)}")
        if heads < 1:
            raise ValueError(f"KERPLE needs at least one attention head, got {heads}")
        self.variant = variant
        if variant == "log":
            self.r1 = nn.Parameter(torch.rand(heads) * 2)
            self.r2 = nn.Parameter(torch.rand(heads))
        else:
            self.r2 = nn.Parameter(torch.rand(heads) * 2)
            self.r1 = nn.Parameter(torch.rand(heads))

    def bias(self, query_pos, key_pos):
        with torch.no_grad():
            self.r1.clamp_(min=self.eps)
            self.r2.clamp_(min=self.eps, max=2.0 if self.variant == "power" else None)
        distance = signed_distance(query_pos, key_pos).abs()
        r1, r2 = per_head(self.r1.float(), distance), per_head(self.r2.float(), distance)
        if self.variant == "log":
            return -r1 * torch.log1p(r2 * distance)
        return -r1 * distance.pow(r2)


class Sandwich(PositionMethod):
    """Sandwich (Chi et al., ACL 2023, arXiv:2212.10356), parameter-free: head h = 1..H adds

        (sum_{k=1..d/2} cos(|i - j| / 10000^(2k/d)) - d/2) / (8h / H),   d the head dimension

    (NeMo 1.x's SandwichRelativePositionEmbedding): 0 at distance 0, negative beyond."""

    name = "sandwich"

    def __init__(self, heads: int, head_dim: int):
        super().__init__()
        if heads < 1:
            raise ValueError(f"Sandwich needs at least one attention head, got {heads}")
        if head_dim < 2 or head_dim % 2:
            raise ValueError(f"Sandwich sums over d/2 frequencies: the head dimension must be even, got {head_dim}")
        self.heads, self.head_dim = heads, head_dim

    def bias(self, query_pos, key_pos):
        # Computed here in fp32, not kept as buffers: a model cast to fp16 would round them.
        device = query_pos.device
        k = torch.arange(1, self.head_dim // 2 + 1, device=device, dtype=torch.float64)
        frequencies = (10000.0 ** (-2 * k / self.head_dim)).float()
        head_scales = 8 * torch.arange(1, self.heads + 1, device=device, dtype=torch.float32) / self.heads
        distance = signed_distance(query_pos, key_pos).abs()
        waves = torch.cos(distance.unsqueeze(-1) * frequencies).sum(-1) - self.head_dim // 2
        return waves[None] / per_head(head_scales, waves)


class Fire(PositionMethod):
    """FIRE (Li et al., ICLR 2024, arXiv:2310.04418): b(i, j) = f(psi(i - j) / psi(max(L, i))),
    psi(x) = log(c |x| + 1), f an MLP 1 -> width -> heads (ReLU), c and the threshold L learned
    (L = |multiplier| * init_threshold, the multiplier learned from 1). "Progressive interpolation":
    the query's own position normalises its distances, so every distance maps into [0, 1] at any
    length past L. As the widely copied module (no official code), with eps 1e-6 in the divisor."""

    name = "fire"
    eps = 1e-6

    def __init__(self, heads: int, width: int = 32, init_c: float = 0.1, init_threshold: float = 512.0):
        super().__init__()
        if heads < 1 or width < 1:
            raise ValueError(f"FIRE needs at least one head and an MLP width of at least 1, got {heads} and {width}")
        if not (init_c > 0 and init_threshold > 0):
            raise ValueError(f"FIRE's c and threshold must start positive, got {init_c} and {init_threshold}")
        self.mlp = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, heads))
        self.c = nn.Parameter(torch.tensor(float(init_c)))
        self.threshold_multiplier = nn.Parameter(torch.tensor(1.0))
        self.init_threshold = float(init_threshold)

    # Without gradients the MLP runs on chunks of query rows of at most this many (query, key)
    # pairs: its hidden layer (pairs x width) stays small at any length (34 GB at 16384 tokens).
    CHUNK_PAIRS = 2**21

    def bias(self, query_pos, key_pos):
        rows = max(1, self.CHUNK_PAIRS // max(1, key_pos.size(-1)))
        if torch.is_grad_enabled() or query_pos.size(-1) <= rows:
            return self.rows_bias(query_pos, key_pos)
        return torch.cat([self.rows_bias(query_pos[..., start:start + rows], key_pos)
                          for start in range(0, query_pos.size(-1), rows)], dim=-2)

    def rows_bias(self, query_pos, key_pos):
        c = self.c.float()
        threshold = (self.threshold_multiplier.float() * self.init_threshold).abs()
        normaliser = torch.maximum(query_pos.float(), threshold)  # (..., Tq)
        distance = torch.log(torch.abs(c * signed_distance(query_pos, key_pos)) + 1)
        scale = torch.log(torch.abs(c * normaliser) + 1) + self.eps
        weight = self.mlp[0].weight
        out = self.mlp((distance / scale.unsqueeze(-1)).unsqueeze(-1).to(weight.dtype))  # (..., Tq, Tk, heads)
        return heads_first(out).float()

