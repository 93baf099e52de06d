"""flex: PyTorch FlexAttention with the ALiBi bias as a `score_mod` (or none) and the causal pattern
as a block mask, future blocks skipped (compiled on GPU; eager elsewhere, which materializes the
scores and is meant for testing); with packed documents a document mask_mod. Its slopes get no
gradient here (and FlexAttention's backward does not run on CPU)."""
from typing import Optional

import torch
from torch import Tensor

from ..base import warn_once
from .base import BLOCKED_ABOVE, Kernel, register
from .flash import takes_slopes_or_nothing

FLEX_MIN_HEAD_DIM = 16  # PyTorch's compiled FlexAttention refuses narrower heads


def flex_compiles(positions, x: Tensor) -> bool:
    """Whether compiled FlexAttention can take ALiBi here: a CUDA input, heads of dimension
    FLEX_MIN_HEAD_DIM and up (x: the layer input, T x B x C, C = heads x head dim)."""
    slopes = positions.linear_slopes
    return x.is_cuda and slopes is not None and x.size(-1) // slopes.numel() >= FLEX_MIN_HEAD_DIM


class Flex(Kernel):
    name = "flex"
    auto_priority = 1

    def takes(self, positions, documents=False):
        return takes_slopes_or_nothing(self.name, positions)

    def unusable(self, positions, x, dropout, documents):
        return "it has no attention dropout (training with attention dropout)" if dropout else None

    def trains_bias(self, documents):
        return False

    def auto_wants(self, positions, x, query_len):
        # Long ALiBi evaluation on a GPU without flash-attn: no heads x T x S mask in memory (at
        # 4096 tokens on an H100: 2.4x the twin's memory against 9.5x, at 0.85x the dense path's
        # speed; training keeps the dense path, whose speed against flex was not measured).
        return query_len > BLOCKED_ABOVE and not torch.is_grad_enabled() and flex_compiles(positions, x)

    def prepare(self, positions, dtype, documents=None, query_len=0):
        return FlexAttend(positions.linear_slopes, documents, query_len)


class FlexAttend:
    def __init__(self, slopes, documents, query_len):
        self.slopes = slopes
        # Built once per forward, for every layer.
        self.block_mask = flex_document_block_mask(documents.ids, query_len) if documents is not None else None

    def attend(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> Tensor:
        if dropout_p > 0:
            raise ValueError("FlexAttention has no attention dropout: train with the sdpa kernel")
        return flex_alibi_attention(q, k, v, self.slopes, self.block_mask)


def flex_document_block_mask(ids: Tensor, query_len: int):
    """FlexAttention's block mask for the last query_len of the S tokens of each row of ids
    (batch, S): causal, and inside each query's document."""
    from torch.nn.attention.flex_attention import create_block_mask

    batch, key_len = ids.shape
    offset = key_len - query_len

    def same_document_causal(b, head, q_idx, kv_idx):
        return (q_idx + offset >= kv_idx) & (ids[b, q_idx + offset] == ids[b, kv_idx])

    return create_block_mask(same_document_causal, batch, None, query_len, key_len, device=ids.device)


_compiled_flex = None
_flex_block_mask = None  # (query length, key length, device), its block mask


def flex_alibi_attention(q: Tensor, k: Tensor, v: Tensor, slopes: Optional[Tensor], block_mask=None) -> Tensor:
    """The bias in a score_mod (slopes None: none); the causal pattern in a block mask, so that the
    compiled kernel skips the blocks wholly in the future instead of computing and discarding them
    (block_mask: a given one, e.g. flex_document_block_mask's). ALiBi's -m (i - j) is the same
    counted from a document's start as from the row's."""
    global _compiled_flex, _flex_block_mask
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    offset = k.size(2) - q.size(2)
    slopes = slopes.float() if slopes is not None else None

    def alibi_score(score, batch, head, q_idx, kv_idx):
        return score - slopes[head] * (q_idx + offset - kv_idx)  # -m (i - j)

    def causal(batch, head, q_idx, kv_idx):
        return q_idx + offset >= kv_idx

    key = (q.size(2), k.size(2), q.device)
    if block_mask is None:
        if _flex_block_mask is None or _flex_block_mask[0] != key:  # the same for every layer and step
            _flex_block_mask = (key, create_block_mask(causal, None, None, q.size(2), k.size(2), device=q.device))
        block_mask = _flex_block_mask[1]
    score_mod = alibi_score if slopes is not None else None
    if q.is_cuda and q.size(-1) < FLEX_MIN_HEAD_DIM:
        warn_once(f"attention kernel flex: PyTorch compiles FlexAttention for heads of dimension {FLEX_MIN_HEAD_DIM} and up, "
                  f"not {q.size(-1)}: running it uncompiled (it materializes the scores; sdpa is faster)")
    elif q.is_cuda:
        if _compiled_flex is None:
            _compiled_flex = torch.compile(flex_attention, dynamic=True)
        return _compiled_flex(q, k, v, score_mod=score_mod, block_mask=block_mask)
    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)


register(Flex())
