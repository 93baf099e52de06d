"""The decoder and LM glue shared by the plugin's position methods (ALiBi, rotary, T5 bias).

A transformer decoder without position embeddings. Before the layer loop it builds, from the
current query and key lengths only, one AttentionBias that every layer's self-attention uses
(attention.PositionBiasFlow, whose hooks each method fills): an additive mask (ALiBi, T5 bias;
causal -inf folded in), the rotation of queries and keys (rotary), or a kernel that adds the
bias itself (ALiBi in FlashAttention/FlexAttention, the blocked CPU kernel). So any batch size
and evaluation length work, and incremental decoding gets each new query's row.
"""
from typing import Dict, List, Optional

from torch import Tensor

from fairseq import options
from fairseq.models.transformer import TransformerConfig, TransformerDecoder
from fairseq.models import register_model_architecture
from fairseq.models.transformer_lm import (
    TransformerLanguageModel,
    base_lm_architecture,
    transformer_lm_baevski_wiki103,
)
from fairseq.modules import AdaptiveInput

from .attention import (  # noqa: F401  (ConfigError, AttentionBias: imported from here too)
    AttentionBias,
    ConfigError,
    PositionBiasFlow,
    RelativeDecoderLayer,
    RelativeSelfAttention,
    is_right_padding,
    wrap_layer,
)

# No position table, so nothing limits the length; fairseq takes the min over limits.
UNBOUNDED_POSITIONS = 2**31 - 1
# Queries per block of the blocked kernel (kernels.blocked_attention), and the longest forward
# that `auto` leaves to the dense mask: up to 512 tokens the dense mask is faster on CPU
# (benchmarks/attention-cpu.md: evaluation 1.6 against 2.4 ms at 512, 6.6 against 5.3 ms at
# 1024; training 50 against 54 ms at 512, 96 against 76 ms at 1024).
BLOCK = 256
BLOCKED_ABOVE = 512


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


def blocked_fits(x: Tensor, query_len: int, padding_mask: Optional[Tensor]) -> bool:
    """Whether the blocked CPU kernel can take this forward: on CPU, without padding to mask
    (fairseq's LM batches have none), longer than BLOCKED_ABOVE (the methods add their own
    conditions: gradients, attention dropout)."""
    return x.device.type == "cpu" and padding_mask is None and query_len > BLOCKED_ABOVE


class RelativePositionDecoder(PositionBiasFlow, TransformerDecoder):
    """Transformer decoder without position embeddings; a subclass fills PositionBiasFlow's
    hooks to say what self-attention adds. Cross-attention (encoder-decoder models) is fairseq's
    own, without positions."""

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(cfg)
        return wrap_layer(RelativeDecoderLayer(cfg, no_encoder_attn), cfg)

    def max_positions(self):
        return UNBOUNDED_POSITIONS

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

        # Encoder-decoder models: cross-attention is fairseq's own, over the encoder's padding.
        encoder_states = encoder_out["encoder_out"][0] if encoder_out and encoder_out["encoder_out"] else None
        encoder_padding = (encoder_out["encoder_padding_mask"][0]
                           if encoder_out and encoder_out["encoder_padding_mask"] else None)
        inner_states: List[Optional[Tensor]] = [x]
        for layer in self.layers:
            # self_attn_mask: fairseq's layer hands it to self-attention untouched (attention.py)
            x, _, _ = layer(
                x, encoder_states, encoder_padding, incremental_state,
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
