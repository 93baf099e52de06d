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
# did not finish (or that holds the source) is refused, not replaced.
set -euo pipefail

usage="usage: scripts/prepare-wikitext.sh [--documents] 103|2 [SOURCE]"
case ${1:-} in -h|--help) echo "$usage"; exit 0 ;; esac
documents=0
if [ "${1:-}" = --documents ]; then documents=1; shift; fi
name=${1:?$usage}
name=wikitext-${name#wikitext-}
source=${2:-}
data_bin=${DATA_BIN:-data-bin}
raw_root=${RAW_DIR:-data-raw}
workers=${WORKERS:-$(nproc)}

# Checksums of the three files. WikiText-2: sha256 of the published files (verified against
# pytorch/examples' git blobs, see shared/data/wikitext-2/README.md); their sha1 equal GluonNLP's.
# WikiText-103: GluonNLP's published sha1 of the same files (no sha256 is published).
case $name in
  wikitext-2)
    url=https://wikitext.smerity.com/wikitext-2-v1.zip
    sums="sha256 wiki.train.tokens 9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f
sha256 wiki.valid.tokens f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8
sha256 wiki.test.tokens d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0" ;;
  wikitext-103)
    url=https://wikitext.smerity.com/wikitext-103-v1.zip
    sums="sha1 wiki.train.tokens b7497e2dfe77e72cfef5e3dbc61b7b53712ac211
sha1 wiki.valid.tokens c326ac59dc587676d58c422eb8a03e119582f92b
sha1 wiki.test.tokens 8a5befc548865cec54ed4273cf87dbbad60d1e47" ;;
  *) echo "error: unknown corpus '$1': use 103 or 2" >&2; exit 2 ;;
esac

out=$data_bin/$name
[ "$documents" = 0 ] || out=$out-documents
fail() { echo "error: $*" >&2; exit 1; }
if [ -f "$out/.prepared" ]; then
  echo "$out is already prepared (delete it to redo)"; exit 0
fi
[ ! -e "$out" ] || fail "$out exists but is no finished preparation (no $out/.prepared): move it away or set DATA_BIN to another directory"

# 1. Locate the raw files: a directory as given, else extract an archive (downloaded if a URL).
raw=$raw_root/$name
extract() {  # archive -> $raw, through a fresh directory of our own
  [ ! -e "$raw" ] || fail "$raw exists without wiki.train.tokens: move it away or set RAW_DIR to another directory"
  mkdir -p "$raw_root"
  local tmp
  tmp=$(mktemp -d "$raw_root/.extract.XXXXXX")
  case $1 in
    *.zip) python3 -m zipfile -e "$1" "$tmp" || fail "$1 is not a readable zip archive: delete it and rerun" ;;
    *.tar.gz|*.tgz) tar -xzf "$1" -C "$tmp" || fail "$1 is not a readable tar.gz archive: delete it and rerun" ;;
    *) fail "$1: expected a .zip or .tar.gz archive" ;;
  esac
  found=$(find "$tmp" -name wiki.train.tokens | head -n 1)
  [ -n "$found" ] || fail "$1 holds no wiki.train.tokens: is it the tokenized WikiText ($name-v1)?"
  mv "$(dirname "$found")" "$raw" && rm -rf "$tmp"
}
if [ -d "$source" ]; then
  raw=$source
elif [ -f "$raw/wiki.train.tokens" ]; then
  echo "using $raw (already extracted)"
elif [ -f "$source" ]; then
  extract "$source"
else
  src_url=${source:-$url}
  archive=$raw_root/$(basename "$src_url")
  if [ ! -f "$archive" ]; then
    mkdir -p "$raw_root"
    echo "downloading $src_url"
    # The mirror rejects some default user agents; curl's own is accepted.
    curl -fL --retry 3 --progress-bar -o "$archive.part" "$src_url" || fail "could not download $src_url: pass a local directory or archive as SOURCE"
    mv "$archive.part" "$archive"
  fi
  extract "$archive"
fi

# 2. Verify every file against its checksum: a corrupt or different corpus stops here.
while read -r algo file expected; do
  [ -f "$raw/$file" ] || fail "$raw/$file is missing"
  actual=$(${algo}sum "$raw/$file" | cut -d' ' -f1)
  if [ "$actual" != "$expected" ]; then
    if [ "$raw" = "$source" ]; then  # the user's own directory: never ask them to delete their files
      fail "$raw/$file has $algo $actual, expected $expected: it is not the tokenized $name-v1 (or is damaged); give SOURCE a directory or archive of the published files"
    fi
    fail "$raw/$file has $algo $actual, expected $expected: the copy this script extracted is corrupt or not $name-v1; move $raw (and its archive) away and rerun"
  fi
done <<< "$sums"
echo "checksums of $raw/wiki.{train,valid,test}.tokens verified"

# 3. Binarize (one dictionary from train, as in fairseq's examples/language_model) into a fresh
# directory, moved into place once complete.
mkdir -p "$data_bin"
tmp=$(mktemp -d "$data_bin/.$(basename "$out").XXXXXX")
text=$raw
if [ "$documents" = 1 ]; then  # separated copies, in the fresh directory, removed once binarized
  text=$tmp/text
  mkdir "$text"
  for split in train valid test; do
    python3 "$(dirname "$0")/separate_articles.py" "$raw/wiki.$split.tokens" "$text/wiki.$split.tokens"
  done
fi
fairseq-preprocess --only-source \
  --trainpref "$text/wiki.train.tokens" --validpref "$text/wiki.valid.tokens" \
  --testpref "$text/wiki.test.tokens" --destdir "$tmp" --workers "$workers"
[ "$documents" = 0 ] || rm -r "$text"
touch "$tmp/.prepared"
mv "$tmp" "$out"
echo "prepared $out"
