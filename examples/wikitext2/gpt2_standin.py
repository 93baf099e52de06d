#!/usr/bin/env python3
"""Entry point of fairseq_alibi_lab/gpt2_standin.py (its docstring is its --help; `python -m
fairseq_alibi_lab.gpt2_standin` is the same)."""
from fairseq_alibi_lab.gpt2_standin import main

if __name__ == "__main__":
    main()
