"""Selective attention (Leviathan, Kalman & Matias, ICLR 2025, arXiv:2410.02703): parameter-free, one
head's positive logits say which earlier tokens later queries need no more, and every head's logits lose
what has accumulated,

    S_kj = relu(l^0_kj) for k != j and j > 0 (0 for the first token and a token's own key),
    F_ij = sum_{k < i} S_kj,       l^h_ij <- l^h_ij - F_ij   for every head h,

l^0 the logits of head 0 as the head computes them (the method's bias and the causal mask included: a
future key's -inf gives 0). Query i's F reads only earlier queries' logits, so a cache keeps sum_k S_kj
over the queries seen (batch, S), which the next queries add to. It reads the logits: the dense path;
with packed documents refused (the paper spares its sequence's first token; a document's would need
the separator's positions).
"""
import dataclasses
from typing import Optional, Tuple

import torch.nn.functional as F
from torch import Tensor

from fairseq_alibi.attention_options.option import AttentionOption, OptionConfig, diagonal, register_option
from fairseq_alibi.positions.position_method import option


@register_option
@dataclasses.dataclass
class SelectiveConfig(OptionConfig):
    name = "selective"
    flag = "--selective-attention"
    reads_logits = True
    takes_documents = False

    selective_attention: bool = option(
        False, "selective attention (Leviathan et al. 2025): head 0's positive logits, accumulated over later "
        "queries, subtracted from every head's")

    def enabled(self) -> bool:
        return bool(self.selective_attention)

    def build(self, heads: int, head_dim: int, embed_dim: int) -> "Selective":
        return Selective()


class Selective(AttentionOption):
    def adjust_logits(self, logits: Tensor, state: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        query_len, key_len = logits.shape[-2:]
        selected = logits[:, 0].clamp(min=0)  # (batch, T, S); a masked key's -inf gives 0
        spared = diagonal(query_len, key_len, logits.device).clone()
        spared[:, 0] = True  # the first token, and each query's own key
        selected = selected.masked_fill(spared, 0.0)
        before = selected.cumsum(dim=1)  # over queries: through query i
        seen = F.pad(state, (0, key_len - state.size(-1))) if state is not None else selected.new_zeros(selected.shape[0], key_len)
        accumulated = seen[:, None] + before - selected  # queries before i only
        return logits - accumulated[:, None], seen + before[:, -1]
