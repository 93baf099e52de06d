"""The causal position methods by name and their inference-only flags, read from the registry
(positions/, no fairseq import): for scripts/train.sh and the experiment runner."""
import dataclasses

from fairseq_alibi.positions import METHODS
from fairseq_alibi.positions.position_method import flag

# --arch <method>_transformer_lm[_small|_wiki103]; scripts/train.sh METHOD.
CAUSAL_METHODS = tuple(METHODS)
# Options that change a trained model's scoring (scripts/eval.sh's SCALING): refused at training.
INFERENCE_ONLY = {method: tuple(flag(f.name) for f in dataclasses.fields(cls.Config) if f.metadata["inference_only"])
                  for method, cls in METHODS.items()}
INFERENCE_ONLY = {method: flags for method, flags in INFERENCE_ONLY.items() if flags}
# The inference-time scalings (scripts/eval.sh SCALING) of each method that has them: METHOD_scaling's choices.
SCALINGS = {method: f.metadata["choices"] for method, cls in METHODS.items() for f in dataclasses.fields(cls.Config)
            if f.name == f"{method}_scaling"}
