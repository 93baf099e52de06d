"""T5's relative position bias (Raffel et al. 2020), causal form. Pure torch.

A learned scalar per head and bucket of the distance i - j, added to the attention scores; the
paper's baseline computes it once and adds it in every layer. Distances below num_buckets / 2
get a bucket each; larger ones share logarithmically wider buckets up to max_distance, and all
distances beyond it share the last bucket (which is how it extrapolates).
"""
import math

import torch
from torch import Tensor


def check_buckets(num_buckets: int, max_distance: int):
    """ValueError naming the fix for bucket settings T5's scheme cannot use."""
    if not (num_buckets >= 2 and max_distance > num_buckets // 2):
        raise ValueError(f"T5 bias needs at least 2 buckets and a maximum distance above half their number, "
                         f"got {num_buckets} buckets and maximum distance {max_distance}")


def t5_buckets(distance: Tensor, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """Bucket of each distance i - j (>= 0 for the keys a causal query sees; < 0 is clamped to 0)."""
    check_buckets(num_buckets, max_distance)
    exact = num_buckets // 2
    distance = distance.clamp(min=0)
    # Logarithmic buckets exact .. num_buckets - 1 for distances exact .. max_distance.
    log_ratio = torch.log(distance.float().clamp(min=exact) / exact) / math.log(max_distance / exact)
    wide = exact + (log_ratio * (num_buckets - exact)).long()
    wide = wide.clamp(max=num_buckets - 1)
    return torch.where(distance < exact, distance, wide)
