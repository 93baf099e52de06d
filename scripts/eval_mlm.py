#!/usr/bin/env python3
"""Entry point of fairseq_alibi_lab/eval_mlm.py (its docstring is its --help; `python -m
fairseq_alibi_lab.eval_mlm` is the same)."""
from fairseq_alibi_lab.eval_mlm import main

if __name__ == "__main__":
    main()
