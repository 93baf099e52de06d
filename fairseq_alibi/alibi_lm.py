"""ALiBi transformer LM: the causal bias -m_h (i - j) folded into the attention mask.

The mask is built before the layer loop (and reused while batches fit in it), or the bias is
computed inside FlashAttention-2 / FlexAttention (--alibi-attention). Slopes can be rescaled at
evaluation time without retraining (--alibi-scaling; see alibi.scale_slopes).
"""
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model
from fairseq.models.transformer_lm import TransformerLanguageModelConfig

from .alibi import SCALINGS, alibi_mask, alibi_slopes, check_scaling, dynamic_factors, scale_slopes
from .decoder import (
    BLOCK,
    ConfigError,
    RelativePositionDecoder,
    RelativePositionLanguageModel,
    blocked_fits,
    register_architectures,
)
from .attention import config_check, warn_once
from .kernels import BlockedBias, InKernelBias, flash_available, flash_installed

KERNELS = ("auto", "sdpa", "flash", "flex", "blocked")  # --alibi-attention


class AlibiTransformerDecoder(RelativePositionDecoder):
    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=True):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        # Older configs lack the options added later: their defaults.
        self.attention_kernel = getattr(args, "alibi_attention", "auto")
        self.scaling = getattr(args, "alibi_scaling", "none")
        self.scaling_factor = float(getattr(args, "alibi_scaling_factor", 1.0))
        self.train_length = getattr(args, "alibi_train_length", None)
        self.attention_dropout = getattr(args, "attention_dropout", 0.0)
        slopes = torch.tensor(alibi_slopes(args.decoder_attention_heads), dtype=torch.float32)
        if self.scaling in ("linear", "ntk"):  # static: the same slopes for every query
            slopes = scale_slopes(slopes, self.scaling, self.scaling_factor)
        # A buffer so that .to(device) moves it; not persistent, so checkpoints stay stock-shaped.
        self.register_buffer("alibi_slopes", slopes, persistent=False)
        self._square_mask = None  # (key, mask): reused while lengths fit, see square_mask

    def query_slopes(self, query_len: int, key_len: int) -> Tensor:
        """(heads,) slopes, or (heads, T) under dynamic scaling: a per query (alibi.dynamic_factors)."""
        if self.scaling != "dynamic_ntk":
            return self.alibi_slopes
        positions = torch.arange(key_len - query_len, key_len, device=self.alibi_slopes.device)
        factors = dynamic_factors(positions, self.train_length, self.scaling_factor)
        return scale_slopes(self.alibi_slopes, "ntk", factors)

    def position_mask(self, query_len: int, key_len: int, dtype, device) -> Tensor:
        """ALiBi + causal mask (1, heads, T, S), computed in fp32, added in the attention dtype.

        4-D because PyTorch's fused CPU kernel takes 2-D or 4-D masks only (a 3-D one falls back
        to the unfused path, 6x slower); the size-1 batch dimension broadcasts.
        """
        if query_len == key_len:
            return self.square_mask(key_len, dtype)
        # incremental decoding: a few rows over the cached keys
        return alibi_mask(self.query_slopes(query_len, key_len), query_len, key_len)[None].to(dtype)

    def square_mask(self, length: int, dtype) -> Tensor:
        """The (1, heads, T, T) mask of a full forward, cached: the T x T mask is the top-left
        block of any larger one (dynamic scaling too: a depends on the query's position only),
        so batches of the same or a shorter length (every training step, every evaluation
        batch) reuse it instead of rebuilding heads x T x T floats."""
        slopes = self.alibi_slopes
        key = (slopes.device, dtype, slopes.data_ptr(), slopes._version)
        if self._square_mask is None or self._square_mask[0] != key or self._square_mask[1].size(-1) < length:
            self._square_mask = None  # free the old one before building its successor
            mask = alibi_mask(self.query_slopes(length, length), length, length)[None].to(dtype)
            self._square_mask = (key, mask)
        return self._square_mask[1][..., :length, :length]

    def choose_kernel(self, x: Tensor, query_len: int, padding_mask: Optional[Tensor]) -> str:
        """--alibi-attention: sdpa (dense mask), flash or flex (bias in the kernel), blocked (CPU,
        query blocks, no T x S mask), or auto: flash where it can run, else blocked where it fits
        (decoder.blocked_fits), else sdpa. Padding to fold in, and dynamic scaling (a slope per
        query), need the dense mask; flex and blocked have no attention dropout. Where the kernel
        asked for cannot take this input, sdpa computes the same numbers (with a warning)."""
        choice = self.attention_kernel
        if choice == "sdpa" or padding_mask is not None or self.scaling == "dynamic_ntk":
            return "sdpa"
        dropout = self.training and self.attention_dropout > 0
        if choice == "auto":
            if not flash_available(x):
                return "flash"
            return "blocked" if blocked_fits(x, query_len, padding_mask) and not dropout else "sdpa"
        why_not = flash_available(x) if choice == "flash" else None
        if choice == "blocked" and x.device.type != "cpu":
            why_not = "it runs on CPU only"
        if choice in ("flex", "blocked") and dropout:
            why_not = "it has no attention dropout (training with --attention-dropout)"
        if why_not:
            warn_once(f"--alibi-attention {choice} cannot run here ({why_not}): using sdpa, which "
                      "computes the same; choose auto to let the model pick")
            return "sdpa"
        return choice

    def in_kernel_bias(self, x, query_len, padding_mask):
        kernel = self.choose_kernel(x, query_len, padding_mask)
        if kernel == "sdpa":
            return None
        if kernel == "blocked":  # the diagonal block's mask, the same for every block
            near_bias = alibi_mask(self.alibi_slopes, BLOCK, BLOCK).to(x.dtype)
            return BlockedBias(near_bias, 0, far_slopes=self.alibi_slopes)
        return InKernelBias(kernel, self.alibi_slopes)


def check_alibi_args(args):
    """Once, when the model is built: the options (also those set by --model-overrides, which
    argparse never sees) and their combinations."""
    scaling = getattr(args, "alibi_scaling", "none")
    factor = getattr(args, "alibi_scaling_factor", 1.0)
    kernel = getattr(args, "alibi_attention", "auto")
    if kernel not in KERNELS:
        raise ConfigError(f"unknown alibi_attention {kernel!r}: use one of {', '.join(KERNELS)}")
    if scaling == "dynamic_ntk" and kernel in ("flash", "flex"):
        raise ConfigError(f"--alibi-attention {kernel} takes one slope per head, not the per-query "
                          "slopes of dynamic_ntk scaling: use auto or sdpa")
    config_check(check_scaling, scaling, factor)
    if kernel == "flash" and flash_installed():
        raise ConfigError(f"--alibi-attention flash: {flash_installed()}; or use auto")
    if scaling == "dynamic_ntk" and not getattr(args, "alibi_train_length", None):
        raise ConfigError("alibi_scaling dynamic_ntk needs alibi_train_length, the training "
                          "--tokens-per-sample (scripts/eval.sh sets it from the checkpoint)")


@dataclass
class AlibiTransformerLanguageModelConfig(TransformerLanguageModelConfig):
    """fairseq's transformer LM options; position-embedding options are rejected (see
    decoder.check_args) because ALiBi replaces position embeddings."""

    alibi_attention: ChoiceEnum(KERNELS) = field(
        default="auto",
        metadata={"help": "attention kernel: sdpa (PyTorch, dense ALiBi mask), flash "
                  "(FlashAttention-2 >= 2.4, GPU, fp16/bf16), flex (FlexAttention), blocked (CPU, "
                  "no T x S mask), auto (flash where it can run, else blocked on CPU for inputs "
                  "longer than 512 tokens, else sdpa); at evaluation set it "
                  "with --model-overrides"},
    )
    alibi_scaling: ChoiceEnum(list(SCALINGS)) = field(
        default="none",
        metadata={"help": "slope scaling at inference, no retraining: linear (all slopes / a), ntk "
                  "(NTK-ALiBi: steepest head kept, flattest / a), dynamic_ntk (ntk with a = "
                  "max(1, factor * tokens so far / alibi_train_length) per query); at evaluation "
                  "set it with --model-overrides"},
    )
    alibi_scaling_factor: float = field(
        default=1.0,
        metadata={"help": "a for linear and ntk (L_valid / L_train extends the training length "
                  "to L_valid); for dynamic_ntk, a multiplier of its per-query a"},
    )
    alibi_train_length: Optional[int] = field(
        default=None,
        metadata={"help": "the training --tokens-per-sample, needed by dynamic_ntk"},
    )


@register_model("alibi_transformer_lm", dataclass=AlibiTransformerLanguageModelConfig)
class AlibiTransformerLanguageModel(RelativePositionLanguageModel):
    decoder_class = AlibiTransformerDecoder
    method = "ALiBi"

    @classmethod
    def build_model(cls, args, task):
        check_alibi_args(args)
        return super().build_model(args, task)


register_architectures("alibi_transformer_lm")
