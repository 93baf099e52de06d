"""Is a checkpoint's dictionary the data's? Plain Python, no import of fairseq (torch only to read a
checkpoint's config, in check), so that the shell scripts ask it cheaply (python3
fairseq_alibi/dictionaries.py ...).

fairseq checkpoints do not hold their dictionary: it is read from the data directory, so a model
scored or fine-tuned on another corpus's dictionary of the same size reads every token as another
word, silently. The plugin's causal models record their training dictionary's fingerprint in their
config (--dictionary-sha256, which scripts/train.sh and the converter set), checked when the model
is built and by check() here, whatever sits beside the checkpoint. For every model, scripts/train.sh
and train_once.sh also keep a copy of the training data's dictionaries (dict.txt; a translation
task's dict.src.txt, dict.tgt.txt) beside the checkpoints (as fairseq's released models ship theirs),
and the tools compare words, not counts.

    python3 fairseq_alibi/dictionaries.py check CHECKPOINT DATA_DIR     # exit 1 with one line if they differ
    python3 fairseq_alibi/dictionaries.py keep DATA_DIR SAVE_DIR        # copy its dict*.txt into SAVE_DIR (refuse another)
"""
import os
import shutil
import sys
from typing import List, Optional

from fairseq_alibi.files import written_whole  # noqa: E402  (absolute: also run as a script, by train.sh)


def words(path: str) -> List[str]:
    """The symbols of a fairseq dict.txt, in order: each line `WORD COUNT [#fairseq:overwrite]`,
    counts and flags dropped (as fairseq's Dictionary.add_from_file reads it)."""
    symbols = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            word, _, last = line.rstrip().rpartition(" ")
            if last == "#fairseq:overwrite":
                word = word.rpartition(" ")[0]
            if word:
                symbols.append(word)
    return symbols


def fingerprint(symbols: List[str]) -> str:
    """A dictionary's words, in order, as 16 hex digits of their sha256: what a plugin model records
    of its training data's dictionary (--dictionary-sha256, in every checkpoint's config)."""
    import hashlib

    return hashlib.sha256("\n".join(symbols).encode("utf-8")).hexdigest()[:16]


def dictionary_fingerprint(data: str) -> str:
    """fingerprint() of a data directory's dict.txt: its words only (files.data_fingerprint is of the
    bytes of the dictionary and a split)."""
    return fingerprint(words(os.path.join(data, "dict.txt")))


def recorded_problem(recorded: Optional[str], data: str, what: str) -> Optional[str]:
    """None if a model's recorded dictionary fingerprint (None: a model from before it was recorded)
    is DATA's, else the one-line reason."""
    if not recorded or not os.path.isfile(os.path.join(data, "dict.txt")):
        return None
    own = dictionary_fingerprint(data)
    if recorded != own:
        return (f"{what} was trained on another dictionary than {data}'s (its dictionary_sha256 {recorded}, "
                f"{data}'s {own}): give the data it was trained on")
    return None


def difference(kept: str, data: str) -> Optional[str]:
    """None if the two dict.txt files list the same words in the same order, else the first
    difference, in a few words."""
    a, b = words(kept), words(data)
    for line, (x, y) in enumerate(zip(a, b), 1):
        if x != y:
            return f"line {line} of dict.txt is {x!r} there, {y!r} here"
    if len(a) != len(b):
        return f"{len(a)} words there, {len(b)} here"
    return None


def dictionary_files(directory: str) -> List[str]:
    """The fairseq dictionaries of a data or save directory, by name: dict.txt (a language model's),
    dict.src.txt and dict.tgt.txt (a translation task's, one per language)."""
    if not os.path.isdir(directory):
        return []
    return sorted(n for n in os.listdir(directory) if n.startswith("dict") and n.endswith(".txt"))


def checkpoint_dictionary(checkpoint: str) -> Optional[str]:
    """The directory holding the dictionaries kept beside a checkpoint, if it has any."""
    directory = os.path.dirname(os.path.abspath(checkpoint))
    return directory if dictionary_files(directory) else None


def check(checkpoint: str, data: str) -> Optional[str]:
    """None if CHECKPOINT may read DATA's tokens, else the one-line reason: each dictionary kept
    beside it (any model; the first difference named), then the dictionary recorded in its config
    (the plugin's models, --dictionary-sha256: whatever sits beside it). Reads the checkpoint (torch)."""
    from fairseq_alibi.checkpoints import NotACheckpoint, field, model_and_task, read_state

    kept = checkpoint_dictionary(checkpoint)
    for name in dictionary_files(kept) if kept else ():
        if not os.path.isfile(os.path.join(data, name)):
            return (f"{checkpoint} was trained on data with {name}, which {data} lacks: give the data it was "
                    "trained on")
        why = difference(os.path.join(kept, name), os.path.join(data, name))
        if why:
            return (f"{checkpoint} was trained on another dictionary than {data}'s ({why.replace('dict.txt', name)}): "
                    "give the data it was trained on")
    try:
        recorded = field(model_and_task(read_state(checkpoint))[0], "dictionary_sha256")
    except (NotACheckpoint, KeyError, TypeError):
        recorded = None  # not ours to say: the caller's own checks name what it is
    return recorded_problem(recorded, data, checkpoint)


def keep(data: str, save_dir: str) -> Optional[str]:
    """Copy DATA's dictionaries into SAVE_DIR (each through a temporary name); None if done or
    already there, else why not (SAVE_DIR holds another dictionary)."""
    for name in dictionary_files(data):
        source, target = os.path.join(data, name), os.path.join(save_dir, name)
        if os.path.isfile(target):
            why = difference(target, source)
            if why:
                return (f"{save_dir} holds a run on another dictionary than {data}'s ({why.replace('dict.txt', name)}): "
                        "give its own data, or another SAVE_DIR")
            continue
        with written_whole(target) as partial:
            shutil.copyfile(source, partial)
    return None


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("check", "keep"):
        sys.exit(__doc__.strip().splitlines()[-2].strip() + "\n" + __doc__.strip().splitlines()[-1].strip())
    problem = (check if sys.argv[1] == "check" else keep)(sys.argv[2], sys.argv[3])
    if problem:
        sys.exit(f"error: {problem}")
