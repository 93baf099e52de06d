"""Is a checkpoint's dictionary the data's? Plain Python, no import of fairseq (torch only to read a
checkpoint's config, in check), so that the trainers and scorers ask it cheaply.

fairseq checkpoints do not hold their dictionary: it is read from the data directory, so a model
scored or fine-tuned on another corpus's dictionary of the same size reads every token as another
word, silently. The plugin's causal models record their training dictionary's fingerprint in their
config (--dictionary-sha256, which scripts/train.sh and the converter set), checked when the model
is built and by check() here, whatever sits beside the checkpoint. Every other model (a stock twin,
a masked LM, an imported GPT-2) has it as a top-level entry of its checkpoint
(fairseq loads past it), written when its training ends (record, by scripts/train.sh and
train_once.sh) or by the importer, and checked by check() the same way. For every model, scripts/train.sh
and train_once.sh also keep a copy of the training data's dictionaries (dict.txt; a translation
task's dict.src.txt, dict.tgt.txt) beside the checkpoints (as fairseq's released models ship theirs),
and the tools compare words, not counts: check(CHECKPOINT, DATA_DIR), keep(DATA_DIR, SAVE_DIR) and
record(SAVE_DIR, DATA_DIR) each return None or the one line that refuses.
"""
import os
import shutil
from typing import List, Optional

from fairseq_alibi.tools.files import written_whole

RECORDED = "dictionary_sha256"  # a plugin model's config field; any other model's top-level checkpoint entry


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
    from fairseq_alibi.tools.checkpoints import NotACheckpoint, field, model_and_task, read_state

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
        recorded = recorded_in(read_state(checkpoint))
    except (NotACheckpoint, KeyError, TypeError):
        recorded = None  # not ours to say: the caller's own checks name what it is
    return recorded_problem(recorded, data, checkpoint)


def recorded_in(state) -> Optional[str]:
    """The dictionary fingerprint a loaded checkpoint records (its config's, else its own entry), or None."""
    from fairseq_alibi.tools.checkpoints import field, model_and_task

    return field(model_and_task(state)[0], RECORDED) or state.get(RECORDED)


def record(save_dir: str, data: str) -> Optional[str]:
    """DATA's dictionary fingerprint written into each checkpoint*.pt of SAVE_DIR that records none
    (each through a temporary name); None if done, else why not (one line). A checkpoint that
    records another dictionary is refused, never rewritten. Data without a dict.txt (an
    encoder-decoder's dict.src.txt and dict.tgt.txt) records nothing: the copies kept beside the
    checkpoints are what guards those."""
    import torch

    from fairseq_alibi.tools.checkpoints import NotACheckpoint, read_state

    if not os.path.isfile(os.path.join(data, "dict.txt")):
        return None
    own = dictionary_fingerprint(data)
    for name in sorted(n for n in os.listdir(save_dir) if n.startswith("checkpoint") and n.endswith(".pt")):
        path = os.path.join(save_dir, name)
        try:
            state = read_state(path)
        except NotACheckpoint as e:
            return str(e)
        recorded = recorded_in(state)
        if recorded and recorded != own:
            return recorded_problem(recorded, data, path)
        if recorded:
            continue
        state = torch.load(path, map_location="cpu", weights_only=False)  # whole: it is rewritten
        state[RECORDED] = own
        with written_whole(path) as partial:  # a full or read-only disk: one line, the checkpoint as it was
            try:
                torch.save(state, partial)
            except RuntimeError as e:  # torch's zip writer reports a full disk so
                raise OSError(28, f"torch.save: {str(e).strip().splitlines()[0]}")
    return None


# The byte-level BPE that turns text into a dictionary's symbols where they are GPT-2 ids (fairseq's
# hf_byte_bpe reads them; the export builds its tokenizer from them): kept with the dictionary.
BPE_FILES = ("vocab.json", "merges.txt")


def keep(data: str, save_dir: str) -> Optional[str]:
    """Copy DATA's dictionaries (and their BPE files, if there) into SAVE_DIR (each through a
    temporary name); None if done or already there, else why not (SAVE_DIR holds another dictionary)."""
    for name in BPE_FILES if all(os.path.isfile(os.path.join(data, n)) for n in BPE_FILES) else ():
        source, target = os.path.join(data, name), os.path.join(save_dir, name)
        if os.path.isfile(target) and open(target, "rb").read() != open(source, "rb").read():
            return f"{save_dir} holds another {name} than {data}'s: give its own data, or another SAVE_DIR"
        if not os.path.isfile(target):
            with written_whole(target) as partial:
                shutil.copyfile(source, partial)
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
