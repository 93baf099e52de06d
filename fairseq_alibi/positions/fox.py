"""The Forgetting Transformer's forget gate (FoX; Lin et al., ICLR 2025, arXiv:2503.02130), i.e.
data-dependent ALiBi: in each layer and head h, a gate f_t = sigmoid(w_h . x_t + b_h) from the
layer's attention input x_t, and query i adds

    D(i, j) = sum_{t = j+1..i} log f_t = c_i - c_j,    c the cumulative sum of log f,

to its score of key j. ALiBi is the constant gate f = e^(-m_h); no other position information (FoX
drops RoPE). The gate's projection starts as the official code's (zhixuan-lin/forgetting-transformer,
fgate_type "full"): weight N(0, 0.02), bias 0, so f = 1/2 at first.

The bias depends on each layer's input: the dense mask (sdpa) computes it, and so does the
separable kernel (kernels/separable.py), which takes -c_j as a per-key term (key_terms: softmax
ignores c_i, the same for every key of query i) on PyTorch's fused causal attention. c is kept in fp64: over long inputs it grows to thousands, where fp32 would round c_i - c_j near
the diagonal. Padded keys forget nothing (log f = 0), so left padding changes no row's bias.
Packed documents need nothing more: attention masks keys of other documents, and within one
document c_i - c_j sums that document's gates only."""
import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from fairseq_alibi.positions.position_method import LayerBias, MethodConfig, PositionMethod, register

GATE_INIT_STD = 0.02


@register("fox", "FoX (forget gate)")
class ForgetGates(PositionMethod):
    name = "forget_gates"  # no parameters of its own: each layer's gate is that layer's
    has_bias = False
    kernels = ("sdpa", "separable")

    @dataclasses.dataclass
    class Config(MethodConfig):
        def build(self, heads, head_dim, embed_dim):
            return ForgetGates(heads, embed_dim)

    def __init__(self, heads: int, embed_dim: int):
        super().__init__()
        self.heads, self.embed_dim = heads, embed_dim

    def layer_bias(self):
        return ForgetGate(self.embed_dim, self.heads)


class ForgetGate(LayerBias):
    """One layer's gates; its state in incremental decoding is c of every cached key (batch, heads, S)."""

    def __init__(self, embed_dim: int, heads: int):
        super().__init__()
        self.proj = nn.Linear(embed_dim, heads)
        nn.init.normal_(self.proj.weight, std=GATE_INIT_STD)
        nn.init.zeros_(self.proj.bias)

    def log_gates(self, x, padding):
        """log f (batch, heads, T) in fp32 for x (T, batch, C); 0 at padded tokens."""
        log_f = F.logsigmoid(self.proj(x).float()).permute(1, 2, 0)
        if padding is not None:
            log_f = log_f.masked_fill(padding[:, None, -x.size(0):], 0.0)
        return log_f

    # Without gradients c_i - c_j is computed in blocks of query rows of at most this many (query,
    # key) pairs per row of the batch and head, each block cast to fp32 as it is made: the fp64
    # difference never exists whole. A block stops at its last query's causal diagonal and the keys
    # past it get -inf, what the causal mask adds there anyway: the same mask as full rows, element
    # for element, made in about half the time (benchmarks/fox-bias-cpu.md).
    CHUNK_PAIRS = 2**20

    def cumulative(self, x, padding, state):
        """c (batch, heads, S) in fp64 over the cached keys and the T new tokens of x."""
        cumulative = self.log_gates(x, padding).double().cumsum(-1)
        if state is not None:  # the cached keys' c, then the new tokens' from the last of them
            cumulative = torch.cat([state, state[..., -1:] + cumulative], dim=-1)
        return cumulative

    def key_terms(self, x, padding, state):
        """The bias as a per-key term (the separable kernel): -c_j (batch, heads, S) fp64, and what
        to keep (c)."""
        cumulative = self.cumulative(x, padding, state)
        return -cumulative, cumulative

    def forward(self, x, q, k, padding, state):
        query_len = x.size(0)
        cumulative = self.cumulative(x, padding, state)
        queries, keys = cumulative[..., -query_len:, None], cumulative[..., None, :]
        rows = max(1, self.CHUNK_PAIRS // cumulative.size(-1))
        if torch.is_grad_enabled() or query_len <= rows:
            return (queries - keys).float(), cumulative  # c_i - c_j
        keys_len = keys.size(-1)
        bias = torch.empty(*queries.shape[:-1], keys_len, dtype=torch.float32, device=x.device)
        for start in range(0, query_len, rows):
            end = min(query_len, start + rows)
            seen = keys_len - query_len + end  # query i (of the new tokens) sees keys up to S - T + i
            bias[..., start:end, :seen] = queries[..., start:end, :] - keys[..., :seen]
            bias[..., start:end, seen:] = float("-inf")
        return bias, cumulative
