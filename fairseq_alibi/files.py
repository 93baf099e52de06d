"""A file written whole or not at all: the one way our tools write what a user keeps (results,
tables, checkpoints, dictionaries). Plain Python, no torch or fairseq.
"""
import contextlib
import errno
import functools
import json
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
        yield partial
        os.replace(partial, target)
    except OSError as e:
        raise SystemExit(f"error: could not write {target} ({e.strerror or e}): "
                         f"{'its previous version is kept' if os.path.exists(target) else 'nothing was written'}")
    finally:
        with contextlib.suppress(OSError):  # absent, or on a disk that now refuses even this: the error above says why
            os.remove(partial)


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
    if "No space left on device" in text or "os error 28" in text or "inline_container" in text or "file write failed" in text:
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
    finally:  # also on Ctrl-C or SIGTERM (as KeyboardInterrupt): no hidden .part folder left behind
        shutil.rmtree(partial, ignore_errors=True)


def append_problem(path):
    """None if result lines could be appended to path, else why not; creates nothing (a refused
    run leaves no empty OUT behind). A disk that fills later is append_lines' to report."""
    if not path.endswith(".jsonl"):  # rows are JSON lines: a .txt or .csv OUT is a mistaken argument
        return f"{path} is not a .jsonl file, where result rows are appended"
    if os.path.isdir(path):
        return f"{path} is a directory"
    if os.path.exists(path):
        return None if os.access(path, os.W_OK) else f"{path} is read-only"
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):  # append_lines creates the missing directories
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        return f"{path} cannot be created ({parent} is not a writable directory)"
    return None


def require_appendable(path):
    """Exit with one line unless result lines could be appended to path (append_problem): called
    before scoring, so that minutes of work never end in a refused write."""
    problem = append_problem(path)
    if problem:
        raise SystemExit(f"error: cannot append to {path} ({problem}): give another OUT")


def append_lines(path, lines):
    """Append result lines (JSON rows) to path (its directory made if missing). If the disk refuses
    (full, read-only), exit with one line that carries the lines themselves: a result that took
    minutes is never lost unseen. A row that measured NaN or an infinity (json writes them bare) is
    refused, nothing appended: a diverged score is an error, never a number in a table."""
    for line in lines:
        not_numbers = [n for n in ("NaN", "Infinity") if n in line and not_a_number(line, n)]
        if not_numbers:
            raise SystemExit(f"error: a score came out {not_numbers[0]} (the model diverged, or a bug): not recorded "
                             f"in {path}: " + line[:300])
    existed = os.path.exists(path)
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "a+b") as f:
            # A last line cut short (an interrupted write) is ended first: the new rows stay whole
            # (the cut line is left as it is, skipped by read_rows).
            cut = False
            if f.seek(0, os.SEEK_END):
                f.seek(-1, os.SEEK_END)
                cut = f.read(1) != b"\n"
            f.write((("\n" if cut else "") + "".join(line + "\n" for line in lines)).encode())
    except OSError as e:
        if not existed and os.path.isfile(path) and os.path.getsize(path) == 0:
            os.remove(path)  # ours, and empty: no empty OUT left behind
        raise SystemExit(f"error: could not append to {path} ({e.strerror or e}); the result, to keep by hand: "
                         + " ".join(lines))


def not_a_number(line, name):
    """Whether the JSON line holds the bare constant `name` (NaN, Infinity), not just the text in a string."""
    found = []
    try:
        json.loads(line, parse_constant=found.append)
    except ValueError:
        return False
    return bool(found)


def options_changed(path, options):
    """[(name, recorded, now)] for each of options that differs from the JSON record at path (what a
    data set was made with), [] if none does, None if there is no readable record."""
    try:
        with open(path) as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        return None
    return [(name, recorded.get(name), value) for name, value in options.items() if recorded.get(name) != value]


def read_rows(path):
    """The rows of a results file so far; a line cut short by an interrupted write is skipped (it
    is measured again)."""
    rows = []
    if os.path.isfile(path):
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return rows


def stride_problem(rule):
    """None if rule is a stride rule (stride()), else the one line that says what one is."""
    if rule.isdigit() or (rule.startswith("/") and rule[1:].isdigit() and int(rule[1:]) > 0):
        return None
    if rule == "/0":
        return "stride /0: /K slides by L_valid / K, K a positive integer"
    return f"stride must be 0, a positive integer or /K (L_valid / K), got '{rule}'"


def stride(rule, l_valid):
    """A stride rule as scripts/eval.sh takes it ("0": nonoverlapping, "S": S tokens, "/K": L_valid/K)
    at L_valid: (the stride in tokens, the rule as results rows name it, "L_valid/K" for "/K")."""
    if rule.startswith("/"):
        return l_valid // int(rule[1:]), f"L_valid{rule}"
    return int(rule), rule


def measurement(label, checkpoint, updates, l_valid, stride_rule, scaling, split, overrides=None):
    """What one measurement is, the key a results row is found by (row_key); overrides: the
    scoring's own --model-overrides (overrides_text)."""
    return (label or None, checkpoint, updates, l_valid, stride_rule, scaling or "none", split, overrides)


def row_key(row):
    return measurement(row.get("label"), row.get("checkpoint"), row.get("updates"), row["l_valid"],
                       row.get("stride_rule"), row.get("scaling"), row["split"], row.get("model_overrides"))


def overrides_text(overrides):
    """A scoring's --model-overrides (a dict, or its text) as rows record it: the dict's items in
    sorted order, None for none."""
    import ast

    if isinstance(overrides, str):
        overrides = ast.literal_eval(overrides) if overrides.strip() else {}
    return repr(dict(sorted(overrides.items()))) if overrides else None


class Measured:
    """The measurements a results file holds, for "is it done?" (`key in measured`, key a
    measurement()). Rows written before scorings recorded their overrides stand for any."""

    def __init__(self, rows):
        self.keys = {row_key(r) for r in rows}
        self.older = {row_key(r)[:-1] for r in rows if "model_overrides" not in r}

    def __contains__(self, key):
        return key in self.keys or key[:-1] in self.older


# What identifies the things a row measured, beyond its measurement's key: the checkpoint file's
# and the data's contents (fingerprint). Rows written before these were recorded carry neither.
# (The runner's rows add the training flags they were trained with: identity_problem reads any.)
IDENTITY = ("checkpoint_sha256", "data_sha256")
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


def identity_problem(rows, checkpoint, identity, out):
    """None if no row of `checkpoint` in `rows` records an identity (IDENTITY fields) other than
    `identity`'s (a field None there, or absent from a row, is not compared), else one line: the
    rows are of another file or other data, and are neither reused nor mixed with new ones."""
    for row in rows:
        if row.get("checkpoint") != checkpoint:
            continue
        for name, now in identity.items():
            if now is not None and row.get(name) not in (None, now):
                what = {"checkpoint_sha256": "scored on another checkpoint file at that path",
                        "data_sha256": "scored on other data", "train_flags": "trained with other --train-flags",
                        "train_data_sha256": "trained on other data"}[name]
                return (f"{out} holds rows of {checkpoint} {what} ({name} {row[name]!r}, now {now!r}): they are "
                        f"not this run's; move them out of {out}, or give another output")
    return None
