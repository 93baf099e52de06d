"""Giving an existing model ALiBi: the small recipe's sinusoidal LM (the stages:
fairseq_alibi_lab/conversion.py) and a GPT-2 imported from transformers (gpt2_conversion.py)."""
from fairseq_alibi_lab import conversion, gpt2_conversion
from fairseq_alibi_lab.claims import Claim
import functools

from fairseq_alibi_lab.experiments.base import BEFORE_SEPARABLE, Experiment, Model, Prepared, Stages, register
from fairseq_alibi_lab.gpt2_conversion import IMPORTED

# Give an existing model ALiBi (fairseq_alibi_lab/conversion.py: the teacher, the conversion, the
# recovery curve): the small recipe's sinusoidal model (seed 1, the one teacher every seed starts
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
     Model("Converted + 200 CE", "alibi", KEEP_EVERY_50, start="converted", directory="finetune-ce"),
     Model("Converted + 200 distill", "alibi", KEEP_EVERY_50 + FROM_TEACHER, start="converted", directory="finetune-distill"),
     Model("Sinusoidal teacher continued (+ 200)", "sinusoidal", KEEP_EVERY_50, start="teacher",
           directory="teacher-continued"),
     Model("ALiBi from scratch (1400)", "alibi", KEEP_EVERY_50, directory="alibi", plus="teacher", kept_at="teacher"),
     Model("ALiBi from scratch (1600)", "alibi", KEEP_EVERY_50, directory="alibi", plus="teacher")),
    updates=200,
    stages=Stages(prepared=Prepared(conversion.path, conversion.updates,
                                    functools.partial(conversion.make, teacher_model=Model("Sinusoidal teacher", "sinusoidal"))),
                  score=conversion.score_model,
                  rows=(conversion.ROWS,), report=conversion.report),
    claims=CONVERSION, kernel_rule=BEFORE_SEPARABLE))


# A GPT-2 trained with transformers and imported, and its ALiBi conversion, for each seed (gpt2_conversion.py).
GPT2_PREPARED = Prepared(gpt2_conversion.path, gpt2_conversion.updates, gpt2_conversion.make)

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
    (Model(gpt2_conversion.IMPORTED, "", start="gpt2", longest=1),
     Model(CONTINUED, "learned", start="gpt2", longest=1),
     Model(CONVERTED, "", start="converted"),
     Model(CE, "alibi", start="converted"),
     Model(DISTILLED, "alibi", DISTILLATION, start="converted"),
     Model("ALiBi from scratch (comparison)", "alibi", shared=("comparison", "ALiBi"))),
    recipe="gpt2_small", updates=200,
    stages=Stages(prepared=GPT2_PREPARED), claims=GPT2_ALIBI, kernel_rule=BEFORE_SEPARABLE))
