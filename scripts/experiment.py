#!/usr/bin/env python3
"""Entry point of fairseq_alibi_lab/experiment_cli.py (the runner's docstring is its --help; `python -m
fairseq_alibi_lab.experiment_cli` is the same)."""
from fairseq_alibi_lab.experiment_cli import cli

if __name__ == "__main__":
    cli()
