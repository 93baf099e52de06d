#!/usr/bin/env python3
"""Entry point of fairseq_alibi_lab/synthetic_table.py (its docstring is its --help; `python -m
fairseq_alibi_lab.synthetic_table` is the same)."""
from fairseq_alibi_lab.synthetic_table import main

if __name__ == "__main__":
    main()
