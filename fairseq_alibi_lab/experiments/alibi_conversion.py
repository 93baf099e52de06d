"""Giving an existing model ALiBi: the small recipe's sinusoidal LM (the stages:
fairseq_alibi_lab/conversion.py) and a GPT-2 imported from transformers (gpt2_conversion.py)."""
from fairseq_alibi_lab import conversion, gpt2_conversion
from fairseq_alibi_lab.experiments.base import Experiment, Model, Stages, register

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
    stages=Stages(prepared=conversion.checkpoint, prepared_updates=conversion.updates, score=conversion.score_model,
                  rows=(conversion.ROWS,), report=conversion.report)))


# The conversion of a GPT-2 (issue 44's experiment): its fine-tunes take 200 updates (the conversion's
# FINETUNE), from a GPT-2 that trained for the small recipe's 1400; the GPT-2 and its continuation
# keep their learned positions, which end at L, so they are scored at L only.
DISTILLATION = ("--criterion", "lm_distillation", "--teacher-path", "{gpt2}", "--distill-weight", "0.5",
                "--distill-temperature", "2")
register("gpt2-alibi", Experiment(
    "A GPT-2 (learned positions) trained with transformers at L=64 stands in for a downloaded gpt2: imported, "
    "given ALiBi, recovered for 200 updates with and without distillation from itself, against the GPT-2 "
    "continued for the same 200 updates and the comparison's ALiBi trained from scratch.",
    (Model(gpt2_conversion.IMPORTED, "", start="gpt2", longest=1),
     Model("GPT-2 continued", "learned", start="gpt2", longest=1),
     Model("GPT-2 -> ALiBi, converted", "", start="converted"),
     Model("GPT-2 -> ALiBi, recovered", "alibi", start="converted"),
     Model("GPT-2 -> ALiBi, recovered with distillation", "alibi", DISTILLATION, start="converted"),
     Model("ALiBi from scratch (comparison)", "alibi", shared=("comparison", "ALiBi"))),
    recipe="gpt2_small", updates=200,
    stages=Stages(prepared=gpt2_conversion.checkpoint, prepared_updates=gpt2_conversion.updates)))
