"""scripts/train_once.sh (its header is the usage): one fairseq-train command for a run directory, once.

    python3 -m fairseq_alibi_lab.train_once SAVE_DIR NAME -- fairseq-train DATA --save-dir SAVE_DIR ...

The models scripts/train.sh does not know (masked LMs, encoder-decoders) train through this: the
same lock, "finished" and flag record as train.py (recipes.py), then the command under
fairseq_alibi_lab/measure.py (wall time and peak memory to SAVE_DIR/resources.jsonl), its output appended to
SAVE_DIR/train.log and its progress lines shown. Stopped (SIGTERM, Ctrl-C), it stops the command
first, so that no trainer runs on unseen.
"""
import os
import re
import signal
import subprocess
import sys

from fairseq_alibi.tools import dictionaries
from fairseq_alibi.commands import mistakes
from fairseq_alibi.tools.flags import last_value
from fairseq_alibi_lab import recipes

USAGE = "usage: scripts/train_once.sh SAVE_DIR NAME -- fairseq-train ..."
SHOWN = re.compile(r"train_inner|valid on|done training|error")  # the log lines worth a screen


def fail(message):
    sys.exit(f"error: {message}")


def main(argv=None, environ=os.environ):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    save, name, *command = argv
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        fail(USAGE)
    max_update = last_value(command, "--max-update")
    if not max_update:
        fail(f"the fairseq-train command needs --max-update N to know when {name} is finished")
    # Whether there is a GPU is not asked here (torch: seconds).
    mistake = mistakes.common_mistake("train", command, None)
    if mistake:
        fail(mistake)
    os.makedirs(save, exist_ok=True)
    # The data directory is the command's first argument.
    data = command[1] if len(command) > 1 and os.path.isdir(command[1]) else None
    run_flags = recipes.with_training_data(command, data)
    try:
        lock = recipes.hold_run(save)
        state, _ = recipes.run_status(save, None, None, int(max_update), environ.get("CONTINUE_RUN") == "1", run_flags)
    except recipes.RunConflict as e:
        fail(e)
    if state == "new":
        recipes.record_flags(save, run_flags)
    if state == "finished":
        print(f"== {save} is already trained: leaving it as it is")
        return
    # The data's dictionaries kept beside the checkpoints, so that scoring on another corpus's is refused.
    if data and (problem := dictionaries.keep(data, save)):
        fail(problem)
    print(f"== training {name} -> {save}", flush=True)
    log_path = os.path.join(save, "train.log")
    training = subprocess.Popen([sys.executable, "-m", "fairseq_alibi_lab.measure", os.path.join(save, "resources.jsonl"), "--",
                                 *command],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, pass_fds=(lock,))
    stopped = []

    def stop(signum, frame):  # measure.py passes it on to the command
        stopped.append(signum)
        training.send_signal(signal.SIGTERM)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    with open(log_path, "a") as log:
        for line in training.stdout:
            log.write(line)
            log.flush()
            if SHOWN.search(line):
                print(line, end="", flush=True)
    code = training.wait()
    if stopped:
        print(f"stopped: rerun to resume {name}", file=sys.stderr)
        sys.exit(143)
    if code != 0:
        with open(log_path) as log:  # its last line says why (the plugin's one-line refusal, fairseq's exception)
            last = ([line.strip() for line in log if line.strip()] or [""])[-1]
        fail(f"training {name} failed: {last} (the whole log: {log_path})")
    # The data's dictionary fingerprint into each checkpoint (a top-level entry: these models'
    # configs have no field for it).
    if data and (problem := dictionaries.record(save, data)):
        fail(problem)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # before the training started (after, stop() has it): nothing runs on
        sys.exit("stopped before the training began: rerun the same command")
