"""Where a result came from: the code's commit and the machine. Plain Python (torch only if it
is already loaded)."""
import functools
import os
import platform
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commit(repo=REPO):
    """The checked-out commit (short), with "+changes" if tracked files differ from it; None
    outside a git checkout. $FAIRSEQ_ALIBI_COMMIT, where set, is taken instead: a copy of the tree
    sent to another machine carries its commit as the sender read it (the copy's own .git, if
    any, need not match)."""
    if os.environ.get("FAIRSEQ_ALIBI_COMMIT"):
        return os.environ["FAIRSEQ_ALIBI_COMMIT"]
    return checked_out(os.path.abspath(repo))


@functools.lru_cache(maxsize=None)
def checked_out(repo):
    """commit()'s answer from git, read once per process: a process runs the code it imported when it
    began, whatever is committed later, and a scorer records a row per group (two git processes each)."""

    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=repo)

    try:
        head = git("rev-parse", "--short", "HEAD")
    except OSError:  # no git on this machine
        head = None
    if head is None or head.returncode != 0:
        return None
    dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return head.stdout.strip() + ("+changes" if dirty else "")


def cpu_name(cpuinfo="/proc/cpuinfo"):
    """The CPU's model name, with its family, model and widest vector instructions where /proc/cpuinfo
    says them: "AMD EPYC" names several generations, and float sums (so a training's digits) follow
    the kernels a CPU's instructions select (an AMD EPYC with AVX2 did not retrain a row another
    AMD EPYC had trained to the digit: examples/wikitext2/results/retrieval)."""
    try:
        with open(cpuinfo) as f:
            first = f.read().split("\n\n")[0]
    except OSError:
        first = ""
    fields = dict(line.split(":", 1) for line in first.splitlines() if ":" in line)
    fields = {name.strip(): value.strip() for name, value in fields.items()}
    name = fields.get("model name") or platform.machine()
    flags = set(fields.get("flags", "").split())
    widest = next((isa for flag, isa in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX")) if flag in flags), None)
    detail = [f"family {fields['cpu family']}" if "cpu family" in fields else None,
              f"model {fields['model']}" if "model" in fields else None, widest]
    detail = [d for d in detail if d]
    return f"{name} ({', '.join(detail)})" if detail else name


@functools.lru_cache(maxsize=None)
def gpu_names():
    """The GPUs this machine shows (nvidia-smi's names), [] where it has none; asked once per process
    (a row's machine() is written per scored group)."""
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in listed.stdout.splitlines() if line.strip()] if listed.returncode == 0 else []


def machine(device="cpu"):
    """"<CPU model>, <n> cores" (and its GPUs, where it has any), or the GPU's name for device
    "cuda"."""
    if device == "cuda":
        return sys.modules["torch"].cuda.get_device_name()
    gpus = gpu_names()
    return f"{cpu_name()}, {os.cpu_count()} cores" + (f", {len(gpus)} x {gpus[0]}" if gpus else "")
