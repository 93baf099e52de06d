"""Registers the plugin's fairseq models, architectures and criterion (`import fairseq_alibi.plugin`;
`--user-dir fairseq_alibi` does it through the package's __init__). Only this, and the modules it
imports, import fairseq: the math (alibi, rotary, t5_bias, bidirectional, littlebird), the position
methods (positions/) and the kernels (kernels/) need torch alone."""
import argparse

import numpy as np
import torch

# fairseq 0.12 (TokenBlockDataset, used by the hub's sample/score) still calls np.compat.long,
# which NumPy 2 removed; give it back the type it named.
if not hasattr(np, "compat"):
    np.compat = type("compat", (), {"long": np.int64})

# torch >= 2.6 loads checkpoints weights-only, and fairseq 0.12 saves the configuration of models
# with argparse options (RoBERTa, the translation transformer) as an argparse.Namespace: a plain
# container of already allowed values, which fairseq's checkpoint loading needs allowed too.
torch.serialization.add_safe_globals([argparse.Namespace])

from fairseq_alibi.models import decoder, distillation_criterion, encoder, imported_gpt2, littlebird_roberta  # noqa: E402,F401
