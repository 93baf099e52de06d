"""`python -m fairseq_alibi_lab.retrieval make|score|floors`: the retrieval experiment's command line under
its old name (fairseq_alibi_lab/experiments/retrieval/cli.py)."""
import sys

from fairseq_alibi_lab.experiments.retrieval.cli import main

if __name__ == "__main__":
    sys.exit(main())
