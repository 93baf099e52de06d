"""Rotary transformer LM (`--arch rotary_transformer_lm[_small|_wiki103]`; RoFormer / GPT-J
style, positions.Rotary): queries and keys rotated in every layer, no position embeddings. One of
the paper's baselines (its Tables 1-6). At evaluation, --rotary-scaling linear|ntk|yarn extends it
past its training length without retraining (rotary.py), as ALiBi's slope scaling does."""
from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum
from fairseq.models.transformer_lm import TransformerLanguageModelConfig

from .decoder import register_position_lm
from .rotary import ROTARY_SCALINGS


@dataclass
class RotaryTransformerLanguageModelConfig(TransformerLanguageModelConfig):
    rotary_base: float = field(default=10000.0, metadata={"help": "theta_k = base^(-2k/head_dim)"})
    rotary_scaling: ChoiceEnum(list(ROTARY_SCALINGS)) = field(
        default="none",
        metadata={"help": "at inference, no retraining: linear (positions / s), ntk (base * "
                  "s^(d/(d-2))), yarn (per-frequency ramp and attention temperature 0.1 ln s + 1; "
                  "needs rotary_train_length); set it with --model-overrides"},
    )
    rotary_scaling_factor: float = field(
        default=1.0, metadata={"help": "s >= 1: L_valid / L_train extends the training length to L_valid"})
    rotary_train_length: Optional[int] = field(
        default=None, metadata={"help": "the training --tokens-per-sample, needed by yarn"})


RotaryTransformerLanguageModel = register_position_lm("rotary", "rotary", RotaryTransformerLanguageModelConfig)
