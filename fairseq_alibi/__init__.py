"""fairseq_alibi: ALiBi (Press, Smith & Lewis, ICLR 2022) as a fairseq user dir.

Use with `fairseq-train --user-dir fairseq_alibi --arch alibi_transformer_lm_small ...`.
The math (slopes, bias) lives in `alibi.py` and needs only torch.
"""
from . import alibi_lm  # noqa: F401  (registers the model and its architectures)
