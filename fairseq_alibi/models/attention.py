"""fairseq glue shared by every model of the plugin: how a position method reaches attention.

One plain function, attention_bias, runs once per forward before the layer loop: it asks the
model's position method (positions/'s interface) for its rotation and bias, lets the kernel
registry (kernels.choose_kernel) pick who adds the bias, and otherwise builds the dense mask (the
method's bias, the causal -inf, padded keys). Its result, an AttentionBias, goes to every layer's
RelativeSelfAttention. A model holds its method; nothing here calls back into the model.
"""
import contextlib
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq.distributed import fsdp_wrap
from fairseq.modules import MultiheadAttention
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from fairseq_alibi.attention_options import OPTIONS, apply_outputs, dense_attention, logit_readers
from fairseq_alibi.documents import Documents, document_bias
from fairseq_alibi.kernels import build_kernel, choose_kernel
from fairseq_alibi.kernels.sdpa import masked_attention
from fairseq_alibi.positions.position_method import causal_mask, fold_padding
from fairseq_alibi.rotary_angles import apply_rotary


@dataclass
class AttentionBias:
    """What a position method adds to self-attention, built once per forward for all layers."""

    # Additive (1 or batch, heads or 1, T, S) mask with -inf where a query must not look. None:
    # no mask needed (causal: SDPA's is_causal when T == S, nothing when T == 1; bidirectional:
    # every key).
    mask: Optional[Tensor] = None
    # cos, sin (T, head_dim / 2) of the T new positions: rotates new queries and keys (rotary);
    # with documents (batch, 1, T, head_dim / 2), each row's positions in its documents.
    rotary: Optional[Tuple[Tensor, Tensor]] = None
    # A kernel that adds the bias itself (what kernels.build_kernel prepared: .attend); then mask is None.
    kernel: Optional[object] = None
    causal: bool = True
    # Each new query's count of keys it sees (its position + 1; with documents its place in its
    # document + 1), (T,) or (batch, T): a length temperature's n (causal attention only).
    keys_seen: Optional[Tensor] = None


def is_right_padding(padding_mask: Tensor) -> bool:
    """True if, in every row, padding only appears after the last real token (or nowhere)."""
    return bool((padding_mask.long().cummax(dim=1).values == padding_mask.long()).all())


def dense_bias(positions, query_len: int, key_len: int, device, causal: bool) -> Tensor:
    """(heads, T, S) fp32: the method's bias for the last T of S positions, -inf on the future
    if causal."""
    if query_len > key_len:
        raise ValueError(f"query_len ({query_len}) cannot exceed key_len ({key_len})")
    keys = torch.arange(key_len, device=device)
    queries = keys[key_len - query_len:]
    bias = positions.bias(queries, keys)
    if not causal:
        return bias
    future = keys[None, :] > queries[:, None]
    # In place where no gradient needs the values (one full-size pass less).
    return bias.masked_fill_(future, float("-inf")) if not bias.requires_grad else bias.masked_fill(future, float("-inf"))


class SquareMaskCache:
    """The (1, heads, T, T) mask of a full forward of a method without parameters, cached: the
    T x T mask is the top-left block of any larger one (any bias(i, j) of positions from 0), so
    batches of the same or a shorter length (every training step, every evaluation batch) reuse
    it instead of rebuilding heads x T x T floats. Keyed by the method's buffers (an in-place
    change of ALiBi's slopes is seen)."""

    def __init__(self):
        self.entry = None  # (key, mask)

    def get(self, positions, length: int, dtype, device, causal: bool) -> Tensor:
        key = (device, dtype, causal, tuple((b.data_ptr(), b._version) for b in positions.buffers()))
        if self.entry is None or self.entry[0] != key or self.entry[1].size(-1) < length:
            self.entry = None  # free the old one before building its successor
            self.entry = (key, dense_bias(positions, length, length, device, causal)[None].to(dtype))
        return self.entry[1][..., :length, :length]


def position_mask(positions, query_len: int, key_len: int, dtype, device, causal: bool,
                  cache: Optional[SquareMaskCache] = None) -> Optional[Tensor]:
    """The additive mask (1, heads or 1, T, S) of the method's bias and the causal -inf, or None
    where the attention pattern alone will do. 4-D because PyTorch's fused CPU kernel takes 2-D or
    4-D masks only (a 3-D one falls back to the unfused path, 6x slower); the size-1 batch
    dimension broadcasts. Computed in fp32, added in the attention dtype."""
    if not positions.has_bias:
        return causal_mask(query_len, key_len, dtype, device) if causal and query_len > 1 and query_len != key_len else None
    if cache is not None and query_len == key_len and next(iter(positions.parameters()), None) is None:
        return cache.get(positions, key_len, dtype, device, causal)
    return dense_bias(positions, query_len, key_len, device, causal)[None].to(dtype)


def attention_bias(positions, x: Tensor, query_len: int, key_len: int, padding_mask: Optional[Tensor], *,
                   causal: bool, kernel: str = "sdpa", dropout: bool = False,
                   cache: Optional[SquareMaskCache] = None, documents: Optional[Documents] = None,
                   scaled: bool = False, dense: bool = False) -> AttentionBias:
    """What every layer adds for these lengths: the T new queries are the last T of S positions
    (incremental decoding: T = 1 over the cached keys). padding_mask: padded keys to mask (None if
    the attention pattern already hides them). kernel: a name of kernels.KERNEL_NAMES; dropout:
    attention dropout is on (training). documents (documents.find_documents, over all S tokens):
    no query sees another document, and positions count from each document's start. scaled: each query's
    bias is to be scaled by its own factor (a length temperature's logit form): a kernel that can. dense: an
    attention option reads every logit (attention_options/): the dense mask, built even where the causal
    pattern alone would do."""
    if documents is None:
        new_positions = torch.arange(key_len - query_len, key_len, device=x.device)
        rotary = positions.rotary(new_positions)
    else:
        new_positions = documents.positions[:, key_len - query_len:]
        rotary = positions.rotary(new_positions)  # (batch, T, head_dim / 2)
        rotary = None if rotary is None else tuple(r[:, None] for r in rotary)
    keys_seen = new_positions + 1 if causal else None
    chosen = "sdpa" if dense else choose_kernel(kernel, positions, x, query_len, padding_mask is not None, dropout,
                                                documents is not None, scaled)
    prepared = build_kernel(chosen, positions, x.dtype, documents, query_len)
    if prepared is not None:
        return AttentionBias(kernel=prepared, rotary=rotary, causal=causal, keys_seen=keys_seen)
    if documents is not None:  # (batch, heads or 1, T, S): each row its own
        keys = torch.arange(key_len, device=x.device)
        mask = document_bias(positions, documents, keys[key_len - query_len:], keys, causal).to(x.dtype)
    else:
        mask = position_mask(positions, query_len, key_len, x.dtype, x.device, causal, cache)
    if padding_mask is not None:
        if mask is None:
            mask = (causal_mask(query_len, key_len, x.dtype, x.device) if causal
                    else x.new_zeros(1, 1, query_len, key_len))
        mask = fold_padding(mask, padding_mask)
    if dense and mask is None and causal and query_len > 1:
        mask = causal_mask(query_len, key_len, x.dtype, x.device)
    return AttentionBias(mask=mask, rotary=rotary, causal=causal, keys_seen=keys_seen)


class RelativeSelfAttention(MultiheadAttention):
    """Self-attention taking an AttentionBias in place of fairseq's attn_mask tensor.

    Our decoder and encoder layers (RelativeDecoderLayer, RelativeEncoderLayer) pass it by name.
    Same parameters (q/k/v/out_proj) and incremental cache layout as fairseq's
    MultiheadAttention, so checkpoints and beam reordering are unchanged. A method whose bias
    depends on the data gives each layer a layer_bias (positions.LayerBias; the decoder sets it),
    whose cached state rides in the same incremental buffer (batch-first, so beams reorder it).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.layer_bias = None
        self.temperature = None  # a length temperature (length_temperature.py; the decoder sets it)
        self.options = None  # its attention options (attention_options/: a ModuleDict; the decoder sets it)
        self.recorded_weights = None  # a list while its weights are recorded (recording_weights)

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = False,
        static_kv: bool = False,
        attn_mask: Optional[AttentionBias] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ):
        # key_padding_mask: attention_bias folds padding into attn_mask.mask; a layer bias reads it.
        bias = attn_mask if attn_mask is not None else AttentionBias()
        tgt_len, bsz, embed_dim = query.size()
        # T x B x C -> B x heads x T x head_dim, for each projection
        q, k, v = (proj(query).view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        if bias.rotary is not None:  # keys are cached rotated, at their own positions
            q, k = apply_rotary(q, *bias.rotary), apply_rotary(k, *bias.rotary)
        query_scale = None
        if self.temperature is not None:  # each query times its factor; the logit form its bias too
            factor = self.temperature(bias.keys_seen).to(q.dtype)
            q = q * factor
            query_scale = factor if self.temperature.form == "logit" else None
        saved_state = self._get_input_buffer(incremental_state) if incremental_state is not None else None
        if saved_state is not None:
            if "prev_key" in saved_state:
                k = torch.cat([saved_state["prev_key"], k], dim=2)
                v = torch.cat([saved_state["prev_value"], v], dim=2)
            saved_state["prev_key"] = k
            saved_state["prev_value"] = v
            saved_state["prev_key_padding_mask"] = None
        states = {name: saved_state[name] for name in STATES if name in saved_state} if saved_state is not None else {}
        dropout = self.dropout_module.p if self.training else 0.0
        out, kept = biased_attention(bias, self.layer_bias, query, q, k, v, key_padding_mask, states, dropout,
                                     query_scale, self.options, self.recorded_weights)
        out = apply_outputs(self.options, out, query)
        if saved_state is not None:
            saved_state.update(kept)
            self._set_input_buffer(incremental_state, saved_state)
        out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
        return self.out_proj(out), None


# What a layer keeps in its incremental cache besides keys and values: a layer bias's state (FoX's c) and
# an attention option's (selective attention's accumulation), each (batch, ...), so that beams reorder it.
STATES = ("layer_bias", *OPTIONS)


def biased_attention(bias: AttentionBias, layer_bias, x: Tensor, q: Tensor, k: Tensor, v: Tensor,
                     padding: Optional[Tensor], states: Optional[Dict[str, Tensor]], dropout: float,
                     query_scale: Optional[Tensor] = None, options=None, recorded: Optional[list] = None):
    """Attention (batch, heads, T, d) with the bias: the chosen kernel's, the dense mask's, or PyTorch's
    causal attention; a layer_bias (a bias from the data: x, (T, batch, C), is the layer's input) as the
    kernel's per-key terms or added to the mask; query_scale (1 or batch, 1 or heads, T, 1): each query's
    bias times its factor (a length temperature's logit form; the kernel was chosen to take it); options:
    the layer's attention options (a ModuleDict or None), those that read the logits on the dense mask;
    states: what the previous call kept (incremental decoding), by name (STATES). Returns the output and
    what to keep now, by name. recorded: a list the attention weights (batch, heads, T, S) are appended to (the
    dense path; attention_bias built the dense mask: recording_weights)."""
    mask, key_terms, kept, states = bias.mask, None, {}, states or {}
    state = states.get("layer_bias")
    scaled = {} if query_scale is None else {"query_scale": query_scale}
    tgt_len = q.size(2)
    if layer_bias is not None and bias.kernel is not None:  # a kernel that adds it: its per-key terms
        key_terms, kept["layer_bias"] = layer_bias.key_terms(x, padding, state)
    elif layer_bias is not None:  # a data-dependent bias: this layer's, over all keys (positions.LayerBias)
        extra, kept["layer_bias"] = layer_bias(x, q, k, padding, state)
        if mask is None:
            mask = (causal_mask(tgt_len, k.size(2), torch.float32, q.device) if bias.causal
                    else q.new_zeros(1, 1, tgt_len, k.size(2), dtype=torch.float32))
        # In place where no gradient needs extra (one full-size tensor less); the same sum.
        mask = (extra.add_(mask) if not extra.requires_grad else mask.float() + extra).to(q.dtype)
    if query_scale is not None and mask is not None:  # the dense mask: its bias times each query's factor
        mask = scaled_mask(mask, query_scale)
    if logit_readers(options) or recorded is not None:  # on the dense mask (None: one query seeing every key)
        out, option_kept = dense_attention(q, k, v, mask, dropout, options or {}, states, recorded)
        kept.update(option_kept)
    elif key_terms is not None:
        out = bias.kernel.attend(q, k, v, dropout, key_terms=key_terms, **scaled)
    elif bias.kernel is not None:
        out = bias.kernel.attend(q, k, v, dropout, **scaled)
    elif mask is not None:
        out = masked_attention(q, k, v, mask, dropout)  # no backend found wrong on masks (kernels/sdpa.py)
    else:
        is_causal = bias.causal and tgt_len > 1  # then tgt_len == src_len
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=is_causal)
    return out, kept


@contextlib.contextmanager
def recording_weights(decoder) -> Iterator[List[List[Tensor]]]:
    """Inside, the decoder's attention runs on the dense path and each layer appends its attention weights
    (batch, heads, T, S: what each query gives each key, after the options that weigh; a row sums to under 1
    where mass goes to a sink logit) to its list, one per forward."""
    layers = [layer.self_attn for layer in decoder.layers]
    recorded, dense = [[] for _ in layers], decoder.dense_attention
    decoder.dense_attention = True  # attention_bias builds the dense mask, whatever the kernel
    for attention, weights in zip(layers, recorded):
        attention.recorded_weights = weights
    try:
        yield recorded
    finally:
        decoder.dense_attention = dense
        for attention in layers:
            attention.recorded_weights = None


def scaled_mask(mask: Tensor, query_scale: Tensor) -> Tensor:
    """The mask's finite entries (the bias) times each query's factor; -inf stays (no inf enters the product:
    its gradient would be NaN)."""
    masked = torch.isinf(mask)
    return torch.where(masked, mask, mask.masked_fill(masked, 0) * query_scale)


def build_relative_self_attention(layer, embed_dim: int, heads: int, cfg) -> RelativeSelfAttention:
    return RelativeSelfAttention(embed_dim, heads, dropout=cfg.attention_dropout, self_attention=True,
                                 q_noise=layer.quant_noise, qn_block_size=layer.quant_noise_block_size)


def wrap_layer(layer, cfg):
    """The same activation checkpointing / FSDP wrapping as fairseq gives its own layers."""
    if cfg.checkpoint_activations:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params_to_wrap = cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0
    return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


class RelativeDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer (same parameters, so checkpoints are unchanged) with a forward of its
    own that takes the AttentionBias by name: fairseq's would pass it through as the tensor
    self_attn_mask. Cross-self-attention is refused at build (decoder.check_decoder_args)."""

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return build_relative_self_attention(self, embed_dim, cfg.decoder.attention_heads, cfg)

    def forward(self, x: Tensor, bias: AttentionBias, padding_mask: Optional[Tensor] = None,
                encoder_out: Optional[Tensor] = None, encoder_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None):
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(query=x, key=x, value=x, key_padding_mask=padding_mask,
                              incremental_state=incremental_state, attn_mask=bias)
        if self.c_attn is not None:  # NormFormer's head scaling (--scale-heads)
            tgt_len, bsz = x.size(0), x.size(1)
            x = torch.einsum("tbhd,h->tbhd", x.view(tgt_len, bsz, self.nh, self.head_dim), self.c_attn)
            x = x.reshape(tgt_len, bsz, self.embed_dim)
        if self.attn_ln is not None:
            x = self.attn_ln(x)
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        if self.encoder_attn is not None and encoder_out is not None:  # fairseq's, without positions
            residual = x
            if self.normalize_before:
                x = self.encoder_attn_layer_norm(x)
            x, _ = self.encoder_attn(query=x, key=encoder_out, value=encoder_out, key_padding_mask=encoder_padding_mask,
                                     incremental_state=incremental_state, static_kv=True, need_weights=False)
            x = self.residual_connection(self.dropout_module(x), residual)
            if not self.normalize_before:
                x = self.encoder_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_dropout_module(self.activation_fn(self.fc1(x)))
        if self.ffn_layernorm is not None:
            x = self.ffn_layernorm(x)
        x = self.dropout_module(self.fc2(x))
        if self.w_resid is not None:
            residual = torch.mul(self.w_resid, residual)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x


class RelativeEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer, taking an AttentionBias. Its forward is fairseq's without two
    things that would drop the bias: the conversion of a float attn_mask into -1e8 wherever it
    is nonzero (every token would see itself only), and fairseq 0.12.2's native fast path in
    evaluation, which ignores any mask."""

    def __init__(self, cfg, return_fc=False):
        super().__init__(cfg, return_fc)
        self.can_use_fastpath = False  # fairseq 0.12.2's encoder checks it too

    def build_self_attention(self, embed_dim, cfg):
        return build_relative_self_attention(self, embed_dim, cfg.encoder.attention_heads, cfg)

    def forward(self, x: Tensor, encoder_padding_mask: Optional[Tensor], attn_mask: Optional[AttentionBias] = None):
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(query=x, key=x, value=x, attn_mask=attn_mask)
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.fc2(self.activation_dropout_module(self.activation_fn(self.fc1(x))))
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x
