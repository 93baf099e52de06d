#!/usr/bin/env python3
"""Entry point of fairseq_alibi_lab/exact_match.py (its docstring is its --help; `python -m
fairseq_alibi_lab.exact_match` is the same)."""
from fairseq_alibi_lab.exact_match import main

if __name__ == "__main__":
    main()
