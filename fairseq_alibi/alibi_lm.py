"""fairseq glue: an ALiBi transformer language model (no position embeddings).

The decoder builds the causal ALiBi mask before the layer loop (reusing it while batches fit
in it), from the current query and key lengths only, so any batch size and evaluation length work, and
incremental decoding gets the bias row of each new query over all cached keys.
"""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq.dataclass import ChoiceEnum
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoder
from fairseq.models.transformer_lm import (
    TransformerLanguageModel,
    TransformerLanguageModelConfig,
    base_lm_architecture,
    transformer_lm_baevski_wiki103,
)
from fairseq.modules import AdaptiveInput, MultiheadAttention
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from fairseq import options

from .alibi import alibi_mask, alibi_slopes
from .kernels import InKernelBias, flash_available

# ALiBi has no position table, so nothing limits the length; fairseq takes the min over limits.
UNBOUNDED_POSITIONS = 2**31 - 1


class AlibiConfigError(SystemExit):
    """A bad configuration: printed as one line by the fairseq command-line tools, no traceback."""

    def __init__(self, message):
        super().__init__(f"fairseq_alibi: {message}")


def check_alibi_args(args):
    """Reject configurations that would silently mix ALiBi with something else."""
    if getattr(args, "decoder_learned_pos", False):
        raise AlibiConfigError(
            "--decoder-learned-pos adds position embeddings, which ALiBi replaces: drop the flag "
            "(for a learned-position baseline use stock --arch transformer_lm)"
        )
    heads = getattr(args, "decoder_attention_heads", None)
    if heads is None or heads < 1:
        raise AlibiConfigError(f"--decoder-attention-heads must be at least 1, got {heads}")
    if args.decoder_embed_dim % heads != 0:
        raise AlibiConfigError(
            f"--decoder-embed-dim ({args.decoder_embed_dim}) must be divisible by "
            f"--decoder-attention-heads ({heads})"
        )
    if getattr(args, "character_embeddings", False):
        raise AlibiConfigError("--character-embeddings is not supported: drop the flag")
    if getattr(args, "cross_self_attention", False):
        raise AlibiConfigError("--cross-self-attention is not supported by the ALiBi decoder: drop it")


class AlibiSelfAttention(MultiheadAttention):
    """Causal self-attention that takes an additive float mask broadcast over the batch.

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
        attn_mask: Optional[Union[Tensor, InKernelBias]] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ):
        # attn_mask: the (1 or batch, heads, T, S) ALiBi + causal mask built by the decoder, with
        # any key padding folded in (so key_padding_mask is unused), or an InKernelBias naming a
        # kernel that adds the bias itself.
        tgt_len, bsz, embed_dim = query.size()
        # T x B x C -> B x heads x T x head_dim, for each projection
        q, k, v = (proj(query).view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
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
        if isinstance(attn_mask, InKernelBias):
            out = attn_mask.attend(q, k, v, dropout)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout)
        out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
        return self.out_proj(out), None


class AlibiDecoderLayer(TransformerDecoderLayerBase):
    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return AlibiSelfAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            dropout=cfg.attention_dropout,
            self_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )


class AlibiTransformerDecoder(TransformerDecoder):
    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=True):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        # A buffer so that .to(device) moves it; not persistent, so checkpoints stay stock-shaped.
        slopes = torch.tensor(alibi_slopes(args.decoder_attention_heads), dtype=torch.float32)
        self.register_buffer("alibi_slopes", slopes, persistent=False)
        self._square_mask = None  # (key, mask): reused while lengths fit, see attention_mask
        self.attention_kernel = getattr(args, "alibi_attention", "auto")  # older configs lack it

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(cfg)
        layer = AlibiDecoderLayer(cfg, no_encoder_attn)
        # Same activation checkpointing / FSDP wrapping as fairseq's own decoder layers.
        if cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        min_params_to_wrap = cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0
        return fsdp_wrap(layer, min_num_params=min_params_to_wrap)

    def max_positions(self):
        return UNBOUNDED_POSITIONS

    def attention_mask(self, query_len: int, key_len: int, dtype, padding_mask: Optional[Tensor]):
        """ALiBi + causal mask (1, heads, T, S), computed in fp32, added in the attention dtype.

        4-D because PyTorch's fused CPU kernel takes 2-D or 4-D masks only (a 3-D one falls back
        to the unfused path, 6x slower); the size-1 batch dimension broadcasts. A padding_mask
        (padding that is not only on the right) is folded in, giving (batch, heads, T, S).
        """
        mask = self.square_mask(key_len, dtype) if query_len == key_len else None
        if mask is None:  # incremental decoding: a few rows over the cached keys
            mask = alibi_mask(self.alibi_slopes, query_len, key_len)[None].to(dtype)
        if padding_mask is not None:
            pad = padding_mask[:, None, None, :]
            diagonal = torch.eye(key_len, dtype=torch.bool, device=mask.device)[-query_len:]
            # A padded query still attends to itself, so that no row is all -inf (NaN).
            mask = mask.masked_fill(pad & ~diagonal, float("-inf"))
        return mask

    def choose_kernel(self, x: Tensor, padding_mask: Optional[Tensor]) -> str:
        """--alibi-attention: sdpa (dense mask), flash or flex (bias in the kernel), or auto
        (flash where it can run, else sdpa). A padding_mask to fold in needs the dense mask."""
        choice = self.attention_kernel
        if choice == "sdpa" or padding_mask is not None:
            return "sdpa"
        why_not = flash_available(x) if choice in ("flash", "auto") else None
        if choice == "flash" and why_not:
            raise AlibiConfigError(f"--alibi-attention flash cannot run: {why_not}; use auto or sdpa")
        if choice == "auto":
            return "sdpa" if why_not else "flash"
        return choice

    def square_mask(self, length: int, dtype) -> Tensor:
        """The (1, heads, T, T) mask of a full forward, cached: the T x T mask is the top-left
        block of any larger one, so batches of the same or a shorter length (every training
        step, every evaluation batch) reuse it instead of rebuilding heads x T x T floats."""
        slopes = self.alibi_slopes
        key = (slopes.device, dtype, slopes.data_ptr(), slopes._version)
        if self._square_mask is None or self._square_mask[0] != key or self._square_mask[1].size(-1) < length:
            self._square_mask = None  # free the old one before building its successor
            self._square_mask = (key, alibi_mask(slopes, length, length)[None].to(dtype))
        return self._square_mask[1][..., :length, :length]

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
            raise ValueError("full_context_alignment is not supported by the ALiBi decoder")
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
        kernel = self.choose_kernel(x, padding_mask)
        if kernel == "sdpa":
            self_attn_mask = self.attention_mask(tokens.size(1), key_len, x.dtype, padding_mask)
        else:
            self_attn_mask = InKernelBias(kernel, self.alibi_slopes)

        inner_states: List[Optional[Tensor]] = [x]
        for layer in self.layers:
            x, _, _ = layer(
                x, None, None, incremental_state,
                self_attn_mask=self_attn_mask, self_attn_padding_mask=padding_mask,
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


def is_right_padding(padding_mask: Tensor) -> bool:
    """True if, in every row, padding only appears after the last real token (or nowhere)."""
    return bool((padding_mask.long().cummax(dim=1).values == padding_mask.long()).all())


@dataclass
class AlibiTransformerLanguageModelConfig(TransformerLanguageModelConfig):
    """fairseq's transformer LM options; position-embedding options are rejected (see
    check_alibi_args) because ALiBi replaces position embeddings."""

    alibi_attention: ChoiceEnum(["auto", "sdpa", "flash", "flex"]) = field(
        default="auto",
        metadata={"help": "attention kernel: sdpa (PyTorch, dense ALiBi mask), flash "
                  "(FlashAttention-2 >= 2.4, GPU, fp16/bf16), flex (FlexAttention), auto (flash "
                  "where it can run, else sdpa); at evaluation set it with --model-overrides"},
    )


@register_model("alibi_transformer_lm", dataclass=AlibiTransformerLanguageModelConfig)
class AlibiTransformerLanguageModel(TransformerLanguageModel):
    @classmethod
    def build_model(cls, args, task):
        check_alibi_args(args)
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
            raise AlibiConfigError(
                "--tie-adaptive-weights needs --adaptive-input with the same cutoff, factor and "
                "dimension as the adaptive softmax"
            )
        return cls(AlibiTransformerDecoder(args, task.target_dictionary, embed_tokens))


# `--arch alibi_transformer_lm` is the model's own name: the config defaults, i.e. exactly stock
# `--arch transformer_lm` (6 layers, d 512, FFN 2048, 8 heads, post-norm) without positions.


@register_model_architecture("alibi_transformer_lm", "alibi_transformer_lm_small")
def alibi_transformer_lm_small(args):
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


# Stock fairseq flags giving alibi_transformer_lm_small's dimensions with sinusoidal positions.
SMALL_TWIN_FLAGS = (
    "--arch transformer_lm --decoder-layers 4 --decoder-embed-dim 128 --decoder-input-dim 128 "
    "--decoder-output-dim 128 --decoder-ffn-embed-dim 512 --decoder-attention-heads 8 "
    "--decoder-normalize-before --adaptive-input --adaptive-input-cutoff 2000,10000 "
    "--adaptive-softmax-cutoff 2000,10000 --tie-adaptive-weights --tie-adaptive-proj"
)


@register_model_architecture("alibi_transformer_lm", "alibi_transformer_lm_wiki103")
def alibi_transformer_lm_wiki103(args):
    """The paper's 247M model: Baevski & Auli's transformer_lm_wiki103 without positions."""
    transformer_lm_baevski_wiki103(args)
