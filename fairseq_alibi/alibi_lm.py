"""ALiBi transformer LM (`--arch alibi_transformer_lm[_small|_wiki103]`): the causal bias
-m_h (i - j) (positions.Alibi), folded into the attention mask, or computed inside
FlashAttention-2 / FlexAttention / the blocked CPU kernel (--alibi-attention). Slopes can be
rescaled at evaluation time without retraining (--alibi-scaling; see alibi.scale_slopes).
"""
from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum
from fairseq.models.transformer_lm import TransformerLanguageModelConfig

from .alibi import SCALINGS
from .decoder import register_position_lm
from .kernels import KERNEL_NAMES

KERNELS = KERNEL_NAMES  # --alibi-attention


@dataclass
class AlibiTransformerLanguageModelConfig(TransformerLanguageModelConfig):
    """fairseq's transformer LM options; position-embedding options are rejected (see
    decoder.check_decoder_args) because ALiBi replaces position embeddings."""

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


AlibiTransformerLanguageModel = register_position_lm("alibi", "ALiBi", AlibiTransformerLanguageModelConfig)
