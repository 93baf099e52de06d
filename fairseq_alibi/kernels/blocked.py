"""blocked: PyTorch's fused CPU kernel on blocks of queries, for long inputs on CPU; memory
heads x block x (window + block) for the bias instead of heads x T x S (see blocked_attention;
with gradients for ALiBi, BlockedAlibiAttention; T5's constant-beyond-a-window bias at evaluation).
With packed documents (any method with a bias, or none) each block of queries reads only the keys
from the start of the block's earliest document (DocumentBlocks), with the dense path's bias there."""
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq_alibi.documents import Documents, document_bias
from fairseq_alibi.kernels.kernel import BLOCKED_ABOVE, Kernel, register

BLOCK = 256  # queries per block


class Blocked(Kernel):
    name = "blocked"
    auto_priority = 3  # long inputs on CPU where no kernel before it runs

    def takes(self, positions, documents=False):
        if documents:  # each block's bias from bias(), for any method
            return None
        if not (positions.linear_slopes is not None or positions.constant_beyond() is not None):
            return "blocked needs a bias that is -m (i - j) (ALiBi) or constant past a window (T5 bias)"
        if not positions.has_bias:
            return "blocked is for biased attention; a method without bias takes sdpa's fused kernel"
        return None

    def unusable(self, positions, x, dropout, documents):
        if x.device.type != "cpu":
            return "it runs on CPU only"
        if dropout:
            return "it has no attention dropout (training with attention dropout)"
        if not documents and positions.linear_slopes is None and torch.is_grad_enabled():
            return "its T5 path is for evaluation (the learned bias needs the mask's gradient)"
        return None

    def trains_bias(self, documents):
        return documents  # DocumentBlocks adds the dense path's bias; the others take it as given

    def auto_wants(self, positions, x, query_len):
        return query_len > BLOCKED_ABOVE

    def prepare(self, positions, dtype, documents=None, query_len=0):
        if documents is not None:
            return DocumentBlocks(positions, documents, dtype)
        if positions.linear_slopes is not None:  # ALiBi: the diagonal block's mask, the same for every block
            return BlockedBias(band_bias(positions, 0, BLOCK, dtype), 0, far_slopes=positions.linear_slopes)
        window, far = positions.constant_beyond()
        return BlockedBias(band_bias(positions, window, BLOCK, dtype), window, far_bias=far)


def band_bias(positions, window: int, block: int, dtype) -> Tensor:
    """(heads, block, window + block): the bias of a block of queries over its own keys and the
    `window` keys before them, -inf on the future; the same for every block (relative bias)."""
    keys = torch.arange(window + block, device=positions_device(positions))
    queries = keys[window:]
    bias = positions.bias(queries, keys)
    return bias.masked_fill(keys[None, None, :] > queries[None, :, None], float("-inf")).to(dtype)


def positions_device(positions):
    tensor = next(iter(positions.parameters()), None)
    if tensor is None:
        tensor = next(iter(positions.buffers()), None)
    return tensor.device if tensor is not None else torch.device("cpu")


class DocumentBlocks:
    """Passed to the layers in place of a mask: the blocked kernel with packed documents, for any
    method. Each block of BLOCK queries attends (sdpa, with gradients) over the keys from the
    first token of the earliest document any of its rows' queries is in: the keys of earlier
    documents are never read, so a long packed evaluation costs each block its documents' span,
    not the whole past. Its bias is the dense path's (documents.document_bias) for that span."""

    def __init__(self, positions, documents: Documents, dtype, block: int = BLOCK):
        self.positions, self.documents, self.dtype, self.block = positions, documents, dtype, block

    def attend(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> Tensor:
        if dropout_p > 0:
            raise ValueError("the blocked attention kernel has no attention dropout: train with the sdpa kernel")
        query_len, key_len = q.size(2), k.size(2)
        offset = key_len - query_len
        starts = self.documents.starts()
        index = torch.arange(key_len, device=q.device)
        blocks = []
        for start in range(0, query_len, self.block):
            c, end = offset + start, offset + min(start + self.block, query_len)
            first = int(starts[:, c].min())  # the block's earliest document starts here
            mask = document_bias(self.positions, self.documents, index[c:end], index[first:end]).to(self.dtype)
            blocks.append(F.scaled_dot_product_attention(q[:, :, start:start + end - c], k[:, :, first:end],
                                                         v[:, :, first:end], attn_mask=mask))
        return torch.cat(blocks, dim=2)


class BlockedBias:
    """Passed to the layers in place of a mask: the bias for blocked_attention (CPU). ALiBi's
    (far_slopes, window 0) has gradients (BlockedAlibiAttention); T5's is for evaluation only (its
    learned bias gets no gradient through it)."""

    def __init__(self, near_bias: Tensor, window: int, far_slopes: Optional[Tensor] = None,
                 far_bias: Optional[Tensor] = None):
        self.near_bias, self.window = near_bias, window
        self.far_slopes, self.far_bias = far_slopes, far_bias

    def attend(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> Tensor:
        if dropout_p > 0:
            raise ValueError("the blocked attention kernel has no attention dropout: train with the sdpa kernel")
        if self.far_slopes is not None and self.window == 0:
            return BlockedAlibiAttention.apply(q, k, v, self.near_bias, self.far_slopes, self.near_bias.size(1))
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            raise ValueError("this blocked attention kernel is for evaluation (no gradients)")
        return blocked_attention(q, k, v, self.near_bias, self.window, self.far_slopes, self.far_bias,
                                 block=self.near_bias.size(1))


def attention_with_lse(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], scale: float, causal: bool = False):
    """softmax(q k^T * scale + mask) v (causal: over a square's past only) and the log-sum-exp of each row,
    (batch, heads, T), from PyTorch's fused CPU kernel (no gradient flows through the log-sum-exp)."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, causal, attn_mask=mask, scale=scale)


def blocked_attention(q: Tensor, k: Tensor, v: Tensor, near_bias: Tensor, window: int,
                      far_slopes: Optional[Tensor] = None, far_bias: Optional[Tensor] = None,
                      block: int = 256, return_lse: bool = False):
    """Causal attention with a relative position bias b_h(i - j), exact, without a T x S mask.

    Queries go in blocks of `block`. For the block starting at position c, its keys split in two:
    - near, positions [c - window, c + n): the bias is read from near_bias, (heads, block,
      window + block), entry [h, a, u] = b_h(a + window - u) (-inf where negative: the future), the
      same for every block because the bias depends on i - j only;
    - far, positions before c - window: no mask. For ALiBi (far_slopes, (heads,)) the bias
      -m (i - j) = m (j - r) - m (i - r), r = c - window: the first term rides in one extra
      dimension of queries (m / scale) and keys (j - r <= 0, so small where it matters), the second
      is the same for every key of row i, so it is added to that row's log-sum-exp. For a bias
      that is constant beyond `window` (T5's last bucket; far_bias, (heads,)) it is added there too.
    The two parts are merged through their log-sum-exps: one softmax over all keys, as dense.
    Rounding matches the dense mask's: no logit carries an offset larger than its own bias.

    ALiBi heads also skip the keys their bias has silenced: a key at distance D has a logit at
    least m D - 2 scale |q| |k|max below the query's own key (Cauchy-Schwarz), so past
    reach = (2 scale |q|max |k|max + ln S + 30) / m all of them together weigh less than e^-30 of
    the row, far below fp32 rounding (the dense kernel computes exp(...) = 0 or denormals there).
    Steep heads then read a window of keys, not the whole past.
    q (batch, heads, T, d) are the last T of the S positions of k, v (batch, heads, S, d).
    No gradient flows through here (see BlockedAlibiAttention); return_lse also returns each
    row's log-sum-exp over all its keys, (batch, heads, T).
    """
    batch, heads, query_len, dim = q.shape
    key_len = k.size(2)
    offset = key_len - query_len
    scale = dim ** -0.5
    out = torch.empty_like(q)
    lse_all = q.new_empty(batch, heads, query_len, dtype=torch.float32)
    if far_slopes is not None:
        k_far, v_far, slope_column, positions, reach = alibi_far_inputs(q, k, v, far_slopes, scale)
    for start in range(0, query_len, block):
        n = min(block, query_len - start)
        c = offset + start  # position of the block's first query
        near_from = max(0, c - window)
        mask = near_bias[:, :n, window - (c - near_from): window + n][None]
        queries = q[:, :, start:start + n]
        o, lse = attention_with_lse(queries, k[:, :, near_from:c + n], v[:, :, near_from:c + n], mask, scale)
        if near_from > 0:
            if far_slopes is not None:
                k_far[..., :near_from, dim] = (positions[:near_from] - near_from).to(k.dtype)
                q_far = torch.cat([queries, slope_column.expand(batch, heads, n, 1)], dim=-1)
                o_far = queries.new_zeros(batch, heads, n, dim + 1)
                lse_far = queries.new_full((batch, heads, n), float("-inf"), dtype=torch.float32)
                for index, first in far_groups(reach, c, near_from):
                    o_far[:, index], lse_far[:, index] = attention_with_lse(
                        q_far[:, index], k_far[:, index, first:near_from], v_far[:, index, first:near_from], None, scale)
                o_far = o_far[..., :dim]
                lse_far = lse_far - far_slopes.float()[:, None] * (positions[c:c + n] - near_from)[None, :]
            else:
                o_far, lse_far = attention_with_lse(queries, k[:, :, :near_from], v[:, :, :near_from], None, scale)
                lse_far = lse_far + far_bias.float()[:, None]
            top = torch.maximum(lse, lse_far)
            w_near, w_far = (lse - top).exp(), (lse_far - top).exp()
            o = (o * w_near[..., None] + o_far * w_far[..., None]) / (w_near + w_far)[..., None]
            lse = top + (w_near + w_far).log()
        out[:, :, start:start + n] = o
        lse_all[:, :, start:start + n] = lse
    return (out, lse_all) if return_lse else out


def alibi_far_inputs(q, k, v, slopes, scale):
    """Keys and values with the extra dimension (its key column is rewritten per block), the
    queries' extra entry m / scale, key positions, and each head's reach in positions."""
    batch, heads, key_len, _ = k.shape
    k_far = torch.cat([k, k.new_zeros(batch, heads, key_len, 1)], dim=-1)
    v_far = torch.cat([v, v.new_zeros(batch, heads, key_len, 1)], dim=-1)
    slope_column = (slopes.float() / scale).to(q.dtype).view(1, heads, 1, 1)
    positions = torch.arange(key_len, device=q.device, dtype=torch.float32)
    return k_far, v_far, slope_column, positions, alibi_reach(q, k, slopes, scale)


def alibi_reach(q, k, slopes, scale):
    """Each ALiBi head's reach in positions: keys further back weigh less than e^-30 of the row
    together (blocked_attention's rule; inf for a slope of 0)."""
    spread = 2 * scale * q.float().norm(dim=-1).amax(dim=(0, 2)) * k.float().norm(dim=-1).amax(dim=(0, 2))
    return [math.inf if m <= 0 else math.ceil((s + math.log(k.size(2)) + 30) / m)
            for s, m in zip(spread.tolist(), slopes.float().tolist())]


def far_groups(reach, c, r):
    """(head index, first key) of the far part, keys [first, r), for the block at c: the heads
    that reach back to key 0 in one call, each other head alone; heads with no key in reach none."""
    starts = [max(0, c - h_reach) for h_reach in reach]
    whole = [h for h, first in enumerate(starts) if first == 0]
    if len(whole) == len(starts):
        return [(slice(None), 0)]
    return ([(whole, 0)] if whole else []) + [(slice(h, h + 1), first) for h, first in enumerate(starts) if 0 < first < r]


class BlockedAlibiAttention(torch.autograd.Function):
    """blocked_attention for ALiBi, with gradients: the backward runs the fused CPU kernel's own
    backward on each part of each block, given the merged output and log-sum-exp (those of one
    softmax over all keys), so that the parts' gradients add up to the whole one's."""

    @staticmethod
    def forward(ctx, q, k, v, near_bias, slopes, block):
        out, lse = blocked_attention(q, k, v, near_bias, 0, far_slopes=slopes, block=block, return_lse=True)
        ctx.save_for_backward(q, k, v, out, lse, near_bias, slopes)
        ctx.block = block
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse, near_bias, slopes = ctx.saved_tensors
        backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
        batch, heads, query_len, dim = q.shape
        offset = k.size(2) - query_len
        scale = dim ** -0.5
        grad_out = grad_out.contiguous()
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        k_far, v_far, slope_column, positions, reach = alibi_far_inputs(q, k, v, slopes, scale)
        for start in range(0, query_len, ctx.block):
            n = min(ctx.block, query_len - start)
            c = offset + start
            rows = slice(start, start + n)
            g, o, lse_rows, queries = grad_out[:, :, rows], out[:, :, rows], lse[:, :, rows], q[:, :, rows]
            gq, gk, gv = backward(g, queries, k[:, :, c:c + n], v[:, :, c:c + n], o, lse_rows, 0.0, False,
                                  attn_mask=near_bias[:, :n, :n][None], scale=scale)
            dq[:, :, rows] += gq
            dk[:, :, c:c + n] += gk
            dv[:, :, c:c + n] += gv
            if c == 0:
                continue
            k_far[..., :c, dim] = (positions[:c] - c).to(k.dtype)
            extra = q.new_zeros(batch, heads, n, 1)
            q_far = torch.cat([queries, slope_column.expand(batch, heads, n, 1)], dim=-1)
            g_far, o_far = torch.cat([g, extra], dim=-1), torch.cat([o, extra], dim=-1)
            lse_far = lse_rows + slopes.float()[:, None] * (positions[c:c + n] - c)[None, :]  # the far part's frame
            for index, first in far_groups(reach, c, c):
                gq, gk, gv = backward(g_far[:, index], q_far[:, index], k_far[:, index, first:c], v_far[:, index, first:c],
                                      o_far[:, index], lse_far[:, index].contiguous(), 0.0, False, scale=scale)
                dq[:, index, rows] += gq[..., :dim]
                dk[:, index, first:c] += gk[..., :dim]
                dv[:, index, first:c] += gv[..., :dim]
        return dq, dk, dv, None, None, None


register(Blocked())
