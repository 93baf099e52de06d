"""A file written whole or not at all: the one way our tools write what a user keeps (results,
tables, checkpoints, dictionaries). Plain Python, no torch or fairseq.
"""
import contextlib
import errno
import functools
import os
import uuid


@contextlib.contextmanager
def written_whole(target):
    """Yield a temporary path beside `target` to write to; when the block ends it is renamed onto
    target. If the block fails (an error, a full disk, Ctrl-C) it is removed instead: target keeps
    its previous content (or stays absent) and no partial file is left behind. A disk that refuses
    (full, read-only) ends the program with one line saying so."""
    partial = f"{target}.{uuid.uuid4().hex[:12]}.part"  # its own: writers racing for one target (ranks of one training) each install a whole file
    try:
        try:
            yield partial
            os.replace(partial, target)
        except Exception as error:  # noqa: BLE001  (torch's and safetensors' full disk is no OSError)
            named = with_path(error, target)
            if named is error:
                raise
            raise named from None
    except OSError as e:
        raise SystemExit(f"error: could not write {target} ({e.strerror or e}): "
                         f"{'its previous version is kept' if os.path.exists(target) else 'nothing was written'}")
    finally:
        with contextlib.suppress(OSError):  # absent, or on a disk that now refuses even this: the error above says why
            os.remove(partial)


def with_path(error, path):
    """error, or where it is a fault of the disk that names no file (torch's zip writer, safetensors, a bare
    OSError), an OSError of the same kind naming `path`: the one line then says where."""
    if disk_fault(error) is None or getattr(error, "filename", None):
        return error
    if isinstance(error, OSError):
        return OSError(error.errno, error.strerror or str(error), path)
    return OSError(errno.ENOSPC, "No space left on device", path)


def disk_fault(error):
    """The one line for an error of the disk or the file system, naming the path, or None for
    another error: an OSError, or what torch's zip writer and safetensors raise on a full disk."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                                                      errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EEXIST):
        where = f" {error.filename}" if error.filename else ""
        advice = {errno.ENOSPC: "free some space, or give another output", errno.EDQUOT: "free some space, or give another output",
                  errno.EROFS: "give an output on a writable disk"}.get(error.errno, "give another path")
        return f"cannot use{where} ({error.strerror or error}): {advice}"
    text = str(error)
    if any(sign in text for sign in ("No space left on device", "os error 28", "StorageFull", "inline_container",
                                     "file write failed")):
        return ("a file could not be written (the disk is full: " + (text.strip().splitlines() or [""])[0][-100:]
                + "): free some space, or give another output; nothing half-written is kept")
    return None


def one_line_on_disk_faults(main):
    """main, with a fault of the disk or the file system (full, read-only, no permission, a missing
    directory) ending the program in one line naming the path, never a traceback; what was being
    written is the writer's to leave whole or absent (written_whole, folder_written_whole)."""
    @functools.wraps(main)
    def guarded(*args, **kwargs):
        import signal

        stops = False  # whether Ctrl-C and SIGTERM are ours to report (a caller that set SIGTERM reports its own)
        with contextlib.suppress(ValueError):  # not the main thread: left as it is
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # SIGTERM stops as Ctrl-C: clean-ups run
                signal.signal(signal.SIGTERM, signal.default_int_handler)
                stops = True
        try:
            return main(*args, **kwargs)
        except KeyboardInterrupt:
            if not stops:
                raise
            raise SystemExit("stopped (nothing is left half-written): run the same command again") from None
        except Exception as error:  # noqa: BLE001  (the writers' errors have many types; others are raised again)
            line = disk_fault(error)
            if line is None:
                raise
            raise SystemExit(f"error: {line}") from None
    return guarded


def new_folder_problem(out_dir):
    """None if out_dir may receive a tool's folder (absent, or an empty directory), else why not:
    a user's files are never overwritten."""
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        return f"{out_dir} exists and is not an empty directory: give a new OUT_DIR"
    return None


@contextlib.contextmanager
def folder_written_whole(out_dir):
    """Yield a temporary directory beside out_dir (checked with new_folder_problem) to fill; when the
    block ends it becomes out_dir, and if the block fails it is removed: no half-written folder."""
    import shutil
    import tempfile

    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    try:
        partial = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(out_dir))}.", suffix=".part", dir=parent)
    except OSError as e:  # named by the folder asked for, not the temporary one
        raise OSError(e.errno, e.strerror, out_dir) from None
    try:
        yield partial
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty (new_folder_problem): anything put there since is kept, and this fails
        os.rename(partial, out_dir)
    except Exception as error:  # noqa: BLE001  (a full disk named by the folder asked for)
        named = with_path(error, out_dir)
        if named is error:
            raise
        raise named from None
    finally:  # also on Ctrl-C or SIGTERM (as KeyboardInterrupt): no hidden .part folder left behind
        shutil.rmtree(partial, ignore_errors=True)


_fingerprints = {}


def fingerprint(*paths):
    """The first 16 hex digits of the sha256 of the files' contents, in order (cached per file
    size and modification time)."""
    import hashlib

    stamp = tuple((p, os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths)
    if stamp not in _fingerprints:
        digest = hashlib.sha256()
        for path in paths:
            with open(path, "rb") as f:
                while block := f.read(1 << 22):
                    digest.update(block)
        _fingerprints[stamp] = digest.hexdigest()[:16]
    return _fingerprints[stamp]


def data_fingerprint(data, split):
    """The fingerprint of a binarized data directory's dictionary and split."""
    return fingerprint(*(os.path.join(data, name) for name in ("dict.txt", f"{split}.idx", f"{split}.bin")))


#END
