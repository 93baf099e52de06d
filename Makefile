# Quick start: `make experiment` (the WikiText-2 train-short/test-long run) and `make test`.
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup experiment test test-fast test-install
setup:
	@scripts/setup.sh

experiment: setup
	python scripts/experiment.py main

# One pytest worker per core (pytest-xdist): most slow tests wait on fairseq's start-up, one core each.
# Tests go to the workers one at a time, slowest first (tests/conftest.py): xdist's default sends
# each worker a contiguous chunk of a quarter of the suite, which gave one worker every slow test.
test: setup
	python -m pytest -q -n auto --maxschedchunk 1 -m "not install" tests

# pip install ".[hf]" in a fresh virtual environment and the installed tools run (two minutes; CI runs it
# after make test, which it would take near its 20-minute budget).
test-install: setup
	python -m pytest -q -m install tests/end_to_end/test_install.py

# The edit-test loop: math, models, kernels; no end-to-end runs of fairseq's tools (under 3 minutes).
test-fast: setup
	python -m pytest -q -n auto --maxschedchunk 1 -m "not slow and not install" tests
