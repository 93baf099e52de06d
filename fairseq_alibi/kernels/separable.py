"""separable: a bias that is a per-key term as extra columns of queries and keys, on PyTorch's fused
causal attention (SDPA with is_causal: on CPU its fused kernel, on a GPU the flash, efficient and
cuDNN backends), with gradients reaching the terms (learned slopes, FoX's gates).

Softmax ignores whatever is constant along a query's row, so a bias b(i, j) = t(j) + r(i) attends as
t(j) alone. ALiBi's -m_h (i - j) is m_h j - m_h i; learned-slope ALiBi likewise; FoX's
c_i - c_j (c the cumulative sum of log forget gates) is -c_j. The term rides in extra columns: each
query gets the constant P (a power of two >= sqrt(d), exact in every dtype), each key
t(j) / (scale P), so that scale (q . k + P t(j) / (scale P)) = scale q . k + t(j); values get
zero columns (the fused kernels want one head dimension; padded to a multiple of 8 for the GPU's).

Precision: the terms are taken relative to a reference key (the middle one, or each document's
first), so that their magnitude is at most half the span times the slope. In half precision one
column cannot hold them (bf16 keeps 8 bits: 4,096 to the nearest 32), so they are split over
SPLITS[dtype] columns, each exactly representable, summed back in the kernels' fp32 accumulator.

Denormals (CPU): a term column spreads the logits, so that many softmax weights of a row fall in fp32's
denormal range (exp of 87-103 below the row's maximum), where PyTorch's fused CPU backward runs up to
4x slower (benchmarks/RESULTS.md: the same shapes with and without the spread). On CPU the kernel's
attention runs, forward and backward, with the calling thread's denormals flushed to zero (flushed):
a weight under 2^-126 (1.2e-38) becomes 0, which moves an output or a gradient by less than
2^-126 x S x max|v|, far under fp32's rounding. Only the calling thread: PyTorch's other intra-op
threads keep their own setting (a process that wants them flushed sets torch.set_flush_denormal(True)
before its first parallel operation, whose threads inherit it).

Packed documents: every document becomes a sequence of its own (batched by length, padded on the
right: causal attention never reads a later key, so padding is never seen by a real query), its
terms referenced to its first token. Queries bottom-right aligned with keys (a cache): T == 1
attends to every key, 1 < T < S takes PyTorch's lower-right causal mask.
"""
import contextlib
import math
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq_alibi.kernels.blocked import attention_with_lse
from fairseq_alibi.kernels.kernel import BLOCKED_ABOVE, Kernel, register

# Columns per dtype: enough mantissa bits (fp32 24; fp16 11 a column, bf16 8) for an fp32 term.
SPLITS = {torch.float32: 1, torch.float64: 1, torch.float16: 3, torch.bfloat16: 3}
PAD_TO = 8  # the GPU flash backend's head dimensions are multiples of 8 (on CPU unpadded: faster there)


class Separable(Kernel):
    name = "separable"
    scales_bias_per_query = True  # the queries' term columns (attend's query_scale)
    # auto takes it where the committed measurement says it is the fastest on CPU (benchmarks/kernels-cpu.md):
    # training a bias with parameters of its own (learned slopes) or from the data (FoX's gates), which the
    # dense mask builds and differentiates as heads x T x S and the blocked kernel cannot train; FoX's
    # evaluation too (5-7x the dense mask's speed at 512-4,096 tokens); and evaluating ALiBi's slopes past
    # BLOCKED_ABOVE tokens in fp32, where each head skips the keys its bias silences (skipping_attention). Fixed-slope ALiBi trains faster on the dense mask or blocked; on a
    # GPU it has not been measured against the fused kernels.
    auto_priority = 2

    def auto_wants(self, positions, x, query_len):
        if x.device.type != "cpu":
            return False
        if torch.is_grad_enabled() or positions.kernels is not None:  # FoX evaluates faster here too
            return bias_trains(positions)
        return (positions.has_bias and positions.linear_slopes is not None and query_len > BLOCKED_ABOVE
                and x.dtype in (torch.float32, torch.float64))

    def takes(self, positions, documents=False):
        if positions.kernels is not None:  # a data-dependent bias: its method names this kernel (FoX) or not
            return None if self.name in positions.kernels else \
                f"{positions.label or 'this method'}'s bias is not a per-key term separable can add"
        if positions.has_bias and positions.linear_slopes is None:
            return ("separable adds a bias that is a per-key term (ALiBi's -m (i - j), learned slopes, FoX's gates); "
                    f"{positions.label or 'this method'} has none as configured")
        return None

    def unusable(self, positions, x, dropout, documents):
        if x.dtype not in SPLITS:
            return f"it runs in {', '.join(str(d).replace('torch.', '') for d in SPLITS)}, not {x.dtype}"
        return None

    def prepare(self, positions, dtype, documents=None, query_len=0):
        slopes = positions.linear_slopes if positions.has_bias else None
        return SeparableAttend(slopes, documents)


def bias_trains(positions) -> bool:
    """Whether the method's bias gets gradients in training: slopes of its own, or a bias from the data
    that this kernel takes as per-key terms (positions.kernels naming it: FoX's gates)."""
    if positions.kernels is not None:
        return "separable" in positions.kernels
    return positions.has_bias and any(p.requires_grad for p in positions.parameters())


class SeparableAttend:
    """What the layers call: attend(q, k, v, dropout_p, key_terms=None). The terms are the
    method's slopes' m_h j, or key_terms (batch, heads, S) a layer's data gives (FoX)."""

    def __init__(self, slopes: Optional[Tensor], documents=None):
        self.slopes, self.documents = slopes, documents

    def terms(self, key_len: int, device, key_terms: Optional[Tensor]) -> Optional[Tensor]:
        """(batch or 1, heads, S) float: the per-key terms, or None (no bias)."""
        if key_terms is not None:
            return key_terms
        if self.slopes is None:
            return None
        keys = torch.arange(key_len, device=device, dtype=torch.float64)
        return (self.slopes.double()[None, :, None] * keys).float() if not self.slopes.requires_grad \
            else self.slopes.float()[None, :, None] * keys.float()

    def attend(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float, key_terms: Optional[Tensor] = None,
               query_scale: Optional[Tensor] = None) -> Tensor:
        """query_scale (1 or batch, 1 or heads, T, 1): each query's terms times its factor (the queries'
        column: a length temperature's logit form)."""
        terms = self.terms(k.size(2), q.device, key_terms)
        if self.documents is not None and q.size(2) == k.size(2):
            return by_document(q, k, v, terms, self.documents.positions, dropout_p, query_scale)
        mask = None
        if self.documents is not None:  # a cache: keys of the query's own document, causal
            ids, offset = self.documents.ids, k.size(2) - q.size(2)
            index = torch.arange(k.size(2), device=q.device)
            mask = (ids[:, offset:, None] == ids[:, None, :]) & (index[None, offset:, None] >= index[None, None, :])
            mask = mask[:, None]
        if key_terms is None and mask is None and query_scale is None and skips_keys(self.slopes, q, k, v, dropout_p):
            return skipping_attention(q, k, v, self.slopes)
        if terms is not None:
            terms = terms - terms[..., k.size(2) // 2, None]  # magnitudes at most half the span's
        return causal_attention(q, k, v, terms, dropout_p, mask, query_scale)


# Per-head skipping (evaluation on CPU): the keys a head skips weigh at most this share of each of its
# rows together, so that an output moves by at most 2 x SKIPPED x max|v| (fp32's rounding: 2^-24).
SKIPPED = 2.0 ** -24
# A head reads its keys by chunks (skipping_attention) where a chunk of its reach is at most this share of
# the input: each query then reads 1.5 chunks on average instead of half the input.
CHUNK_SHARE = 1 / 3
MIN_CHUNK = 128  # queries per chunk at least (smaller ones cost more in calls than they save)


def skips_keys(slopes: Optional[Tensor], q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> bool:
    """Whether attention may skip keys per head: ALiBi's slopes (fixed or learned) with no gradient
    wanted, a whole input (no cache), fp32 or fp64 on CPU, no dropout."""
    return (slopes is not None and q.device.type == "cpu" and dropout_p == 0 and q.size(2) == k.size(2)
            and q.dtype in (torch.float32, torch.float64)
            and not (torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v, slopes))))


def skip_reach(q: Tensor, k: Tensor, slopes: Tensor, scale: float) -> List[float]:
    """Each head's reach: the greatest distance i - j a query reads; the keys further back weigh at
    most SKIPPED of its row together. A row's sum is at least its own key's weight, so key j weighs at
    most e^(l_ij - l_ii) of it, and l_ij - l_ii = scale q_i.(k_j - k_i) - m (i - j) <= s_i - m (i - j) with
    s_i = scale (|q_i| K - q_i.k_i), K = max_j |k_j| (Cauchy-Schwarz). The keys past distance R then weigh
    at most sum_{D > R} e^(s - m D) = e^(s - m (R + 1)) / (1 - e^-m) of the row, s = max_i s_i: R = (s -
    ln SKIPPED - ln(1 - e^-m)) / m - 1 keeps it under SKIPPED (inf for a slope of 0). fp32's rounding of
    the norms and dot products (under d x 2^-24 of |q_i| |k_i|) is covered by a margin of 0.1% of
    |q_i| (K + |k_i|)."""
    q_norms, k_norms = torch.linalg.vector_norm(q, dim=-1), torch.linalg.vector_norm(k, dim=-1)  # (batch, heads, T)
    largest_key = k_norms.amax(dim=(0, 2))[None, :, None]
    own = torch.linalg.vecdot(q, k)
    margin = 1e-3 * q_norms * (largest_key + k_norms)
    spread = (scale * (q_norms * largest_key - own + margin)).amax(dim=(0, 2)).double()
    reach = []
    for s, m in zip(spread.tolist(), slopes.double().tolist()):
        reach.append(math.inf if m <= 0 else math.ceil((s - math.log(SKIPPED) - math.log(-math.expm1(-m))) / m) - 1)
    return reach


def skipping_attention(q: Tensor, k: Tensor, v: Tensor, slopes: Tensor) -> Tensor:
    """ALiBi's causal attention where each head reads only the keys within its reach (skip_reach), by
    chunks of C >= reach queries: a chunk reads its own keys (causal, a square) and the previous chunk's
    (all of them), so that every query sees every key within its reach; two calls for all of a head's
    chunks at once (views of one copy of q, k, v with the terms' column), merged through their
    log-sum-exps. Heads whose chunk would not pay (C above CHUNK_SHARE of T) read every key in one call.
    A key's term is m_h (j - T / 2) for those, m_h (its place in its chunk) for the others."""
    batch, heads, length, dim = q.shape
    scale = dim ** -0.5
    chunks = [max(MIN_CHUNK, reach) for reach in skip_reach(q, k, slopes, scale)]
    whole = [h for h in range(heads) if chunks[h] > CHUNK_SHARE * length]
    keys = torch.arange(length, device=q.device, dtype=torch.float64)
    place = torch.stack([keys - length // 2 if h in whole else keys % chunks[h] for h in range(heads)])
    qs, ks, vs, scale = with_terms(q, k, v, (slopes.double()[:, None] * place).float()[None])
    if len(whole) == heads:
        return causal_attention_with_columns(qs, ks, vs, scale)[..., :dim]
    out = q.new_empty(batch, heads, length, dim)
    if whole:
        index = slice(whole[0], whole[-1] + 1) if whole == list(range(whole[0], whole[-1] + 1)) else whole
        out[:, index] = causal_attention_with_columns(qs[:, index], ks[:, index], vs[:, index], scale)[..., :dim]
    for h in sorted(set(range(heads)) - set(whole)):
        by_chunks(qs[:, h], ks[:, h], vs[:, h], scale, float(slopes[h]), chunks[h], out[:, h])
    return out


def causal_attention_with_columns(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    with flushed():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


def by_chunks(q: Tensor, k: Tensor, v: Tensor, scale: float, slope: float, chunk: int, out: Tensor):
    """One head's causal attention by chunks of `chunk` queries (q, k, v: (batch, T, width), with the
    terms' column, a key's term its place in its chunk), each chunk reading its own keys and the previous
    chunk's, whose terms are slope x chunk too high (taken off their log-sum-exp); the last, partial chunk
    alike. Written into out (batch, T, dim), dim <= width: the output's first dim columns."""
    batch, length, width = q.shape
    dim = out.size(-1)
    count, full = length // chunk, length // chunk * chunk

    def chunked(x, start, end):
        return x[:, start:end].view(batch, (end - start) // chunk, chunk, x.size(-1))

    with flushed():
        own, own_lse = attention_with_lse(chunked(q, 0, full), chunked(k, 0, full), chunked(v, 0, full), None, scale,
                                          causal=True)
        into = chunked(out, 0, full)
        into[:, :1] = own[:, :1, :, :dim]
        if count > 1:
            into[:, 1:] = merged(own[:, 1:], own_lse[:, 1:], *attention_with_lse(
                chunked(q, chunk, full), chunked(k, 0, full - chunk), chunked(v, 0, full - chunk), None, scale),
                slope * chunk)[..., :dim]
        if full < length:
            rest = [x[:, None, full:] for x in (q, k, v)]
            before = [x[:, None, full - chunk:full] for x in (k, v)]
            tail = merged(*attention_with_lse(*rest, None, scale, causal=True),
                          *attention_with_lse(rest[0], *before, None, scale), slope * chunk)
            out[:, full:] = tail[:, 0, :, :dim]


def merged(out: Tensor, lse: Tensor, out_before: Tensor, lse_before: Tensor, lowered: float) -> Tensor:
    """One softmax's output from two parts' outputs and log-sum-exps, the second's logits `lowered`
    (written over the parts' outputs, which the callers own)."""
    lse_before = lse_before - lowered
    top = torch.maximum(lse, lse_before)
    w, w_before = (lse - top).exp_()[..., None], (lse_before - top).exp_()[..., None]
    return out.mul_(w).add_(out_before.mul_(w_before)).div_(w + w_before)


def padded_dim(dim: int, columns: int, device) -> int:
    pad_to = 1 if device.type == "cpu" else PAD_TO
    return -(-(dim + columns) // pad_to) * pad_to


def with_terms(q: Tensor, k: Tensor, v: Tensor, terms: Optional[Tensor], query_scale: Optional[Tensor] = None):
    """q, k, v with the terms' columns (and zero padding) appended; the softmax scale of the
    original head dimension. query_scale: each query's column times its factor (its terms scaled)."""
    dim = q.size(-1)
    scale = dim ** -0.5
    if terms is None:
        return q, k, v, scale
    columns = SPLITS[q.dtype]
    width = padded_dim(dim, columns, q.device)
    query_entry = 2.0 ** math.ceil(math.log2(dim) / 2)  # a power of two >= sqrt(dim): exact in any dtype
    parts = split(terms / (scale * query_entry), q.dtype, columns)  # each (batch or 1, heads, S)
    batch, heads, key_len = k.shape[:3]
    extra_k = torch.stack(parts, -1).expand(batch, heads, key_len, columns)
    q_columns = q.new_full((*q.shape[:3], columns), query_entry)
    if query_scale is not None:
        q_columns = q_columns * query_scale.to(q.dtype)
    zeros = width - dim - columns
    q = torch.cat([q, q_columns, q.new_zeros(*q.shape[:3], zeros)], -1)
    k = torch.cat([k, extra_k.to(k.dtype), k.new_zeros(*k.shape[:3], zeros)], -1)
    v = F.pad(v, (0, width - dim))
    return q, k, v, scale


def split(values: Tensor, dtype, columns: int) -> List[Tensor]:
    """values (fp32 or fp64) as `columns` parts, each exact in dtype, that sum back to them (to the
    parts' precision): the high part, then what it leaves, and so on."""
    parts, rest = [], values
    for _ in range(columns - 1):
        high = rest.to(dtype)
        parts.append(high)
        rest = rest - high.to(rest.dtype)
    parts.append(rest.to(dtype))
    return parts


def causal_attention(q: Tensor, k: Tensor, v: Tensor, terms: Optional[Tensor], dropout_p: float,
                     mask: Optional[Tensor] = None, query_scale: Optional[Tensor] = None) -> Tensor:
    """Causal SDPA (queries the last T of the S keys) with the terms' columns (each query's times its
    query_scale); mask: a boolean mask that replaces the causal pattern."""
    dim, query_len, key_len = q.size(-1), q.size(2), k.size(2)
    q, k, v, scale = with_terms(q, k, v, terms, query_scale)
    if mask is not None:
        kwargs = dict(attn_mask=mask)
    elif query_len == key_len or query_len == 1:
        kwargs = dict(is_causal=query_len > 1)
    else:
        from torch.nn.attention.bias import causal_lower_right

        kwargs = dict(attn_mask=causal_lower_right(query_len, key_len))
    if terms is None or q.device.type != "cpu":
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale, **kwargs)
    elif torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        out = FlushedAttention.apply(q, k, v, dropout_p, scale, kwargs)
    else:
        with flushed():
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale, **kwargs)
    return out[..., :dim]


@contextlib.contextmanager
def flushed():
    """The calling thread's denormals flushed to zero, then not (PyTorch's default; it has no getter)."""
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


class FlushedAttention(torch.autograd.Function):
    """PyTorch's SDPA, forward and backward, with the calling thread's denormals flushed (its own
    backward, run under flushed: the graph kept from the forward)."""

    @staticmethod
    def forward(ctx, q, k, v, dropout_p, scale, kwargs):
        inputs = tuple(x.detach().requires_grad_(x.requires_grad) for x in (q, k, v))
        with torch.enable_grad(), flushed():
            out = F.scaled_dot_product_attention(*inputs, dropout_p=dropout_p, scale=scale, **kwargs)
        ctx.inputs, ctx.out = inputs, out
        return out.detach()

    @staticmethod
    def backward(ctx, grad):
        inputs, out = ctx.inputs, ctx.out
        ctx.inputs = ctx.out = None
        wanted = [x for x in inputs if x.requires_grad]
        with flushed():
            grads = iter(torch.autograd.grad(out, wanted, grad) if wanted else ())
        return (*(next(grads) if x.requires_grad else None for x in inputs), None, None, None)


def by_document(q: Tensor, k: Tensor, v: Tensor, terms: Optional[Tensor], within: Tensor, dropout_p: float,
                query_scale: Optional[Tensor] = None) -> Tensor:
    """Every (row, document) as its own causal sequence: documents of similar length (up to twice
    as long as the shortest of their group) batched together, padded on the right; each
    document's terms relative to its first token. within (batch, S): each token's position in its
    document."""
    batch, heads, length, dim = q.shape
    starts = (within == 0).nonzero()  # (documents, 2): row, first token, in row order
    rows, firsts = starts[:, 0], starts[:, 1]
    ends = torch.cat([firsts[1:], firsts.new_tensor([length])])
    last_of_row = torch.cat([rows[1:] != rows[:-1], torch.ones(1, dtype=torch.bool, device=rows.device)])
    ends = torch.where(last_of_row, length, ends)
    lengths = ends - firsts
    # Which document and offset each token reads its output from (the inverse of the gather below).
    document_of = torch.zeros(batch, length, dtype=torch.long, device=q.device)
    document_of[rows, firsts] = 1
    document_of = document_of.flatten().cumsum(0).view(batch, length) - 1
    outputs, place = [], torch.empty(lengths.numel(), dtype=torch.long, device=q.device)
    groups = torch.floor(torch.log2(lengths.double())).long()
    base = 0
    for group in torch.unique(groups).tolist():
        members = (groups == group).nonzero().flatten()
        longest = int(lengths[members].max())
        index = (firsts[members, None] + torch.arange(longest, device=q.device)).clamp(max=length - 1)
        row = rows[members, None]  # past a document's end: keys none of its queries sees

        def gather(x):  # (batch, heads, S, ...) -> (members, heads, longest, ...)
            return x.transpose(1, 2)[row, index].transpose(1, 2)

        group_terms = None
        if terms is not None:
            group_terms = gather(terms.expand(batch, heads, length)[..., None])[..., 0]
            group_terms = group_terms - group_terms[..., :1]
        group_scale = None if query_scale is None else gather(query_scale.expand(batch, heads, length, 1))
        out = causal_attention(gather(q), gather(k), gather(v), group_terms, dropout_p, query_scale=group_scale)
        outputs.append(out.transpose(1, 2).reshape(-1, heads, dim))
        place[members] = base + torch.arange(members.numel(), device=q.device) * longest
        base += members.numel() * longest
    source = place[document_of] + within  # (batch, S): each token's row among the groups' outputs
    return torch.cat(outputs)[source.flatten()].view(batch, length, heads, dim).transpose(1, 2)


register(Separable())
