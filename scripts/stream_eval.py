#!/usr/bin/env python3
"""Entry point of fairseq_alibi_lab/stream_eval.py (its docstring is its --help; `python -m
fairseq_alibi_lab.stream_eval` is the same)."""
from fairseq_alibi_lab.stream_eval import main

if __name__ == "__main__":
    main()
