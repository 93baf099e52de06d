#!/usr/bin/env bash
# Fetch, verify and binarize WikiText (the tokenized v1 release, with <unk>) for fairseq.
#
#   scripts/prepare-wikitext.sh [--documents] 103|2 [SOURCE]
#
# SOURCE (optional) is a directory holding wiki.{train,valid,test}.tokens, a .zip or .tar.gz
# archive of them, or a URL (https://, http://, file://). Default: the wikitext.smerity.com
# mirror (the original research.metamind.io bucket is gone).
# Output: data-bin/wikitext-<N> (DATA_BIN overrides data-bin); raw files go to data-raw/.
# --documents: the same corpus with a line <doc> between articles (scripts/separate_articles.py),
# in data-bin/wikitext-<N>-documents, for --document-separator '<doc>'; the usual one is untouched.
# Work already done is skipped; every corpus file is checked against its published checksum.
# Nothing is deleted but what this script itself created: an existing output directory that it
# did not finish (or that holds the source) is refused, not replaced. The work: fairseq_alibi_lab/prepare.py.
set -euo pipefail
case ${1:-} in -h|--help) source "$(dirname "$0")/usage.sh"; script_help "$0"; exit 0 ;; esac
exec python3 -m fairseq_alibi_lab.prepare "$@"
