#!/usr/bin/env python3
"""Entry point of fairseq_alibi_lab/by_position.py (its docstring is its --help; `python -m
fairseq_alibi_lab.by_position` is the same)."""
from fairseq_alibi_lab.by_position import main

if __name__ == "__main__":
    main()
