"""Where a result came from: the code's commit and the machine. Plain Python (torch only if it
is already loaded), no import of the package, so that light scripts read it with `runpy`."""
import os
import platform
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commit(repo=REPO):
    """The checked-out commit (short), with "+changes" if tracked files differ from it; None
    outside a git checkout."""
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=repo)

    head = git("rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return None
    dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return head.stdout.strip() + ("+changes" if dirty else "")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else platform.machine()


def machine(device="cpu"):
    """"<CPU model>, <n> cores", or the GPU's name for device "cuda"."""
    if device == "cuda":
        return sys.modules["torch"].cuda.get_device_name()
    return f"{cpu_name()}, {os.cpu_count()} cores"
