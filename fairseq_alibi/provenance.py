"""Where a result came from: the code's commit and the machine. Plain Python (torch only if it
is already loaded)."""
import os
import platform
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# What a scorer writes into a result row itself (what it measured, of what, where): fields a caller
# adds (row_fields) may not replace them.
MEASURED_FIELDS = frozenset((
    "accuracy", "cache", "changed", "checkpoint", "checkpoint_sha256", "chunk", "commit", "correct", "data_sha256",
    "depth", "eval_flags", "first_accuracy", "first_correct", "keys_held", "l_valid", "label", "length", "loss",
    "loss_base2", "machine", "mask_prob", "mask_seed", "masked_tokens", "max_distance", "min_distance", "mixture_sha256",
    "model", "model_overrides", "n", "perplexity", "perplexity_blocks", "perplexity_by_position", "perplexity_stride_1",
    "perplexity_stride_half", "prompts_sha256", "scaling", "scaling_factor", "scoring", "seconds", "seed", "sinks",
    "split", "stride", "stride_rule", "task", "threads", "tokens", "tokens_per_s", "train_length",
    "updates", "wall_s", "window"))


def measured_problem(fields, name="--fields"):
    """None, or the one line refusing fields that would replace what a row measures."""
    replaced = sorted(set(fields) & MEASURED_FIELDS)
    if replaced:
        return (f"error: {name} may add fields to the rows, not replace what they measure: drop "
                f"{', '.join(replaced)}")
    return None


def row_fields(text, name="--fields"):
    """The fields a caller adds to every result row (the experiment runner's experiment and recipe):
    a JSON object of fields no scorer measures, else exit with one line naming `name`."""
    import json

    try:
        fields = json.loads(text)
    except ValueError:
        fields = None
    if not isinstance(fields, dict):
        raise SystemExit(f"error: {name} must be a JSON object, e.g. '{{\"experiment\": \"mine\"}}', got '{text}'")
    if measured_problem(fields, name):
        raise SystemExit(measured_problem(fields, name))
    return fields


def commit(repo=REPO):
    """The checked-out commit (short), with "+changes" if tracked files differ from it; None
    outside a git checkout. $FAIRSEQ_ALIBI_COMMIT, where set, is taken instead: a copy of the tree
    sent to another machine carries its commit as the sender read it (the copy's own .git, if
    any, need not match)."""
    if os.environ.get("FAIRSEQ_ALIBI_COMMIT"):
        return os.environ["FAIRSEQ_ALIBI_COMMIT"]

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


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else platform.machine()


def gpu_names():
    """The GPUs this machine shows (nvidia-smi's names), [] where it has none."""
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
