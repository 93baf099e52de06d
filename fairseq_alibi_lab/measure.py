"""Run a command and append its wall time and peak memory to a JSON-lines file.

    python3 -m fairseq_alibi_lab.measure RESOURCES.jsonl -- COMMAND [ARGS...]   (or scripts/measure.py)

Peak memory is the largest resident set of the command and the processes it waited for (Linux
ru_maxrss via wait4), cpu_s their CPU seconds (user and system): a call that only waited for another
process's training of the run (a parallel part's, WAIT_FOR_RUN) lasts as long as that training but computes
next to nothing. The command's output passes through; the exit status is the command's.
SIGTERM and SIGINT are passed on to the command, so that stopping this stops it too.
"""
import json
import os
import signal
import subprocess
import sys
import time


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: python3 -m fairseq_alibi_lab.measure RESOURCES.jsonl -- COMMAND [ARGS...]")
    out, command = argv[0], argv[2:]
    start = time.perf_counter()
    try:
        child = subprocess.Popen(command)
    except OSError as e:
        sys.exit(f"error: cannot run {command[0]}: {e.strerror}")
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, lambda signum, frame: child.send_signal(signum))
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    with open(out, "a") as f:
        shown = ["python" if c == sys.executable else c for c in command]  # no machine's paths
        f.write(json.dumps({"command": shown, "exit": code, "seconds": round(seconds, 1),
                            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "peak_mib": round(usage.ru_maxrss / 1024, 1)}) + "\n")
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
