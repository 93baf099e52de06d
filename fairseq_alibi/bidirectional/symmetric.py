"""symmetric: -m_h |i - j| (fork issue #5 option 1; MPT, x-transformers, JinaBERT). Blind to
direction: every layer commutes with reversing the input."""
from torch import Tensor

from fairseq_alibi.bidirectional.encoder_alibi import EncoderAlibi, register, two_sided_bias


@register("symmetric")
class Symmetric(EncoderAlibi):
    def forward(self, query_pos: Tensor, key_pos: Tensor) -> Tensor:
        return two_sided_bias(self.slopes, self.slopes, query_pos, key_pos)
