"""fairseq_alibi: ALiBi (Press, Smith & Lewis, ICLR 2022) as a fairseq user dir.

Use with `fairseq-train --user-dir fairseq_alibi --arch alibi_transformer_lm_small ...`.
The math (slopes, bias) lives in `alibi.py` and needs only torch.
"""
import numpy as np

# fairseq 0.12 (TokenBlockDataset, used by the hub's sample/score) still calls np.compat.long,
# which NumPy 2 removed; give it back the type it named.
if not hasattr(np, "compat"):
    np.compat = type("compat", (), {"long": np.int64})

from . import alibi_lm  # noqa: E402,F401  (registers the model and its architectures)
