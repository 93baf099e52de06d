#!/usr/bin/env python3
"""Entry point of fairseq_alibi_lab/unigram.py (its docstring is its --help; `python -m
fairseq_alibi_lab.unigram` is the same)."""
from fairseq_alibi_lab.unigram import main

if __name__ == "__main__":
    main()
