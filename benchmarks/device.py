#!/usr/bin/env python3
"""Everything a lent GPU is for, in one call (benchmarks/device.sh runs this there):

    bash benchmarks/device.sh          # on the GPU machine: results under $OUT
    python benchmarks/device.py --dry-run --out DIR   # the same steps at toy sizes on CPU (make test)

Steps, each with its own time limit, each one's failure logged without stopping the others:
1. the second-scale comparison (scripts/experiment.py scale2, every run at once, --parallel) starts
   in the background, since it takes longest;
2. tests/test_gpu.py and tests/test_flex.py, while it trains (correctness only: no timing then);
3. the SDPA backend check (benchmarks/backends.py);
4. once the comparison has ended (or its limit has passed: it is stopped, and what finished is kept),
   with the GPU to itself: every kernel against the floor (benchmarks/kernels.py) and Table 1 at the
   paper's model size (benchmarks/bench.py --arch wiki103: training speed and memory at L=512 and
   1024, evaluation at L, 2L and 6L).
Everything is written under --out, then packed into one archive, $OUT/device-results.tar.gz on the
device machine (the device tool brings back at most 8 files).
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Seconds each step may take on an H100 (the call's limit is 9 minutes; the tool's 10).
OUT_DIR = [""]  # --out, written as OUT/device in the record
LIMITS = {"comparison": 300, "tests": 200, "backends": 40, "kernels": 60, "table1": 140}
TABLE1_MODES = ("sinusoidal", "alibi")  # the paper's Table 1: ALiBi against its sinusoidal baseline
DATA = "data-bin/wikitext-2"  # carried to the GPU machine (it reaches no download)


def steps(out, dry_run, data=DATA):
    """(name, command, limit in seconds, background) of each step; the dry run's toy sizes on CPU."""
    py = sys.executable
    comparison = [py, "scripts/experiment.py", "scale2", "--out", f"{out}/scale2", "--checkpoints", f"{out}/../checkpoints-scale2",
                  "--data", data]
    if dry_run:
        comparison += ["--models", "alibi", "sinusoidal", "--seeds", "1", "--updates", "2", "--lengths", "16",
                       "--train-flags", "--decoder-layers 1 --decoder-embed-dim 32 --decoder-input-dim 32 "
                       "--decoder-output-dim 32 --decoder-ffn-embed-dim 64 --max-tokens 256", "--parallel", "2",
                       "--train-length", "16"]
        kernels = ["--dtype", "float32", "--lengths", "64", "--tokens", "128", "--heads", "2", "--head-dim", "16",
                   "--repeats", "1", "--methods", "alibi", "kerple"]
        table1 = ["--smoke", "--modes", *TABLE1_MODES]
    else:
        comparison += ["--parallel", "15"]
        kernels = ["--lengths", "1024", "4096"]
        table1 = ["--arch", "wiki103", "--dtype", "float16", "--modes", *TABLE1_MODES, "--lengths", "512", "1024",
                  "--eval-lengths", "512", "1024", "2048", "3072", "6144", "--sliding-batches", "--repeats", "1",
                  "--steps", "4", "--paired-steps", "6", "--out", f"{out}/table1-paper-gpu.md"]
    # The dry run's tests: test_gpu.py only (it skips without a GPU; test_flex.py is in make test).
    tests = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_gpu.py", *([] if dry_run else ["tests/test_flex.py"])]
    return [("comparison", comparison, LIMITS["comparison"], True),
            ("tests", tests, LIMITS["tests"], False),
            ("backends", [py, "benchmarks/backends.py", "--out", f"{out}/backends-gpu.md"], LIMITS["backends"], False),
            ("kernels", [py, "benchmarks/kernels.py", *kernels, "--out", f"{out}/kernels-gpu.md"], LIMITS["kernels"], False),
            ("table1", [py, "benchmarks/bench.py", *table1], LIMITS["table1"], False)]


class Step:
    def __init__(self, name, command, limit, out):
        self.name, self.command, self.limit = name, command, limit
        self.log = open(os.path.join(out, f"{name}.log"), "w")
        self.start = time.time()
        self.proc = subprocess.Popen(command, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"))

    def wait(self):
        """Its exit status; past its limit it is stopped (SIGINT, then SIGKILL): 'stopped'."""
        try:
            return self.proc.wait(timeout=max(1, self.limit - (time.time() - self.start)))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            return "stopped"
        finally:
            self.log.close()


def machine():
    """The device's name and software, for the provenance."""
    import torch

    info = {"torch": torch.__version__, "python": sys.version.split()[0], "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "cpus": os.cpu_count()}
    try:
        info["nvidia-smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        info["nvidia-smi"] = None
    return info


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # Under $OUT (what the device tool brings back: 8 files at most) only the archive and the log.
    p.add_argument("--out", default=os.path.join("/tmp" if os.environ.get("OUT") else "runs", "device"))
    p.add_argument("--archive", help="default: $OUT/device-results.tar.gz on the device machine, else beside --out")
    p.add_argument("--dry-run", action="store_true", help="toy sizes on CPU: every step runs, in about a minute")
    p.add_argument("--only", nargs="+", choices=list(LIMITS), help="only these steps")
    p.add_argument("--data", default=DATA, help="the comparison's binarized WikiText-2 (default: %(default)s; "
                   "the dry run's test gives a slice, whose scoring takes seconds, not minutes)")
    args = p.parse_args()
    out = os.path.abspath(args.out)
    OUT_DIR[0] = out
    if os.path.exists(out) and os.listdir(out):
        raise SystemExit(f"error: {args.out} is not empty: give another --out (nothing there is overwritten)")
    os.makedirs(out, exist_ok=True)
    started = time.time()
    record = {"command": "python benchmarks/device.py " + shlex.join(sys.argv[1:]), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "machine": machine(), "steps": {}}
    print(json.dumps(record["machine"]), flush=True)
    planned = [s for s in steps(out, args.dry_run, args.data) if not args.only or s[0] in args.only]
    background = [Step(name, command, limit, out) for name, command, limit, bg in planned if bg]
    for name, command, limit, bg in planned:
        if bg:
            continue
        if name in ("kernels", "table1"):  # timings: the GPU to themselves
            for step in background:
                finish(step, record, started)
            background = []
        finish(Step(name, command, limit, out), record, started)
    for step in background:
        finish(step, record, started)
    record["wall_s"] = round(time.time() - started, 1)
    with open(os.path.join(out, "device.json"), "w") as f:
        json.dump(record, f, indent=1)
    archive = args.archive or os.path.join(os.environ.get("OUT") or os.path.dirname(out), "device-results.tar.gz")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(out, arcname="device")
    print(f"== done in {record['wall_s']} s: {archive}", flush=True)
    failed = [name for name, s in record["steps"].items() if s["status"] != 0]
    if failed:
        print(f"== steps that failed or were stopped: {', '.join(failed)} (their logs in the archive)", flush=True)
    return 1 if failed else 0


def finish(step, record, started):
    status = step.wait()
    command = [("python" if word == sys.executable else word.replace(OUT_DIR[0], "OUT/device").replace(REPO + "/", ""))
               for word in step.command]  # no machine's paths
    record["steps"][step.name] = {"command": shlex.join(command), "status": status,
                                  "wall_s": round(time.time() - step.start, 1)}
    with open(step.log.name) as log:
        tail = log.read().strip().splitlines()[-3:]
    print(f"== {step.name}: {status} after {record['steps'][step.name]['wall_s']} s "
          f"({round(time.time() - started)} s so far)\n   " + "\n   ".join(tail), flush=True)


if __name__ == "__main__":
    sys.exit(main())
