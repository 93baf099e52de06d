#!/usr/bin/env python3
"""Entry point of fairseq_alibi_lab/claims_cli.py (claims.py's docstring is its --help; `python -m
fairseq_alibi_lab.claims_cli` is the same)."""
from fairseq_alibi_lab.claims_cli import main

if __name__ == "__main__":
    main()
