"""Attention kernels that compute the ALiBi bias themselves, so no heads x T x S mask exists.

Pure torch (plus flash-attn where installed), no fairseq import. q, k, v are (batch, heads, T, d),
queries bottom-right aligned with keys (the last T of S positions), as in alibi.alibi_mask.
- flash: FlashAttention-2 (>= 2.4, CUDA, fp16/bf16) with `alibi_slopes` (fp32, in registers).
- flex: PyTorch FlexAttention with the bias as a `score_mod` (compiled on GPU; eager elsewhere,
  which materializes the scores and is meant for testing).
"""
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


_compiled_flex = None


def flex_alibi_attention(q: Tensor, k: Tensor, v: Tensor, slopes: Tensor) -> Tensor:
    global _compiled_flex
    from torch.nn.attention.flex_attention import flex_attention

    offset = k.size(2) - q.size(2)
    slopes = slopes.float()

    def alibi_score(score, batch, head, q_idx, kv_idx):
        distance = q_idx + offset - kv_idx  # i - j
        return torch.where(distance >= 0, score - slopes[head] * distance, float("-inf"))

    if q.is_cuda:
        if _compiled_flex is None:
            _compiled_flex = torch.compile(flex_attention, dynamic=True)
        return _compiled_flex(q, k, v, score_mod=alibi_score)
    return flex_attention(q, k, v, score_mod=alibi_score)
