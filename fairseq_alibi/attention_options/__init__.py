"""Attention options: changes to a layer's attention that compose with any causal position method,
one file each, every one registered by being here (option.py: what an option declares, the registry,
the dense attention that the logit-reading options need). Pure torch, no fairseq.

- output_gate: a head-specific sigmoid gate on the attention output (Qiu et al., NeurIPS 2025).
- sink_logit: one learned logit per head that takes softmax mass and carries no value (Gu et al., ICLR
  2025; gpt-oss).
- selective: a head's positive logits, accumulated over later queries, subtracted from every head's
  logits (Leviathan et al., ICLR 2025).
- stick_breaking: softmax replaced by a stick-breaking process over the keys (Tan et al., ICLR 2025).
Adding an option is adding a file here (its Config and its layer module) and its test.
"""
import importlib
import pkgutil

from fairseq_alibi.attention_options.option import (OPTIONS, AttentionOption, OptionConfig, apply_outputs,  # noqa: F401
                                                    build_options, configs_from_args, dense_attention, logit_readers,
                                                    register_option)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "option":
        importlib.import_module(f"{__name__}.{_module.name}")
