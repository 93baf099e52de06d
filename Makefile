# Quick start: `make experiment` (the WikiText-2 train-short/test-long run) and `make test`.
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup experiment test
setup:
	@scripts/setup.sh

experiment: setup
	examples/wikitext2/run.sh

test: setup
	python -m pytest -q tests
