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
