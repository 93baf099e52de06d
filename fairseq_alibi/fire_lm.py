"""FIRE transformer LM (`--arch fire_transformer_lm[_small|_wiki103]`, positions.Fire; Li et al.,
ICLR 2024): a learned MLP of the log distance normalised by the query's own position."""
from dataclasses import dataclass, field

from fairseq.models.transformer_lm import TransformerLanguageModelConfig

from .decoder import register_position_lm


@dataclass
class FireTransformerLanguageModelConfig(TransformerLanguageModelConfig):
    fire_mlp_width: int = field(default=32, metadata={"help": "hidden width of FIRE's MLP (1 -> width -> heads)"})
    fire_init_c: float = field(default=0.1, metadata={"help": "initial c of psi(x) = log(c x + 1), learned"})
    fire_init_threshold: float = field(
        default=512.0, metadata={"help": "initial threshold L of the normaliser psi(max(L, i)), learned "
                                 "(as a multiplier of this value)"})


FireTransformerLanguageModel = register_position_lm("fire", "FIRE", FireTransformerLanguageModelConfig)
