"""Common mistakes on fairseq's command line that fairseq itself answers with a traceback (or a
run that never ends, or a silently wrong model): caught before it starts, in one line naming the fix.
Plain Python, no torch or fairseq (but for a fine-tune, whose start is read), so that it is asked
cheaply: by scripts/train.sh and train_once.sh (fairseq_alibi_lab/train.py, train_once.py) and
fairseq_alibi/commands/cli.py (fairseq-alibi-train, fairseq-alibi-eval-lm).
"""
from typing import List, Optional

from fairseq_alibi.tools.flags import flag_values

HALF_PRECISION = ("--fp16", "--bf16", "--amp", "--memory-efficient-fp16", "--memory-efficient-bf16")
LM_TOKENS_PER_SAMPLE = 1024  # fairseq's language_modeling default


def common_mistake(tool: str, argv: List[str], gpus: Optional[int]) -> Optional[str]:
    """None, or the one-line fix for a mistake fairseq would crash on: a half-precision flag without
    a GPU (gpus None: not known), --tokens-per-sample that is not a positive integer (a
    ZeroDivisionError in its block maker), for training a --max-update of 0 (fairseq's "no limit": a
    run that never ends) or a fine-tune that drops the symbols its start never predicts (an imported GPT-2's
    --masked-output-symbols: the new model would give them mass), and for fairseq-eval-lm a --context-window
    as long as the window itself."""
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
    if tool == "train" and values.get("--finetune-from-model"):
        from fairseq_alibi.models.masked_output import finetune_problem  # reads the checkpoint: torch, only here

        problem = finetune_problem(values["--finetune-from-model"], values.get("--masked-output-symbols"))
        if problem:
            return problem
    context = values.get("--context-window", "0")
    if tool == "eval_lm" and (not context.isdigit() or int(context) >= int(tokens)):
        return (f"--context-window {context} must be a whole number below --tokens-per-sample {tokens}: each "
                "window scores its last tokens-per-sample minus context-window tokens")
    return None
