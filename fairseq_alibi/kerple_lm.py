"""KERPLE transformer LM (`--arch kerple_transformer_lm[_small|_wiki103]`, positions.Kerple; Chi
et al., NeurIPS 2022): a learned kernel of |i - j| per head, log or power (--kerple-variant)."""
from dataclasses import dataclass, field

from fairseq.dataclass import ChoiceEnum
from fairseq.models.transformer_lm import TransformerLanguageModelConfig

from .decoder import register_position_lm
from .positions import KERPLE_VARIANTS


@dataclass
class KerpleTransformerLanguageModelConfig(TransformerLanguageModelConfig):
    kerple_variant: ChoiceEnum(list(KERPLE_VARIANTS)) = field(
        default="log", metadata={"help": "log: -r1 log(1 + r2 |i-j|); power: -r1 |i-j|^r2 (0 < r2 <= 2)"})


KerpleTransformerLanguageModel = register_position_lm("kerple", "KERPLE", KerpleTransformerLanguageModelConfig)
