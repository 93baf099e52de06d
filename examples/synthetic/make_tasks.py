#!/usr/bin/env python3
"""Entry point of fairseq_alibi_lab/synthetic_tasks.py (its docstring is its --help; `python -m
fairseq_alibi_lab.synthetic_tasks` is the same)."""
from fairseq_alibi_lab.synthetic_tasks import main

if __name__ == "__main__":
    main()
