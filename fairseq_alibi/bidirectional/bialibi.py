"""bialibi (LittleBird, Lee et al. 2022, section 3): -D[i, j] with D = 0 on the diagonal, alpha_h in
row 0 and column 0 (the first token: <s> in a masked LM), past_h (i - j) for keys before the query
and future_h (j - i) for keys after it, all three learned per head. past_h and future_h are learned
slopes (base.LearnedSlopes); alpha_h is a constant, not a slope (either sign allowed), started at 0:
the first token starts out as a global token seen at no distance by every query. It is anchored at
index 0, so inputs must not be left-padded."""
import torch
from torch import Tensor, nn

from fairseq_alibi.positions import per_head
from fairseq_alibi.bidirectional.encoder_alibi import LearnedSlopes, register


@register("bialibi")
class BiAlibi(LearnedSlopes):
    first_token_anchored = True

    def __init__(self, num_heads: int):
        super().__init__(num_heads)
        self.first_token = nn.Parameter(torch.zeros(num_heads))

    def forward(self, query_pos: Tensor, key_pos: Tensor) -> Tensor:
        bias = super().forward(query_pos, key_pos)
        query, key = query_pos.unsqueeze(-1), key_pos.unsqueeze(-2)
        first = ((query == 0) | (key == 0)) & (query != key)
        return torch.where(first, -per_head(self.first_token, first), bias)
