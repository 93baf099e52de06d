"""ALiBi with learned slopes: -m_h (i - j), m_h = exp(s_h) learned (positive by construction), s
starting at the log of the paper's slopes, so training starts from ALiBi; shared by the layers, as
ALiBi's slopes are. The paper (section 3) tried trainable slopes and kept fixed ones (no gain,
slower); this is the baseline a data-dependent ALiBi (fox.py) is measured against.

Kernels that compute -m (i - j) from given slopes (FlashAttention-2, the blocked CPU kernel) take
these slopes at evaluation; they give them no gradient, so training leaves them to sdpa
(kernels.unusable), which does, or to FlexAttention on a GPU (elementwise_bias)."""
import dataclasses

import torch
from torch import nn

from fairseq_alibi.alibi_bias import alibi_slopes
from fairseq_alibi.positions.position_method import MethodConfig, PositionMethod, per_head, register, signed_distance


@register("learned_alibi", "ALiBi, learned slopes")
class LearnedAlibi(PositionMethod):
    name = "learned_alibi"  # checkpoint key decoder.learned_alibi.log_slopes

    @dataclasses.dataclass
    class Config(MethodConfig):
        def build(self, heads, head_dim, embed_dim):
            return LearnedAlibi(heads)

    def __init__(self, heads: int):
        super().__init__()
        self.log_slopes = nn.Parameter(torch.tensor(alibi_slopes(heads), dtype=torch.float64).log().float())

    @property
    def linear_slopes(self):
        return self.log_slopes.exp()

    def bias(self, query_pos, key_pos):
        distance = -signed_distance(query_pos, key_pos)  # j - i
        return per_head(self.log_slopes.float().exp(), distance) * distance  # -m (i - j)

    def elementwise_bias(self):
        slopes = self.log_slopes.float().exp()
        return lambda head, query_pos, key_pos: -slopes[head] * (query_pos - key_pos)
