"""A learnable sink logit (Gu et al., ICLR 2025, arXiv:2410.10781; gpt-oss's attention sinks): each head
has one logit s_h that takes softmax mass and carries no value,

    w_ij = exp(l_ij) / (exp(s_h) + sum_j' exp(l_ij')),

so that a query may attend to nothing (its weights summing to under 1), which attention sinks do by
spending mass on the first tokens. s_h starts at 0. It reads every row's normaliser: the dense path.
"""
import dataclasses

import torch
from torch import Tensor, nn

from fairseq_alibi.attention_options.option import AttentionOption, OptionConfig, register_option
from fairseq_alibi.positions.position_method import option


@register_option
@dataclasses.dataclass
class SinkLogitConfig(OptionConfig):
    name = "sink_logit"
    flag = "--sink-logit"
    reads_logits = True
    weighs = True

    sink_logit: bool = option(
        False, "one learned logit per head in softmax's denominator that carries no value (Gu et al. 2025; gpt-oss)")

    def enabled(self) -> bool:
        return bool(self.sink_logit)

    def build(self, heads: int, head_dim: int, embed_dim: int) -> "SinkLogit":
        return SinkLogit(heads)


class SinkLogit(AttentionOption):
    def __init__(self, heads: int):
        super().__init__()
        self.logit = nn.Parameter(torch.zeros(heads))

    def weights(self, logits: Tensor) -> Tensor:
        sink = self.logit.float()[None, :, None, None]
        normaliser = torch.logaddexp(torch.logsumexp(logits, dim=-1, keepdim=True), sink)
        return (logits - normaliser).exp()
