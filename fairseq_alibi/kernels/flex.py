"""flex: PyTorch FlexAttention with the method's bias as a `score_mod` (its elementwise_bias:
ALiBi, learned slopes, KERPLE, FIRE, T5, Sandwich) or none (rotary, NoPE), and the causal pattern
as a block mask, future blocks skipped; with packed documents a document mask_mod (positions then
count from each document's start). Compiled on a GPU, where the learned biases get their gradients
through it; eager elsewhere, which materializes the scores and is meant for testing, forward only
(PyTorch has no FlexAttention backward on CPU: training there leaves the input to sdpa).

ALiBi at evaluation also skips the blocks its bias has silenced: each head reads back only as far
as the blocked kernel's rule proves the rest weighs less than e^-30 of the row (blocked.alibi_reach)."""
import torch
from torch import Tensor

from fairseq_alibi.checks import warn_once
from fairseq_alibi.kernels.kernel import BLOCKED_ABOVE, Kernel, register
from fairseq_alibi.kernels.blocked import alibi_reach

FLEX_MIN_HEAD_DIM = 16  # PyTorch's compiled FlexAttention refuses narrower heads

# Methods whose learned bias trained through compiled FlexAttention on a GPU with gradients far from
# fp32's (tests/library/test_gpu.py on an H100, torch 2.11, 2026-11-28); refused by name, never chosen, until
# a GPU run shows parity. On CPU the same score_mod's gradient on explicit scores is exact
# (tests/library/test_flex.py), so the fault is in the compiled backward, not reproduced here; upstream
# reports wrong FlexAttention gradients with captured buffers (pytorch#158212): a guess, not measured.
GRADIENT_NOT_SHOWN = {
    "t5_bias": "its bucket table's gradient through compiled FlexAttention was far from fp32's on an H100 "
               "(relative error 0.73 with document masks; 0.20 on a layer norm without)",
}


def flex_compiles(positions, x: Tensor) -> bool:
    """Whether compiled FlexAttention can take ALiBi here: a CUDA input, heads of dimension
    FLEX_MIN_HEAD_DIM and up (x: the layer input, T x B x C, C = heads x head dim)."""
    slopes = positions.linear_slopes
    return x.is_cuda and slopes is not None and x.size(-1) // slopes.numel() >= FLEX_MIN_HEAD_DIM


class Flex(Kernel):
    name = "flex"
    auto_priority = 1

    def takes(self, positions, documents=False):
        if positions.method in GRADIENT_NOT_SHOWN:
            return (f"flex is not used for {positions.label}: {GRADIENT_NOT_SHOWN[positions.method]}; "
                    "use sdpa or auto until a GPU run shows parity")
        if positions.has_bias and positions.elementwise_bias() is None:
            return (f"flex adds a bias written elementwise (the method's elementwise_bias) or none; "
                    f"{positions.label or 'this method'} has none as configured")
        return None

    def unusable(self, positions, x, dropout, documents):
        if dropout:
            return "it has no attention dropout (training with attention dropout)"
        if torch.is_grad_enabled() and not x.is_cuda:
            return "PyTorch has no FlexAttention backward on CPU (training)"
        return None

    def auto_wants(self, positions, x, query_len):
        # Long ALiBi evaluation on a GPU without flash-attn: no heads x T x S mask in memory (at
        # 4096 tokens on an H100: 2.4x the twin's memory against 9.5x, at 0.85x the dense path's
        # speed; training keeps the dense path, whose speed against flex was not measured).
        return query_len > BLOCKED_ABOVE and not torch.is_grad_enabled() and flex_compiles(positions, x)

    def prepare(self, positions, dtype, documents=None, query_len=0):
        bias = positions.elementwise_bias() if positions.has_bias else None
        # ALiBi's silent blocks are skipped at evaluation only (the reach is read from the data).
        slopes = positions.linear_slopes if bias is not None and not torch.is_grad_enabled() else None
        return FlexAttend(bias, slopes, documents, query_len)


class FlexAttend:
    def __init__(self, bias, slopes, documents, query_len):
        self.bias, self.slopes = bias, slopes
        self.positions = documents.positions if documents is not None else None
        # Built once per forward, for every layer.
        self.block_mask = flex_document_block_mask(documents.ids, query_len) if documents is not None else None

    def attend(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> Tensor:
        if dropout_p > 0:
            raise ValueError("FlexAttention has no attention dropout: train with the sdpa kernel")
        block_mask = self.block_mask
        if block_mask is None and self.slopes is not None:
            block_mask = alibi_block_mask(q, k, self.slopes)
        return flex_attention_with_bias(q, k, v, self.bias, block_mask, self.positions)


def flex_document_block_mask(ids: Tensor, query_len: int):
    """FlexAttention's block mask for the last query_len of the S tokens of each row of ids
    (batch, S): causal, and inside each query's document."""
    from torch.nn.attention.flex_attention import create_block_mask

    batch, key_len = ids.shape
    offset = key_len - query_len

    def same_document_causal(b, head, q_idx, kv_idx):
        return (q_idx + offset >= kv_idx) & (ids[b, q_idx + offset] == ids[b, kv_idx])

    return create_block_mask(same_document_causal, batch, None, query_len, key_len, device=ids.device)


def alibi_block_mask(q: Tensor, k: Tensor, slopes: Tensor):
    """The causal block mask less, per head, the keys beyond its reach (blocked.alibi_reach), or
    None where every head reaches back to the first key (the plain causal mask then)."""
    from torch.nn.attention.flex_attention import create_block_mask

    key_len, query_len = k.size(2), q.size(2)
    reach = alibi_reach(q, k, slopes, q.size(-1) ** -0.5)
    if min(reach) >= key_len:
        return None
    offset = key_len - query_len
    reach = torch.tensor([min(r, key_len) for r in reach], device=q.device, dtype=torch.int64)

    def causal_within_reach(b, head, q_idx, kv_idx):
        distance = q_idx + offset - kv_idx
        return (distance >= 0) & (distance <= reach[head])

    return create_block_mask(causal_within_reach, None, q.size(1), query_len, key_len, device=q.device,
                             _compile=q.is_cuda)


_compiled_flex = None
_flex_block_mask = None  # (query length, key length, device), its block mask


def flex_attention_with_bias(q: Tensor, k: Tensor, v: Tensor, bias=None, block_mask=None, positions=None) -> Tensor:
    """bias(head, query position, key position) (a method's elementwise_bias; None: none) in a
    score_mod; the causal pattern in a block mask, so that the compiled kernel skips the blocks
    wholly in the future instead of computing and discarding them (block_mask: a given one, e.g.
    flex_document_block_mask's). positions (batch, S): each token's position in its document
    (None: its index in the row)."""
    global _compiled_flex, _flex_block_mask
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    offset = k.size(2) - q.size(2)

    def causal(batch, head, q_idx, kv_idx):
        return q_idx + offset >= kv_idx

    if positions is None:
        def score_mod(score, batch, head, q_idx, kv_idx):
            return score + bias(head, q_idx + offset, kv_idx)
    else:
        def score_mod(score, batch, head, q_idx, kv_idx):
            return score + bias(head, positions[batch, q_idx + offset], positions[batch, kv_idx])

    key = (q.size(2), k.size(2), q.device)
    if block_mask is None:
        if _flex_block_mask is None or _flex_block_mask[0] != key:  # the same for every layer and step
            _flex_block_mask = (key, create_block_mask(causal, None, None, q.size(2), k.size(2), device=q.device))
        block_mask = _flex_block_mask[1]
    score_mod = score_mod if bias is not None else None
    if q.is_cuda and q.size(-1) < FLEX_MIN_HEAD_DIM:
        warn_once(f"attention kernel flex: PyTorch compiles FlexAttention for heads of dimension {FLEX_MIN_HEAD_DIM} and up, "
                  f"not {q.size(-1)}: running it uncompiled (it materializes the scores; sdpa is faster)")
    elif q.is_cuda:
        if _compiled_flex is None:
            _compiled_flex = torch.compile(flex_attention, dynamic=True)
        return _compiled_flex(q, k, v, score_mod=score_mod, block_mask=block_mask)
    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)


register(Flex())
