#!/usr/bin/env python3
"""Entry point of fairseq_alibi_lab/generate.py (its docstring is its --help; `python -m
fairseq_alibi_lab.generate` is the same)."""
from fairseq_alibi_lab.generate import main

if __name__ == "__main__":
    main()
