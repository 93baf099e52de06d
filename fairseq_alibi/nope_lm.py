"""NoPE transformer LM (`--arch nope_transformer_lm[_small|_wiki103]`, positions.NoPositions;
Kazemnejad et al., NeurIPS 2023): no position information at all, the causal mask only; any length."""
from dataclasses import dataclass

from fairseq.models.transformer_lm import TransformerLanguageModelConfig

from .decoder import register_position_lm


@dataclass
class NopeTransformerLanguageModelConfig(TransformerLanguageModelConfig):
    """No options of its own."""


NopeTransformerLanguageModel = register_position_lm("nope", "NoPE", NopeTransformerLanguageModelConfig)
