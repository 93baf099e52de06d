"""sdpa: PyTorch's scaled_dot_product_attention with the dense (1 or batch, heads, T, S) mask that
models/attention.py builds (the method's bias, the causal -inf, padding, documents). Takes any bias and
gives every learned parameter its gradient: the reference every other kernel is tested against,
and auto's last resort.

No silently wrong backend: SDPA dispatches a masked call to one of its backends (math, efficient,
flash, cuDNN), and a backend may read a float mask wrongly (PyTorch's cuDNN backend read an fp32
mask as the query's dtype, pytorch PR #191612). Before the first masked call on a device in a dtype,
each backend runs a small masked input as the plugin builds them (the mask in the query's dtype,
ALiBi's bias, the causal -inf, a row per document) against fp32 math; one that is wrong is never
selected for such inputs again (sdpa_kernel with the others), said once in the log."""
import contextlib
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq_alibi.checks import warn_once
from fairseq_alibi.kernels.kernel import Kernel, register


class Sdpa(Kernel):
    name = "sdpa"
    scales_bias_per_query = True  # its mask's rows (models/attention.py: biased_attention)


register(Sdpa())

# Relative error (|got - fp32| / |fp32|) above which a backend is wrong: 10x what the rounding of
# one attention call gives (fp16 2^-11, bf16 2^-8 per operation).
WRONG_ABOVE = {torch.float16: 1e-2, torch.bfloat16: 5e-2, torch.float32: 1e-4}


def backends():
    """{name: SDPBackend} of the backends this PyTorch has."""
    from torch.nn.attention import SDPBackend

    names = {"math": "MATH", "efficient": "EFFICIENT_ATTENTION", "flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION"}
    return {name: getattr(SDPBackend, attr) for name, attr in names.items() if hasattr(SDPBackend, attr)}


def probe_input(device, dtype, mask_dtype=None, heads: int = 4, length: int = 160, head_dim: int = 64):
    """q, k, v (2, heads, length, head_dim) and the plugin's kind of mask (2, heads, length, length):
    ALiBi's bias, the causal -inf, and in the second row two documents (no query sees the other),
    in mask_dtype (default: the query's, as the plugin builds it)."""
    from fairseq_alibi.alibi_bias import alibi_mask, alibi_slopes

    generator = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(2, heads, length, head_dim, generator=generator).to(device, dtype) for _ in range(3))
    mask = alibi_mask(torch.tensor(alibi_slopes(heads)), length, length)[None].repeat(2, 1, 1, 1)
    split = length // 3
    mask[1, :, split:, :split] = float("-inf")
    return q, k, v, mask.to(device, mask_dtype or dtype)


def backend_errors(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, run=None) -> Dict[str, Optional[float]]:
    """{backend: relative error against fp32 math, or None where it does not take this input}.
    run(backend, q, k, v, mask): one call under that backend alone (default: SDPA's)."""
    from torch.nn.attention import SDPBackend

    run = run or run_backend
    with torch.nn.attention.sdpa_kernel([SDPBackend.MATH]):
        expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask.float()).double()
    errors = {}
    for name, backend in backends().items():
        try:
            got = run(backend, q, k, v, mask).double()
        except (RuntimeError, NotImplementedError, ValueError):  # this backend does not take this input: SDPA never dispatches it here
            errors[name] = None
            continue
        error = ((got - expected).norm() / expected.norm()).item()
        errors[name] = error if error == error else float("inf")  # NaN: wrong
    return errors


def run_backend(backend, q, k, v, mask):
    with torch.nn.attention.sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


_allowed: Dict[tuple, Optional[List]] = {}  # (device, dtype) -> the backends to keep to, or None: any


def masked_backends(q: Tensor) -> Optional[List]:
    """The backends a masked SDPA call on q's device and dtype may use: None (any) unless one was
    found wrong on the probe input, once per (device, dtype)."""
    key = (q.device, q.dtype)
    if key not in _allowed:
        errors = backend_errors(*probe_input(q.device, q.dtype))
        wrong = [name for name, error in errors.items() if error is not None and error > WRONG_ABOVE.get(q.dtype, 1e-2)]
        _allowed[key] = None
        if wrong:
            table = backends()
            _allowed[key] = [table[name] for name in table if name not in wrong]
            warn_once(f"attention kernel sdpa: PyTorch's {', '.join(wrong)} attention backend gives wrong results "
                      f"for a float mask in {str(q.dtype).replace('torch.', '')} on {q.device} (relative error "
                      f"{', '.join(f'{errors[n]:.2g}' for n in wrong)} on a probe input): never selected for masked calls here")
    return _allowed[key]


def masked_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout_p: float = 0.0) -> Tensor:
    """SDPA with the plugin's mask, through the backends masked_backends keeps."""
    allowed = masked_backends(q)
    context = torch.nn.attention.sdpa_kernel(allowed) if allowed else contextlib.nullcontext()
    with context:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
