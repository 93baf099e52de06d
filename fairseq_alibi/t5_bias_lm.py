"""T5-bias transformer LM (`--arch t5_bias_transformer_lm[_small|_wiki103]`, positions.T5Bias): a
learned bias per head and bucket of the distance i - j, computed once per forward and added in
every layer, no position embeddings. One of the paper's baselines."""
from dataclasses import dataclass, field

from fairseq.models.transformer_lm import TransformerLanguageModelConfig

from .decoder import register_position_lm


@dataclass
class T5BiasTransformerLanguageModelConfig(TransformerLanguageModelConfig):
    t5_num_buckets: int = field(default=32, metadata={"help": "learned biases per head (T5: 32)"})
    t5_max_distance: int = field(default=128, metadata={"help": "distances beyond share the last bucket (T5: 128)"})


T5BiasTransformerLanguageModel = register_position_lm("t5_bias", "T5 bias", T5BiasTransformerLanguageModelConfig)
