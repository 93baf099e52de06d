"""ALiBi math: slopes and the causal bias mask. Pure torch, no fairseq import.

Press, Smith & Lewis, "Train Short, Test Long" (ICLR 2022), section 3: query i adds
m_h * [-(i-1), ..., -1, 0] to its attention scores over keys 1..i, with one slope m_h per head.
"""
import math
from typing import List

import torch


def alibi_slopes(num_heads: int) -> List[float]:
    """The paper's slopes: a geometric sequence starting at 2^(-8/n) with that ratio.

    For a head count that is not a power of 2, the paper's rule: the slopes of the closest
    lower power of 2, then every other slope of the next power of 2 (the ones in between).
    """
    if num_heads < 1:
        raise ValueError(f"ALiBi needs at least one attention head, got {num_heads}")

    def power_of_2_slopes(n):
        return [2.0 ** (-8.0 * (k + 1) / n) for k in range(n)]

    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_2_slopes(closest)
    if closest < num_heads:
        slopes += power_of_2_slopes(2 * closest)[0::2][: num_heads - closest]
    return slopes


def alibi_mask(slopes: torch.Tensor, query_len: int, key_len: int) -> torch.Tensor:
    """Causal ALiBi mask of shape (heads, query_len, key_len), in fp32.

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
    bias = slopes.float()[:, None, None] * distance  # -m (i - j): one full-size pass ...
    return bias.masked_fill_(distance > 0, float("-inf"))  # ... and one in place
