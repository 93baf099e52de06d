"""fairseq glue shared by the plugin's position methods (ALiBi, rotary, T5 bias).

A transformer LM decoder without position embeddings. Before the layer loop it builds, from the
current query and key lengths only, one AttentionBias that every layer's self-attention uses:
an additive mask (ALiBi, T5 bias; causal -inf folded in), the rotation of queries and keys
(rotary), or a kernel that adds the bias itself (ALiBi in FlashAttention/FlexAttention). So any
batch size and evaluation length work, and incremental decoding gets each new query's row.
"""
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq import options
from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerConfig, TransformerDecoder
from fairseq.models import register_model_architecture
from fairseq.models.transformer_lm import (
    TransformerLanguageModel,
    base_lm_architecture,
    transformer_lm_baevski_wiki103,
)
from fairseq.modules import AdaptiveInput, MultiheadAttention
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

from .kernels import BlockedBias, InKernelBias
from .rotary import apply_rotary

# No position table, so nothing limits the length; fairseq takes the min over limits.
UNBOUNDED_POSITIONS = 2**31 - 1
# Queries per block of the blocked kernel (kernels.blocked_attention), and the longest forward
# that `auto` leaves to the dense mask: up to 512 tokens the dense mask is faster on CPU
# (benchmarks/attention-cpu.md: evaluation 1.6 against 2.4 ms at 512, 6.6 against 5.3 ms at
# 1024; training 50 against 54 ms at 512, 96 against 76 ms at 1024).
BLOCK = 256
BLOCKED_ABOVE = 512


class ConfigError(SystemExit):
    """A bad configuration: printed as one line by the fairseq command-line tools, no traceback."""

    def __init__(self, message):
        super().__init__(f"fairseq_alibi: {message}")


def check_args(args, method: str):
    """Reject configurations that would silently mix `method` with something else."""
    if getattr(args, "decoder_learned_pos", False):
        raise ConfigError(
            f"--decoder-learned-pos adds position embeddings, which {method} replaces: drop the flag "
            "(for a learned-position baseline use stock --arch transformer_lm)"
        )
    heads = getattr(args, "decoder_attention_heads", None)
    if heads is None or heads < 1:
        raise ConfigError(f"--decoder-attention-heads must be at least 1, got {heads}")
    if args.decoder_embed_dim % heads != 0:
        raise ConfigError(
            f"--decoder-embed-dim ({args.decoder_embed_dim}) must be divisible by "
            f"--decoder-attention-heads ({heads})"
        )
    if getattr(args, "character_embeddings", False):
        raise ConfigError("--character-embeddings is not supported: drop the flag")
    if getattr(args, "cross_self_attention", False):
        raise ConfigError(f"--cross-self-attention is not supported by the {method} decoder: drop it")


@dataclass
class AttentionBias:
    """What a position method adds to self-attention, built once per forward for all layers."""

    # Additive (1 or batch, heads or 1, T, S) mask with -inf where a query must not look. None:
    # plain causal attention, which needs no mask (T == S: SDPA's is_causal; T == 1: nothing).
    mask: Optional[Tensor] = None
    # cos, sin (T, head_dim / 2) of the T new positions: rotates new queries and keys (rotary).
    rotary: Optional[Tuple[Tensor, Tensor]] = None
    # A kernel that adds the bias itself (InKernelBias, BlockedBias); then mask is None.
    kernel: Optional[Union[InKernelBias, BlockedBias]] = None


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


def blocked_fits(x: Tensor, query_len: int, padding_mask: Optional[Tensor]) -> bool:
    """Whether the blocked CPU kernel can take this forward: on CPU, without padding to mask
    (fairseq's LM batches have none), longer than BLOCKED_ABOVE (the methods add their own
    conditions: gradients, attention dropout)."""
    return x.device.type == "cpu" and padding_mask is None and query_len > BLOCKED_ABOVE


def is_right_padding(padding_mask: Tensor) -> bool:
    """True if, in every row, padding only appears after the last real token (or nowhere)."""
    return bool((padding_mask.long().cummax(dim=1).values == padding_mask.long()).all())


class RelativeSelfAttention(MultiheadAttention):
    """Causal self-attention taking an AttentionBias in place of fairseq's attn_mask.

    Same parameters (q/k/v/out_proj) and incremental cache layout as fairseq's
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
        # key_padding_mask is unused: the decoder folds padding into attn_mask.mask when needed.
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
            is_causal = bias.mask is None and tgt_len > 1  # then tgt_len == src_len
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.mask, dropout_p=dropout, is_causal=is_causal)
        out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
        return self.out_proj(out), None


class RelativeDecoderLayer(TransformerDecoderLayerBase):
    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return RelativeSelfAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            dropout=cfg.attention_dropout,
            self_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )


class RelativePositionDecoder(TransformerDecoder):
    """Transformer decoder without position embeddings; a subclass says what attention adds."""

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(cfg)
        layer = RelativeDecoderLayer(cfg, no_encoder_attn)
        # Same activation checkpointing / FSDP wrapping as fairseq's own decoder layers.
        if cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        min_params_to_wrap = cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0
        return fsdp_wrap(layer, min_num_params=min_params_to_wrap)

    def max_positions(self):
        return UNBOUNDED_POSITIONS

    def position_mask(self, query_len: int, key_len: int, dtype, device) -> Optional[Tensor]:
        """The method's additive mask (1, heads or 1, T, S), causal -inf included; None if plain
        causal attention will do (T == S or T == 1). Overridden by the bias methods."""
        if query_len == key_len or query_len == 1:
            return None
        return causal_mask(query_len, key_len, dtype, device)

    def in_kernel_bias(self, x: Tensor, query_len: int, padding_mask: Optional[Tensor]):
        """A kernel that adds the method's bias itself (kernels.InKernelBias, kernels.BlockedBias),
        or None for the mask. Overridden by the bias methods."""
        return None

    def attention_bias(self, x: Tensor, query_len: int, key_len: int, padding_mask: Optional[Tensor]) -> AttentionBias:
        """What every layer adds for these lengths. padding_mask: padding to mask (not only on the right)."""
        kernel = self.in_kernel_bias(x, query_len, padding_mask)
        if kernel is not None:
            return AttentionBias(kernel=kernel)
        mask = self.position_mask(query_len, key_len, x.dtype, x.device)
        if padding_mask is not None:
            if mask is None:
                mask = causal_mask(query_len, key_len, x.dtype, x.device)
            mask = fold_padding(mask, padding_mask)
        return AttentionBias(mask=mask)

    def extract_features_scriptable(
        self,
        prev_output_tokens,
        encoder_out: Optional[Dict[str, List[Tensor]]] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        if full_context_alignment:
            raise ValueError("full_context_alignment is not supported by this decoder")
        key_len = prev_output_tokens.size(1)  # in incremental decoding: cached + new tokens
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
        tokens = prev_output_tokens.contiguous()

        x = self.embed_scale * self.embed_tokens(tokens)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        x = x.transpose(0, 1)  # B x T x C -> T x B x C

        padding_mask = tokens.eq(self.padding_idx) if incremental_state is None else None
        if padding_mask is not None and is_right_padding(padding_mask):
            # fairseq's LM batches: padded keys lie in the future of every real query, so the
            # causal mask already hides them; only other padding has to be masked.
            padding_mask = None
        bias = self.attention_bias(x, tokens.size(1), key_len, padding_mask)

        inner_states: List[Optional[Tensor]] = [x]
        for layer in self.layers:
            x, _, _ = layer(
                x, None, None, incremental_state,
                self_attn_mask=bias, self_attn_padding_mask=padding_mask,
            )
            inner_states.append(x)

        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)  # T x B x C -> B x T x C
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        return x, {"attn": [None], "inner_states": inner_states}

    def upgrade_state_dict_named(self, state_dict, name):
        # The paper's checkpoints keep the unused sinusoidal buffer of the stock decoder.
        state_dict.pop(f"{name}.embed_positions._float_tensor", None)
        return super().upgrade_state_dict_named(state_dict, name)


class RelativePositionLanguageModel(TransformerLanguageModel):
    """A transformer LM whose decoder is `decoder_class`, named `method` in error messages."""

    decoder_class = RelativePositionDecoder
    method = "this position method"

    @classmethod
    def build_model(cls, args, task):
        check_args(args, cls.method)
        args.no_token_positional_embeddings = True
        if args.decoder_layers_to_keep:
            args.decoder_layers = len(args.decoder_layers_to_keep.split(","))
        if getattr(args, "max_target_positions", None) is None:
            args.max_target_positions = UNBOUNDED_POSITIONS

        dictionary = task.source_dictionary
        if args.adaptive_input:
            embed_tokens = AdaptiveInput(
                len(dictionary), dictionary.pad(), args.decoder_input_dim,
                args.adaptive_input_factor, args.decoder_embed_dim,
                options.eval_str_list(args.adaptive_input_cutoff, type=int),
                args.quant_noise_pq, args.quant_noise_pq_block_size,
            )
        else:
            embed_tokens = cls.build_embedding(args, dictionary, args.decoder_input_dim)
        if args.tie_adaptive_weights and not (
            args.adaptive_input
            and args.adaptive_input_factor == args.adaptive_softmax_factor
            and args.adaptive_softmax_cutoff == args.adaptive_input_cutoff
            and args.decoder_input_dim == args.decoder_output_dim
        ):
            raise ConfigError(
                "--tie-adaptive-weights needs --adaptive-input with the same cutoff, factor and "
                "dimension as the adaptive softmax"
            )
        return cls(cls.decoder_class(args, task.target_dictionary, embed_tokens))


def small_architecture(args):
    """CPU scale, a shrunken wiki103 model: 4 layers, d 128, FFN 512, 8 heads (head dim 16),
    pre-norm, tied adaptive input/softmax with cutoffs 2000,10000 (sized for WikiText-2's 33k
    words; criterion adaptive_loss). Trains on WikiText-2 in minutes on 2 cores.

    Its sinusoidal twin is stock fairseq: `--arch transformer_lm` plus SMALL_TWIN_FLAGS.
    """
    args.decoder_layers = getattr(args, "decoder_layers", 4)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 128)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 512)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 8)
    args.adaptive_input = getattr(args, "adaptive_input", True)
    args.adaptive_input_cutoff = getattr(args, "adaptive_input_cutoff", "2000,10000")
    args.adaptive_softmax_cutoff = getattr(args, "adaptive_softmax_cutoff", "2000,10000")
    args.tie_adaptive_weights = getattr(args, "tie_adaptive_weights", True)
    args.tie_adaptive_proj = getattr(args, "tie_adaptive_proj", True)
    base_lm_architecture(args)  # pre-norm, input/output dims = embed dim


def wiki103_architecture(args):
    """The paper's 247M model: Baevski & Auli's transformer_lm_wiki103 without positions."""
    transformer_lm_baevski_wiki103(args)


def register_architectures(model_name: str):
    """`--arch <model>_small` and `--arch <model>_wiki103`; `--arch <model>` itself is the
    config defaults, i.e. stock `--arch transformer_lm` dimensions (6 x 512, post-norm)."""
    register_model_architecture(model_name, f"{model_name}_small")(small_architecture)
    register_model_architecture(model_name, f"{model_name}_wiki103")(wiki103_architecture)


# Stock fairseq flags giving the small architecture's dimensions with sinusoidal positions.
SMALL_TWIN_FLAGS = (
    "--arch transformer_lm --decoder-layers 4 --decoder-embed-dim 128 --decoder-input-dim 128 "
    "--decoder-output-dim 128 --decoder-ffn-embed-dim 512 --decoder-attention-heads 8 "
    "--decoder-normalize-before --adaptive-input --adaptive-input-cutoff 2000,10000 "
    "--adaptive-softmax-cutoff 2000,10000 --tie-adaptive-weights --tie-adaptive-proj"
)
