"""Attention kernels, chosen by name from a registry that knows which bias each can take.

Pure torch (plus flash-attn where installed), no fairseq import. q, k, v are (batch, heads, T, d),
queries bottom-right aligned with keys (the last T of S positions), as in alibi.alibi_mask. What
a kernel can take is read from the position method's interface (positions.py): `has_bias`,
`linear_slopes` (the bias is -m (i - j)), `constant_beyond()` (one constant per head past a window).
- sdpa: PyTorch's scaled_dot_product_attention with the dense (1, heads, T, S) mask; takes any bias.
- flash: FlashAttention-2 (>= 2.4, CUDA, fp16/bf16) with `alibi_slopes` (fp32, in registers), or
  plain causal attention for a method without bias (rotary, NoPE).
- flex: PyTorch FlexAttention with the ALiBi bias as a `score_mod` (or none) and the causal pattern
  as a block mask, future blocks skipped (compiled on GPU; eager elsewhere, which materializes
  the scores and is meant for testing).
- blocked: PyTorch's fused CPU kernel on blocks of queries, for long inputs on CPU; memory
  heads x block x (window + block) for the bias instead of heads x T x S (see blocked_attention;
  with gradients for ALiBi, BlockedAlibiAttention; T5's constant-beyond-a-window bias at evaluation).
With packed documents (documents.py) each kernel keeps every query inside its own document: sdpa
by the dense mask, flash by FlashAttention-2's variable-length function (one sequence per document
of each row), flex by a document mask_mod, blocked (any method) by reading, for each block of
queries, only the keys from the start of the block's earliest document (DocumentBlocks).
choose_kernel picks one for an input; attention (attention.attention_bias) then calls build_kernel.
"""
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import warn_once

from .documents import Documents, document_bias

try:  # optional: GPU users install it themselves
    import flash_attn
    from flash_attn import flash_attn_func, flash_attn_varlen_func
except ImportError:
    flash_attn = None

KERNEL_NAMES = ("auto", "sdpa", "flash", "flex", "blocked")
# Queries per block of the blocked kernel, and the longest input that `auto` leaves to the dense
# mask: up to 512 tokens the dense mask is faster on CPU (benchmarks/attention-cpu.md: evaluation
# 1.6 against 2.4 ms at 512, 6.6 against 5.3 ms at 1024; training 50 against 54 ms at 512, 96
# against 76 ms at 1024).
BLOCK = 256
BLOCKED_ABOVE = 512


def flash_installed() -> Optional[str]:
    """None if FlashAttention-2 with ALiBi is installed, else why not (checked when a model that
    asks for it is built)."""
    if flash_attn is None:
        return "flash-attn is not installed (pip install flash-attn>=2.4 on a CUDA machine)"
    version = tuple(int(p) for p in flash_attn.__version__.split(".")[:2] if p.isdigit())
    if version < (2, 4):
        return f"flash-attn {flash_attn.__version__} has no alibi_slopes (needs >= 2.4)"
    return None


def flash_available(x: Tensor) -> Optional[str]:
    """None if FlashAttention-2's ALiBi can run on x, else why not."""
    why_not = flash_installed()
    if why_not is None and (not x.is_cuda or x.dtype not in (torch.float16, torch.bfloat16)):
        why_not = f"FlashAttention-2 needs CUDA and fp16/bf16 (got {x.device.type}, {x.dtype})"
    return why_not


def takes_bias(kernel: str, positions) -> Optional[str]:
    """None if `kernel` can ever add this method's bias, else why not (checked at build for a
    kernel asked for by name)."""
    if positions.kernels is not None and kernel not in (*positions.kernels, "auto"):
        return f"{positions.label or 'this method'} takes {' or '.join(positions.kernels)} only (its bias depends on the data)"
    if kernel == "sdpa":
        return None
    linear = positions.linear_slopes is not None
    if kernel in ("flash", "flex") and positions.has_bias and not linear:
        return f"{kernel} adds ALiBi's per-head slopes or no bias, not this method's bias"
    if kernel == "blocked" and not (linear or positions.constant_beyond() is not None):
        return "blocked needs a bias that is -m (i - j) (ALiBi) or constant past a window (T5 bias)"
    if kernel == "blocked" and not positions.has_bias:
        return "blocked is for biased attention; a method without bias takes sdpa's fused kernel"
    return None


def unusable(kernel: str, positions, x: Tensor, dropout: bool, documents: bool = False) -> Optional[str]:
    """None if `kernel` can run this input (x: the layer input, dropout: attention dropout in
    training, documents: packed documents to keep apart), else why not."""
    # With documents the blocked kernel builds each block's bias from bias(), for any method that has one.
    data_only = positions.kernels is not None and kernel not in positions.kernels
    why_not = takes_bias(kernel, positions) if data_only or not (documents and kernel == "blocked") else None
    if why_not is None and kernel == "flash":
        why_not = flash_available(x)
    if why_not is None and kernel == "blocked":
        if x.device.type != "cpu":
            why_not = "it runs on CPU only"
        elif not documents and positions.linear_slopes is None and torch.is_grad_enabled():
            why_not = "its T5 path is for evaluation (the learned bias needs the mask's gradient)"
    if why_not is None and kernel != "sdpa" and torch.is_grad_enabled() and not (documents and kernel == "blocked") \
            and positions.linear_slopes is not None and positions.linear_slopes.requires_grad:
        why_not = "it gives learned slopes no gradient (training)"
    if why_not is None and kernel in ("flex", "blocked") and dropout:
        why_not = "it has no attention dropout (training with attention dropout)"
    return why_not


FLEX_MIN_HEAD_DIM = 16  # PyTorch's compiled FlexAttention refuses narrower heads


def flex_compiles(positions, x: Tensor) -> bool:
    """Whether compiled FlexAttention can take ALiBi here: a CUDA input, heads of dimension
    FLEX_MIN_HEAD_DIM and up (x: the layer input, T x B x C, C = heads x head dim)."""
    slopes = positions.linear_slopes
    return x.is_cuda and slopes is not None and x.size(-1) // slopes.numel() >= FLEX_MIN_HEAD_DIM


def choose_kernel(requested: str, positions, x: Tensor, query_len: int, padding: bool, dropout: bool,
                  documents: bool = False) -> str:
    """The kernel for this input. Padding to fold in needs the dense mask (sdpa). auto: flash
    where it can run, else blocked on CPU for inputs longer than BLOCKED_ABOVE, else sdpa. A kernel
    asked for by name that cannot run this input leaves it to sdpa, which computes the same, with
    one warning: never an error from inside forward (what can never work is refused at build)."""
    if requested == "sdpa" or padding:
        return "sdpa"
    if requested == "auto":
        if unusable("flash", positions, x, dropout, documents) is None:
            return "flash"
        # Long ALiBi evaluation on a GPU without flash-attn: no heads x T x S mask in memory (at
        # 4096 tokens on an H100: 2.4x the twin's memory against 9.5x, at 0.85x the dense path's
        # speed; training keeps the dense path, whose speed against flex was not measured).
        if query_len > BLOCKED_ABOVE and not torch.is_grad_enabled() and flex_compiles(positions, x) and \
                unusable("flex", positions, x, dropout, documents) is None:
            return "flex"
        if query_len > BLOCKED_ABOVE and unusable("blocked", positions, x, dropout, documents) is None:
            return "blocked"
        return "sdpa"
    why_not = unusable(requested, positions, x, dropout, documents)
    if why_not:
        warn_once(f"attention kernel {requested} cannot run here ({why_not}): using sdpa, which computes "
                  "the same; choose auto to let the model pick")
        return "sdpa"
    return requested


def build_kernel(kernel: str, positions, dtype, documents: Optional[Documents] = None, query_len: int = 0):
    """What the layers call in place of sdpa for a kernel chosen by choose_kernel (once per
    forward: query_len, the new queries, is needed with documents only)."""
    if kernel in ("flash", "flex"):
        return InKernelBias(kernel, positions.linear_slopes, documents, query_len)
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


class InKernelBias:
    """Passed to the layers in place of a mask: which kernel adds the bias, with which slopes
    (None: no bias, plain causal attention)."""

    def __init__(self, kernel: str, slopes: Optional[Tensor], documents: Optional[Documents] = None,
                 query_len: int = 0):
        assert kernel in ("flash", "flex")
        self.kernel, self.slopes, self.documents = kernel, slopes, documents
        self.block_mask = None
        if kernel == "flex" and documents is not None:  # built once per forward, for every layer
            self.block_mask = flex_document_block_mask(documents.ids, query_len)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> Tensor:
        if self.kernel == "flash" and self.documents is not None:
            return flash_documents(q, k, v, self.documents.ids, self.slopes, dropout_p)
        if self.kernel == "flash":
            # FA2's causal mask is bottom-right aligned (>= 2.1), as ours; its layout is (B, T, H, d).
            slopes = None if self.slopes is None else self.slopes.float()
            out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                  dropout_p=dropout_p, causal=True, alibi_slopes=slopes)
            return out.transpose(1, 2)
        if dropout_p > 0:
            raise ValueError("FlexAttention has no attention dropout: train with the sdpa kernel")
        return flex_alibi_attention(q, k, v, self.slopes, self.block_mask)


def flash_documents(q: Tensor, k: Tensor, v: Tensor, ids: Tensor, slopes: Optional[Tensor], dropout_p: float) -> Tensor:
    """FlashAttention-2's variable-length kernel with each (row, document) as one sequence. The T
    queries are the last T of the S keys, so every document holding a query holds its last
    tokens, and its queries are the last of its keys: FA2's bottom-right causal alignment. Keys of
    documents wholly before the first query (cached) are left out."""
    batch, heads, query_len, dim = q.shape
    key_len = k.size(2)
    row = torch.arange(batch, device=ids.device)[:, None] * (key_len + 1)
    query_docs = (ids[:, key_len - query_len:] + row).flatten()  # (batch T), nondecreasing
    kept = ids >= ids[:, key_len - query_len:key_len - query_len + 1]  # (batch, S)
    key_docs = (ids + row)[kept]
    query_counts = torch.unique_consecutive(query_docs, return_counts=True)[1]
    key_counts = torch.unique_consecutive(key_docs, return_counts=True)[1]

    def cumulative(counts):
        return F.pad(counts.cumsum(0), (1, 0)).to(torch.int32)

    slopes = None if slopes is None else slopes.float()
    out = flash_attn_varlen_func(
        q.transpose(1, 2).reshape(batch * query_len, heads, dim), k.transpose(1, 2)[kept], v.transpose(1, 2)[kept],
        cumulative(query_counts), cumulative(key_counts), int(query_counts.max()), int(key_counts.max()),
        dropout_p=dropout_p, causal=True, alibi_slopes=slopes)
    return out.view(batch, query_len, heads, dim).transpose(1, 2)


def flex_document_block_mask(ids: Tensor, query_len: int):
    """FlexAttention's block mask for the last query_len of the S tokens of each row of ids
    (batch, S): causal, and inside each query's document."""
    from torch.nn.attention.flex_attention import create_block_mask

    batch, key_len = ids.shape
    offset = key_len - query_len

    def same_document_causal(b, head, q_idx, kv_idx):
        return (q_idx + offset >= kv_idx) & (ids[b, q_idx + offset] == ids[b, kv_idx])

    return create_block_mask(same_document_causal, batch, None, query_len, key_len, device=ids.device)


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


_compiled_flex = None
_flex_block_mask = None  # (query length, key length, device), its block mask


def flex_alibi_attention(q: Tensor, k: Tensor, v: Tensor, slopes: Optional[Tensor], block_mask=None) -> Tensor:
    """The bias in a score_mod (slopes None: none); the causal pattern in a block mask, so that the
    compiled kernel skips the blocks wholly in the future instead of computing and discarding them
    (block_mask: a given one, e.g. flex_document_block_mask's). ALiBi's -m (i - j) is the same
    counted from a document's start as from the row's."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    offset = k.size(2) - q.size(2)
    slopes = slopes.float() if slopes is not None else None

    def alibi_score(score, batch, head, q_idx, kv_idx):
        return score - slopes[head] * (q_idx + offset - kv_idx)  # -m (i - j)

    def causal(batch, head, q_idx, kv_idx):
        return q_idx + offset >= kv_idx

    global _flex_block_mask
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


def attention_with_lse(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], scale: float):
    """softmax(q k^T * scale + mask) v and the log-sum-exp of each row, (batch, heads, T), from
    PyTorch's fused CPU kernel (no gradient flows through the log-sum-exp)."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, False, attn_mask=mask, scale=scale)


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
    spread = 2 * scale * q.float().norm(dim=-1).amax(dim=(0, 2)) * k.float().norm(dim=-1).amax(dim=(0, 2))
    reach = [math.inf if m <= 0 else math.ceil((s + math.log(key_len) + 30) / m)
             for s, m in zip(spread.tolist(), slopes.float().tolist())]
    return k_far, v_far, slope_column, positions, reach


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
