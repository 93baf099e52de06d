"""one_sided: heads 0 .. H/2-1 look only left, -m'_h (i - j) for j <= i and -inf after; heads
H/2 .. H-1 only right, -m'_h (j - i) for j >= i and -inf before; m' the slopes of H/2 heads, used by
both halves (fork issue #5 option 2). H even."""
import torch
from torch import Tensor

from fairseq_alibi.alibi_bias import alibi_slopes
from fairseq_alibi.bidirectional.encoder_alibi import EncoderAlibi, one_sided_bias, register


@register("one_sided")
class OneSided(EncoderAlibi):
    def __init__(self, num_heads: int):
        super().__init__(num_heads)
        if num_heads % 2:
            raise ValueError(f"one_sided ALiBi gives half the heads to each side: the head count must be "
                             f"even, got {num_heads}")
        self.slopes = torch.tensor(alibi_slopes(num_heads // 2))

    def past_future_slopes(self):
        raise ValueError("one_sided ALiBi has no two-sided slopes (a head looks one way)")

    def forward(self, query_pos: Tensor, key_pos: Tensor) -> Tensor:
        return one_sided_bias(self.slopes, query_pos, key_pos)
