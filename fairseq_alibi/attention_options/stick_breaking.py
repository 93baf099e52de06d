"""Stick-breaking attention (Tan, Shen, Shao, Courville & Panda, ICLR 2025, arXiv:2410.17980): softmax
replaced by breaking a stick from the nearest key back,

    beta_ij = sigmoid(l_ij),   A_ij = beta_ij prod_{j < k < i} (1 - beta_ik)   for j < i,

computed in log space (log A_ij = log sigmoid(l_ij) + sum_{j < k < i} log sigmoid(-l_ik), a reverse
cumulative sum over the keys), and what the stick leaves, 1 - sum_j A_ij, given to the query's own value
(the authors' reference, attend_current False). l: the logits, the method's bias included (the paper uses
none: NoPE). Per query: a cache needs nothing. It replaces softmax: the dense path.
"""
import dataclasses

import torch.nn.functional as F
from torch import Tensor

from fairseq_alibi.attention_options.option import AttentionOption, OptionConfig, diagonal, register_option
from fairseq_alibi.positions.position_method import option


@register_option
@dataclasses.dataclass
class StickBreakingConfig(OptionConfig):
    name = "stick_breaking"
    flag = "--stick-breaking"
    reads_logits = True
    weighs = True

    stick_breaking: bool = option(
        False, "stick-breaking attention in place of softmax (Tan et al. 2025): each key takes sigmoid(logit) "
        "of what the nearer keys left")

    def enabled(self) -> bool:
        return bool(self.stick_breaking)

    def build(self, heads: int, head_dim: int, embed_dim: int) -> "StickBreaking":
        return StickBreaking()


class StickBreaking(AttentionOption):
    def weights(self, logits: Tensor) -> Tensor:
        own = diagonal(*logits.shape[-2:], logits.device)
        logits = logits.masked_fill(own, float("-inf"))  # keys before the query only
        log_rest = F.logsigmoid(-logits)  # 0 where masked
        nearer = log_rest.flip(-1).cumsum(-1).flip(-1) - log_rest  # sum over the keys after j
        taken = (F.logsigmoid(logits) + nearer).exp()
        left = 1.0 - taken.sum(dim=-1, keepdim=True)
        return taken + own * left
