"""The runner's child processes: stopped with it, yielding as it does, their progress shown; and its
data preparation, one runner at a time."""
import contextlib
import fcntl
import os
import re
import signal


def duration(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def follow(proc, log, where, updates=None, every=60.0, clock=None):
    """The training's output into its log; its validations (at `where`) and errors shown, and, at most
    once a minute (`every` seconds), its updates out of `updates` with the time left at the rate since
    the first update it reported (start-up, and a resumed run's earlier updates, not counted)."""
    import time

    clock = clock or time.monotonic
    began = shown = clock()
    first = None  # (time, updates) of the first update reported: the rate counts from there (start-up left out)
    for line in proc.stdout:
        log.write(line)
        log.flush()  # tail -f SAVE/train.log follows it
        done = re.search(r"\| train_inner \| .*num_updates=(\d+)", line)
        if done and updates:
            now, n = clock(), int(done[1])
            first = first or (now, n)
            if now - shown >= every and n > first[1]:
                left = (updates - n) * (now - first[0]) / (n - first[1])
                print(f"    {n}/{updates} updates ({duration(now - began)} so far, about {duration(left)} left)", flush=True)
                shown = now
        valid = re.search(r"valid on .*\| ppl ([\d.]+) .*\| num_updates (\d+)", line)
        if valid:
            print(f"    {valid[2]} updates: validation perplexity {valid[1]}{where}", flush=True)
        elif re.search(r"done training|already trained|error", line):
            print("   ", line.split(" | ")[-1].rstrip(), flush=True)


def relayed(proc, shown):
    """All of proc's stderr once it ends, its lines that start with `shown` printed as they come (a
    scorer's progress), indented as the runner's."""
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith(shown):
            print(f"    {line.rstrip()}", flush=True)
    proc.wait()
    return "".join(lines)


@contextlib.contextmanager
def stopped_together(*procs):
    """If the runner is stopped (Ctrl-C, SIGTERM), so is proc with everything it started (its own
    session): no trainer is left running unseen, writing to a directory a rerun will use. And as
    the runner yields, so do they: on Linux a new session is a new scheduling group (autogroup),
    where the runner's `nice` no longer counts, so the group is given the runner's niceness."""
    niceness = os.nice(0)
    for proc in procs if niceness > 0 else ():
        with contextlib.suppress(OSError), open(f"/proc/{proc.pid}/autogroup", "w") as group:
            group.write(str(niceness))
    try:
        yield
    except BaseException:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in procs:
            with contextlib.suppress(ChildProcessError):
                proc.wait()
        raise


def one_preparation_at_a_time(prepare, data_bin="data-bin"):
    """prepare() holding DATA_BIN/.prepare.lock: two runners started together (two --out) would build
    the same data-bin folders at once (one crashed on the other's rename); the second waits, then
    finds them made."""
    os.makedirs(data_bin, exist_ok=True)
    with open(os.path.join(data_bin, ".prepare.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return prepare()
