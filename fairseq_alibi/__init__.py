"""fairseq_alibi: ALiBi (Press, Smith & Lewis, ICLR 2022) as a fairseq user dir, with the
paper's rotary and T5-bias baselines.

Use with `fairseq-train --user-dir fairseq_alibi --arch alibi_transformer_lm_small ...`
(or rotary_transformer_lm_small, t5_bias_transformer_lm_small). The math (ALiBi slopes, bias and
slope scaling; rotary angles; T5 buckets) lives in alibi.py, rotary.py and t5_bias.py and needs
only torch; decoder.py is the fairseq glue they share. The criterion `lm_distillation`
(distillation_criterion.py; its math in distillation.py) fine-tunes a model converted to ALiBi
(convert_checkpoint.py --replace-positions) against the original.
"""
import numpy as np

# fairseq 0.12 (TokenBlockDataset, used by the hub's sample/score) still calls np.compat.long,
# which NumPy 2 removed; give it back the type it named.
if not hasattr(np, "compat"):
    np.compat = type("compat", (), {"long": np.int64})

# Registering the models, their architectures and the criterion.
from . import alibi_lm, distillation_criterion, rotary_lm, t5_bias_lm  # noqa: E402,F401
