#!/usr/bin/env python3
"""Entry point of fairseq_alibi_lab/evaluate.py (its docstring is its --help; `python -m
fairseq_alibi_lab.evaluate` is the same)."""
from fairseq_alibi_lab.evaluate import main

if __name__ == "__main__":
    main()
