"""A file written whole or not at all: the one way our tools write what a user keeps (results,
tables, checkpoints, dictionaries). Plain Python, no torch or fairseq, so that scripts load it by
path (runpy) without starting the package.
"""
import contextlib
import os


@contextlib.contextmanager
def written_whole(target):
    """Yield a temporary path beside `target` to write to; when the block ends it is renamed onto
    target. If the block fails (an error, a full disk, Ctrl-C) it is removed instead: target keeps
    its previous content (or stays absent) and no partial file is left behind."""
    partial = f"{target}.part"
    try:
        yield partial
        os.replace(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)


def append_lines(path, lines):
    """Append result lines (JSON rows) to path. If the disk refuses (full, read-only), exit with one
    line that carries the lines themselves: a result that took minutes is never lost unseen."""
    try:
        with open(path, "a") as f:
            f.write("".join(line + "\n" for line in lines))
    except OSError as e:
        raise SystemExit(f"error: could not append to {path} ({e.strerror or e}); the result, to keep by hand: "
                         + " ".join(lines))
