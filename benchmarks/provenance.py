"""What every benchmark table starts with (command, commit, date, machine) and how it is written."""
import json
import os
import shlex
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
# The package's definition of commit and machine (no fairseq import).
from fairseq_alibi.tools.files import written_whole  # noqa: E402
from fairseq_alibi.tools.provenance import commit, machine  # noqa: E402


def header(details, device="cpu"):
    """`Command: ...; commit ...; date; machine; torch ...; details` for the running script."""
    # Paths inside this checkout or the working directory are written relative: no machine's paths.
    roots = sorted({os.path.dirname(HERE) + os.sep, os.getcwd() + os.sep}, key=len, reverse=True)
    args = [next((a.replace(r, "", 1) for r in roots if a.startswith(r)), a) for a in sys.argv[1:]]
    if "--rows" in args:  # the rows' stream as they are measured (append_row): a scratch file, not the result
        at = args.index("--rows")
        args = args[:at] + args[at + 2:]
    command = f"python benchmarks/{os.path.basename(sys.argv[0])} {shlex.join(args)}".strip()  # to paste back
    threads = f"{torch.get_num_threads()} intra-op thread{'s' * (torch.get_num_threads() != 1)}"
    return (f"Command: `{command}`; commit `{commit()}`; {time.strftime('%Y-%m-%d')}; {machine(device)}; "
            f"torch {torch.__version__}; {threads}; {details}")


def emit(text, out, rows=None):
    """Print the table; with --out, write it there (and rows, if any, as JSON beside it)."""
    print(text)
    if out:
        with written_whole(out) as partial, open(partial, "w") as f:
            f.write(text)
        if rows is not None:
            with written_whole(os.path.splitext(out)[0] + ".json") as partial, open(partial, "w") as f:
                json.dump(rows, f, indent=1)


def append_row(path, row):
    """One result row appended to path (JSON lines) the moment it is measured, flushed to disk: a run
    stopped at its limit (the device script's steps) keeps every row it had. None: nowhere."""
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())
