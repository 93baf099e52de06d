#!/usr/bin/env bash
# Create .venv with torch 2.13.0 (CPU wheel), fairseq and this package; skip if already done.
set -euo pipefail
case ${1:-} in
  -h|--help) echo "usage: scripts/setup.sh   (no arguments: creates .venv in the repository, or does nothing if it is current)"; exit 0 ;;
  ?*) echo "error: scripts/setup.sh takes no arguments (see --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
stamp=.venv/.installed-$(cat setup.py scripts/setup.sh | sha1sum | cut -c1-12)
if [ -f "$stamp" ]; then exit 0; fi
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# Pin torch first: an unpinned torch pulled in by fairseq would be a multi-GB CUDA build.
.venv/bin/pip install -q torch==2.13.0
# fairseq-fixed (Python >= 3.11) compiles for about 3 minutes on a fresh machine.
.venv/bin/pip install -q -e ".[test,hf,onnx]"
# fairseq pulls the newest torchaudio, built for another torch (none exists for 2.13): transformers
# imports it whenever it is installed, and fails. Nothing here uses audio.
.venv/bin/pip uninstall -y -q torchaudio
rm -f .venv/.installed-* && touch "$stamp"
echo "set up .venv"
