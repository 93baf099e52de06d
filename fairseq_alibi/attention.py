"""fairseq glue shared by every model of the plugin: how a position method reaches attention.

PositionBiasFlow owns the flow, once per forward, before the layer loop: a kernel that adds the
bias itself, else the method's additive mask, then padding folded into it, then rotary angles.
A method fills the hooks (in_kernel_bias, position_mask, rotary_angles); the flow never calls
back into its caller. The result, an AttentionBias, goes to every layer's RelativeSelfAttention.
The same pieces serve a decoder (causal), an encoder (bidirectional) and, with no hooks filled,
attention without positions.
"""
import logging
from dataclasses import dataclass
from typing import Dict, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq.distributed import fsdp_wrap
from fairseq.modules import MultiheadAttention
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from .kernels import BlockedBias, InKernelBias
from .rotary import apply_rotary

logger = logging.getLogger(__name__)


class ConfigError(SystemExit):
    """A bad configuration: printed as one line by the fairseq command-line tools, no traceback."""

    def __init__(self, message):
        super().__init__(f"fairseq_alibi: {message}")


def config_check(check, *args):
    """Run a pure-torch check (which raises ValueError naming the fix) when the model is built,
    as a ConfigError: one check, one message, for the function and the flag alike."""
    try:
        check(*args)
    except ValueError as error:
        raise ConfigError(str(error)) from None


_warned = set()


def warn_once(message: str):
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)


@dataclass
class AttentionBias:
    """What a position method adds to self-attention, built once per forward for all layers."""

    # Additive (1 or batch, heads or 1, T, S) mask with -inf where a query must not look. None:
    # no mask needed (causal: SDPA's is_causal when T == S, nothing when T == 1; bidirectional:
    # every key).
    mask: Optional[Tensor] = None
    # cos, sin (T, head_dim / 2) of the T new positions: rotates new queries and keys (rotary).
    rotary: Optional[Tuple[Tensor, Tensor]] = None
    # A kernel that adds the bias itself (InKernelBias, BlockedBias); then mask is None.
    kernel: Optional[Union[InKernelBias, BlockedBias]] = None
    causal: bool = True


def causal_mask(query_len: int, key_len: int, dtype, device) -> Tensor:
    """(1, 1, T, S): 0 where query i (the last T of S positions) may look, -inf on the future."""
    future = torch.ones(query_len, key_len, dtype=torch.bool, device=device).triu(key_len - query_len + 1)
    return torch.zeros(query_len, key_len, dtype=dtype, device=device).masked_fill(future, float("-inf"))[None, None]


def fold_padding(mask: Tensor, padding_mask: Tensor) -> Tensor:
    """Mask padded keys too: (batch, heads or 1, T, S)."""
    query_len, key_len = mask.shape[-2:]
    diagonal = torch.eye(key_len, dtype=torch.bool, device=mask.device)[-query_len:]
    # A padded query still attends to itself, so that no row is all -inf (NaN).
    return mask.masked_fill(padding_mask[:, None, None, :] & ~diagonal, float("-inf"))


def is_right_padding(padding_mask: Tensor) -> bool:
    """True if, in every row, padding only appears after the last real token (or nowhere)."""
    return bool((padding_mask.long().cummax(dim=1).values == padding_mask.long()).all())


class PositionBiasFlow:
    """Mixed into a decoder (causal = True) or an encoder (causal = False); position methods
    override the hooks, never attention_bias."""

    causal = True

    def in_kernel_bias(self, x: Tensor, query_len: int, padding_mask: Optional[Tensor]):
        """A kernel that adds the method's bias itself (kernels.InKernelBias, kernels.BlockedBias),
        or None for the mask."""
        return None

    def position_mask(self, query_len: int, key_len: int, dtype, device) -> Optional[Tensor]:
        """The method's additive mask (1, heads or 1, T, S), its -inf pattern included (causal:
        the future), or None where the attention pattern alone will do."""
        if self.causal and query_len != key_len and query_len > 1:
            return causal_mask(query_len, key_len, dtype, device)
        return None

    def rotary_angles(self, query_len: int, key_len: int, device) -> Optional[Tuple[Tensor, Tensor]]:
        """cos, sin (T, head_dim / 2) rotating the T new queries and keys, or None."""
        return None

    def attention_bias(self, x: Tensor, query_len: int, key_len: int, padding_mask: Optional[Tensor]) -> AttentionBias:
        """What every layer adds for these lengths. padding_mask: padded keys to mask (None if
        the attention pattern already hides them)."""
        rotary = self.rotary_angles(query_len, key_len, x.device)
        kernel = self.in_kernel_bias(x, query_len, padding_mask)
        if kernel is not None:
            return AttentionBias(kernel=kernel, rotary=rotary, causal=self.causal)
        mask = self.position_mask(query_len, key_len, x.dtype, x.device)
        if padding_mask is not None:
            if mask is None:
                mask = (causal_mask(query_len, key_len, x.dtype, x.device) if self.causal
                        else x.new_zeros(1, 1, query_len, key_len))
            mask = fold_padding(mask, padding_mask)
        return AttentionBias(mask=mask, rotary=rotary, causal=self.causal)


class RelativeSelfAttention(MultiheadAttention):
    """Self-attention taking an AttentionBias in place of fairseq's attn_mask tensor.

    fairseq's decoder layer hands self_attn_mask to self-attention untouched, so the decoder
    passes the AttentionBias through it; the encoder layer (RelativeEncoderLayer) takes it by
    name. Same parameters (q/k/v/out_proj) and incremental cache layout as fairseq's
    MultiheadAttention, so checkpoints and beam reordering are unchanged.
    """

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
        # key_padding_mask is unused: PositionBiasFlow folds padding into attn_mask.mask.
        bias = attn_mask if attn_mask is not None else AttentionBias()
        tgt_len, bsz, embed_dim = query.size()
        # T x B x C -> B x heads x T x head_dim, for each projection
        q, k, v = (proj(query).view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        if bias.rotary is not None:  # keys are cached rotated, at their own positions
            q, k = apply_rotary(q, *bias.rotary), apply_rotary(k, *bias.rotary)
        if incremental_state is not None:
            saved_state = self._get_input_buffer(incremental_state)
            if "prev_key" in saved_state:
                k = torch.cat([saved_state["prev_key"], k], dim=2)
                v = torch.cat([saved_state["prev_value"], v], dim=2)
            saved_state["prev_key"] = k
            saved_state["prev_value"] = v
            saved_state["prev_key_padding_mask"] = None
            self._set_input_buffer(incremental_state, saved_state)
        dropout = self.dropout_module.p if self.training else 0.0
        if bias.kernel is not None:
            out = bias.kernel.attend(q, k, v, dropout)
        else:
            is_causal = bias.causal and bias.mask is None and tgt_len > 1  # then tgt_len == src_len
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.mask, dropout_p=dropout, is_causal=is_causal)
        out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
        return self.out_proj(out), None


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
    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return build_relative_self_attention(self, embed_dim, cfg.decoder.attention_heads, cfg)


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
