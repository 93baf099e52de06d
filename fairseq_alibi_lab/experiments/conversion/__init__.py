"""Giving an existing model ALiBi: the small recipe's sinusoidal LM and a GPT-2 imported from transformers, and
gpt2-alibi again with its fine-tune schedule deconfounded (gpt2-schedule, gpt2-alibi-2). The experiments' own
code is this folder: teacher.py and gpt2.py (their prepared checkpoints), recovery.py (the conversion's recovery
curve and continuations), schedule.py (gpt2-schedule's rule), wall_time.py (gpt2-alibi-2's report)."""
import functools

from fairseq_alibi_lab.claims import Claim
from fairseq_alibi_lab.experiments.base import BEFORE_SEPARABLE, Experiment, Model, Prepared, Stages, register, slug
from fairseq_alibi_lab.experiments.conversion import gpt2, recovery, teacher
from fairseq_alibi_lab.experiments.conversion.gpt2 import IMPORTED
from fairseq_alibi_lab.experiments.conversion.schedule import PEAK, PEAKS, SCHEDULE, continued
from fairseq_alibi_lab.experiments.conversion.wall_time import wall_time

# Give an existing model ALiBi (teacher.py: the teacher and the conversion; recovery.py: the recovery curve): the small recipe's sinusoidal model (seed 1, the one teacher every seed starts
# from) with its positions dropped, fine-tuned for 200 updates with cross entropy and with
# distillation from the teacher, against the teacher continued alike (a gain over the teacher is not
# just more training) and ALiBi from scratch for the teacher's updates + 200 (and its checkpoint at
# the teacher's). A checkpoint kept every 50 updates for the recovery curve. The directory stems are
# those of the committed run (made by the bash preset this declaration replaced).
KEEP_EVERY_50 = ("--save-interval-updates", "50", "--keep-interval-updates", "-1")
FROM_TEACHER = ("--criterion", "lm_distillation", "--teacher-path", "{teacher}", "--distill-weight", "0.5",
                "--distill-temperature", "2")
# The conversion's claims, as its README makes them.
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
register("conversion", Experiment(
    "A sinusoidal LM given ALiBi: converted, fine-tuned 200 updates with and without distillation from itself, "
    "against it continued for 200 and ALiBi from scratch; the recovery curve at L every 50 updates.",
    (Model("Sinusoidal teacher (1400)", "", start="teacher", seeds=(1,)),
     Model("Converted, not fine-tuned", "", start="converted", seeds=(1,)),
     Model("Converted + 200 CE", "alibi", KEEP_EVERY_50, start="converted", directory="finetune-ce",
           records=(recovery.Curve("ce"),)),
     Model("Converted + 200 distill", "alibi", KEEP_EVERY_50 + FROM_TEACHER, start="converted", directory="finetune-distill",
           records=(recovery.Curve("distill"),)),
     Model("Sinusoidal teacher continued (+ 200)", "sinusoidal", KEEP_EVERY_50, start="teacher",
           directory="teacher-continued", records=(recovery.Curve("continued"),)),
     # one run, scored at the teacher's updates (kept_at) and at its last; its curve recorded once
     Model("ALiBi from scratch (1400)", "alibi", KEEP_EVERY_50, directory="alibi", plus="teacher", kept_at="teacher"),
     Model("ALiBi from scratch (1600)", "alibi", KEEP_EVERY_50, directory="alibi", plus="teacher",
           records=(recovery.Curve("scratch"),))),
    updates=200,
    stages=Stages(prepared=Prepared(teacher.path, teacher.updates,
                                    functools.partial(teacher.make, teacher_model=Model("Sinusoidal teacher", "sinusoidal"))),
                  score=recovery.score_model, rows=(recovery.ROWS,), report=recovery.report),
    claims=CONVERSION, kernel_rule=BEFORE_SEPARABLE))


# A GPT-2 trained with transformers and imported, and its ALiBi conversion, for each seed (gpt2.py).
GPT2_PREPARED = Prepared(gpt2.path, gpt2.updates, gpt2.make)

# The conversion of a GPT-2 (issue 44's experiment): its fine-tunes take 200 updates (the conversion's
# FINETUNE), from a GPT-2 that trained for the small recipe's 1400; the GPT-2 and its continuation
# keep their learned positions, which end at L, so they are scored at L only.
DISTILLATION = ("--criterion", "lm_distillation", "--teacher-path", "{gpt2}", "--distill-weight", "0.5",
                "--distill-temperature", "2")
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
register("gpt2-alibi", Experiment(
    "A GPT-2 (learned positions) trained with transformers at L=64 stands in for a downloaded gpt2: imported, "
    "given ALiBi, recovered for 200 updates with and without distillation from itself, against the GPT-2 "
    "continued for the same 200 updates and the comparison's ALiBi trained from scratch.",
    (Model(IMPORTED, "", start="gpt2", longest=1),
     Model(CONTINUED, "learned", start="gpt2", longest=1),
     Model(CONVERTED, "", start="converted"),
     Model(CE, "alibi", start="converted"),
     Model(DISTILLED, "alibi", DISTILLATION, start="converted"),
     Model("ALiBi from scratch (comparison)", "alibi", shared=("comparison", "ALiBi"))),
    recipe="gpt2_small", updates=200,
    stages=Stages(prepared=GPT2_PREPARED), claims=GPT2_ALIBI, kernel_rule=BEFORE_SEPARABLE))

# The GPT-2 -> ALiBi experiment again, deconfounded (issue 65): gpt2-alibi's fine-tunes warmed back up to the
# recipe's lr 0.003, which alone set the continued GPT-2 back 10%. First gpt2-schedule chooses the fine-tune
# schedule on the continued GPT-2 alone (seed 1), by the rule in its description, written before any of its
# rows (schedule.py); then gpt2-alibi-2 (declared once the schedule was chosen; its claims were declared before
# any row of either) runs the conversion with it, 3 seeds, beside ALiBi trained from scratch in the GPT-2's
# layout for the GPT-2's and its fine-tune's updates together. Both share their GPT-2 stand-ins
# (checkpoints/gpt2-alibi-2).
register("gpt2-schedule", Experiment(
    "The fine-tune schedule for gpt2-alibi's rerun, chosen on the continued GPT-2 alone (seed 1, scored at L): the "
    "imported GPT-2 continued for 200 updates with the recipe's schedule (100 warm-up updates back to lr 0.003) and "
    "with no warm-up from peaks 0.001, 0.0003 and 0.0001, each decaying linearly to 0. Chosen, by a rule written "
    "before any row: the highest peak whose continued GPT-2 is no worse than the imported GPT-2 at L "
    "(nonoverlapping), else the lowest peak.",
    (Model(IMPORTED, "", start="gpt2", longest=1),
     Model("GPT-2 continued, recipe schedule", "learned", start="gpt2", longest=1),
     *(Model(continued(peak), "learned", ("--lr", peak, "--warmup-updates", "0"),
             start="gpt2", longest=1) for peak in PEAKS)),
    recipe="gpt2_small", updates=200, seeds=(1,), multiples=(1,), checkpoints="gpt2-alibi-2", stages=Stages(prepared=GPT2_PREPARED),
    kernel_rule=BEFORE_SEPARABLE))

# gpt2-alibi-2's claims: every fine-tune with the schedule gpt2-schedule chooses; declared before any row of either experiment.
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
register("gpt2-alibi-2", Experiment(
    "gpt2-alibi again, deconfounded: the imported GPT-2 continued, and its ALiBi conversion fine-tuned with cross "
    f"entropy and with distillation from it, each for 200 updates with gpt2-schedule's choice (no warm-up, peak {PEAK}, "
    "linear decay to 0), beside ALiBi trained from scratch in the GPT-2's layout for 1600 updates (the stand-in's "
    "1400 + 200); nonoverlapping and sliding; each training's wall time.",
    (Model(IMPORTED, "", start="gpt2", longest=1),
     # seed 1 is gpt2-schedule's run of this peak (same start, flags and updates): trained once
     Model(CONTINUED_D, "learned", SCHEDULE, start="gpt2", longest=1, directory=slug(continued(PEAK))),
     Model(CE_D, "alibi", SCHEDULE, start="converted"),
     Model(DISTILLED_D, "alibi", SCHEDULE + DISTILLATION, start="converted"),
     Model(SCRATCH_D, "alibi", updates=1600)),
    recipe="gpt2_small", updates=200, checkpoints="gpt2-alibi-2",
    stages=Stages(prepared=GPT2_PREPARED, report=wall_time),
    claims=GPT2_ALIBI_2, kernel_rule=BEFORE_SEPARABLE))
