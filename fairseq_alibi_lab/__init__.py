"""The lab: the experiments of fairseq-alibi (recipes, the runner and its declared experiments,
evaluation, tables, claims, the floor), apart from the library (fairseq_alibi). The scripts in
scripts/ and examples/ are thin entry points to these modules (`python -m fairseq_alibi_lab.X`
runs the same)."""
from fairseq_alibi_lab import fairseq_start

fairseq_start.install()  # every lab process imports fairseq a third faster (fairseq_start.py)
