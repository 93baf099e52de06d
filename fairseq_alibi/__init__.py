"""fairseq_alibi: ALiBi (Press, Smith & Lewis, ICLR 2022) as a fairseq user dir, with the
paper's rotary and T5-bias baselines, the methods the field compares it with (NoPE, KERPLE,
Sandwich, FIRE, learned-slope ALiBi, FoX's data-dependent ALiBi; rotary's linear/NTK/YaRN
scaling), bidirectional ALiBi for encoders and LittleBird.

Use with `fairseq-train --user-dir fairseq_alibi --arch alibi_transformer_lm_small ...`
(or <method>_transformer_lm_small for every method of positions/; alibi_roberta_small for a
masked LM, littlebird_roberta_small for LittleBird's linear-memory one, alibi_transformer_small
for an encoder-decoder). The layers: the math, pure torch (alibi_bias.py, rotary_angles.py,
t5_buckets.py, documents.py, littlebird.py, distillation.py; one file per method in positions/, per
encoder variant in bidirectional/, per kernel in kernels/); fairseq's side in models/ (factory.py
builds and checks a model's position method and kernel once; attention.py, decoder.py, encoder.py,
littlebird_roberta.py and the criterion `lm_distillation`, distillation_criterion.py), registered by
plugin.py; the command-line tools and what they share with the lab in tools/ (cli.py,
convert_checkpoint.py: --replace-positions gives a model ALiBi; the one checkpoint and flag readers,
whole-file writes, provenance).

Importing the package imports no fairseq; fairseq's --user-dir imports it after fairseq, and then
it registers the models (elsewhere: `import fairseq_alibi.plugin`).
"""
import sys

if "fairseq" in sys.modules:  # fairseq-train --user-dir fairseq_alibi, and any code that imported fairseq first
    from fairseq_alibi import plugin  # noqa: F401
