"""LittleBird's encoder layer (Lee et al., EMNLP 2022 findings, arXiv:2210.11870, section 3):
pack/unpack attention, a sliding window and BiALiBi, in memory linear in the input's length.
Pure torch, no fairseq import.

Per layer, X the input (l tokens), P the pack (s vectors, learned at the input, each layer's P'
feeding the next):

    C_p = Attn(P, X)             pack attention: its own projections, padded keys masked, no positions
    P'  = LayerNorm(C_p + P)
    C_x = USWAttn(X, C_p)        unpack + sliding window: ONE softmax per query
    A   = LayerNorm(C_x + X)
    X'  = LayerNorm(FFN(A) + A)

USWAttn: query i of X attends over [K(C_p); K(X_window(i))] with the same K and V projections for
both, adding the bias [-D_p; -D]: D is BiALiBi (bidirectional/'s "bialibi": 0 on the diagonal,
alpha_h to and from token 0, past_h (i - j) for keys before the query, future_h (j - i) after it),
and D_p = (past_h + future_h) / 2 * b for every pack key: the pack sits one block away, at the
mean of the two slopes. The public implementation's defects are not repeated here: one softmax
(weights sum to 1), no slopes of the pack's own, alpha a constant, the bias built from positions
for any length, padding taken from each batch.

The window: X in blocks of b, padded on the right to whole blocks (the padding masked). A row
with n blocks (n counts its tokens up to the last that is not padding, so the window does not
depend on how much padding follows) has query block q see key block 0 (a global column) and
blocks w, w+1, w+2 with w = min(max(q - 1, 1), n - 3):

    q = 0, 1, 2       -> 0, 1, 2, 3
    2 <= q <= n - 2   -> 0, q - 1, q, q + 1
    q = n - 1         -> 0, n - 3, n - 2, n - 1

so with n >= 4 every query sees exactly 4b window keys and s pack keys (n = 4: every block), and
with n < 4 all its blocks (w = 1, the blocks past n being padding): the layer is then dense
attention plus the pack. Memory per layer: O(l (4b + 2s)) for pack (s x l), unpack (l x s) and
window (l x 4b) scores.
"""
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq_alibi.bidirectional import EncoderAlibi

# Block size and pack length: 64 and 64, the public implementation's example, taken as the
# paper's setting (its text could not be checked offline).
PAPER_BLOCK_SIZE = 64
PAPER_PACK_LENGTH = 64


def check_littlebird(block_size: int, pack_length: int, embed_dim: int, num_heads: int):
    """ValueError naming the fix for settings the layer cannot run with."""
    if block_size < 1:
        raise ValueError(f"the block size must be at least 1 token, got {block_size}")
    if pack_length < 1:
        raise ValueError(f"the pack length must be at least 1 (the pack is how tokens outside a window "
                         f"are seen), got {pack_length}")
    if num_heads < 1 or embed_dim % num_heads:
        raise ValueError(f"the embedding dimension ({embed_dim}) must be a positive multiple of the "
                         f"head count ({num_heads})")


def window_key_blocks(num_blocks: int, row_blocks: Tensor) -> Tensor:
    """(rows, groups, key blocks): the key blocks each group of queries sees, for an input of
    num_blocks blocks whose rows have row_blocks (rows,) blocks of their own. Past 4 blocks, one
    group per block and 4 key blocks each (the rule above); with 4 or fewer, one group of every
    query seeing every block, for all rows (rows = 1)."""
    if num_blocks <= 4:
        return torch.arange(num_blocks, device=row_blocks.device).view(1, 1, -1)
    query_block = torch.arange(num_blocks, device=row_blocks.device)
    w = torch.minimum((query_block - 1).clamp(min=1)[None], (row_blocks - 3).clamp(min=1)[:, None])
    return torch.stack([torch.zeros_like(w), w, w + 1, w + 2], dim=-1)


def row_block_counts(padding_mask: Optional[Tensor], length: int, block_size: int, device=None) -> Tensor:
    """(B,): each row's blocks up to its last token that is not padding; (1,) if no padding."""
    if padding_mask is None:
        return torch.full((1,), -(-length // block_size), device=device)
    positions = torch.arange(1, length + 1, device=padding_mask.device)
    extent = (positions * ~padding_mask).amax(1)  # the index after the last real token
    return (extent + block_size - 1) // block_size


@dataclass
class WindowBias:
    """What every layer needs of the positions for one batch (built once per forward)."""
    block_size: int
    key_blocks: Tensor  # (rows, groups, key blocks), window_key_blocks; rows 1 or B
    window: Tensor  # (rows, heads, groups, queries per group, key blocks * b): -D for each query's window
    pack: Tensor  # (heads,): -D_p, the same for every pack key


def window_bias(alibi: EncoderAlibi, length: int, block_size: int, padding_mask: Optional[Tensor] = None,
                device=None) -> WindowBias:
    """BiALiBi for a batch of `length` tokens (a multiple of block_size), window by window;
    padding_mask (B, T), True at padding, or None (then every row is `length` long)."""
    row_blocks = row_block_counts(padding_mask, length, block_size, device)
    key_blocks = window_key_blocks(length // block_size, row_blocks)
    query_pos = torch.arange(length, device=key_blocks.device).view(1, key_blocks.size(1), -1)  # (1, groups, queries)
    key_pos = (key_blocks[..., None] * block_size + torch.arange(block_size, device=key_blocks.device)).flatten(2)
    window = alibi.bias(query_pos.expand(key_pos.size(0), -1, -1), key_pos).transpose(0, 1)
    past, future = alibi.past_future_slopes()
    return WindowBias(block_size, key_blocks, window, -(past + future) / 2 * block_size)


def window_logits(q: Tensor, k: Tensor, pack_k: Tensor, bias: WindowBias, padding_mask: Optional[Tensor] = None):
    """The scores of USWAttn, blocked: (B, H, groups, queries per group, s + key blocks * b),
    pack keys first, -inf at padded keys. q, k: (B, H, T, d_h), q scaled; pack_k (B, H, s, d_h)."""
    B, H, T, d_h = q.shape
    b, key_blocks = bias.block_size, bias.key_blocks
    groups = key_blocks.size(1)
    q = q.view(B, H, groups, T // groups, d_h)
    window = q @ windows(k, key_blocks, b).transpose(-1, -2) + bias.window.to(q.dtype)
    if padding_mask is not None:
        rows = torch.arange(B, device=q.device)[:, None, None]
        padded_keys = padding_mask.view(B, T // b, b)[rows, key_blocks.expand(B, -1, -1)].flatten(2, 3)
        window = window.masked_fill(padded_keys[:, None, :, None, :], float("-inf"))
    pack = q @ pack_k[:, :, None].transpose(-1, -2) + bias.pack.to(q.dtype).view(1, H, 1, 1, 1)
    return torch.cat([pack, window], -1)


def windows(t: Tensor, key_blocks: Tensor, block_size: int) -> Tensor:
    """(B, H, T, d_h) -> (B, H, groups, key blocks * b, d_h): each group's keys (or values)."""
    B, H, T, d_h = t.shape
    rows = torch.arange(B, device=t.device)[:, None, None]
    blocked = t.view(B, H, T // block_size, block_size, d_h)
    picked = blocked[rows, :, key_blocks.expand(B, -1, -1)]  # (B, groups, key blocks, H, b, d_h)
    return picked.permute(0, 3, 1, 2, 4, 5).flatten(3, 4)


def unpacked_window_attention(q: Tensor, k: Tensor, v: Tensor, pack_k: Tensor, pack_v: Tensor,
                              bias: WindowBias, padding_mask: Optional[Tensor] = None,
                              dropout: float = 0.0, training: bool = False) -> Tensor:
    """USWAttn, blocked. q, k, v: (B, H, T, d_h), T a multiple of the block size, q already
    scaled by d_h^-0.5; pack_k, pack_v: (B, H, s, d_h), never masked; padding_mask: (B, T), True
    at padding. One softmax over each query's s + 4b scores. Returns (B, H, T, d_h)."""
    B, H, T, d_h = q.shape
    s = pack_k.size(2)
    logits = window_logits(q, k, pack_k, bias, padding_mask)
    softmax_dtype = torch.promote_types(q.dtype, torch.float32)  # fp32 at least
    weights = F.dropout(torch.softmax(logits, -1, dtype=softmax_dtype).to(q.dtype), dropout, training)
    out = weights[..., :s] @ pack_v[:, :, None] + weights[..., s:] @ windows(v, bias.key_blocks, bias.block_size)
    return out.reshape(B, H, T, d_h)


def dense_window_attention(q: Tensor, k: Tensor, v: Tensor, pack_k: Tensor, pack_v: Tensor,
                           alibi: EncoderAlibi, block_size: int, padding_mask: Optional[Tensor] = None) -> Tensor:
    """The same attention as one (T, s + T) score matrix per head: every logit, -inf where the
    window leaves a key out, one softmax, the values. Quadratic in T: the reference for tests."""
    B, H, T, d_h = q.shape
    n = T // block_size
    key_blocks = window_key_blocks(n, row_block_counts(padding_mask, T, block_size, q.device))
    if n <= 4:
        visible = torch.ones(1, T, T, dtype=torch.bool, device=q.device)
    else:
        blocks_seen = torch.zeros(*key_blocks.shape[:2], n, dtype=torch.bool, device=q.device)
        blocks_seen.scatter_(2, key_blocks, True)  # (rows, query block, key block)
        visible = blocks_seen.repeat_interleave(block_size, 1).repeat_interleave(block_size, 2)
    logits = q @ k.transpose(-1, -2) + alibi.square(T, q.device).to(q.dtype)
    logits = logits.masked_fill(~visible[:, None], float("-inf"))
    if padding_mask is not None:
        logits = logits.masked_fill(padding_mask[:, None, None, :], float("-inf"))
    past, future = alibi.past_future_slopes()
    pack_logits = q @ pack_k.transpose(-1, -2) - ((past + future) / 2 * block_size).to(q.dtype).view(1, H, 1, 1)
    weights = torch.softmax(torch.cat([pack_logits, logits], -1), -1)
    return weights[..., :pack_k.size(2)] @ pack_v + weights[..., pack_k.size(2):] @ v


class Projections(nn.Module):
    """The q, k, v and output projections of multi-head attention, named as fairseq's
    MultiheadAttention names them (its weights load as they are)."""

    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(embed_dim, embed_dim) for _ in range(4))

    def split(self, x: Tensor) -> Tensor:  # (B, T, C) -> (B, H, T, d_h)
        return x.view(x.size(0), x.size(1), self.num_heads, self.head_dim).transpose(1, 2)

    def merge(self, x: Tensor) -> Tensor:  # (B, H, T, d_h) -> (B, T, C), projected
        return self.out_proj(x.transpose(1, 2).flatten(2))


def pack_attention(proj: Projections, pack: Tensor, x: Tensor, padding_mask: Optional[Tensor],
                   dropout: float = 0.0, training: bool = False) -> Tensor:
    """C_p = Attn(P, X): pack (B, s, C) queries over x (B, T, C), padded keys masked. (B, s, C)."""
    q, k, v = proj.split(proj.q_proj(pack)), proj.split(proj.k_proj(x)), proj.split(proj.v_proj(x))
    attend = None if padding_mask is None else ~padding_mask[:, None, None, :]
    return proj.merge(F.scaled_dot_product_attention(q, k, v, attn_mask=attend, dropout_p=dropout if training else 0.0))


class LittleBirdLayer(nn.Module):
    """One LittleBird encoder layer (post-norm, the five equations above). Names follow fairseq's
    encoder layer (self_attn, self_attn_layer_norm, fc1, fc2, final_layer_norm) plus the pack's
    pack_attn and pack_layer_norm."""

    def __init__(self, embed_dim: int, num_heads: int, ffn_dim: int, activation: Callable[[Tensor], Tensor] = F.gelu,
                 dropout: float = 0.0, attention_dropout: float = 0.0, activation_dropout: float = 0.0):
        super().__init__()
        self.pack_attn = Projections(embed_dim, num_heads)
        self.pack_layer_norm = nn.LayerNorm(embed_dim)
        self.self_attn = Projections(embed_dim, num_heads)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.fc1, self.fc2 = nn.Linear(embed_dim, ffn_dim), nn.Linear(ffn_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)
        self.activation = activation
        self.dropout, self.attention_dropout, self.activation_dropout = dropout, attention_dropout, activation_dropout

    def forward(self, x: Tensor, pack: Tensor, bias: WindowBias, padding_mask: Optional[Tensor] = None):
        """x: (B, T, C), T a multiple of the block size; pack: (B, s, C); padding_mask: (B, T),
        True at padding, or None. Returns (X', P'), padded rows of X' zero."""
        drop = lambda t: F.dropout(t, self.dropout, self.training)  # noqa: E731
        packed = pack_attention(self.pack_attn, pack, x, padding_mask, self.attention_dropout, self.training)  # C_p
        next_pack = self.pack_layer_norm(pack + drop(packed))  # P'

        attn = self.self_attn
        q = attn.split(attn.q_proj(x)) * attn.head_dim ** -0.5
        k, v = attn.split(attn.k_proj(x)), attn.split(attn.v_proj(x))
        pack_k, pack_v = attn.split(attn.k_proj(packed)), attn.split(attn.v_proj(packed))
        context = attn.merge(unpacked_window_attention(q, k, v, pack_k, pack_v, bias, padding_mask,
                                                       self.attention_dropout, self.training))  # C_x
        a = self.self_attn_layer_norm(x + drop(context))
        hidden = F.dropout(self.activation(self.fc1(a)), self.activation_dropout, self.training)
        x = self.final_layer_norm(a + drop(self.fc2(hidden)))
        if padding_mask is not None:
            x = x.masked_fill(padding_mask[..., None], 0.0)
        return x, next_pack


def pad_to_blocks(x: Tensor, padding_mask: Tensor, block_size: int):
    """Right-pad x (B, T, C) and padding_mask (B, T) to a multiple of block_size (the new
    positions are padding)."""
    extra = -x.size(1) % block_size
    if extra:
        x = F.pad(x, (0, 0, 0, extra))
        padding_mask = F.pad(padding_mask, (0, extra), value=True)
    return x, padding_mask


def insert_padding(x: Tensor, padding_mask: Tensor, extra: int, generator: Optional[torch.Generator] = None):
    """The paper's padding insertion: `extra` masked padding slots at random places after the
    first token of each row (token 0 keeps index 0, where BiALiBi's alpha is anchored), so
    training sees the longer distances of longer inputs. x (B, T, C), padding_mask (B, T).
    Returns (x', padding_mask', where): x' (B, T + extra, C); where (B, T - 1) the new index of
    tokens 1 .. T-1, for taking the outputs back with take_back."""
    B, T, C = x.shape
    slots = torch.rand(B, T + extra - 1, generator=generator, device=x.device).argsort(1)[:, :T - 1]
    where = slots.sort(1).values + 1
    spread = x.new_zeros(B, T + extra, C)
    spread[:, 0] = x[:, 0]
    spread.scatter_(1, where[..., None].expand(-1, -1, C), x[:, 1:])
    spread_mask = padding_mask.new_ones(B, T + extra)
    spread_mask[:, 0] = padding_mask[:, 0]
    spread_mask.scatter_(1, where, padding_mask[:, 1:])
    return spread, spread_mask, where


def take_back(x: Tensor, where: Tensor) -> Tensor:
    """Undo insert_padding on outputs: (B, T + extra, C) -> (B, T, C)."""
    rest = x.gather(1, where[..., None].expand(-1, -1, x.size(2)))
    return torch.cat([x[:, :1], rest], 1)
