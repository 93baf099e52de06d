#!/usr/bin/env python3
"""Verdicts on comparisons of seeded cells: an experiment's declared claims, and any two cells asked for.

    python scripts/claims.py RESULTS.jsonl [--experiment NAME] [--out claims.md]
    python scripts/claims.py RESULTS.jsonl --compare "LABEL A@K" "LABEL B@K" [--relation lower|at-most]

A cell is (label, K x L) of one stride, over the training seeds (one run, one checkpoint, per seed);
L is the shortest L_valid scored, where the models were trained. The synthetic tasks' cells are
(label, task, size bucket) of exact match, in percent (higher is better). Each comparison gets,
from one function (compare):
- the descriptive rule: "separated by the seeds' spread" where the means differ by more than the
  two sample standard deviations together, else "within the seeds' spread". It is a description,
  not a significance test;
- a test beside it, two-sided: a paired t test where both cells are the same checkpoints (one model
  at two lengths), else Welch's t test (independent runs);
- the verdict, by the rule: "supported" or "refuted" by the direction the claim predicts where
  separated, "not separated" where not; for a claim that A is "at most" B (no worse), "no
  difference shown" where not separated (a claim of no difference would need an equivalence margin
  declared with it, and none is); "no verdict" below 3 seeds a side. Where the rule and the test
  disagree (separated with p > 0.05, not separated with p < 0.05) the verdict says so;
- beside each raw p, Holm's adjustment over every test of the table (one experiment's claims: the
  family), and a line saying how many were tested;
- when the claim was declared: the commit that first wrote it into this file (git log -S), and
  "post hoc" where that came after the first row of its cells (Claim.after_data; a scoring added
  later, SCORINGS_DECLARED, makes its lines post hoc where it came after the experiment's first row).
  `scripts/claims.py RESULTS --experiment NAME --audit` recomputes both from git history and the
  rows' commits (retired rows included: a cell seen before its checkpoint was trained again was
  seen); tests/lab/test_rebuild.py checks them for every committed experiment.
A claim that A is "lower" is on perplexity; "higher" on exact match.
Prints the Markdown table (and writes it to --out if given).
"""
import argparse
import dataclasses
import functools
import os
from fairseq_alibi_lab import results
from fairseq_alibi_lab.gpt2_conversion import IMPORTED
from fairseq_alibi_lab.retrieval import FLOOR, METRICS as RETRIEVAL_METRICS
from fairseq_alibi_lab.results import one_line_on_disk_faults, written_whole


@dataclasses.dataclass(frozen=True)
class Claim:
    text: str
    a: tuple  # (label, multiple of L)
    b: tuple
    relation: str  # "lower": a's value is below b's; "at most": not above it; "higher": above it
    strides: tuple = ("0", "L_valid/2")  # the scorings: stride rules, or EXACT_MATCH
    scoring: str = ""  # the scoring's name where a stride rule's would mislead (the streams)
    declared: str = ""  # the commit that first wrote the claim here ("": not yet committed)
    after_data: bool = False  # declared after the first row of its cells: post hoc (--audit checks it)


CLAIMS = (
    Claim("KERPLE (log) extrapolates better than ALiBi", ("KERPLE log", 16), ("ALiBi", 16), "lower",
          declared="eced153", after_data=True),
    Claim("FIRE extrapolates better than ALiBi", ("FIRE", 16), ("ALiBi", 16), "lower",
          declared="eced153", after_data=True),
    # The same at 8L, the longest the second scale (scale2, L=512) is scored at.
    Claim("KERPLE (log) extrapolates better than ALiBi (8L)", ("KERPLE log", 8), ("ALiBi", 8), "lower",
          declared="14acbae", after_data=True),
    Claim("FIRE extrapolates better than ALiBi (8L)", ("FIRE", 8), ("ALiBi", 8), "lower",
          declared="14acbae", after_data=True),
    Claim("YaRN closes rotary's gap past L (rotary + YaRN at 8L no worse than ALiBi)", ("Rotary + YaRN", 8),
          ("ALiBi", 8), "at most", declared="14acbae", after_data=True),
    # With a sliding window every token scored at 16L sees at least 8L tokens before it; at L,
    # at least L/2. Lower at 16L: the model uses context beyond its training length.
    Claim("Sandwich uses context beyond L", ("Sandwich", 16), ("Sandwich", 1), "lower", ("L_valid/2",),
          declared="eced153"),
    Claim("ALiBi uses context beyond L (the paper's claim, for reference)", ("ALiBi", 16), ("ALiBi", 1), "lower",
          ("L_valid/2",), declared="eced153", after_data=True),
    Claim("NoPE generalises in length (2L no worse than L)", ("NoPE", 2), ("NoPE", 1), "at most",
          declared="eced153", after_data=True),
    Claim("NoPE generalises in length (16L no worse than L)", ("NoPE", 16), ("NoPE", 1), "at most",
          declared="eced153", after_data=True),
    Claim("YaRN closes rotary's gap past L (rotary + YaRN at 16L no worse than ALiBi)", ("Rotary + YaRN", 16),
          ("ALiBi", 16), "at most", declared="eced153", after_data=True),
    Claim("YaRN improves rotary past L", ("Rotary + YaRN", 16), ("Rotary", 16), "lower",
          declared="eced153", after_data=True),
    # The paper (section 3) tried trainable slopes and kept fixed ones: learning them does not help.
    Claim("Learned slopes do not help (ALiBi at L no worse than ALiBi with learned slopes)", ("ALiBi", 1),
          ("ALiBi, learned slopes", 1), "at most", declared="062d77b", after_data=True),
    Claim("Learned slopes do not help past L (ALiBi at 16L no worse than learned slopes)", ("ALiBi", 16),
          ("ALiBi, learned slopes", 16), "at most", declared="062d77b", after_data=True),
    # What docs/comparison.md reads off the tables, each checked the same way.
    Claim("ALiBi beats the sinusoidal model at L (the main job's question)", ("ALiBi", 1), ("Sinusoidal", 1), "lower",
          declared="322d864", after_data=True),
    Claim("KERPLE power beats KERPLE log at L", ("KERPLE power", 1), ("KERPLE log", 1), "lower",
          declared="322d864", after_data=True),
    Claim("Rotary holds to 2L (2L no worse than L)", ("Rotary", 2), ("Rotary", 1), "at most",
          declared="322d864", after_data=True),
    Claim("Linear interpolation improves rotary past L", ("Rotary + linear interp.", 16), ("Rotary", 16), "lower",
          declared="322d864", after_data=True),
    Claim("YaRN improves rotary past L more than NTK", ("Rotary + YaRN", 16), ("Rotary + NTK", 16), "lower",
          declared="322d864", after_data=True),
    Claim("NTK rescaling of ALiBi's slopes costs perplexity at 16L (ALiBi below it)", ("ALiBi", 16),
          ("ALiBi + NTK", 16), "lower", declared="322d864", after_data=True),
    Claim("Dynamic NTK rescaling of ALiBi's slopes costs perplexity at 16L (ALiBi below it)", ("ALiBi", 16),
          ("ALiBi + dynamic NTK", 16), "lower", declared="322d864", after_data=True),
    # FoX's paper: the forget gate (data-dependent ALiBi) models language better and extrapolates.
    Claim("FoX's forget gate improves on ALiBi at L", ("FoX (forget gate)", 1), ("ALiBi", 1), "lower",
          declared="062d77b", after_data=True),
    Claim("FoX's forget gate extrapolates better than ALiBi", ("FoX (forget gate)", 16), ("ALiBi", 16), "lower",
          declared="062d77b", after_data=True),
)
# Other experiments' comparisons, as their results READMEs make them (claims.md beside their rows).
DOCUMENTS = tuple(
    Claim(f"Training with documents apart lowers {method}'s perplexity{where} (each scored its own way)",
          (f"{method}, trained apart, scored apart", k), (f"{method}, scored packed", k), "lower",
          declared="fde6ad2", after_data=True)
    for method in ("ALiBi", "Rotary") for k, where in ((1, " at L"), (16, " at 16L")))
CONVERSION = (
    Claim("Distillation recovers the conversion better than cross entropy (at L)", ("Converted + 200 distill", 1),
          ("Converted + 200 CE", 1), "lower", declared="fde6ad2", after_data=True),
    Claim("Distillation recovers the conversion better than cross entropy (at 16L)", ("Converted + 200 distill", 16),
          ("Converted + 200 CE", 16), "lower", declared="fde6ad2", after_data=True),
    Claim("The distilled conversion is below the teacher continued as long (at L)", ("Converted + 200 distill", 1),
          ("Sinusoidal teacher continued (+ 200)", 1), "lower", declared="fde6ad2", after_data=True),
    Claim("The distilled conversion is below the teacher continued as long (at 16L)", ("Converted + 200 distill", 16),
          ("Sinusoidal teacher continued (+ 200)", 16), "lower", declared="4a794b6", after_data=True),
    Claim("Cross entropy's conversion is below the teacher continued as long (at L)", ("Converted + 200 CE", 1),
          ("Sinusoidal teacher continued (+ 200)", 1), "lower", declared="fde6ad2", after_data=True),
    Claim("Cross entropy's conversion is below the teacher continued as long (at 2L)", ("Converted + 200 CE", 2),
          ("Sinusoidal teacher continued (+ 200)", 2), "lower", declared="4a794b6", after_data=True),
    Claim("Cross entropy's conversion is below the teacher continued as long (at 16L)", ("Converted + 200 CE", 16),
          ("Sinusoidal teacher continued (+ 200)", 16), "lower", declared="4a794b6", after_data=True),
    Claim("ALiBi from scratch for as many updates beats the distilled conversion (at L)", ("ALiBi from scratch (1600)", 1),
          ("Converted + 200 distill", 1), "lower", declared="fde6ad2", after_data=True),
    Claim("ALiBi from scratch for as many updates beats the distilled conversion (at 16L)", ("ALiBi from scratch (1600)", 16),
          ("Converted + 200 distill", 16), "lower", declared="fde6ad2", after_data=True),
)
# A GPT-2 given ALiBi (gpt2-alibi): its GPT-2's learned positions end at L, so the GPT-2 is compared at L.
CONTINUED = "GPT-2 continued"
CONVERTED, CE, DISTILLED = ("GPT-2 -> ALiBi, converted", "GPT-2 -> ALiBi, recovered",
                            "GPT-2 -> ALiBi, recovered with distillation")
GPT2_ALIBI = (
    Claim("Dropping the positions costs the GPT-2 at L (imported below converted)", (IMPORTED, 1), (CONVERTED, 1), "lower",
          declared="f35756f", after_data=True),
    Claim("Distillation recovers the conversion better than cross entropy (at L)", (DISTILLED, 1), (CE, 1), "lower",
          declared="f35756f", after_data=True),
    Claim("Distillation recovers the conversion better than cross entropy (at 16L)", (DISTILLED, 16), (CE, 16), "lower",
          declared="f35756f", after_data=True),
    Claim("The distilled conversion is no worse than the imported GPT-2 at L", (DISTILLED, 1), (IMPORTED, 1), "at most",
          declared="f35756f", after_data=True),
    Claim("The distilled conversion is below the GPT-2 continued as long (at L)", (DISTILLED, 1), (CONTINUED, 1), "lower",
          declared="f35756f", after_data=True),
    Claim("Cross entropy's conversion is below the GPT-2 continued as long (at L)", (CE, 1), (CONTINUED, 1), "lower",
          declared="f35756f", after_data=True),
    Claim("The distilled conversion does not degrade past L (16L no worse than L)", (DISTILLED, 16), (DISTILLED, 1),
          "at most", declared="f35756f", after_data=True),
    Claim("Continuing the GPT-2 with the recipe's schedule sets it back (imported below continued, at L)", (IMPORTED, 1),
          (CONTINUED, 1), "lower", declared="f35756f", after_data=True),
)
# gpt2-alibi again, deconfounded (fairseq_alibi_lab/experiments/gpt2_deconfounded.py): every fine-tune with the
# schedule gpt2-schedule chooses; declared before any row of either experiment.
CONTINUED_D, CE_D, DISTILLED_D = ("GPT-2 continued (chosen schedule)", "GPT-2 -> ALiBi, cross entropy (chosen schedule)",
                                  "GPT-2 -> ALiBi, distillation (chosen schedule)")
SCRATCH_D = "ALiBi from scratch, GPT-2 layout (1600)"
GPT2_ALIBI_2 = (
    Claim("With the chosen schedule the continued GPT-2 is not set back (no worse than imported, at L)",
          (CONTINUED_D, 1), (IMPORTED, 1), "at most", declared="8c4f3e2"),
    Claim("Distillation recovers the conversion better than cross entropy, schedule deconfounded (at L)",
          (DISTILLED_D, 1), (CE_D, 1), "lower", declared="8c4f3e2"),
    Claim("Distillation recovers the conversion better than cross entropy, schedule deconfounded (at 16L)",
          (DISTILLED_D, 16), (CE_D, 16), "lower", declared="8c4f3e2"),
    Claim("The distilled conversion is below the GPT-2 continued as long, schedule deconfounded (at L)",
          (DISTILLED_D, 1), (CONTINUED_D, 1), "lower", declared="8c4f3e2"),
    Claim("Cross entropy's conversion is below the GPT-2 continued as long, schedule deconfounded (at L)",
          (CE_D, 1), (CONTINUED_D, 1), "lower", declared="8c4f3e2"),
    Claim("ALiBi from scratch in the GPT-2's layout for as many updates beats the distilled conversion (at L)",
          (SCRATCH_D, 1), (DISTILLED_D, 1), "lower", declared="8c4f3e2"),
    Claim("ALiBi from scratch in the GPT-2's layout for as many updates beats the distilled conversion (at 16L)",
          (SCRATCH_D, 16), (DISTILLED_D, 16), "lower", declared="8c4f3e2"),
    Claim("The distilled conversion at 16L is below the imported GPT-2 at L (sliding window)",
          (DISTILLED_D, 16), (IMPORTED, 1), "lower", ("L_valid/2",), declared="8c4f3e2"),
    Claim("The distilled conversion uses context past L (16L below L, sliding window)",
          (DISTILLED_D, 16), (DISTILLED_D, 1), "lower", ("L_valid/2",), declared="8c4f3e2"),
)
# The masked LMs are scored nonoverlapping only.
LITTLEBIRD = tuple(claim for k, where in ((1, "at L"), (16, "at 16L")) for claim in (
    Claim(f"LittleBird's sparse window costs nothing against the dense BiALiBi encoder ({where})", ("LittleBird", k),
          ("ALiBi bialibi", k), "at most", ("0",), declared="30378a6", after_data=True),
    Claim(f"Padding insertion improves LittleBird ({where})", ("LittleBird + padding insertion", k), ("LittleBird", k),
          "lower", ("0",), declared="30378a6", after_data=True))) + (
    Claim("LittleBird extrapolates (16L below L)", ("LittleBird", 16), ("LittleBird", 1), "lower", ("0",),
          declared="30378a6", after_data=True),)
LITTLEBIRD_LONG = (
    Claim("LittleBird trained at 512 costs nothing against the dense encoder (at L)", ("LittleBird", 1),
          ("ALiBi bialibi", 1), "at most", ("0",), declared="30378a6", after_data=True),
    Claim("LittleBird trained at 512 costs nothing against the dense encoder (at 8L)", ("LittleBird", 8),
          ("ALiBi bialibi", 8), "at most", ("0",), declared="30378a6", after_data=True),
    Claim("LittleBird trained at 512 extrapolates (8L below L)", ("LittleBird", 8), ("LittleBird", 1), "lower", ("0",),
          declared="30378a6", after_data=True),
)
# The masked LMs of the bidirectional comparison (nonoverlapping; masked-token perplexity).
MLM_VARIANTS = ("ALiBi symmetric", "ALiBi ruoss", "ALiBi bialibi", "ALiBi learned", "ALiBi one_sided")
MLM = tuple(
    Claim(f"The {twin} twin degrades past L (L below 16L)", (label, 1), (label, 16), "lower", ("0",),
          declared="fc7569c", after_data=True)
    for twin, label in (("sinusoidal", "Sinusoidal"), ("learned-position", "Learned positions"))) + tuple(
    Claim(f"{label} does not degrade past L (16L at most L)", (label, 16), (label, 1), "at most", ("0",),
          declared="fc7569c", after_data=True)
    for label in MLM_VARIANTS) + tuple(
    Claim(f"{a} is below {b} at L", (a, 1), (b, 1), "lower", ("0",), declared="fc7569c", after_data=True) for a, b in (
        ("ALiBi one_sided", "ALiBi learned"), ("ALiBi learned", "ALiBi bialibi"), ("ALiBi bialibi", "ALiBi ruoss"),
        ("ALiBi ruoss", "ALiBi symmetric")))
# The synthetic tasks: exact match at 21-40, up to twice the training sizes (1-20).
EXACT_MATCH = "exact match"
PAST = "21-40"
SYNTHETIC = tuple(
    Claim(f"{label} beats the sinusoidal twin on {task} past the training sizes", (label, task, PAST),
          ("Sinusoidal", task, PAST), "higher", (EXACT_MATCH,), declared="fc7569c", after_data=True)
    for task in ("copy", "reverse") for label in MLM_VARIANTS) + tuple(
    Claim(f"{a} beats {b} on {task} past the training sizes", (a, task, PAST), (b, task, PAST), "higher", (EXACT_MATCH,),
          declared="fc7569c", after_data=True)
    for task, a, b in (
        ("reverse", "ALiBi one_sided", "ALiBi bialibi"), ("reverse", "ALiBi one_sided", "ALiBi learned"),
        ("reverse", "ALiBi one_sided", "ALiBi symmetric"), ("reverse", "ALiBi one_sided", "ALiBi ruoss"),
        ("reverse", "ALiBi bialibi", "ALiBi learned"), ("reverse", "ALiBi bialibi", "ALiBi symmetric"),
        ("reverse", "ALiBi learned", "ALiBi symmetric"), ("reverse", "ALiBi symmetric", "ALiBi ruoss"),
        ("copy", "ALiBi ruoss", "ALiBi symmetric"), ("copy", "ALiBi ruoss", "ALiBi bialibi"),
        ("copy", "ALiBi learned", "ALiBi symmetric")))
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
          ("Sinusoidal, sequences per update fixed", 2, 2), "lower", ("0",), declared="e5502a7", after_data=True),
    Claim("At 8192 tokens per update, L beats 4L (128 against 32 sequences per update)", ("Sinusoidal at L, 4x tokens", 1),
          ("Sinusoidal, sequences per update fixed", 4, 4), "lower", ("0",), declared="e5502a7", after_data=True),
)
# Streaming (stream_eval.py): each stream a cell of its own beside the model's blocks at L, on the
# same checkpoints (a paired test). StreamingLLM's finding is that a softmax model evicting its first
# tokens needs a few kept as sinks; ALiBi's bias already fades distant keys.
EVERY_TOKEN_ONCE = "every token once (blocks of L, or the stream)"
STREAMING = (
    Claim("ALiBi streamed through a cache of L (window only) beats blocks of L", ("ALiBi, stream, window only", 1),
          ("ALiBi", 1), "lower", ("0",), EVERY_TOKEN_ONCE, declared="737e32a"),
    Claim("ALiBi needs no attention sink (window only no worse than 4 sinks)", ("ALiBi, stream, window only", 1),
          ("ALiBi, stream, 4 sinks", 1), "at most", ("0",), EVERY_TOKEN_ONCE, declared="737e32a"),
    Claim("Rotary needs an attention sink (4 sinks beat window only)", ("Rotary, stream, 4 sinks", 1),
          ("Rotary, stream, window only", 1), "lower", ("0",), EVERY_TOKEN_ONCE, declared="737e32a"),
    Claim("ALiBi streams better than rotary (window only)", ("ALiBi, stream, window only", 1),
          ("Rotary, stream, window only", 1), "lower", ("0",), EVERY_TOKEN_ONCE, declared="737e32a"),
    Claim("ALiBi streams better than rotary (4 sinks)", ("ALiBi, stream, 4 sinks", 1), ("Rotary, stream, 4 sinks", 1),
          "lower", ("0",), EVERY_TOKEN_ONCE, declared="737e32a"),
)
# Retrieval past L (retrieval.py's rows: a cell is (model + scaling, task, K), exact match in percent at
# K x L averaged over the five depths): the field's claims, as issue 47 states them.
RETRIEVAL_TASKS = ("passkey", "multikey", "kvlookup")
RETRIEVAL_SCORINGS = {name: field for field, name in RETRIEVAL_METRICS.items()}  # a scoring: its retrieval row field
# The same fields over the needles past L only (retrieval.past: the depths whose asked needle sits more
# than L tokens from the question in every prompt), which the floors' rows date.
PAST_L = ", needles past L"
WHOLE_DEPTHS = tuple(RETRIEVAL_SCORINGS)  # the scorings the first claims were declared with (every depth)
RETRIEVAL_SCORINGS.update({name + PAST_L: field for name, field in list(RETRIEVAL_SCORINGS.items())})
FIRST_PAST_L = "first key word" + PAST_L
RETRIEVAL = tuple(claim for task in RETRIEVAL_TASKS for claim in (
    Claim(f"ALiBi fails past L ({task}: L above 4L)", ("ALiBi", task, 1), ("ALiBi", task, 4), "higher",
          WHOLE_DEPTHS, declared="19b3696"),
    Claim(f"NTK-ALiBi widens ALiBi's field ({task} at 4L)", ("ALiBi + NTK", task, 4), ("ALiBi", task, 4), "higher",
          WHOLE_DEPTHS, declared="19b3696"),
    Claim(f"Rotary + NTK retrieves further than ALiBi ({task} at 4L)", ("Rotary + NTK", task, 4), ("ALiBi", task, 4),
          "higher", WHOLE_DEPTHS, declared="19b3696"),
    Claim(f"Rotary + YaRN retrieves further than ALiBi ({task} at 4L)", ("Rotary + YaRN", task, 4), ("ALiBi", task, 4),
          "higher", WHOLE_DEPTHS, declared="19b3696")))
# Past ALiBi's field (issue 63), declared before any row at these lengths: at 32L and 128L (2,048 and 8,192
# tokens at L = 64, where the gentlest head's bias is -8 and -32), by the first key word over the needles
# past L, against the floor of the prompts (retrieval.floor_cells: the best answerer that does not pick
# the asked needle out) and against ALiBi. "Falls to its floor": no higher than it (at most).
FLOOR_LABEL = "Floor"


def keeps_retrieving(label, task, k, declared, name=None):
    """"<name> keeps retrieving past ALiBi's field": the model's first key word over the needles past L
    above the floor of the prompts at k x L (name: the claim's wording of the label)."""
    return Claim(f"{name or label} keeps retrieving past ALiBi's field ({task} at {k}L: above the floor)", (label, task, k),
                 (FLOOR_LABEL, task, k), "higher", (FIRST_PAST_L,), declared=declared)


PAST_FIELD = tuple(claim for task in ("passkey", "multikey") for k in (32, 128) for claim in (
    Claim(f"ALiBi's retrieval falls to its floor past its field ({task} at {k}L)", ("ALiBi", task, k),
          (FLOOR_LABEL, task, k), "at most", (FIRST_PAST_L,), declared="359d214"),
    keeps_retrieving("ALiBi + NTK", task, k, "359d214", name="NTK-ALiBi"),
    Claim(f"NTK-ALiBi retrieves further than ALiBi past its field ({task} at {k}L)", ("ALiBi + NTK", task, k),
          ("ALiBi", task, k), "higher", (FIRST_PAST_L,), declared="359d214"),
    keeps_retrieving("KERPLE log", task, k, "359d214", name="KERPLE (log)"),
    keeps_retrieving("FIRE", task, k, "359d214")))
RETRIEVAL += PAST_FIELD
# The ALiBi family's new members in the retrieval experiment, declared before their first training:
# FoX's paper claims better retrieval than ALiBi; learned slopes are ALiBi's own baseline. At 16L,
# over the needles past L, by the first key word.
ALIBI_FAMILY = tuple(Claim(f"{label} retrieves further than ALiBi past L ({task} at 16L)", (label, task, 16),
                           ("ALiBi", task, 16), "higher", (FIRST_PAST_L,), declared="51e63bf",
                           after_data=True)  # ALiBi's cells were scored before: post hoc by the rule
                     for label in ("FoX (forget gate)", "ALiBi, learned slopes") for task in ("passkey", "multikey"))
RETRIEVAL += ALIBI_FAMILY
# The last two registered causal methods, declared before their first training: KERPLE's power kernel and
# Sandwich asked what KERPLE log and FIRE are past ALiBi's field (above the floor at 32L and 128L).
LAST_METHODS = tuple(keeps_retrieving(label, task, k, "386859a")
                     for label in ("KERPLE power", "Sandwich") for task in ("passkey", "multikey") for k in (32, 128))
RETRIEVAL += LAST_METHODS
# Rotary + YaRN, the one rotary scaling above its floor at 4L (44.2 ± 37.8% of passkey first words past L,
# 7.9 ± 6.9% at 16L), asked the same past ALiBi's field; declared before its first row past 16L (its seeds
# are trained again to get there).
ROTARY_YARN = tuple(keeps_retrieving("Rotary + YaRN", task, k, "9033ae8") for task in ("passkey", "multikey") for k in (32, 128))
RETRIEVAL += ROTARY_YARN
# The second scale (scale2) asks the comparison's claims of its own rows, which came after some of them
# were declared (its first rows: commit 7e17a0d, 2026-11-26 16:53).
SCALE2 = tuple(dataclasses.replace(claim, after_data=claim.declared in ("14acbae", "322d864")) for claim in CLAIMS)
EXPERIMENT_CLAIMS = {"comparison": CLAIMS, "scale2": SCALE2, "trade": TRADE, "documents": DOCUMENTS, "conversion": CONVERSION, "littlebird": LITTLEBIRD,
                     "littlebird-long": LITTLEBIRD_LONG, "mlm": MLM, "synthetic": SYNTHETIC,
                     "gpt2-alibi": GPT2_ALIBI, "gpt2-alibi-2": GPT2_ALIBI_2, "streaming": STREAMING, "retrieval": RETRIEVAL}
SEEDS = 3


# Where the descriptive rule and the two-sided test are said to disagree.
ALPHA = 0.05


def compare(a, b, relation, seeds=SEEDS):
    """(rule, test, verdict, p) on "a relation b", a and b {checkpoint: value} (one run per seed); p
    the test's (None where there is none)."""
    if not a or not b:
        return "", "", "no verdict (a cell not scored)", None
    if set(b) == {FLOOR}:  # a floor from the prompts: one value, no seeds
        if len(a) < seeds:
            return "", "", f"no verdict (n = {len(a)}: the rule asks for {seeds} seeds)", None
        mean_a, std_a = results.mean_std(list(a.values()))
        mean_b, separated = b[FLOOR], abs(mean_a - b[FLOOR]) > std_a
        rule = "separated from the floor by the seeds' spread" if separated else "within the seeds' spread of the floor"
        test, p = one_sample_test(a, b[FLOOR])
    else:
        if min(len(a), len(b)) < seeds:
            return "", "", f"no verdict (n = {len(a)} and {len(b)}: the rule asks for {seeds} seeds a side)", None
        (mean_a, std_a), (mean_b, std_b) = results.mean_std(list(a.values())), results.mean_std(list(b.values()))
        separated = abs(mean_a - mean_b) > std_a + std_b
        rule = "separated by the seeds' spread" if separated else "within the seeds' spread"
        test, p = t_test(a, b)
    if not separated:
        verdict = "no difference shown" if relation == "at most" else "not separated"
    else:
        verdict = "supported" if (mean_a > mean_b if relation == "higher" else mean_a < mean_b) else "refuted"
    if p is not None and separated and p > ALPHA:
        verdict += f"; the test disagrees (p > {ALPHA})"
    elif p is not None and not separated and p < ALPHA:
        verdict += f"; the test disagrees (p < {ALPHA})"
    return rule, test, verdict, p


def one_sample_test(a, floor):
    """(what, p): the two-sided p of a one-sample t test of a's values against the floor; p None where
    the seeds do not spread (scipy's t is then infinite and its p 0, a certainty no 3 seeds give)."""
    from scipy import stats

    if spreadless(a.values()):
        return "one-sample t: no spread, p undefined", None
    p = float(stats.ttest_1samp(list(a.values()), floor).pvalue)
    return f"one-sample t, p = {p:.2g}", p


def t_test(a, b):
    """(what, p): the two-sided p of a paired t test where a and b are the same checkpoints, else of
    Welch's; p None where the seeds do not spread."""
    from scipy import stats

    paired = set(a) == set(b)
    name = "paired t" if paired else "Welch t"
    if spreadless(a[c] - b[c] for c in a) if paired else spreadless(a.values()) and spreadless(b.values()):
        return f"{name}: no spread, p undefined", None
    if paired:
        result = stats.ttest_rel([a[c] for c in a], [b[c] for c in a])
    else:
        result = stats.ttest_ind(list(a.values()), list(b.values()), equal_var=False)
    p = float(result.pvalue)
    return (f"{name}, p = {p:.2g}", p) if p == p else (f"{name}: no spread, p undefined", None)


def spreadless(values):
    """True where every value is the same (a t statistic is then 0/0 or infinite: no test)."""
    return len(set(values)) <= 1


def holm(pvalues):
    """Holm's step-down adjustment of the p values (None: no test, left out of the family)."""
    ranked = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    adjusted, running = [None] * len(pvalues), 0.0
    for rank, (p, i) in enumerate(ranked):
        running = max(running, min(1.0, (len(ranked) - rank) * p))
        adjusted[i] = running
    return adjusted


def one_run_per_seed(runs, run, label, seed, checkpoint):
    """Refuses a second checkpoint for one run (a label, a training length) and seed."""
    other = runs.setdefault((run, seed), checkpoint)
    if other != checkpoint:
        raise SystemExit(f"error: the rows hold two runs of {label}, seed {seed} ({other} and {checkpoint}): "
                         "a verdict counts one run per seed; give the rows of one run")


def cells(rows):
    """{(stride rule, label, training length, l_valid): {checkpoint: perplexity}}, split valid; and L,
    the shortest length scored. Two runs of one label, training length and seed are refused: a seed
    is one run."""
    length = min(key[-1] for key in rows)
    out, runs = {}, {}
    for (split, stride, label, train_length, seed, checkpoint, l_valid), ppl in rows.items():
        if split != "valid":
            continue
        train_length = train_length or length
        one_run_per_seed(runs, (label, train_length), label, seed, checkpoint)
        out.setdefault((stride, label, train_length, l_valid), {})[checkpoint] = ppl
    return out, length


def perplexity_cells(length):
    """A cell (label, K) at K x L of a model trained at L, or (label, K, T) of one trained at T x L:
    its key in cells() for a stride, and its name."""
    def locate(cell, stride):
        label, k, *trained = cell
        t = trained[0] if trained else 1
        name = f"{label} at {k * length}" + (f" (trained at {t * length})" if t != 1 else "")
        return (stride, label, t * length, k * length), name
    return locate


def accuracy_cells(rows):
    """{(label, task, "low-high"): {checkpoint: exact match in percent}} from exact_match.py's rows
    (the last scoring of a checkpoint wins); two runs of one label and seed refused."""
    out, runs = {}, {}
    for r in rows:
        one_run_per_seed(runs, r["label"], r["label"], r.get("seed"), r["checkpoint"])
        out.setdefault((r["label"], r["task"], f"{r['n_low']}-{r['n_high']}"), {})[r["checkpoint"]] = 100 * r["accuracy"]
    return out


def retrieval_cells(rows, floors=()):
    """({(scoring, model + scaling, task, length): {checkpoint: accuracy in percent, the depths' mean}}, L)
    from retrieval.py's rows (retrieval.depth_means), for each of RETRIEVAL_SCORINGS, and the floors'
    cells (floors: retrieval.floor_rows, which also say which depths are past L; without them the
    scorings over needles past L have no cells); two runs of one label and seed refused."""
    from fairseq_alibi_lab.retrieval import depth_means, floor_cells, past

    runs = {}
    for r in rows:
        label = r.get("label") or r["model"]
        one_run_per_seed(runs, label, label, r.get("seed"), r["checkpoint"])
    length = min((r["length"] for r in rows), default=None)
    out = {}
    for scoring, metric in RETRIEVAL_SCORINGS.items():
        if scoring.endswith(PAST_L) and not floors:
            continue
        keep = past(floors, length) if scoring.endswith(PAST_L) else None
        for found in (depth_means(rows, metric, keep), floor_cells(floors, metric, keep) if floors else {}):
            out.update({(scoring, name, task, k): {c: 100 * v for c, v in by.items()} for (task, name, k), by in found.items()})
    return out, length


def retrieval_locate(length):
    def locate(cell, scoring):
        name, task, k = cell
        return (scoring, name, task, k * length), f"{name}, {task} at {k * length}"
    return locate


def retrieval_table(rows, claims=RETRIEVAL, floors=()):
    """The claims' table on the retrieval experiment's rows, for each of their scorings."""
    found, length = retrieval_cells(rows, floors)
    return render(found, retrieval_locate(length), claims)


def locate_accuracy(cell, scoring):
    label, task, sizes = cell
    return cell, f"{label}, {task} {sizes}"


SCORINGS = {"0": "nonoverlapping", EXACT_MATCH: "exact match (%)", **{name: f"{name} (%)" for name in RETRIEVAL_SCORINGS}}
# A scoring declared after its experiment's first rows: (commit, after the data). Retrieval's first key
# word was added once exact match had been seen near zero (its rows of seed 1, commit 64e39cd).
SCORINGS_DECLARED = {"first key word": ("0171b47", True)}


def declaration(claim, scoring):
    """The table's "declared" cell of one claim's line: its commit, and "post hoc" where the claim or
    this scoring was declared after the data."""
    if not claim.declared:
        return "not declared (asked after the data)"
    commit, after = SCORINGS_DECLARED.get(scoring, (claim.declared, False))
    post_hoc = claim.after_data or after
    when = f"`{claim.declared}`" + (f", scoring `{commit}`" if scoring in SCORINGS_DECLARED else "")
    return when + (", post hoc" if post_hoc else ", before the data")


def lines(found, locate, claim):
    """The claim's lines, one per scoring, as (cells of the table, p): Holm's column is filled by render."""
    out = []
    for scoring in claim.strides:
        sides = [(found.get(key, {}), name) for key, name in (locate(cell, scoring) for cell in (claim.a, claim.b))]
        shown = [f"{name}: {results.cell(list(values.values()), len(values))} (n={len(values)})" if values
                 else f"{name}: not scored" for values, name in sides]
        rule, test, verdict, p = compare(sides[0][0], sides[1][0], claim.relation)
        named = claim.scoring or SCORINGS.get(scoring, f"sliding, stride {scoring}")
        out.append(([claim.text, declaration(claim, scoring), named, *shown, rule, test], verdict, p))
    return out


HEADER = ["| claim | declared | scoring | A | B | the seeds' spread (descriptive) | test (two-sided) | Holm p | verdict |",
          "|---|---|---|---|---|---|---|---|---|"]


def render(found, locate, claims):
    """The claims' table: one line per claim and scoring, Holm's adjustment over every test in it,
    then how many were tested and how many were declared after the data."""
    made = [line for claim in claims for line in lines(found, locate, claim)]
    adjusted = holm([p for _, _, p in made])
    body = [f"| {' | '.join(cells)} | {'' if q is None else f'{q:.2g}'} | {verdict} |"
            for (cells, verdict, _), q in zip(made, adjusted)]
    tested = sum(q is not None for q in adjusted)
    post_hoc = sum(", post hoc" in cells[1] for cells, _, _ in made)
    return "\n".join(HEADER + body + [
        "", f"{len(made)} comparisons (claim x scoring), {tested} with a test: Holm's adjustment is over those {tested}; "
        f"{post_hoc} of the {len(made)} were declared after the first row of their cells (post hoc). The verdict is the "
        f"seeds' spread's (a description); where the test's raw p says otherwise at {ALPHA}, the verdict says so."]) + "\n"


def table(rows, claims=CLAIMS):
    """The claims' table on perplexity rows (results.load's)."""
    found, length = cells(rows)
    return render(found, perplexity_cells(length), claims)


def accuracy_table(rows, claims=SYNTHETIC):
    """The claims' table on the synthetic tasks' exact-match rows."""
    return render(accuracy_cells(rows), locate_accuracy, claims)


# How --compare names a claim's relation (Claim.relation's values).
RELATION_WORDS = {"lower": "below", "at most": "at most", "higher": "above"}


@functools.lru_cache(maxsize=None)
def git_date(commit):
    """The author date of a commit (a row's "abc1234+changes": its base commit), from git; None where
    the history does not hold it."""
    import subprocess

    done = subprocess.run(["git", "show", "-s", "--format=%aI", commit.split("+")[0]], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def audit(found, locate, claims, paths, date=git_date, retired=()):
    """(report, disagreements): for each claim, the date of its declaring commit against the first row
    of its cells (the earliest commit of any row of the checkpoints they hold, in the files `paths`,
    and of any row `retired` since at a cell's path and length: a cell seen before its checkpoint was
    trained again was seen), post hoc where it came after, and whether Claim.after_data says the
    same; a scoring of SCORINGS_DECLARED against the first row of the whole experiment."""
    from fairseq_alibi_lab.result_rows import read_rows

    undated = date

    def date(commit):  # an audit without the history that dates a commit would read "not post hoc": refused
        when = undated(commit)
        if when is None:
            raise SystemExit(f"error: --audit needs the git history that holds commit {commit} (this is a shallow "
                             "clone or a copy without .git?): run it in a full clone (git fetch --unshallow)")
        return when

    def earliest_rows(paths, key):
        first = {}  # key(row) -> (date, commit) of its earliest row
        for path in paths:
            for row in read_rows(path):
                when = date(row["commit"]) if row.get("commit") else None
                if when and (key(row) not in first or when < first[key(row)][0]):
                    first[key(row)] = (when, row["commit"])
        return first

    first = earliest_rows(paths, lambda row: row.get("checkpoint"))
    seen = earliest_rows(retired, lambda row: (row.get("checkpoint"), row.get("length", row.get("l_valid"))))
    experiment_first = min(first.values(), default=None)
    lines_, wrong = ["| claim | declared | its date | first row of its cells | its date | post hoc | claims.py says |",
                     "|---|---|---|---|---|---|---|"], 0
    for claim in claims:
        held = {(c, key[-1]) for scoring in claim.strides for cell in (claim.a, claim.b)
                for key in [locate(cell, scoring)[0]] for c in found.get(key, {})}  # key[-1]: the cell's length
        earliest = min([first[c] for c, _ in held if c in first] + [seen[h] for h in held if h in seen], default=None)
        declared = date(claim.declared) if claim.declared else None
        after = bool(declared and earliest and declared > earliest[0])
        agrees = after == claim.after_data or earliest is None
        wrong += not agrees
        lines_.append(f"| {claim.text} | {claim.declared or '-'} | {declared or '-'} | {earliest[1] if earliest else '-'} | "
                      f"{earliest[0] if earliest else '-'} | {'yes' if after else 'no'} | "
                      f"{'the same' if agrees else 'after_data=' + str(claim.after_data) + ': wrong'} |")
    for scoring, (commit, after_data) in SCORINGS_DECLARED.items():
        if any(scoring in claim.strides for claim in claims) and experiment_first:
            after = date(commit) > experiment_first[0]
            wrong += after != after_data
            lines_.append(f"| (the scoring {scoring}) | {commit} | {date(commit)} | {experiment_first[1]} | "
                          f"{experiment_first[0]} | {'yes' if after else 'no'} | "
                          f"{'the same' if after == after_data else 'wrong'} |")
    return "\n".join(lines_) + "\n", wrong


def rows_problem(paths, experiment):
    """None, or the one line refusing rows the verdicts must not count: rows of another experiment than
    `experiment` (or the ones whose runs it shares: runner.EXPERIMENTS), or a model's rows at more than
    one number of updates (another run, which would count as more seeds)."""
    from fairseq_alibi_lab.result_rows import read_rows
    from fairseq_alibi_lab.experiments import EXPERIMENTS

    declared = EXPERIMENTS.get(experiment)
    allowed = {experiment, *(m.shared[0] for m in declared.models if m.shared), declared.checkpoints} if declared else {experiment}
    updates = {}
    for path in paths:
        for row in read_rows(path):
            if row.get("model") == "unigram":
                continue
            if row.get("experiment") not in (None, *allowed):
                other = row["experiment"]
                return (f"{path} holds rows of the {other} experiment (e.g. {row.get('label')!r}), not {experiment}'s: "
                        + (f"give --experiment {other}, or the rows of {experiment}" if other in EXPERIMENT_CLAIMS
                           else f"{other} declares no claims; give the rows of {experiment}"))
            updates.setdefault(row.get("label"), {}).setdefault(row.get("updates"), path)
    for label, runs in updates.items():
        if len(runs) > 1:
            return (f"rows of {label!r} at {' and '.join(map(str, sorted(runs, key=str)))} updates ({', '.join(sorted(set(runs.values())))}): "
                    "another run's rows would count as more seeds; give the rows of one run")
    return None


def cell_name(text):
    """"LABEL@K" -> (LABEL, K), K the multiple of L; one line naming the form otherwise."""
    label, _, multiple = text.rpartition("@")
    if not label or not multiple.isdigit() or int(multiple) < 1:
        raise SystemExit(f"error: --compare takes cells as LABEL@K (K a multiple of L, e.g. 'ALiBi@16'), got {text!r}")
    return label, int(multiple)


@one_line_on_disk_faults
def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", help="the comparison's results.jsonl (scripts/experiment.py comparison)")
    p.add_argument("--out", help="also write the table here (.md)")
    p.add_argument("--experiment", choices=sorted(EXPERIMENT_CLAIMS), default="comparison",
                   help="whose declared claims (default: the comparison's; scale2: the same claims on the second scale)")
    p.add_argument("--compare", nargs=2, metavar=("A@K", "B@K"),
                   help="the verdict on these two cells (each stride scored) instead of the declared claims")
    p.add_argument("--relation", choices=("lower", "at-most", "higher"),
                   help="with --compare: A's perplexity below B's (default), or A's not above B's; "
                        "A's accuracy above B's (retrieval's, the default there)")
    p.add_argument("--task", choices=RETRIEVAL_TASKS, help="with --compare on the retrieval rows: the task the cells are on")
    p.add_argument("--audit", action="store_true",
                   help="instead of the table: each claim's declaring commit against the first row of its cells, "
                        "from git history (post hoc where the claim came after), and whether claims.py says the same")
    args = p.parse_args()
    if args.task and not (args.compare and args.experiment == "retrieval"):
        p.error("--task names the task of --compare's cells on the retrieval rows (--experiment retrieval)")
    claims, raw = EXPERIMENT_CLAIMS[args.experiment], list(args.results)  # raw: the files whose rows' commits --audit reads
    if args.experiment == "retrieval":  # retrieval.jsonl beside each results file
        if args.compare and not args.task:
            p.error(f"--compare on the retrieval rows needs --task (one of {', '.join(RETRIEVAL_TASKS)})")
        from fairseq_alibi_lab.retrieval import ROWS as SCORED

        paths = [os.path.join(os.path.dirname(path), SCORED) for path in args.results]
        for path in paths:
            if not os.path.exists(path):
                p.error(f"no {path}: the retrieval experiment writes it (scripts/experiment.py retrieval)")
        raw += paths
        from fairseq_alibi_lab.retrieval import read_floors

        rows, floors = [], []
        for path in paths:  # each folder's rows with the floors of their own prompts
            these = list(results.read_json_lines(path, ("label", "task", "length", "depth", "accuracy", "checkpoint"),
                                                 "fairseq_alibi_lab/retrieval.py"))
            rows += these
            floors += read_floors(os.path.dirname(path), these)
        found, length = retrieval_cells(rows, floors)
        locate = retrieval_locate(length)
        if args.compare:  # a comparison not declared before the results: named as asked, same rule and test
            (a, k_a), (b, k_b) = map(cell_name, args.compare)
            names = sorted({name for _, name, _, _ in found})
            for name in {a, b} - set(names):
                p.error(f"no retrieval rows of {name!r}; its models: {', '.join(names)}")
            relation = (args.relation or "higher").replace("-", " ")
            scored = tuple(scoring for scoring in RETRIEVAL_SCORINGS if any(key[0] == scoring for key in found))
            claims = [Claim(f"{a} at {k_a}L {RELATION_WORDS[relation]} {b} at {k_b}L ({args.task})", (a, args.task, k_a),
                            (b, args.task, k_b), relation, scored)]
    elif args.experiment == "synthetic":
        if args.compare:
            p.error("--compare takes perplexity cells; the synthetic tasks' comparisons are the declared ones")
        rows = [r for path in args.results for r in results.read_json_lines(
            path, ("label", "task", "n_low", "n_high", "accuracy", "checkpoint"), "examples/synthetic/exact_match.py")]
        if not rows:
            p.error(f"no results in {', '.join(args.results)}")
        found, locate = accuracy_cells(rows), locate_accuracy
    else:
        rows = results.load(args.results)
        if args.experiment == "streaming":  # the streams beside each results file
            from fairseq_alibi_lab.stream_eval import ROWS as STREAMS, stream_cells

            for path in args.results:
                streamed = os.path.join(os.path.dirname(path), STREAMS)
                if not os.path.exists(streamed):
                    p.error(f"no {STREAMS} beside {path}: the streaming experiment writes it (scripts/experiment.py streaming)")
                raw.append(streamed)
                rows.update(stream_cells(streamed))
        if not rows:
            p.error(f"no results in {', '.join(args.results)}")
        if args.compare:
            a, b = map(cell_name, args.compare)
            labels = sorted({key[2] for key in rows})
            for label in {a[0], b[0]} - set(labels):
                p.error(f"no rows of {label!r} in {', '.join(args.results)}; its labels: {', '.join(labels)}")
            scored = sorted({key[1] for key in rows}, key=lambda stride: stride != "0")
            relation = (args.relation or "lower").replace("-", " ")
            if relation == "higher":
                p.error("--relation higher compares accuracies (--experiment retrieval); a perplexity is better lower")
            claims = [Claim(f"{a[0]} at {a[1]}L {RELATION_WORDS[relation]} {b[0]} at {b[1]}L",
                            a, b, relation, tuple(scored))]
        found, length = cells(rows)
        locate = perplexity_cells(length)
    problem = rows_problem(raw, args.experiment)
    if problem:
        raise SystemExit(f"error: {problem}")
    if args.audit:
        # A cell's first rows count where they were retired since (its checkpoint trained again): a claim
        # declared after they were seen is post hoc, whichever training's rows it is scored on now.
        from fairseq_alibi_lab.result_rows import RETIRED

        retired = [p for p in dict.fromkeys(os.path.join(os.path.dirname(r), RETIRED) for r in args.results)
                   if os.path.isfile(p)]
        report, wrong = audit(found, locate, claims, raw, retired=retired)
        print(report, end="")
        raise SystemExit(1 if wrong else 0)
    text = render(found, locate, claims)
    if args.out:
        with written_whole(args.out) as partial, open(partial, "w") as f:
            f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
