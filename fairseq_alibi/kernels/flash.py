"""flash: FlashAttention-2 (>= 2.4, CUDA, fp16/bf16) with `alibi_slopes` (fp32, in registers), or
plain causal attention for a method without bias (rotary, NoPE); with packed documents its
variable-length function, one sequence per document of each row. Its slopes get no gradient."""
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq_alibi.kernels.kernel import Kernel, register

try:  # optional: GPU users install it themselves
    import flash_attn
    from flash_attn import flash_attn_func, flash_attn_varlen_func
except ImportError:
    flash_attn = None


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


def takes_slopes_or_nothing(kernel, positions) -> Optional[str]:
    """flash and flex: ALiBi's per-head slopes or no bias."""
    if positions.has_bias and positions.linear_slopes is None:
        return f"{kernel} adds ALiBi's per-head slopes or no bias, not this method's bias"
    return None


class Flash(Kernel):
    name = "flash"
    auto_priority = 0  # wherever it can run

    def installed(self):
        return flash_installed()

    def takes(self, positions, documents=False):
        return takes_slopes_or_nothing(self.name, positions)

    def unusable(self, positions, x, dropout, documents):
        return flash_available(x)

    def trains_bias(self, documents):
        return False

    def auto_wants(self, positions, x, query_len):
        return True

    def prepare(self, positions, dtype, documents=None, query_len=0):
        return FlashAttend(positions.linear_slopes, documents)


class FlashAttend:
    def __init__(self, slopes, documents):
        self.slopes = None if slopes is None else slopes.float()
        self.documents = documents

    def attend(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> Tensor:
        if self.documents is not None:
            return flash_documents(q, k, v, self.documents.ids, self.slopes, dropout_p)
        # FA2's causal mask is bottom-right aligned (>= 2.1), as ours; its layout is (B, T, H, d).
        out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                              dropout_p=dropout_p, causal=True, alibi_slopes=self.slopes)
        return out.transpose(1, 2)


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

    out = flash_attn_varlen_func(
        q.transpose(1, 2).reshape(batch * query_len, heads, dim), k.transpose(1, 2)[kept], v.transpose(1, 2)[kept],
        cumulative(query_counts), cumulative(key_counts), int(query_counts.max()), int(key_counts.max()),
        dropout_p=dropout_p, causal=True, alibi_slopes=slopes)
    return out.view(batch, query_len, heads, dim).transpose(1, 2)


register(Flash())
