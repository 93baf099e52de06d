#!/usr/bin/env bash
# Create .venv with torch 2.13.0 (CPU wheel), fairseq and this package; skip if already done.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.installed-$(cat setup.py scripts/setup.sh | sha1sum | cut -c1-12)
if [ -f "$stamp" ]; then exit 0; fi
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# Pin torch first: an unpinned torch pulled in by fairseq would be a multi-GB CUDA build.
.venv/bin/pip install -q torch==2.13.0
# fairseq-fixed (Python >= 3.11) compiles for about 3 minutes on a fresh machine.
.venv/bin/pip install -q -e ".[test]"
rm -f .venv/.installed-* && touch "$stamp"
echo "set up .venv"
