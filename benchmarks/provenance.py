"""What every benchmark table starts with (command, commit, date, machine) and how it is written."""
import json
import os
import platform
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_name():
    with open("/proc/cpuinfo") as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return names[0] if names else platform.machine()


def machine(device="cpu"):
    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"{cpu_name()}, {os.cpu_count()} cores"


def header(details, device="cpu"):
    """`Command: ...; commit ...; date; machine; torch ...; details` for the running script."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout.strip()
    command = f"python benchmarks/{os.path.basename(sys.argv[0])} {' '.join(sys.argv[1:])}".strip()
    return (f"Command: `{command}`; commit `{commit}`; {time.strftime('%Y-%m-%d')}; {machine(device)}; "
            f"torch {torch.__version__}; {details}")


def emit(text, out, rows=None):
    """Print the table; with --out, write it there (and rows, if any, as JSON beside it)."""
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
        if rows is not None:
            with open(os.path.splitext(out)[0] + ".json", "w") as f:
                json.dump(rows, f, indent=1)
