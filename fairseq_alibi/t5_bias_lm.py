"""T5-bias transformer LM: a learned bias per head and bucket of the distance i - j, computed
once per forward and added in every layer, no position embeddings. One of the paper's baselines."""
from dataclasses import dataclass, field

import torch
from torch import nn

from fairseq.models import register_model
from fairseq.models.transformer_lm import TransformerLanguageModelConfig

from .decoder import (
    BLOCK,
    RelativePositionDecoder,
    RelativePositionLanguageModel,
    blocked_fits,
    register_architectures,
)
from .attention import config_check
from .kernels import BlockedBias
from .t5_bias import check_buckets, t5_buckets


class T5BiasTransformerDecoder(RelativePositionDecoder):
    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=True):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.num_buckets, self.max_distance = args.t5_num_buckets, args.t5_max_distance
        # Shared by all layers; T5's initialization (std d^-0.5).
        self.relative_attention_bias = nn.Embedding(self.num_buckets, args.decoder_attention_heads)
        nn.init.normal_(self.relative_attention_bias.weight, std=args.decoder_embed_dim**-0.5)

    def distance_bias(self, distance, dtype):
        """(heads, ...): the learned bias of each distance's bucket, -inf where negative (the future)."""
        bias = self.relative_attention_bias(t5_buckets(distance, self.num_buckets, self.max_distance))
        bias = bias.permute(-1, *range(distance.dim())).to(dtype)  # (..., heads) -> (heads, ...)
        return bias.masked_fill(distance < 0, float("-inf"))

    def position_mask(self, query_len, key_len, dtype, device):
        """(1, heads, T, S)."""
        positions = torch.arange(key_len, device=device)
        return self.distance_bias(positions[key_len - query_len:, None] - positions[None, :], dtype)[None]

    def in_kernel_bias(self, x, query_len, padding_mask):
        """The blocked CPU kernel for long evaluation (not training): distances from max_distance on share the
        last bucket, so beyond that window the bias is one constant per head."""
        if torch.is_grad_enabled() or not blocked_fits(x, query_len, padding_mask):
            return None  # the learned bias needs the mask's gradient
        window = self.max_distance
        rows, cols = torch.arange(BLOCK, device=x.device), torch.arange(window + BLOCK, device=x.device)
        near_bias = self.distance_bias(rows[:, None] + window - cols[None, :], x.dtype)
        return BlockedBias(near_bias, window, far_bias=self.relative_attention_bias.weight[self.num_buckets - 1])


@dataclass
class T5BiasTransformerLanguageModelConfig(TransformerLanguageModelConfig):
    t5_num_buckets: int = field(default=32, metadata={"help": "learned biases per head (T5: 32)"})
    t5_max_distance: int = field(default=128, metadata={"help": "distances beyond share the last bucket (T5: 128)"})


@register_model("t5_bias_transformer_lm", dataclass=T5BiasTransformerLanguageModelConfig)
class T5BiasTransformerLanguageModel(RelativePositionLanguageModel):
    decoder_class = T5BiasTransformerDecoder
    method = "T5 bias"

    @classmethod
    def build_model(cls, args, task):
        config_check(check_buckets, args.t5_num_buckets, args.t5_max_distance)
        return super().build_model(args, task)


register_architectures("t5_bias_transformer_lm")
