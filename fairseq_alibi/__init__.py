"""fairseq_alibi: ALiBi (Press, Smith & Lewis, ICLR 2022) as a fairseq user dir, with the
paper's rotary and T5-bias baselines, the methods the field compares it with (NoPE, KERPLE,
Sandwich, FIRE, learned-slope ALiBi, FoX's data-dependent ALiBi; rotary's linear/NTK/YaRN
scaling), bidirectional ALiBi for encoders and LittleBird.

Use with `fairseq-train --user-dir fairseq_alibi --arch alibi_transformer_lm_small ...`
(or <method>_transformer_lm_small for every method of positions/; alibi_roberta_small for a
masked LM, littlebird_roberta_small for LittleBird's linear-memory one, alibi_transformer_small
for an encoder-decoder). Each position method is one file of positions/ (the encoder's:
bidirectional/), built and checked by factory.py, and reaches attention through
attention.attention_bias; the math (alibi.py, rotary.py, t5_bias.py, bidirectional/,
littlebird.py, kernels/, positions/) needs only torch; decoder.py and encoder.py are the fairseq
models, registered by plugin.py. The criterion `lm_distillation` (distillation_criterion.py; its
math in distillation.py) fine-tunes a model converted to ALiBi (convert_checkpoint.py
--replace-positions) against the original.

Importing the package imports no fairseq; fairseq's --user-dir imports it after fairseq, and then
it registers the models (elsewhere: `import fairseq_alibi.plugin`).
"""
import sys

if "fairseq" in sys.modules:  # fairseq-train --user-dir fairseq_alibi, and any code that imported fairseq first
    from . import plugin  # noqa: F401
