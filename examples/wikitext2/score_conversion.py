#!/usr/bin/env python3
"""Entry point of fairseq_alibi_lab/score_conversion.py (its docstring is its --help; `python -m
fairseq_alibi_lab.score_conversion` is the same)."""
from fairseq_alibi_lab.score_conversion import main

if __name__ == "__main__":
    main()
