"""Rotary transformer LM (RoFormer / GPT-J style): queries and keys rotated in every layer,
no position embeddings. One of the paper's baselines (its Tables 1-6)."""
from dataclasses import dataclass, field

import torch

from fairseq.models import register_model
from fairseq.models.transformer_lm import TransformerLanguageModelConfig

from .decoder import (
    ConfigError,
    RelativePositionDecoder,
    RelativePositionLanguageModel,
    register_architectures,
)
from .rotary import rotary_angles


class RotaryTransformerDecoder(RelativePositionDecoder):
    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=True):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.head_dim = args.decoder_embed_dim // args.decoder_attention_heads
        self.rotary_base = args.rotary_base

    def rotary_angles(self, query_len, key_len, device):
        # The T new tokens sit at positions S-T .. S-1 (all cached keys came before them).
        positions = torch.arange(key_len - query_len, key_len, device=device)
        return rotary_angles(positions, self.head_dim, self.rotary_base)


@dataclass
class RotaryTransformerLanguageModelConfig(TransformerLanguageModelConfig):
    rotary_base: float = field(default=10000.0, metadata={"help": "theta_k = base^(-2k/head_dim)"})


@register_model("rotary_transformer_lm", dataclass=RotaryTransformerLanguageModelConfig)
class RotaryTransformerLanguageModel(RelativePositionLanguageModel):
    decoder_class = RotaryTransformerDecoder
    method = "rotary"

    @classmethod
    def build_model(cls, args, task):
        head_dim = args.decoder_embed_dim // max(args.decoder_attention_heads, 1)
        if head_dim % 2:
            raise ConfigError(f"rotary rotates pairs of dimensions: the head dimension "
                              f"({args.decoder_embed_dim} / {args.decoder_attention_heads} heads) must be even")
        return super().build_model(args, task)


register_architectures("rotary_transformer_lm")
