"""ruoss: -m_h (|i - j| - 0.5 [j < i]) (Ruoss et al., ACL 2023): keys on the left get half a unit
of distance back, which breaks the symmetry at no cost in parameters."""
from torch import Tensor

from fairseq_alibi.positions import per_head
from fairseq_alibi.bidirectional.encoder_alibi import EncoderAlibi, register, two_sided_bias


@register("ruoss")
class Ruoss(EncoderAlibi):
    def forward(self, query_pos: Tensor, key_pos: Tensor) -> Tensor:
        bias = two_sided_bias(self.slopes, self.slopes, query_pos, key_pos)
        before = (key_pos.unsqueeze(-2) < query_pos.unsqueeze(-1)).float()
        return bias + 0.5 * per_head(self.slopes, before) * before
