"""T5's relative bias (Raffel et al. 2020; the paper's baseline): a learned scalar per head and
log-bucket of i - j (t5_bias.t5_buckets), shared by the layers."""
import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from fairseq_alibi.t5_buckets import check_buckets, t5_buckets
from fairseq_alibi.positions.position_method import MethodConfig, PositionMethod, heads_first, option, register, signed_distance


@register("t5_bias", "T5 bias")
class T5Bias(PositionMethod):
    name = "relative_attention_bias"  # checkpoint key decoder.relative_attention_bias.weight

    @dataclasses.dataclass
    class Config(MethodConfig):
        t5_num_buckets: int = option(32, "learned biases per head (T5: 32)")
        t5_max_distance: int = option(128, "distances beyond share the last bucket (T5: 128)")

        def build(self, heads, head_dim, embed_dim):
            return T5Bias(heads, self.t5_num_buckets, self.t5_max_distance, embed_dim ** -0.5)

    def __init__(self, heads: int, num_buckets: int = Config.t5_num_buckets,
                 max_distance: int = Config.t5_max_distance, init_std: float = 1.0):
        super().__init__()
        check_buckets(num_buckets, max_distance)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.weight = nn.Parameter(torch.empty(num_buckets, heads))
        nn.init.normal_(self.weight, std=init_std)  # T5's: std d^-0.5

    def bias(self, query_pos, key_pos):
        buckets = t5_buckets(signed_distance(query_pos, key_pos).long(), self.num_buckets, self.max_distance)
        return heads_first(F.embedding(buckets, self.weight)).float()

    def elementwise_bias(self):
        weight = self.weight.float()
        return lambda head, query_pos, key_pos: weight[
            t5_buckets((query_pos - key_pos).long(), self.num_buckets, self.max_distance), head]

    def constant_beyond(self):
        return self.max_distance, self.weight[self.num_buckets - 1]
