"""ALiBi's slopes (Press, Smith & Lewis, ICLR 2022, section 3): plain Python, importable without torch, so
that what only draws or names them (the lab's figures of each head's reach) starts without it."""
import math
from typing import List


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
