"""ALiBi math: slopes and the causal bias mask. Pure torch, no fairseq import.

Press, Smith & Lewis, "Train Short, Test Long" (ICLR 2022), section 3: query i adds
m_h * [-(i-1), ..., -1, 0] to its attention scores over keys 1..i, with one slope m_h per head.
"""
from typing import Union

import torch
from torch import Tensor

from fairseq_alibi.slopes import alibi_slopes  # noqa: F401 (where its importers have always found it)

# Inference-time slope scaling (no retraining); see scale_slopes.
SCALINGS = ("none", "linear", "ntk", "dynamic_ntk")


def alibi_mask(slopes: Tensor, query_len: int, key_len: int) -> Tensor:
    """Causal ALiBi mask of shape (heads, query_len, key_len), in fp32.

    slopes: (heads,), or (heads, query_len) for a slope per head and query (dynamic scaling).

    Queries are the last `query_len` of `key_len` positions (bottom-right aligned), so the same
    function serves a full forward (query_len == key_len) and incremental decoding (the new
    queries over all cached keys). Entry [h, i, j] is -m_h * (i - j) for keys j <= i and -inf
    for future keys. The relative form keeps values near the diagonal small, hence exact when
    later cast to fp16/bf16, unlike the fork's key-index form m_h * j.
    """
    if query_len > key_len:
        raise ValueError(f"query_len ({query_len}) cannot exceed key_len ({key_len})")
    key_pos = torch.arange(key_len, device=slopes.device, dtype=torch.float32)
    distance = key_pos[None, :] - key_pos[key_len - query_len :, None]  # j - i, > 0 in the future
    slopes = slopes.float()[:, None, None] if slopes.dim() == 1 else slopes.float()[:, :, None]
    bias = slopes * distance  # -m (i - j): one full-size pass ...
    return bias.masked_fill_(distance > 0, float("-inf"))  # ... and one in place


def ntk_exponents(slopes: Tensor) -> Tensor:
    """Each head's place t in [0, 1] between the steepest slope (t = 0) and the flattest (t = 1),
    on a log scale: NTK-ALiBi divides a head's slope by a^t.

    For a power-of-2 head count the paper's slopes are 2^(-8h/H), so t = (h-1)/(H-1) and
    m_h / a^t is NTK-ALiBi's 1 / (2^(8h/H) a^((h-1)/(H-1))) exactly. For other head counts (the
    paper interleaves two geometric sequences there) t still follows each slope's own size, so the
    steepest head stays, the flattest is divided by a and the order of the heads is kept. A single
    head is the model's only (so longest-range) head: t = 1, i.e. linear interpolation.
    """
    log_slopes = slopes.double().log()
    spread = log_slopes.max() - log_slopes.min()
    if spread == 0:
        return torch.ones_like(log_slopes, dtype=torch.float32)
    return ((log_slopes.max() - log_slopes) / spread).float()


def check_scaling(method: str, factor: Union[float, Tensor]):
    """ValueError naming the fix for an unknown scaling method or a factor that is not positive
    (linear, ntk: below 1, which would steepen the slopes rather than extend the length)."""
    if method not in SCALINGS:
        raise ValueError(f"unknown slope scaling {method!r}: use one of {', '.join(SCALINGS)}")
    factor = torch.as_tensor(factor, dtype=torch.float32)
    if not bool((factor > 0).all()):
        raise ValueError(f"the slope scaling factor must be positive, got {factor.tolist()}")
    if method in ("linear", "ntk") and not bool((factor >= 1).all()):
        raise ValueError(f"the {method} slope scaling factor is how many times the training length is extended: "
                         f"at least 1 (L_valid / L_train), got {factor.tolist()}")


def scale_slopes(slopes: Tensor, method: str, factor: Union[float, Tensor]) -> Tensor:
    """Slopes for evaluating at `factor` (a) times the training length, without retraining.

    - none: unchanged.
    - linear: every slope divided by a (position interpolation, Al-Khateeb et al. 2023).
    - ntk, dynamic_ntk: NTK-ALiBi (keezen/ntk_alibi): slope / a^t, t from ntk_exponents.
    A tensor factor of shape (T,) (one a per query, see dynamic_factors) gives (heads, T).
    """
    check_scaling(method, factor)
    factor = torch.as_tensor(factor, dtype=torch.float32, device=slopes.device)
    if method == "none":
        return slopes
    exponent = torch.ones_like(slopes) if method == "linear" else ntk_exponents(slopes).to(slopes.device)
    if factor.dim() == 0:
        return slopes / factor ** exponent
    return slopes[:, None] / factor[None, :] ** exponent[:, None]


def dynamic_factors(query_positions: Tensor, train_length: int, factor: float = 1.0) -> Tensor:
    """Dynamic NTK-ALiBi's a for each query: max(1, factor * n / train_length), where n = i + 1
    is the number of tokens query i attends to (the sequence so far).

    Per query rather than per sequence, so that a token's prediction does not depend on how many
    tokens follow it: a full forward gives the same logits as incremental decoding, and within
    the training length (n <= train_length, factor 1) nothing changes.
    """
    if train_length < 1:
        raise ValueError(f"dynamic scaling needs the training length, got {train_length}")
    return torch.clamp(factor * (query_positions.float() + 1) / train_length, min=1.0)
