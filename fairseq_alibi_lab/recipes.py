"""The training recipes by name, and what a run is: its lock, "finished", the flags it was started
with. One definition, imported by scripts/train.sh's and train_once.sh's modules (train.py,
train_once.py) and the experiment runner, so none copies them. Plain Python (torch only to read a
checkpoint); no fairseq.
"""

from fairseq_alibi.tools.checkpoints import checkpoint_summary  # the library's checkpoint reader (torch on use)

# Batches made in the main thread: no DataLoader workers, and no fairseq prefetching thread (its BufferedIterator,
# --data-buffer-size): that daemon thread, collating the next batch with torch while the finished run exits,
# aborts the process ("terminate called without an active exception", pytorch/pytorch#38228) after its
# checkpoint was saved, so a run reads as failed. The same batches in the same order.
IN_THE_MAIN_THREAD = ("--num-workers", "0", "--data-buffer-size", "0")

# CPU scale on WikiText-2, tuned for the most model in minutes on 2 cores
# (examples/wikitext2/results/PROVENANCE.md): Adam, lr 0.003 after 100 warmup updates, decaying
# linearly to 0 at the last update (scripts/train.sh sets --total-num-update = --max-update),
# batches of 2048 tokens, no dropout (a run is about one epoch).
SMALL = ("--max-update", "1400", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "0.003",
         "--lr-scheduler", "polynomial_decay", "--warmup-updates", "100", "--dropout", "0.0",
         "--clip-norm", "0.1", "--max-tokens", "2048", "--seed", "1", "--required-batch-size-multiple", "1",
         *IN_THE_MAIN_THREAD, "--save-interval-updates", "100")

# The small recipe for the presets of one output matrix (bloom_small, gpt2_small): no adaptive
# softmax, so plain cross entropy (after scripts/train.sh's adaptive_loss: the last wins).
SMALL_ONE_SOFTMAX = SMALL + ("--criterion", "cross_entropy")


def wiki103(length, workers):
    """The paper's: 8 GPUs x 9216 tokens per update (L >= 3072: 3072 tokens x update-freq 3), NAG,
    lr 1.0 with a cosine schedule after 16k warmup updates from 1e-7, 286k updates; fewer GPUs
    accumulate to the same batch."""
    tokens, freq = (3072, 3) if length >= 3072 else (9216, 1)
    if 8 % workers:
        raise ValueError(f"{workers} GPUs: the paper's batch (8 x {tokens} tokens) needs 1, 2, 4 or 8 GPUs "
                         "(or set --max-tokens/--update-freq yourself after --)")
    return ("--max-update", "286000", "--lr", "1.0", "--t-mult", "2", "--lr-period-updates", "270000",
            "--lr-scheduler", "cosine", "--lr-shrink", "0.75", "--warmup-updates", "16000",
            "--warmup-init-lr", "1e-07", "--stop-min-lr", "1e-09", "--optimizer", "nag", "--min-lr", "0.0001",
            "--clip-norm", "0.1", "--max-tokens", str(tokens), "--update-freq", str(freq * 8 // workers),
            "--seed", "1", "--required-batch-size-multiple", "1", "--save-interval-updates", "2000")


def masked_lm(length, updates=3000):
    """The CPU-scale masked-LM recipe (the runner's mlm and littlebird): fairseq's masked_lm task
    (15% masked, 80/10/10) on blocks of `length` tokens, RoBERTa's Adam (0.9, 0.98), lr 0.001 warmed
    up over the first tenth of the updates and decaying linearly to 0 at the last, batches of 2048
    tokens, weight decay 0.01, 3000 updates (about 3 epochs of WikiText-2: at 600 the
    position-embedding twins had learned nothing from context; examples/wikitext2/results/mlm-diagnosis/)."""
    return ("--task", "masked_lm", "--criterion", "masked_lm", "--tokens-per-sample", str(length),
            "--sample-break-mode", "none", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--adam-eps", "1e-6",
            "--lr", "0.001", "--lr-scheduler", "polynomial_decay", "--warmup-updates", str(updates // 10),
            "--total-num-update", str(updates), "--max-update", str(updates), "--clip-norm", "1.0",
            "--max-tokens", "2048", "--weight-decay", "0.01", "--seed", "1", "--required-batch-size-multiple", "1",
            *IN_THE_MAIN_THREAD, "--save-interval-updates", "100", "--keep-interval-updates", "1",
            "--no-epoch-checkpoints", "--skip-invalid-size-inputs-valid-test")


def synthetic(updates=2400):
    """The CPU-scale encoder-decoder recipe of the synthetic tasks (examples/synthetic/run.sh), one
    for every model: pre-norm (it learns these tasks faster), Adam, lr 0.002 after 100 warm-up
    updates decaying linearly to 0 at the last, batches of 4096 tokens, no dropout, shared
    embeddings, 2400 updates (about 29 epochs: at 800 the sinusoidal twin and BiALiBi had not
    learned copy in distribution; at 2400 both do, examples/synthetic/budget/). Sources are padded
    on the right (bialibi's first token sits at index 0; in fairseq 0.12 --left-pad-source turns
    left padding off)."""
    return ("--task", "translation", "--source-lang", "src", "--target-lang", "tgt", "--left-pad-source",
            "--encoder-normalize-before", "--decoder-normalize-before", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)",
            "--lr", "0.002", "--lr-scheduler", "polynomial_decay", "--warmup-updates", "100",
            "--total-num-update", str(updates), "--max-update", str(updates), "--clip-norm", "1.0", "--max-tokens", "4096",
            "--dropout", "0.0", "--criterion", "cross_entropy", "--seed", "1", *IN_THE_MAIN_THREAD,
            "--required-batch-size-multiple", "1", "--no-epoch-checkpoints", "--save-interval-updates", "200",
            "--keep-interval-updates", "1", "--share-all-embeddings", "--max-source-positions", "1024",
            "--max-target-positions", "1024")


# The recipes by name, and what each trains (a KINDS value of fairseq_alibi/tools/checkpoints.py).
RECIPE_KIND = {"small": "causal LM", "bloom_small": "causal LM", "gpt2_small": "causal LM", "wiki103": "causal LM", "masked_lm": "masked LM", "synthetic": "encoder-decoder"}
RECIPES = tuple(RECIPE_KIND)


def recipe(preset, length, workers=1, updates=None):
    """The fairseq-train flags of a recipe by name, at training length `length` (masked_lm: its
    schedule for `updates` updates, None: its own; the causal recipes' schedules follow a
    --max-update given after them: scripts/train.sh)."""
    if preset == "small":
        return SMALL
    if preset in ("bloom_small", "gpt2_small"):
        return SMALL_ONE_SOFTMAX
    if preset == "wiki103":
        return wiki103(length, workers)
    if preset == "masked_lm":
        return masked_lm(length, *([updates] if updates else []))
    if preset == "synthetic":  # no training length: the tasks' sizes are in the data
        return synthetic(*([updates] if updates else []))
    raise ValueError(f"unknown preset '{preset}': use {', '.join(RECIPES)}")


def last_value(flags, name, default=None):
    """The value of the last `name` in flags (fairseq's argparse: the last one given wins)."""
    from fairseq_alibi.tools.flags import last_value as value

    return value(flags, name, default)



class RunConflict(ValueError):
    """SAVE_DIR holds something other than the run asked for."""


# What a run was started with (its fairseq-train flags), kept beside its checkpoints, so that a rerun
# with another recipe (more updates, another learning rate or task flag) is refused instead of
# resuming into a model that is neither, or of being called "already trained".
RUN_FLAGS = "train_flags.json"
# Flags that say where a run writes or how it is run, not what it learns: a rerun may change them.
BOOKKEEPING = {"--save-dir", "--tensorboard-logdir", "--user-dir", "--num-workers", "--data-buffer-size", "--log-interval",
               "--log-format", "--log-file", "--no-progress-bar", "--save-interval-updates", "--keep-interval-updates", "--no-epoch-checkpoints",
               "--cpu", "--distributed-world-size", "--distributed-port", "--distributed-rank",
               "--validate-interval-updates", "--disable-validation"}


# The training data a run learns from (files.data_fingerprint of its dictionary and train split), kept
# with its flags: a finished run is "already trained" only on the data it was trained on.
TRAINING_DATA = "--training-data-sha256"


def with_training_data(flags, data):
    """A run's flags as recorded: the fairseq-train flags and the fingerprint of DATA's training text
    (none where DATA has no train split of its own: a translation task's is per language)."""
    import os

    from fairseq_alibi.tools.files import data_fingerprint

    if not data or not os.path.isfile(os.path.join(data, "train.idx")):
        return list(flags)
    return [*flags, TRAINING_DATA, data_fingerprint(data, "train")]


def recorded_training_data(save_dir):
    """The training data's fingerprint a run in save_dir was started on, or None (a run from before
    it was recorded, or none)."""
    import json
    import os

    try:
        with open(os.path.join(save_dir, RUN_FLAGS)) as f:
            return json.load(f).get(TRAINING_DATA)
    except (OSError, ValueError, AttributeError):
        return None


def flag_values(flags):
    """{flag: the value the run gets} of a fairseq-train argument list (flags.flag_values), less
    the bookkeeping flags."""
    from fairseq_alibi.tools.flags import flag_values as values

    return {flag: value for flag, value in values(flags).items() if flag not in BOOKKEEPING}


def record_flags(save_dir, flags):
    """Keep what a new run is started with (written whole or not at all)."""
    import json
    import os
    from fairseq_alibi.tools.files import written_whole
    with written_whole(os.path.join(save_dir, RUN_FLAGS)) as path, open(path, "w") as f:
        json.dump(flag_values(flags), f, indent=0, sort_keys=True)


def other_flags(save_dir, then, max_update, flags):
    """None if the run in save_dir was started with these flags, else what differs, for a message.
    A run from before RUN_FLAGS was kept is compared on its --max-update only (`then`: its
    checkpoint's)."""
    import json
    import os

    path = os.path.join(save_dir, RUN_FLAGS)
    if os.path.isfile(path):
        with open(path) as f:
            was = json.load(f)
        now = flag_values(flags)
        if TRAINING_DATA not in was:  # a run from before the data was recorded: not known, not compared
            now.pop(TRAINING_DATA, None)
    else:
        if then in (None, max_update):
            return None
        was, now = {"--max-update": str(then)}, {"--max-update": str(max_update)}

    def said(value):
        return "not given" if value is None else "given" if value == "" else value

    if was.get(TRAINING_DATA) != now.get(TRAINING_DATA):
        return (f"other training data: its dictionary and train split's fingerprint {said(was.get(TRAINING_DATA))} "
                f"then, {said(now.get(TRAINING_DATA))} now")
    differ = [f"{flag} {said(was.get(flag))} then, {said(now.get(flag))} now"
              for flag in sorted(set(was) | set(now)) if was.get(flag) != now.get(flag)]
    return "; ".join(differ) or None


def hold_run(save_dir, wait=False):
    """A descriptor holding SAVE_DIR/.train.lock (one training per save directory, for as long as
    the descriptor is open, in this process or one that inherits it); RunConflict if another holds it,
    or with wait, once the other has let it go (the runner's parts: a continuation may train its first
    stage while that stage's own job starts)."""
    import fcntl
    import os

    lock = os.open(os.path.join(save_dir, ".train.lock"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        if wait:
            print(f"waiting for the training running on {save_dir} to end", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
            return lock
        os.close(lock)
        raise RunConflict(f"another training is running on {save_dir} (it holds {save_dir}/.train.lock): wait for "
                          "it, or give another SAVE_DIR") from None
    return lock


def wait_for_run(save_dir):
    """Return once no training holds SAVE_DIR/.train.lock (at once where none does)."""
    import fcntl
    import os

    lock = os.open(os.path.join(save_dir, ".train.lock"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
    finally:
        os.close(lock)


def kept_checkpoint(save_dir, updates, results=""):
    """fairseq's checkpoint_EPOCH_UPDATES.pt of a run after `updates`; where the run is not here, the one
    results' rows name (the epoch is fairseq's to say); else a pattern no file matches."""
    import os
    import re

    from fairseq_alibi_lab.result_rows import read_rows

    pattern = re.compile(re.escape(os.path.join(save_dir, "checkpoint_")) + rf"\d+_{updates}\.pt")
    found = sorted(os.path.join(save_dir, name) for name in (os.listdir(save_dir) if os.path.isdir(save_dir) else ())
                   if pattern.fullmatch(os.path.join(save_dir, name)))
    named = [r["checkpoint"] for r in read_rows(results) if pattern.fullmatch(r.get("checkpoint") or "")] if results else []
    return (found or named or [os.path.join(save_dir, f"checkpoint_?_{updates}.pt")])[0]


def run_status(save_dir, arch, length, max_update, other_ok=False, flags=None):
    """("new" | "resume" | "finished", updates done): a run is finished when its checkpoint_last.pt
    has reached max_update updates. Raises RunConflict (one line) for an unreadable checkpoint, and,
    unless other_ok, for one of another architecture or length (arch None: not checked) or a run
    started with other flags than `flags` (None: not checked); for a run on other training data
    (flags' TRAINING_DATA) always."""
    import os

    last = os.path.join(save_dir, "checkpoint_last.pt")
    if not os.path.isfile(last):
        return "new", 0
    try:
        done_arch, done_length, done_updates, done_max_update = checkpoint_summary(last)
    except Exception:  # noqa: BLE001  (whatever torch or a truncated file raises)
        raise RunConflict(f"{last} is unreadable: move it away or choose another SAVE_DIR") from None
    differ = other_flags(save_dir, done_max_update, max_update, flags) if flags is not None else None
    if differ and differ.startswith("other training data"):  # continued, it would be neither run's model
        raise RunConflict(f"{save_dir} holds a run ({done_updates} updates) on {differ}: give the data it was "
                          "trained on, or another SAVE_DIR (--checkpoints) for a run on this data")
    if other_ok:
        pass
    elif arch is not None and (done_arch, done_length) != (arch, length):
        raise RunConflict(f"{save_dir} holds another run ({done_arch} at L={done_length}, {done_updates} updates), "
                          f"not {arch} at L={length}: choose another SAVE_DIR, or CONTINUE_RUN=1 to continue that one")
    elif differ:
        raise RunConflict(f"{save_dir} holds a run ({done_updates} updates) started with other flags ({differ}): "
                          "choose another SAVE_DIR, or CONTINUE_RUN=1 to continue that one with these")
    return ("finished" if done_updates >= max_update else "resume"), done_updates
