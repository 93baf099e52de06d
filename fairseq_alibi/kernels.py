"""Attention kernels that compute the ALiBi bias themselves, so no heads x T x S mask exists.

Pure torch (plus flash-attn where installed), no fairseq import. q, k, v are (batch, heads, T, d),
queries bottom-right aligned with keys (the last T of S positions), as in alibi.alibi_mask.
- flash: FlashAttention-2 (>= 2.4, CUDA, fp16/bf16) with `alibi_slopes` (fp32, in registers).
- flex: PyTorch FlexAttention with the bias as a `score_mod` and the causal pattern as a block
  mask, future blocks skipped (compiled on GPU; eager elsewhere,
  which materializes the scores and is meant for testing).
- blocked: PyTorch's fused CPU kernel on blocks of queries, for long evaluation on CPU; memory
  heads x block x (window + block) for the bias instead of heads x T x S (see blocked_attention).
"""
import math
from typing import Optional

import torch
from torch import Tensor

try:  # optional: GPU users install it themselves
    import flash_attn
    from flash_attn import flash_attn_func
except ImportError:
    flash_attn = None


def flash_available(x: Tensor) -> Optional[str]:
    """None if FlashAttention-2's ALiBi can run on x, else why not."""
    if flash_attn is None:
        return "flash-attn is not installed (pip install flash-attn>=2.4 on a CUDA machine)"
    version = tuple(int(p) for p in flash_attn.__version__.split(".")[:2] if p.isdigit())
    if version < (2, 4):
        return f"flash-attn {flash_attn.__version__} has no alibi_slopes (needs >= 2.4)"
    if not x.is_cuda or x.dtype not in (torch.float16, torch.bfloat16):
        return f"FlashAttention-2 needs CUDA and fp16/bf16 (got {x.device.type}, {x.dtype})"
    return None


class InKernelBias:
    """Passed to the layers in place of a mask: which kernel adds the bias, with which slopes."""

    def __init__(self, kernel: str, slopes: Tensor):
        assert kernel in ("flash", "flex")
        self.kernel, self.slopes = kernel, slopes

    def attend(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> Tensor:
        if self.kernel == "flash":
            # FA2's causal mask is bottom-right aligned (>= 2.1), as ours; its layout is (B, T, H, d).
            out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                  dropout_p=dropout_p, causal=True, alibi_slopes=self.slopes.float())
            return out.transpose(1, 2)
        if dropout_p > 0:
            raise ValueError("FlexAttention has no attention dropout: use --alibi-attention sdpa to train with it")
        return flex_alibi_attention(q, k, v, self.slopes)


class BlockedBias:
    """Passed to the layers in place of a mask: the bias for blocked_attention (long evaluation on
    CPU). Evaluation only: no gradient flows through the log-sum-exps that merge the blocks."""

    kernel = "blocked"

    def __init__(self, near_bias: Tensor, window: int, far_slopes: Optional[Tensor] = None,
                 far_bias: Optional[Tensor] = None):
        self.near_bias, self.window = near_bias, window
        self.far_slopes, self.far_bias = far_slopes, far_bias

    def attend(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> Tensor:
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            raise ValueError("the blocked attention kernel is for evaluation (no gradients): "
                             "use --alibi-attention auto or sdpa to train")
        return blocked_attention(q, k, v, self.near_bias, self.window, self.far_slopes, self.far_bias,
                                 block=self.near_bias.size(1))


_compiled_flex = None
_flex_block_mask = None  # (query length, key length, device), its block mask


def flex_alibi_attention(q: Tensor, k: Tensor, v: Tensor, slopes: Tensor) -> Tensor:
    """The bias in a score_mod; the causal pattern in a block mask, so that the compiled kernel
    skips the blocks wholly in the future instead of computing and discarding them."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    offset = k.size(2) - q.size(2)
    slopes = slopes.float()

    def alibi_score(score, batch, head, q_idx, kv_idx):
        return score - slopes[head] * (q_idx + offset - kv_idx)  # -m (i - j)

    def causal(batch, head, q_idx, kv_idx):
        return q_idx + offset >= kv_idx

    global _flex_block_mask
    key = (q.size(2), k.size(2), q.device)
    if _flex_block_mask is None or _flex_block_mask[0] != key:  # the same for every layer and step
        _flex_block_mask = (key, create_block_mask(causal, None, None, q.size(2), k.size(2), device=q.device))
    block_mask = _flex_block_mask[1]
    if q.is_cuda:
        if _compiled_flex is None:
            _compiled_flex = torch.compile(flex_attention, dynamic=True)
        return _compiled_flex(q, k, v, score_mod=alibi_score, block_mask=block_mask)
    return flex_attention(q, k, v, score_mod=alibi_score, block_mask=block_mask)


def attention_with_lse(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], scale: float):
    """softmax(q k^T * scale + mask) v and the log-sum-exp of each row, (batch, heads, T), from
    PyTorch's fused CPU kernel (no gradient flows through the log-sum-exp)."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, False, attn_mask=mask, scale=scale)


def blocked_attention(q: Tensor, k: Tensor, v: Tensor, near_bias: Tensor, window: int,
                      far_slopes: Optional[Tensor] = None, far_bias: Optional[Tensor] = None,
                      block: int = 256) -> Tensor:
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
    """
    batch, heads, query_len, dim = q.shape
    key_len = k.size(2)
    offset = key_len - query_len
    scale = dim ** -0.5
    out = torch.empty_like(q)
    if far_slopes is not None:  # keys and values with the extra dimension (its key rewritten per block)
        k_far = torch.cat([k, k.new_zeros(batch, heads, key_len, 1)], dim=-1)
        v_far = torch.cat([v, v.new_zeros(batch, heads, key_len, 1)], dim=-1)
        slope_column = (far_slopes.float() / scale).to(q.dtype).view(1, heads, 1, 1)
        positions = torch.arange(key_len, device=q.device, dtype=torch.float32)
        spread = 2 * scale * q.float().norm(dim=-1).amax(dim=(0, 2)) * k.float().norm(dim=-1).amax(dim=(0, 2))
        reach = [math.inf if m <= 0 else math.ceil((s + math.log(key_len) + 30) / m)
                 for s, m in zip(spread.tolist(), far_slopes.float().tolist())]
    for start in range(0, query_len, block):
        n = min(block, query_len - start)
        c = offset + start  # position of the block's first query
        near_from = max(0, c - window)
        mask = near_bias[:, :n, window - (c - near_from): window + n][None]
        queries = q[:, :, start:start + n]
        o, lse = attention_with_lse(queries, k[:, :, near_from:c + n], v[:, :, near_from:c + n], mask, scale)
        if near_from > 0:
            if far_slopes is not None:
                o_far, lse_far = alibi_far_attention(queries, k_far, v_far, slope_column, positions, reach,
                                                     c, near_from, scale)
                lse_far = lse_far - far_slopes.float()[:, None] * (positions[c:c + n] - near_from)[None, :]
            else:
                o_far, lse_far = attention_with_lse(queries, k[:, :, :near_from], v[:, :, :near_from], None, scale)
                lse_far = lse_far + far_bias.float()[:, None]
            top = torch.maximum(lse, lse_far)
            w_near, w_far = (lse - top).exp()[..., None], (lse_far - top).exp()[..., None]
            o = (o * w_near + o_far * w_far) / (w_near + w_far)
        out[:, :, start:start + n] = o
    return out


def alibi_far_attention(queries, k_far, v_far, slope_column, positions, reach, c, r, scale):
    """The far part of blocked_attention for ALiBi: keys [c - reach_h, r) of each head h, the bias
    m (j - r) in the extra dimension; returns the output (without that dimension) and the
    log-sum-exp, -inf for a head with no key in reach."""
    batch, heads, n, dim = queries.shape
    k_far[..., :r, dim] = (positions[:r] - r).to(k_far.dtype)
    q_far = torch.cat([queries, slope_column.expand(batch, heads, n, 1)], dim=-1)
    starts = [max(0, c - h_reach) for h_reach in reach]
    whole = [h for h, s in enumerate(starts) if s == 0]  # heads that read all of it: one call
    if len(whole) == heads:
        o_far, lse_far = attention_with_lse(q_far, k_far[:, :, :r], v_far[:, :, :r], None, scale)
        return o_far[..., :dim], lse_far
    o_far = queries.new_zeros(batch, heads, n, dim + 1)
    lse_far = queries.new_full((batch, heads, n), float("-inf"), dtype=torch.float32)
    groups = ([whole] if whole else []) + [[h] for h, s in enumerate(starts) if 0 < s < r]
    for group in groups:
        s, idx = starts[group[0]], slice(group[0], group[-1] + 1) if len(group) == 1 else group
        o_g, lse_g = attention_with_lse(q_far[:, idx], k_far[:, idx, s:r], v_far[:, idx, s:r], None, scale)
        o_far[:, idx], lse_far[:, idx] = o_g, lse_g
    return o_far[..., :dim], lse_far
