"""Rotary position embedding (RoFormer, Su et al. 2021; GPT-J's interleaved layout). Pure torch.

Dimensions (2k, 2k+1) of a query or key at position p are rotated by the angle p * theta_k,
theta_k = base^(-2k/d), so q_i . k_j depends on the positions only through i - j.
"""
from typing import Tuple

import torch
from torch import Tensor


def rotary_angles(positions: Tensor, head_dim: int, base: float = 10000.0) -> Tuple[Tensor, Tensor]:
    """cos and sin of p * theta_k, each (len(positions), head_dim / 2), in fp32."""
    if head_dim % 2:
        raise ValueError(f"rotary needs an even head dimension, got {head_dim}")
    theta = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float64) / head_dim)
    # In fp64 (a small T x d/2 table): an fp32 angle is off by ~1e-4 rad at position 5000.
    angles = positions.double()[:, None] * theta[None, :]
    return angles.cos().float(), angles.sin().float()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate x (..., T, head_dim) pairwise by the angles of its T positions; computed in fp32."""
    even, odd = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)
