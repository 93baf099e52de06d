# Quick start: `make experiment` (the WikiText-2 train-short/test-long run) and `make test`.
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup experiment test test-fast
setup:
	@scripts/setup.sh

experiment: setup
	python scripts/experiment.py main

# One pytest worker per core (pytest-xdist): most slow tests wait on fairseq's start-up, one core each.
test: setup
	python -m pytest -q -n auto tests

# The edit-test loop: math, models, kernels; no end-to-end runs of fairseq's tools (under 3 minutes).
test-fast: setup
	python -m pytest -q -n auto -m "not slow" tests
