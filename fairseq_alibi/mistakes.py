"""Common mistakes on fairseq's command line that fairseq itself answers with a traceback (or a
run that never ends): caught before it starts, in one line naming the fix. Plain Python, no torch
or fairseq, so that scripts/train.sh asks it cheaply:

    python3 fairseq_alibi/mistakes.py train|eval_lm GPUS -- FLAGS...   # exit 1 with one line if one is found
                                        (GPUS "-": not known; then only --cpu says there is none)

scripts/train_once.sh and fairseq_alibi/cli.py (fairseq-alibi-train, fairseq-alibi-eval-lm) ask it too.
"""
import sys
from typing import List, Optional

from fairseq_alibi.flags import flag_values  # absolute: also run as a script, by train.sh

HALF_PRECISION = ("--fp16", "--bf16", "--amp", "--memory-efficient-fp16", "--memory-efficient-bf16")
LM_TOKENS_PER_SAMPLE = 1024  # fairseq's language_modeling default


def common_mistake(tool: str, argv: List[str], gpus: Optional[int]) -> Optional[str]:
    """None, or the one-line fix for a mistake fairseq would crash on: a half-precision flag without
    a GPU (gpus None: not known), --tokens-per-sample that is not a positive integer (a
    ZeroDivisionError in its block maker), for training a --max-update of 0 (fairseq's "no limit": a
    run that never ends), and for fairseq-eval-lm a --context-window as long as the window itself."""
    values = flag_values(argv)
    precision = next((a for a in argv if a in HALF_PRECISION), None)
    if precision and (gpus == 0 or "--cpu" in argv):
        return f"{precision} needs a GPU and none was found: drop it to run on CPU in fp32"
    tokens = values.get("--tokens-per-sample", str(LM_TOKENS_PER_SAMPLE))
    if not tokens.isdigit() or int(tokens) < 1:
        return f"--tokens-per-sample must be a positive integer, got '{tokens}'"
    updates = values.get("--max-update", "1")
    if tool == "train" and (not updates.isdigit() or int(updates) < 1):
        return f"--max-update must be a positive integer, got '{updates}' (0 is fairseq's no limit: a run that never ends)"
    context = values.get("--context-window", "0")
    if tool == "eval_lm" and (not context.isdigit() or int(context) >= int(tokens)):
        return (f"--context-window {context} must be a whole number below --tokens-per-sample {tokens}: each "
                "window scores its last tokens-per-sample minus context-window tokens")
    return None


if __name__ == "__main__":
    if (len(sys.argv) < 4 or sys.argv[1] not in ("train", "eval_lm") or sys.argv[3] != "--"
            or not (sys.argv[2].isdigit() or sys.argv[2] == "-")):
        sys.exit(__doc__.strip().splitlines()[4].strip())
    mistake = common_mistake(sys.argv[1], sys.argv[4:], int(sys.argv[2]) if sys.argv[2] != "-" else None)
    if mistake:
        sys.exit(f"error: {mistake}")
