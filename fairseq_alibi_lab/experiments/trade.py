"""The paper's headline trade: ALiBi trained short against sinusoidal models trained at each length,
with each training's wall-clock and peak memory."""
from fairseq_alibi_lab import trade_table
from fairseq_alibi_lab.claims import Claim
from fairseq_alibi_lab.experiments.base import BEFORE_SEPARABLE, Experiment, Model, Stages, register

SEQUENCES_FIXED = "Sinusoidal, sequences per update fixed"  # the variant (trade_table.py: a grid by tokens per update)
# The trade compares models trained at several lengths (a cell's third element: trained at T x L),
# each scored nonoverlapping.
TRADE = tuple(
    Claim(f"The sinusoidal model trained at {t}L is no worse at its own length than the one trained at L",
          ("Sinusoidal", t, t), ("Sinusoidal", 1), "at most", ("0",),
          declared="e5502a7", after_data=True) for t in (2, 4, 16)) + (
    Claim("ALiBi trained at L beats, at 16L, the sinusoidal model trained at 16L", ("ALiBi", 16), ("Sinusoidal", 16, 16),
          "lower", ("0",), declared="e5502a7", after_data=True),
    Claim("ALiBi trained at L, scored at 16L, beats the sinusoidal model trained and scored at L", ("ALiBi", 16),
          ("Sinusoidal", 1), "lower", ("0",), declared="e5502a7", after_data=True),
    Claim("At 4096 tokens per update, L beats 2L (64 against 32 sequences per update)", ("Sinusoidal at L, 2x tokens", 1),
          (SEQUENCES_FIXED, 2, 2), "lower", ("0",), declared="e5502a7", after_data=True),
    Claim("At 8192 tokens per update, L beats 4L (128 against 32 sequences per update)", ("Sinusoidal at L, 4x tokens", 1),
          (SEQUENCES_FIXED, 4, 4), "lower", ("0",), declared="e5502a7", after_data=True),
)
register("trade", Experiment(
    "The paper's headline trade: ALiBi trained at L=64 and scored at 64, 128, 256 and 1024 against "
    "sinusoidal models trained at each of those lengths and scored at their own; each training's "
    "wall-clock and peak memory (resources.jsonl beside its checkpoint) in trade.md; and sinusoidal models "
    "at 2L and 4L given L's sequences per update rather than its tokens, with their control at L "
    "given the same tokens.",
    (Model("ALiBi", "alibi", multiples=(1, 2, 4, 16)),
     *(Model("Sinusoidal", "sinusoidal", train_multiple=k, multiples=(k,)) for k in (1, 2, 4, 16)),
     # The recipe fixes tokens per update (2048: 32 sequences at L=64, 2 at 16L). These keep L's
     # sequences per update (k batches of 2048 tokens each), so k times the tokens and compute; not
     # at 16L, which would cost 16x (about 12 core-hours per seed on the CPU machine).
     *(Model(SEQUENCES_FIXED, "sinusoidal", ("--update-freq", str(k)), train_multiple=k, multiples=(k,))
       for k in (2, 4)),
     # Their control: at L, the same k times the tokens (k batches of 2048 per update), so that
     # what the variant gains from more sequences per update is told from what it gains from
     # more tokens.
     *(Model(f"Sinusoidal at L, {k}x tokens", "sinusoidal", ("--update-freq", str(k)), multiples=(1,))
       for k in (2, 4))),
    # ALiBi and the sinusoidal model at L are trained here again, not taken from the comparison
    # (same label, recipe and seeds): trade.md sets each training's wall-clock and peak memory
    # beside the others', which only means something for runs on one machine in one run.
    strides=("0",), stages=Stages(report=trade_table.report), claims=TRADE, kernel_rule=BEFORE_SEPARABLE))
