#!/usr/bin/env python3
"""Entry point of fairseq_alibi_lab/runner.py (its docstring is its --help; `python -m
fairseq_alibi_lab.runner` is the same)."""
from fairseq_alibi_lab.runner import cli

if __name__ == "__main__":
    cli()
