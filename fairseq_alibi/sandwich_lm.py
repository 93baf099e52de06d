"""Sandwich transformer LM (`--arch sandwich_transformer_lm[_small|_wiki103]`, positions.Sandwich;
Chi et al., ACL 2023): a parameter-free bias, the sum of the sinusoids' cosines of i - j, per head
scaled as ALiBi's slopes are spread."""
from dataclasses import dataclass

from fairseq.models.transformer_lm import TransformerLanguageModelConfig

from .decoder import register_position_lm


@dataclass
class SandwichTransformerLanguageModelConfig(TransformerLanguageModelConfig):
    """No options of its own."""


SandwichTransformerLanguageModel = register_position_lm("sandwich", "Sandwich", SandwichTransformerLanguageModelConfig)
