"""Attention kernels, one file each, every one registered by being here (kernel.py: what a kernel
declares, the registry, choose_kernel). Pure torch (plus flash-attn where installed), no fairseq.

- sdpa: PyTorch's scaled_dot_product_attention with the dense mask; takes any bias.
- flash: FlashAttention-2 (>= 2.4, CUDA, fp16/bf16) with ALiBi's slopes, or no bias.
- flex: PyTorch FlexAttention with any bias written elementwise as a score_mod (with gradients
  on a GPU), or no bias.
- blocked: PyTorch's fused CPU kernel on blocks of queries, for long inputs on CPU (ALiBi, with
  gradients; T5's bias at evaluation; any bias with packed documents).
- separable: a per-key bias as extra query/key columns on PyTorch's fused causal attention (ALiBi,
  learned slopes, FoX, with their gradients).
choose_kernel picks one for an input; attention (attention.attention_bias) then calls build_kernel.
Adding a kernel is adding a file here (CONTRIBUTING.md).
"""
import importlib
import pkgutil

from fairseq_alibi.kernels.kernel import (AUTO_RULES, BLOCKED_ABOVE, KERNELS, Kernel, build_kernel, choose_kernel,  # noqa: F401
                                          register, takes_bias, unusable)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "kernel":
        importlib.import_module(f"{__name__}.{_module.name}")

KERNEL_NAMES = (*AUTO_RULES, *sorted(KERNELS, key=lambda name: (name != "sdpa", name)))  # --attention-kernel's choices

from fairseq_alibi.kernels.blocked import (BLOCK, BlockedAlibiAttention, BlockedBias, DocumentBlocks, attention_with_lse,  # noqa: E402,F401
                      blocked_attention)
from fairseq_alibi.kernels.flash import flash_available, flash_installed  # noqa: E402,F401
from fairseq_alibi.kernels.flex import flex_attention_with_bias  # noqa: E402,F401
