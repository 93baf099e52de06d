"""Rotary position embedding (RoFormer, Su et al. 2021; GPT-J's interleaved layout) and its
context-extension schemes. Pure torch.

Dimensions (2k, 2k+1) of a query or key at position p are rotated by the angle p * theta_k,
theta_k = base^(-2k/d), so q_i . k_j depends on the positions only through i - j.

Scaling at inference (no retraining), by a factor s >= 1, as Hugging Face's `rope_type` defines them:
- linear (position interpolation, Chen et al. 2023): theta_k / s, i.e. positions divided by s;
- ntk (NTK-aware, bloc97 2023): base * s^(d / (d - 2));
- yarn (Peng et al. 2023, arXiv:2309.00071): per frequency, a ramp between theta_k / s (the
  frequencies that turn fewer than beta_slow = 1 times over the training length) and theta_k
  unchanged (more than beta_fast = 32 turns), and an attention temperature: cos and sin both times
  0.1 ln s + 1, so every logit q.k is multiplied by its square.
"""
import math
from typing import Optional, Tuple

import torch
from torch import Tensor

ROTARY_SCALINGS = ("none", "linear", "ntk", "yarn")
YARN_BETA_FAST, YARN_BETA_SLOW = 32, 1


def check_rotary(head_dim: int, scaling: str = "none", factor: float = 1.0, train_length: Optional[int] = None):
    """ValueError naming what is wrong with these rotary settings."""
    if head_dim % 2:
        raise ValueError(f"rotary rotates pairs of dimensions: the head dimension must be even, got {head_dim}")
    if scaling not in ROTARY_SCALINGS:
        raise ValueError(f"unknown rotary scaling {scaling!r}: use one of {', '.join(ROTARY_SCALINGS)}")
    if scaling == "none":
        return
    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor >= 1):
        raise ValueError(f"the rotary scaling factor is how many times the training length is extended: "
                         f"it must be at least 1, got {factor}")
    if scaling == "ntk" and head_dim <= 2:
        raise ValueError(f"ntk scaling raises the base to d / (d - 2): the head dimension must exceed 2, got {head_dim}")
    if scaling == "yarn" and not (train_length and train_length >= 1):
        raise ValueError(f"yarn scaling needs the training length (its ramp counts turns over it), got {train_length}")


def rotary_frequencies(head_dim: int, base: float = 10000.0, scaling: str = "none", factor: float = 1.0,
                       train_length: Optional[int] = None, device=None) -> Tuple[Tensor, float]:
    """theta (head_dim / 2,) in fp64, and the factor that multiplies cos and sin (YaRN's
    temperature; 1 otherwise)."""
    check_rotary(head_dim, scaling, factor, train_length)
    exponents = torch.arange(0, head_dim, 2, device=device, dtype=torch.float64) / head_dim
    if scaling == "ntk":
        base = base * factor ** (head_dim / (head_dim - 2))
    theta = base ** -exponents
    if scaling == "linear":
        return theta / factor, 1.0
    if scaling != "yarn" or factor == 1:
        return theta, 1.0

    def correction_dim(turns):  # the dimension whose frequency turns `turns` times over train_length
        return head_dim * math.log(train_length / (turns * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(YARN_BETA_FAST)), 0)
    high = min(math.ceil(correction_dim(YARN_BETA_SLOW)), head_dim - 1)
    if low == high:
        high += 0.001  # as Hugging Face: no division by zero
    ramp = ((torch.arange(head_dim // 2, device=device, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    kept = 1 - ramp  # 1: theta unchanged (fast dimensions), 0: interpolated by the factor
    return theta / factor * (1 - kept) + theta * kept, 0.1 * math.log(factor) + 1.0


def rotary_angles(positions: Tensor, head_dim: int, base: float = 10000.0, scaling: str = "none",
                  factor: float = 1.0, train_length: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """cos and sin of p * theta_k, each (*positions.shape, head_dim / 2), in fp32 (times YaRN's
    temperature under yarn scaling)."""
    theta, temperature = rotary_frequencies(head_dim, base, scaling, factor, train_length, positions.device)
    # In fp64 (a small T x d/2 table): an fp32 angle is off by ~1e-4 rad at position 5000.
    angles = positions.double()[..., None] * theta
    cos, sin = angles.cos().float(), angles.sin().float()
    return (cos, sin) if temperature == 1 else (cos * temperature, sin * temperature)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate x (..., T, head_dim) pairwise by the angles of its T positions; computed in fp32."""
    even, odd = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)
