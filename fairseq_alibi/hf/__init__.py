"""Hugging Face, both ways (docs/hugging-face.md): export.py writes any causal LM of the plugin (and
fairseq's own sinusoidal or learned-position transformer_lm) as a transformers folder whose one
modeling file (modeling_fairseq_alibi.py with the position math bundled by bundle.py) needs torch
and transformers only; tokenizer.py gives it fairseq's word-level ids; import_gpt2.py brings a
GPT2LMHeadModel into fairseq. Importing this package imports no fairseq."""
