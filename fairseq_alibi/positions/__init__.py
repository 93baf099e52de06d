"""Position methods, one file each, every one registered by being here (position_method.py: the interface,
the options' config, the registry). Pure torch, no fairseq import.

    from fairseq_alibi.positions import METHODS, build_method
    config = METHODS["fire"].Config(fire_init_threshold=64.0)
    fire = build_method("fire", config, heads=8, head_dim=16, embed_dim=128)

Adding a method is adding a file here (CONTRIBUTING.md): the fairseq architectures
(`<method>_transformer_lm[_small|_wiki103]`), their options, scripts/train.sh and the tests that
list methods read this registry.
"""
import importlib
import pkgutil

from fairseq_alibi.positions.position_method import (METHODS, LayerBias, MethodConfig, PositionMethod, build_method, heads_first, option, per_head,  # noqa: F401
                   register, signed_distance)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "position_method":
        importlib.import_module(f"{__name__}.{_module.name}")

# Each method's class by its own name (from fairseq_alibi.positions import Alibi, Fire, ...).
globals().update({cls.__name__: cls for cls in METHODS.values()})
from fairseq_alibi.positions.kerple import KERPLE_VARIANTS  # noqa: E402,F401
