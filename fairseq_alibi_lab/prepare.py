"""scripts/prepare-wikitext.sh (its header is the usage): fetch, verify and binarize WikiText (the
tokenized v1 release, with <unk>) for fairseq; and separate_articles, its --documents copy.

Every step leaves nothing half-made under a name it will trust later: an archive is downloaded to
NAME.part and renamed once whole, extracted into a fresh directory that is renamed into place, and
binarized into a fresh directory marked .prepared and renamed into place. Nothing is deleted but
what this run made; a directory this script did not finish is refused, not replaced.
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

from fairseq_alibi.tools.files import written_whole

USAGE = "usage: scripts/prepare-wikitext.sh [--documents] 103|2 [SOURCE]"
FILES = ("wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens")
# WikiText-2: sha256 of the published files (verified against pytorch/examples' git blobs, see
# shared/data/wikitext-2/README.md); their sha1 equal GluonNLP's. WikiText-103: GluonNLP's published
# sha1 of the same files (no sha256 is published).
CORPORA = {
    "wikitext-2": ("https://wikitext.smerity.com/wikitext-2-v1.zip", "sha256", (
        "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f",
        "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
        "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0")),
    "wikitext-103": ("https://wikitext.smerity.com/wikitext-103-v1.zip", "sha1", (
        "b7497e2dfe77e72cfef5e3dbc61b7b53712ac211",
        "c326ac59dc587676d58c422eb8a03e119582f92b",
        "8a5befc548865cec54ed4273cf87dbbad60d1e47")),
}
SEPARATOR = "<doc>"
HEADING = re.compile(r" = [^=].* = ")  # a level-1 heading; subheadings are " = = Title = = "


def fail(message):
    sys.exit(f"error: {message}")


def separate_articles(source, target, symbol=SEPARATOR):
    """Write source's text to target with a line holding only symbol before each article but the
    first (an article starts at a level-1 heading after an empty line), so that in fairseq's stream
    each article but the last ends `... </s> SYMBOL </s>`. Returns the article count."""
    with open(source, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if any(line.strip() == symbol for line in lines):
        fail(f"{source} already holds a line {symbol!r}: choose another SYMBOL")
    out, articles = [], 0
    for i, line in enumerate(lines):
        if HEADING.fullmatch(line) and (i == 0 or not lines[i - 1].strip()):
            if articles:
                out.append(f" {symbol} ")
            articles += 1
        out.append(line)
    with written_whole(target) as partial, open(partial, "w", encoding="utf-8") as f:
        f.write("\n".join(out))
    return articles


def extract(archive, raw, name):
    """archive (.zip, .tar.gz) -> the directory raw, through a fresh directory of our own."""
    if os.path.exists(raw):
        fail(f"{raw} exists without wiki.train.tokens: move it away or set RAW_DIR to another directory")
    os.makedirs(os.path.dirname(raw) or ".", exist_ok=True)
    fresh = tempfile.mkdtemp(prefix=".extract.", dir=os.path.dirname(raw) or ".")
    try:
        if archive.endswith(".zip"):
            try:
                with zipfile.ZipFile(archive) as z:
                    z.extractall(fresh)
            except (zipfile.BadZipFile, OSError):
                fail(f"{archive} is not a readable zip archive: delete it and rerun")
        elif archive.endswith((".tar.gz", ".tgz")):
            try:
                with tarfile.open(archive, "r:gz") as tar:
                    # "data": no links out or absolute paths (where this Python has the filter)
                    tar.extractall(fresh, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            except (tarfile.TarError, OSError, EOFError):
                fail(f"{archive} is not a readable tar.gz archive: delete it and rerun")
        else:
            fail(f"{archive}: expected a .zip or .tar.gz archive")
        found = [root for root, _, names in os.walk(fresh) if "wiki.train.tokens" in names]
        if not found:
            fail(f"{archive} holds no wiki.train.tokens: is it the tokenized WikiText ({name}-v1)?")
        os.rename(sorted(found)[0], raw)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)


def download(url, archive):
    """url -> archive, through archive.part (curl: the mirror rejects some default user agents,
    curl's own is accepted)."""
    os.makedirs(os.path.dirname(archive) or ".", exist_ok=True)
    print(f"downloading {url}", flush=True)
    if subprocess.run(["curl", "-fL", "--retry", "3", "--progress-bar", "-o", archive + ".part", url]).returncode:
        fail(f"could not download {url}: pass a local directory or archive as SOURCE")
    os.rename(archive + ".part", archive)


def locate(source, name, raw_root):
    """The directory holding the raw files: SOURCE if a directory, else an archive extracted under
    raw_root (downloaded first if a URL, or if no SOURCE: the mirror)."""
    raw = os.path.join(raw_root, name)
    if os.path.isdir(source):
        return source
    if os.path.isfile(os.path.join(raw, "wiki.train.tokens")):
        print(f"using {raw} (already extracted)")
    elif os.path.isfile(source):
        extract(source, raw, name)
    else:
        url = source or CORPORA[name][0]
        archive = os.path.join(raw_root, os.path.basename(url))
        if not os.path.isfile(archive):
            download(url, archive)
        extract(archive, raw, name)
    return raw


def verify(raw, source, name):
    """Every file against its published checksum: a corrupt or different corpus stops here."""
    _, algorithm, expected_sums = CORPORA[name]
    for file, expected in zip(FILES, expected_sums):
        path = os.path.join(raw, file)
        if not os.path.isfile(path):
            fail(f"{path} is missing")
        digest = hashlib.new(algorithm)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != expected:
            said = f"{path} has {algorithm} {digest.hexdigest()}, expected {expected}"
            if raw == source:  # the user's own directory: never ask them to delete their files
                fail(f"{said}: it is not the tokenized {name}-v1 (or is damaged); give SOURCE a directory or "
                     "archive of the published files")
            fail(f"{said}: the copy this script extracted is corrupt or not {name}-v1; move {raw} (and its "
                 "archive) away and rerun")
    print(f"checksums of {raw}/wiki.{{train,valid,test}}.tokens verified")


def binarize(raw, out, documents, workers):
    """One dictionary from train, as in fairseq's examples/language_model, into a fresh directory
    moved into place once complete (with --documents: of article-separated copies made inside it)."""
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    fresh = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.", dir=os.path.dirname(out) or ".")
    try:
        text = raw
        if documents:
            text = os.path.join(fresh, "text")
            os.mkdir(text)
            for file in FILES:
                articles = separate_articles(os.path.join(raw, file), os.path.join(text, file))
                print(f"{os.path.join(raw, file)}: {articles} articles")
        prefixes = [f"--{split}pref={os.path.join(text, f'wiki.{split}.tokens')}" for split in ("train", "valid", "test")]
        if subprocess.run(["fairseq-preprocess", "--only-source", *prefixes, "--destdir", fresh,
                           "--workers", str(workers)]).returncode:
            fail(f"fairseq-preprocess failed on {text} (its messages above)")
        if documents:
            shutil.rmtree(text)
        open(os.path.join(fresh, ".prepared"), "w").close()
        os.rename(fresh, out)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)


def main(argv=None, environ=os.environ):
    argv = list(sys.argv[1:] if argv is None else argv)
    documents = bool(argv) and argv[0] == "--documents"
    if documents:
        argv.pop(0)
    if not argv or len(argv) > 2:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    name = "wikitext-" + argv[0].removeprefix("wikitext-")
    if name not in CORPORA:
        print(f"error: unknown corpus '{argv[0]}': use 103 or 2", file=sys.stderr)
        sys.exit(2)
    source = argv[1] if len(argv) > 1 else ""
    out = os.path.join(environ.get("DATA_BIN") or "data-bin", name + ("-documents" if documents else ""))
    if os.path.isfile(os.path.join(out, ".prepared")):
        print(f"{out} is already prepared (delete it to redo)")
        return
    if os.path.exists(out):
        fail(f"{out} exists but is no finished preparation (no {out}/.prepared): move it away or set DATA_BIN to "
             "another directory")
    raw = locate(source, name, environ.get("RAW_DIR") or "data-raw")
    verify(raw, source, name)
    binarize(raw, out, documents, environ.get("WORKERS") or len(os.sched_getaffinity(0)))
    print(f"prepared {out}")


def wikitext2(documents=False, environ=os.environ):
    """data-bin/wikitext-2 (-documents: with <doc> between articles), made here where it is not (from
    WIKITEXT2_SOURCE, else ../shared/data/wikitext-2 if present, else the download mirror): the
    experiment runner's data."""
    shared = os.path.join("..", "shared", "data", "wikitext-2")
    source = environ.get("WIKITEXT2_SOURCE") or (shared if os.path.isdir(shared) else "")
    # DATA_BIN is not the runner's: the directory returned is data-bin's.
    main([*(["--documents"] if documents else []), "2", *([source] if source else [])],
         {name: value for name, value in environ.items() if name != "DATA_BIN"})
    return "data-bin/wikitext-2" + ("-documents" if documents else "")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # what was half made is removed (the finally clauses); the rest is kept
        sys.exit("stopped: rerun the same command to continue")
