"""Bidirectional (encoder) ALiBi: five variants of the bias an encoder adds to q.k / sqrt(d_h), one
file each, every one registered by being here (encoder_alibi.py: the interface and the registry). Pure
torch, no fairseq import.

    from fairseq_alibi.bidirectional import build_variant
    bias = build_variant("ruoss", heads=8).square(16)   # (8, 16, 16)

i is the query's position, j the key's, m_h the paper's slopes (alibi.alibi_slopes). Keys with
j < i are "past" (left of the query), j > i "future" (right of it).

Each variant's file says its bias and where it comes from: symmetric.py, one_sided.py, learned.py,
ruoss.py, bialibi.py (the last two learned: encoder_alibi.LearnedSlopes).
"""
import importlib
import pkgutil

from fairseq_alibi.bidirectional.encoder_alibi import DEFAULT, VARIANTS, EncoderAlibi, build_variant, one_sided_bias, register, two_sided_bias  # noqa: F401  (the package's names)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "encoder_alibi":
        importlib.import_module(f"{__name__}.{_module.name}")
