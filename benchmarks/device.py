#!/usr/bin/env python3
"""Everything a lent GPU is for, in one call that returns whatever it measured (benchmarks/device.sh
runs this there):

    bash benchmarks/device.sh                          # on the GPU machine: results under $OUT
    python benchmarks/device.py --dry-run --out DIR    # the same steps at toy sizes on CPU (make test)

Steps, in order of value, each with its own limit inside one budget (an 8-minute call on an H100):
1. tests: the GPU tests CPU cannot run (tests/library/test_gpu.py, tests/library/test_flex.py);
2. table1: Table 1 at the paper's size (benchmarks/bench.py --arch wiki103: training speed and
   memory at L=512 and 1024 against the sinusoidal twin, evaluation at L..6L);
3. kernels: every kernel against SDPA is_causal (benchmarks/kernels.py), the separable one included;
4. backends: the SDPA backend check (benchmarks/backends.py);
5. main: the README's main job again on the GPU in fp16 (the cross-check withdrawn in
   examples/wikitext2/results/main-gpu/).
(comparison, the scale2 experiment, runs with --only comparison.)

Nothing waits for a step's end to be kept: every test outcome and every measured row is appended to
OUT/rows-<step>.jsonl the moment it exists (flushed), each step's output goes to OUT/device.log line by
line with the seconds since the start, and OUT/device.json (the machine, each step's command, status,
wall time and where its time went) is rewritten after every step. A step stopped at its limit keeps
its rows. What OUT holds stays under the device tool's 8 files; tables and logs beside them go to
--work.
"""
import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from fairseq_alibi.tools.files import one_line_on_disk_faults, written_whole  # noqa: E402

# Seconds each step may take on an H100, in the order they run; the call's budget, BUDGET, caps
# them all together (a step gets what is left if that is less).
LIMITS = {"tests": 120, "table1": 150, "kernels": 80, "backends": 30, "main": 200, "comparison": 300}
DEFAULT_STEPS = ("tests", "table1", "kernels", "backends", "main")
BUDGET = 470  # an 8-minute call: the device tool's 10 less the machine's start and the transfers
# The dry run's toy sizes: a minute or two on CPU. Its kernels step runs a last length far too long
# for its limit, so that every dry run stops a step mid-way and shows its earlier rows kept.
DRY_LIMITS = {"tests": 120, "table1": 120, "kernels": 25, "backends": 60, "main": 300, "comparison": 300}
TABLE1_MODES = ("sinusoidal", "alibi")  # the paper's Table 1: ALiBi against its sinusoidal baseline
DATA = "data-bin/wikitext-2"  # carried to the GPU machine (it reaches no download)


def steps(out, work, dry_run, data=DATA):
    """{name: (command, extra environment, rows file or None)}: the dry run's toy sizes on CPU."""
    py = sys.executable
    rows = {name: os.path.join(out, f"rows-{name}.jsonl") for name in LIMITS}
    if dry_run:
        tests = ["tests/library/test_gpu.py"]  # skips without a GPU; test_flex.py is in make test
        table1 = ["--smoke", "--modes", *TABLE1_MODES]
        kernels = ["--dtype", "float32", "--lengths", "16", "32", "8192", "--tokens", "4096", "--heads", "2", "--head-dim",
                   "16", "--repeats", "40", "--methods", "alibi", "learned_alibi", "--kernels", "sdpa", "blocked", "separable"]
        main = ["--models", "alibi", "--updates", "2", "--lengths", "16", "--train-length", "16", "--train-flags",
                "--decoder-layers 1 --decoder-embed-dim 32 --decoder-input-dim 32 --decoder-output-dim 32 "
                "--decoder-ffn-embed-dim 64 --max-tokens 256"]
    else:
        tests = ["tests/library/test_gpu.py", "tests/library/test_flex.py"]
        # One repeat, one paired run of 6 steps, four evaluation lengths: about 20 jobs, in this process
        # on a GPU (bench.py: no fairseq start-up per job).
        table1 = ["--arch", "wiki103", "--dtype", "float16", "--modes", *TABLE1_MODES, "--lengths", "512", "1024",
                  "--eval-lengths", "512", "1024", "2048", "3072", "--sliding-batches", "--repeats", "1",
                  "--steps", "4", "--paired-steps", "6", "--out", f"{work}/table1-paper-gpu.md"]
        kernels = ["--lengths", "1024", "4096", "--kernels", "auto", "sdpa", "flex", "separable", "--repeats", "5"]
        main = ["--parallel", "2"]
    comparison = ["--parallel", "15"] if not dry_run else ["--models", "alibi", "--seeds", "1", "--updates", "2",
                                                            "--lengths", "16", "--train-length", "16", "--train-flags",
                                                            "--decoder-layers 1 --decoder-embed-dim 32 --max-tokens 256"]
    return {
        "tests": ([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_rows", *tests],
                  {"PYTEST_ROWS": rows["tests"], "PYTHONPATH": os.pathsep.join(filter(None, [os.path.join(REPO, "benchmarks"),
                                                                                              os.environ.get("PYTHONPATH")]))},
                  rows["tests"]),
        "table1": ([py, "benchmarks/bench.py", *table1, "--rows", rows["table1"]], {}, rows["table1"]),
        "kernels": ([py, "benchmarks/kernels.py", *kernels, "--rows", rows["kernels"], "--out", f"{work}/kernels-gpu.md"],
                    {}, rows["kernels"]),
        "backends": ([py, "benchmarks/backends.py", "--out", f"{work}/backends-gpu.md"], {}, None),
        "main": ([py, "scripts/experiment.py", "main", "--out", f"{work}/main", "--checkpoints", f"{work}/checkpoints-main",
                  "--data", data, *main], {}, None),
        "comparison": ([py, "scripts/experiment.py", "scale2", "--out", f"{work}/scale2", "--checkpoints",
                        f"{work}/checkpoints-scale2", "--data", data, *comparison], {}, None),
    }


# Fields of a row that say where its time went (bench.py's jobs, kernels.py's configurations, a test).
PHASES = ("import_s", "build_s", "set_up_s", "warmup_s", "timed_s", "measured_s", "seconds")


def time_split(rows_file):
    """'N rows; import 3.1 s, build 12.0 s, ...': the phases' seconds summed over a step's rows."""
    if not rows_file or not os.path.isfile(rows_file):
        return "no rows"
    with open(rows_file) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    totals = {phase: sum(r.get(phase) or 0 for r in rows) for phase in PHASES}
    said = ", ".join(f"{phase[:-2].replace('_', '-')} {value:.1f} s" for phase, value in totals.items() if value)
    return f"{len(rows)} rows" + (f"; {said}" if said else "")


class Log:
    """OUT/device.log and stdout, a line at a time, each with the seconds since the start."""

    def __init__(self, path, started):
        self.file, self.started, self.lock = open(path, "a"), started, threading.Lock()

    def line(self, text):
        stamped = f"[{time.time() - self.started:6.1f} s] {text}"
        with self.lock:
            print(stamped, flush=True)
            self.file.write(stamped + "\n")
            self.file.flush()


def run_step(name, command, env, limit, log):
    """Run one step, its output into the log line by line; past its limit it is stopped (SIGINT,
    then SIGKILL after 15 s): returns (status: exit code or 'stopped', seconds)."""
    start = time.time()
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1", **env))
    reader = threading.Thread(target=lambda: [log.line(f"{name} | {line.rstrip()}") for line in proc.stdout], daemon=True)
    reader.start()
    try:
        status = proc.wait(timeout=max(1, limit))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        status = "stopped"
    reader.join(timeout=5)
    return status, round(time.time() - start, 1)


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


def write_record(record, out):
    with written_whole(os.path.join(out, "device.json")) as partial, open(partial, "w") as f:
        json.dump(record, f, indent=1)


def portable(command, out, work):
    """The command as run, without this machine's paths (OUT, the work folder, the repository)."""
    words = [("python" if word == sys.executable else word) for word in command]
    for path, name in ((out, "OUT"), (work, "WORK"), (REPO + "/", "")):
        words = [word.replace(path, name) for word in words]
    return shlex.join(words)


@one_line_on_disk_faults  # a read-only or full disk: one line naming the path
def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT") or os.path.join("runs", "device"),
                   help="what comes back (default: $OUT on the device machine, else %(default)s); must be empty")
    p.add_argument("--work", help="tables, logs and checkpoints that need not come back (default: /tmp/device-work "
                   "on the device machine, else OUT/work)")
    p.add_argument("--dry-run", action="store_true", help="toy sizes on CPU: every step runs, in a minute or two")
    p.add_argument("--only", nargs="+", choices=list(LIMITS), help="only these steps (default: %s)" % " ".join(DEFAULT_STEPS))
    p.add_argument("--budget", type=float, default=BUDGET, help="seconds for all steps together (default: %(default)s)")
    p.add_argument("--data", default=DATA, help="the main job's binarized WikiText-2 (default: %(default)s; the dry "
                   "run's test gives a slice)")
    args = p.parse_args()
    out = os.path.abspath(args.out)
    if os.path.exists(out) and os.listdir(out):
        raise SystemExit(f"error: {args.out} is not empty: give another --out (nothing there is overwritten)")
    work = os.path.abspath(args.work or ("/tmp/device-work" if os.environ.get("OUT") else os.path.join(out, "work")))
    if os.path.exists(work) and os.listdir(work):
        raise SystemExit(f"error: {work} is not empty: give another --work (nothing there is overwritten)")
    os.makedirs(out, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    started = time.time()
    log = Log(os.path.join(out, "device.log"), started)
    record = {"command": "python benchmarks/device.py " + shlex.join(sys.argv[1:]), "commit": os.environ.get("FAIRSEQ_ALIBI_COMMIT"),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(), "steps": {}}
    write_record(record, out)
    log.line(json.dumps(record["machine"]))
    limits = DRY_LIMITS if args.dry_run else LIMITS
    planned = steps(out, work, args.dry_run, args.data)
    for name in (args.only or DEFAULT_STEPS):
        command, env, rows = planned[name]
        left = args.budget - (time.time() - started)
        if left < 10:
            record["steps"][name] = {"command": portable(command, out, work), "status": "not run: the budget was spent"}
            log.line(f"== {name}: not run (the budget of {args.budget:.0f} s is spent)")
            write_record(record, out)
            continue
        limit = min(limits[name], left)
        log.line(f"== {name}: starting, limit {limit:.0f} s")
        status, seconds = run_step(name, command, env, limit, log)
        if name in ("main", "comparison"):  # the runner's rows, beside the others
            results = os.path.join(work, name if name == "main" else "scale2", "results.jsonl")
            if os.path.isfile(results):
                shutil.copyfile(results, os.path.join(out, f"rows-{name}.jsonl"))
                rows = os.path.join(out, f"rows-{name}.jsonl")
        split = time_split(rows)
        record["steps"][name] = {"command": portable(command, out, work), "status": status, "wall_s": seconds,
                                 "limit_s": round(limit), "rows": split}
        write_record(record, out)
        log.line(f"== {name}: {status} after {seconds} s ({split})")
    record["wall_s"] = round(time.time() - started, 1)
    write_record(record, out)
    failed = [name for name, s in record["steps"].items() if s["status"] != 0]
    log.line(f"== done in {record['wall_s']} s" + (f"; failed, stopped or not run: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
