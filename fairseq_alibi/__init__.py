"""fairseq_alibi: ALiBi (Press, Smith & Lewis, ICLR 2022) as a fairseq user dir, with the
paper's rotary and T5-bias baselines, the methods the field compares it with (NoPE, KERPLE,
Sandwich, FIRE; rotary's linear/NTK/YaRN scaling), bidirectional ALiBi for encoders and LittleBird.

Use with `fairseq-train --user-dir fairseq_alibi --arch alibi_transformer_lm_small ...`
(or <method>_transformer_lm_small for method rotary, t5_bias, nope, kerple, sandwich, fire;
alibi_roberta_small for a masked LM, littlebird_roberta_small for LittleBird's linear-memory one,
alibi_transformer_small for an encoder-decoder). Each position method is one module of
positions.py (the encoder's: bidirectional.py), built and checked by factory.py, and reaches
attention through attention.attention_bias; the math (alibi.py, rotary.py, t5_bias.py,
bidirectional.py, littlebird.py, kernels.py) needs only torch; decoder.py and encoder.py are the
models. The criterion `lm_distillation`
(distillation_criterion.py; its math in distillation.py) fine-tunes a model converted to ALiBi
(convert_checkpoint.py --replace-positions) against the original.
"""
import numpy as np

# fairseq 0.12 (TokenBlockDataset, used by the hub's sample/score) still calls np.compat.long,
# which NumPy 2 removed; give it back the type it named.
if not hasattr(np, "compat"):
    np.compat = type("compat", (), {"long": np.int64})

# torch >= 2.6 loads checkpoints weights-only, and fairseq 0.12 saves the configuration of models
# with argparse options (RoBERTa, the translation transformer) as an argparse.Namespace: a plain
# container of already allowed values, which fairseq's checkpoint loading needs allowed too.
import argparse  # noqa: E402

import torch  # noqa: E402

torch.serialization.add_safe_globals([argparse.Namespace])

# Registering the models, their architectures and the criterion.
from . import (alibi_lm, distillation_criterion, encoder, fire_lm, kerple_lm, littlebird_roberta, nope_lm,  # noqa: E402,F401
               rotary_lm, sandwich_lm, t5_bias_lm)
