"""Symbols a model never predicts: their logits are -inf, so they take no probability mass.

A GPT-2 imported into fairseq (hf/import_gpt2.py) gains fairseq's <s>, <pad> and <unk>, which the
GPT-2 lacks, and keeps its <|endoftext|> row beside fairseq's </s>, which is the same token. Left in
the softmax they take mass the GPT-2 never gave (on a trained GPT-2, whose logits sit far below zero,
almost all of it: a zero row's logit 0 beats every real token's). --masked-output-symbols lists their
dictionary indices; every model that takes the option (the imported GPT-2's gpt2_transformer_lm and
the plugin's position LMs it is converted to) masks them in its output layer, so that fairseq-eval-lm,
the hub interface, generation, training and the Hugging Face export all see the GPT-2's distribution.
"""
from dataclasses import field
from typing import List, Optional

import torch

from fairseq_alibi.checks import ConfigError

MASKED_OUTPUT_HELP = ("comma-separated dictionary indices the model never predicts (their logits are -inf): the "
                      "fairseq symbols an imported GPT-2 lacks (fairseq-alibi-import-hf sets it)")
# The option as a fairseq model config field (name, type, dataclass field).
MASKED_OUTPUT_FIELD = ("masked_output_symbols", Optional[str], field(default=None, metadata={"help": MASKED_OUTPUT_HELP}))


def parse_symbols(text: Optional[str], vocab_size: int) -> List[int]:
    """The indices of --masked-output-symbols (empty without it), checked against the vocabulary."""
    if text is None or not str(text).strip():
        return []
    try:
        symbols = [int(s) for s in str(text).split(",")]
    except ValueError:
        raise ConfigError(f"--masked-output-symbols {text!r}: give comma-separated dictionary indices, e.g. 0,1,3") from None
    bad = [s for s in symbols if not 0 <= s < vocab_size]
    if bad:
        raise ConfigError(f"--masked-output-symbols {text!r}: {bad[0]} is not an index of the {vocab_size}-symbol "
                          "dictionary: the option belongs to another dictionary's model")
    if len(set(symbols)) == vocab_size:
        raise ConfigError(f"--masked-output-symbols {text!r} masks every symbol: the model could predict nothing")
    return sorted(set(symbols))


def mask_output(decoder, text: Optional[str]):
    """Make the decoder's output layer give -inf at the symbols of --masked-output-symbols `text`
    (nothing without it). The state dict is unchanged: the indices are a non-persistent buffer."""
    symbols = parse_symbols(text, len(decoder.dictionary))
    if not symbols:
        return
    if getattr(decoder, "adaptive_softmax", None) is not None or getattr(decoder, "output_projection", None) is None:
        raise ConfigError("--masked-output-symbols needs one output matrix: drop --adaptive-softmax-cutoff")
    projection = decoder.output_projection
    projection.register_buffer("masked_symbols", torch.tensor(symbols, dtype=torch.long), persistent=False)
    projection.register_forward_hook(_masked_logits)


def _masked_logits(projection, inputs, logits):
    return logits.index_fill(-1, projection.masked_symbols, float("-inf"))


def finetune_problem(start: str, masked: Optional[str]) -> Optional[str]:
    """None, or why a fine-tune from the checkpoint `start` with --masked-output-symbols `masked` would
    silently change which symbols the model predicts (fairseq loads only the start's weights)."""
    import os

    from fairseq_alibi.tools import checkpoints

    if not os.path.isfile(start):
        return None  # fairseq's own message
    try:
        theirs = checkpoints.field(checkpoints.model_and_task(checkpoints.read_state(start))[0], "masked_output_symbols")
    except checkpoints.NotACheckpoint:
        return None
    if (theirs or None) == (masked or None):
        return None
    if theirs:
        return (f"--finetune-from-model {start} never predicts the symbols {theirs} (an imported GPT-2's): give "
                f"--masked-output-symbols {theirs} (and --arch gpt2_transformer_lm for learned positions)")
    return f"--masked-output-symbols {masked}: {start} predicts every symbol; drop the flag"
