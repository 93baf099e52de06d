"""The one checkpoint reader and inspector: a fairseq checkpoint's state, what kind of model it is
(causal LM, masked LM, encoder-decoder: from its task), its architecture, training length and
updates, and the one line that names the tool for a checkpoint of another kind. torch only, no
fairseq import (the lab's scripts and the plugin's tools both read checkpoints through it)."""


class NotACheckpoint(ValueError):
    """A file that does not load as a fairseq checkpoint (the message is one line)."""


def read_state(path):
    """The checkpoint's state dict (memory-mapped: its tensors are read only when used), or
    NotACheckpoint naming the file."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception as error:  # noqa: BLE001  (unpickling errors have many types)
        raise NotACheckpoint(f"{path} could not be loaded as a fairseq checkpoint ({type(error).__name__})") from None
    if not (isinstance(state, dict) and ("cfg" in state or "args" in state)):
        raise NotACheckpoint(f"{path} is not a fairseq checkpoint")
    return state


def field(section, name):
    """A config field of a dict section, or of an argparse.Namespace (RoBERTa's, the translation model's)."""
    return section.get(name) if hasattr(section, "get") else getattr(section, name, None)


def learned_positions_end(state):
    """The length a checkpoint's learned position table ends at (a GPT-2 imported, the learned twin: no row
    past it), or None where positions do not end (every method of the plugin, sinusoidal positions)."""
    model, task = model_and_task(state)
    if not field(model, "decoder_learned_pos") or field(model, "no_token_positional_embeddings"):
        return None
    return int(field(model, "max_target_positions") or field(task, "tokens_per_sample"))


def model_and_task(state):
    """The model and task sections of a loaded checkpoint's config, of either form."""
    cfg = state.get("cfg") or {"model": state.get("args"), "task": state.get("args")}
    return cfg["model"], cfg["task"]


def identity(path, state):
    """What a scored row says of the checkpoint it scored (the lab's streaming and retrieval rows):
    its model, path, training length, training seed and updates."""
    model, task = model_and_task(state)
    common = (state.get("cfg") or {}).get("common") or {}
    return {"model": field(model, "_name"), "checkpoint": path, "train_length": field(task, "tokens_per_sample"),
            "seed": field(common, "seed"), "updates": (state.get("optimizer_history") or [{}])[-1].get("num_updates")}


def checkpoint_summary(path):
    """(architecture, training length, updates done, the --max-update it was run with) of a fairseq
    checkpoint."""
    state = read_state(path)
    model, task = model_and_task(state)
    cfg = state.get("cfg") or {}
    section = cfg.get("optimization") or cfg.get("model") or state.get("args")  # argparse era: all in one
    # _name is the --arch given (arch itself only in argparse-era configs)
    return (field(model, "arch") or field(model, "_name"), field(task, "tokens_per_sample"),
            state["optimizer_history"][-1]["num_updates"], field(section, "max_update") if section is not None else None)


# What a checkpoint is, from its task, and the tool that scores each kind.
KINDS = {"language_modeling": "causal LM", "masked_lm": "masked LM", "translation": "encoder-decoder"}
SCORED_BY = {"causal LM": "scripts/eval.sh (or fairseq-alibi-eval-lm)", "masked LM": "scripts/eval_mlm.py",
             "encoder-decoder": "examples/synthetic/exact_match.py"}


def checkpoint_kind(state):
    """"causal LM", "masked LM", "encoder-decoder", or the task's own name, of a loaded checkpoint."""
    _, task = model_and_task(state)
    name = field(task, "_name") or field(task, "task")  # argparse-era configs: the task's name in .task
    return KINDS.get(name, name or "unknown")


def wrong_kind(state, path, wanted):
    """None if the checkpoint is a `wanted` (a KINDS value) that the tools score right, else one line
    naming what it is and which tool takes it (or that it must be imported again: unmasked_import)."""
    if not isinstance(state, dict):
        return f"{path} is not a fairseq checkpoint"
    kind = checkpoint_kind(state)
    if kind == wanted:
        return unmasked_import(state, path)
    tool = f": score it with {SCORED_BY[kind]}" if kind in SCORED_BY else ""
    return f"{path} is {with_article(kind)} checkpoint, not {with_article(wanted)}{tool}"


def unmasked_import(state, path):
    """None, or the line refusing a GPT-2 imported before fairseq's symbols it lacks were masked
    (models/masked_output.py): its <s>, <pad> and <unk> are zero rows whose logit 0 takes the softmax's
    mass, so every score of it is wrong. A GPT-2 that kept fairseq's ids has rows of its own there."""
    if "fairseq_alibi_import" not in state or field(model_and_task(state)[0], "masked_output_symbols") is not None:
        return None
    rows = (state.get("model") or {}).get("decoder.embed_tokens.weight")
    if rows is None or rows.dim() != 2 or rows.size(0) < 4 or not bool((rows[[0, 1, 3]] == 0).all()):
        return None
    return (f"{path} is a GPT-2 imported before fairseq's <s>, <pad> and <unk> were masked: they take its softmax's "
            "mass and every score of it is wrong; import the GPT-2 again with fairseq-alibi-import-hf")


def with_article(kind):
    """'a masked LM', 'an encoder-decoder'."""
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"
