#!/usr/bin/env python3
"""Run a declared experiment: train each (model, seed) once, score each at every length and
stride, and tabulate the seeds as mean ± std.

    python scripts/experiment.py NAME [--seeds 1 2 3] [--updates N] [--out DIR] ...
    python scripts/experiment.py --list

An experiment is declared once, below (EXPERIMENTS): its models (a label, scripts/train.sh's
METHOD and flags, the inference-time scalings scored past L), the recipe by name
(fairseq_alibi_lab/recipes.py, the one scripts/train.sh uses), the training length, the seeds and the
evaluation grid. Each (model, seed) trains into CHECKPOINTS/<label>-L<L>-s<seed>: a causal LM
through scripts/train.sh, a masked LM or an encoder-decoder (the synthetic tasks, no L in the
name) through scripts/train_once.sh (its METHOD is the fairseq architecture); an interrupted
training resumes from its last checkpoint and a finished one
(recipes.run_status) is left untouched, as is one whose rows are all in the results where its checkpoint
is gone (a fresh machine, the rows kept in git). Each missing (length, stride, scaling) is scored through
scripts/eval.sh (a masked LM: scripts/eval_mlm.py, its one fixed mask, nonoverlapping; an
encoder-decoder: each test bucket by examples/synthetic/exact_match.py) and appended to
OUT/results.jsonl, a row carrying the label, the seed, the recipe, the commit and the
machine; nothing is ever deleted, so stopping (Ctrl-C) and running the same command again
continues where it stopped. The unigram model (scripts/unigram.py) is every table's floor row.
Tables and figures (scripts/results.py) are rebuilt from the rows of the declared runs after each
job; OUT/runs.jsonl records each invocation (command, commit, machine, threads, start) as it starts, and again
with its wall time as it finishes or is stopped.
"""
import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import re
import importlib
import shlex
import shutil
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from fairseq_alibi import checkpoints, files, provenance, twins  # noqa: E402  (no fairseq or torch import)
from fairseq_alibi_lab import exact_match, prepare, recipes, results, synthetic_table  # noqa: E402
append_lines, read_rows, measurement, stride_of = (
    getattr(files, name) for name in ("append_lines", "read_rows", "measurement", "stride"))


@dataclasses.dataclass(frozen=True)
class Model:
    label: str  # the row's name in every table
    method: str  # scripts/train.sh METHOD (a masked LM: its --arch)
    flags: tuple = ()  # its fairseq-train flags, after the recipe's
    scalings: tuple = ()  # scripts/eval.sh SCALING values, scored past the training length
    train_multiple: int = 1  # trained at this multiple of the experiment's L (the trade's long sinusoidal models)
    multiples: tuple = ()  # L_valid = multiple x L scored (default: the experiment's)
    longest: int = 0  # scored up to this multiple of L only (learned positions end at L: 1); 0, no limit
    # A checkpoint the experiment's `prepare` module makes for each seed (the GPT-2 experiment's
    # "gpt2", a GPT-2 trained with transformers and imported): the model is fine-tuned from it
    # (--finetune-from-model), or, with no method, is that checkpoint, scored as it is. A flag
    # "{name}" stands for such a checkpoint (--teacher-path {gpt2}).
    start: str = ""
    # (experiment, label): this model is that experiment's run of that label (same recipe, L and
    # seeds), its rows taken from the experiment's committed results (COMMITTED), never trained or
    # scored here.
    shared: tuple = ()
    directory: str = ""  # its save directories' stem (default: the label's slug); models naming one share a run
    seeds: tuple = ()  # scored for these seeds only (a prepared checkpoint every seed starts from: the one teacher)
    # A prepared checkpoint whose updates are added to the training's (ALiBi from scratch for as long
    # as the teacher and its fine-tune together).
    plus: str = ""
    # A prepared checkpoint: the model is the one its run kept after as many updates as that one's
    # (--save-interval-updates), not the run's last.
    kept_at: str = ""


@dataclasses.dataclass(frozen=True)
class Experiment:
    about: str
    models: tuple
    recipe: str = "small"  # fairseq_alibi_lab/recipes.py; its RECIPE_KIND says what the models are
    train_length: int = 64
    seeds: tuple = (1, 2, 3)
    multiples: tuple = (1, 2, 4, 8, 16)  # L_valid = multiple x L
    strides: tuple = ("0", "/2")  # scripts/eval.sh STRIDE: nonoverlapping, sliding by L_valid/2
    split: str = "valid"
    # WikiText-2 with <doc> between articles (scripts/prepare-wikitext.sh --documents), and each
    # model scored with its documents kept apart and packed (--document-separator set and dropped
    # at evaluation), in rows labelled "<label>, scored apart|packed". False: the usual data.
    documents: bool = False
    # checkpoints/<this> (default: the experiment's name): experiments that share a model (same label,
    # flags, recipe, L) and name the same directory train it once.
    checkpoints: str = ""
    # A module whose report(rows, out) writes a table of its own from the declared runs' rows (the trade's).
    report: str = ""
    # fairseq-train flags for every model, after the recipe's (a model size other than the recipe's).
    train_flags: tuple = ()
    updates: int = 0  # training updates (0: the recipe's)
    # A module whose prepare_data(runner) makes and returns the binarized data every model trains and
    # is scored on (default: WikiText-2, or with documents).
    data: str = ""
    # A module whose score_model(runner, model, seed, checkpoint) scores what its own results (OUT/ROWS,
    # its ROWS) lack beside the perplexity (retrieval accuracy), after each model; its tables come from `report`.
    scorer: str = ""
    # A module whose checkpoint(name, runner, seed, make) gives the path of each Model.start checkpoint
    # (make: and makes it first, resumably, if it is not there).
    prepare: str = ""


SEPARATOR = prepare.SEPARATOR  # what prepare-wikitext.sh --documents writes between articles
# Label suffix -> the evaluation's --model-overrides.
DOCUMENT_SCORINGS = {"scored apart": f"{{'document_separator': '{SEPARATOR}'}}",
                     "scored packed": "{'document_separator': None}"}


SINUSOIDAL = Model("Sinusoidal", "sinusoidal")
SEQUENCES_FIXED = "Sinusoidal, sequences per update fixed"  # the trade's variant (trade_table.py: a grid by tokens per update)
ALIBI = Model("ALiBi", "alibi", scalings=("linear", "ntk", "dynamic_ntk"))
EXPERIMENTS = {
    "main": Experiment(
        "The README's main job: ALiBi and the sinusoidal model trained at L=64, scored to 16L.",
        (SINUSOIDAL, dataclasses.replace(ALIBI, scalings=())), seeds=(1,)),
    "comparison": Experiment(
        "Every causal method on one recipe, trained at L=64, scored to 16L, nonoverlapping and sliding.",
        (SINUSOIDAL,
         Model("Rotary", "rotary", scalings=("linear", "ntk", "yarn")),
         Model("T5 bias", "t5_bias"),
         ALIBI,
         Model("NoPE", "nope"),
         Model("KERPLE log", "kerple", ("--kerple-variant", "log")),
         Model("KERPLE power", "kerple", ("--kerple-variant", "power")),
         Model("Sandwich", "sandwich"),
         # FIRE's interpolation threshold starts at the training length (the module's default, 512,
         # would leave it unused below 512 tokens).
         Model("FIRE", "fire", ("--fire-init-threshold", "64")),
         Model("ALiBi, learned slopes", "learned_alibi"),
         Model("FoX (forget gate)", "fox"))),
    "trade": Experiment(
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
        strides=("0",), report="fairseq_alibi_lab.trade_table"),
    "documents": Experiment(
        "Packed documents: ALiBi and rotary trained with articles packed and kept apart "
        "(--document-separator), each scored both ways, on WikiText-2 with <doc> between articles.",
        (Model("ALiBi", "alibi"), Model("ALiBi, trained apart", "alibi", ("--document-separator", SEPARATOR)),
         Model("Rotary", "rotary"), Model("Rotary, trained apart", "rotary", ("--document-separator", SEPARATOR))),
        documents=True),
}

# The masked-LM encoders of the bidirectional experiment, one recipe for all: the five encoder ALiBi
# variants and fairseq's RoBERTa encoder with sinusoidal or learned positions (the twins).
# Every encoder scales its token embeddings by sqrt(d) (--scale-embedding, fairseq's transformer
# convention): without it the sinusoidal twin's unit-scale sinusoids drown RoBERTa's std-0.02 token
# embeddings, and with it both twins learn from context within the recipe's 3000 updates
# (examples/wikitext2/results/mlm-diagnosis/). An ALiBi encoder adds no positions, so its embedding
# LayerNorm makes the scale a no-op (tests/test_bidirectional.py).
SCALED = ("--scale-embedding",)
ENCODER_VARIANTS = ("symmetric", "one_sided", "learned", "ruoss", "bialibi")  # --encoder-alibi
ENCODERS = (*(Model(f"ALiBi {variant}", "alibi_roberta_small", ("--encoder-alibi", variant, *SCALED))
              for variant in ENCODER_VARIANTS),
            Model("Sinusoidal", "alibi_roberta_small", ("--encoder-alibi", "none", *SCALED)),
            # its table 16L long (rows past L never trained), so that it is scored at every length
            Model("Learned positions", "alibi_roberta_small",
                  ("--encoder-alibi", "none", "--encoder-learned-pos", "--max-positions", "1024", *SCALED)))
EXPERIMENTS["mlm"] = Experiment(
    "Masked LMs (RoBERTa-style encoders) trained at L=64, scored to 16L on one fixed mask.",
    ENCODERS, recipe="masked_lm", strides=("0",))  # eval_mlm.py: nonoverlapping blocks only


EXPERIMENTS["synthetic"] = Experiment(
    "Encoder-decoders on synthetic tasks (copy, reverse, addition; examples/synthetic/make_tasks.py) trained on "
    "sizes up to 20 and scored by exact match (greedy) up to 80: the five encoder ALiBi variants (a causal ALiBi "
    "decoder, cross-attention without positions) against their sinusoidal twin (stock --arch transformer).",
    (*(Model(f"ALiBi {variant}", "alibi_transformer_small", ("--encoder-alibi", variant)) for variant in ENCODER_VARIANTS),
     Model("Sinusoidal", "transformer", tuple(twins.TRANSLATION_TWIN_FLAGS.split()[2:]))),
    recipe="synthetic", multiples=(), strides=())


def littlebird(block, pack):
    """LittleBird (blocks of `block` tokens, a pack of `pack`) without and with padding insertion."""
    flags = ("--block-size", str(block), "--pack-length", str(pack))
    return (Model("LittleBird", "littlebird_roberta_small", flags),
            Model("LittleBird + padding insertion", "littlebird_roberta_small", (*flags, "--padding-insertion", "0.5")))


DENSE = {m.label: m for m in ENCODERS}
EXPERIMENTS["littlebird"] = Experiment(
    "LittleBird (blocks of 8, a pack of 8: 8 blocks at L=64, sparse in training) against the dense "
    "encoders of its size, as mlm; the dense ones are mlm's own runs (its checkpoints).",
    (*littlebird(8, 8), DENSE["ALiBi bialibi"], DENSE["Sinusoidal"]), recipe="masked_lm", strides=("0",),
    checkpoints="mlm")
EXPERIMENTS["littlebird-long"] = Experiment(
    "LittleBird with its own setting (blocks and pack of 64) trained at L=512, where its window is "
    "sparse (8 blocks), against dense BiALiBi at the same L, scored to 8L.",
    (*littlebird(64, 64)[:1], DENSE["ALiBi bialibi"]), recipe="masked_lm", train_length=512,
    multiples=(1, 2, 4, 8), strides=("0",))


# Retrieval past L (fairseq_alibi_lab/retrieval.py): the comparison's causal methods trained from
# scratch at L=64 on WikiText-2 mixed half and half with passkey, multi-key and key-value examples
# (at most L long), for 4x the small recipe's updates (its 1400, at 10% or 50% examples, taught no
# model to copy a key: docs/retrieval.md), scored by exact match at L..16L and 5 depths, and by perplexity.
EXPERIMENTS["retrieval"] = Experiment(
    "Retrieval past the training length: causal methods trained at L=64 for 5600 updates on WikiText-2 mixed "
    "half and half with passkey, multi-key needle and key-value examples, scored by exact match at L..16L and 5 "
    "depths, and by perplexity.",
    (SINUSOIDAL, Model("Rotary", "rotary", scalings=("ntk", "yarn")), Model("T5 bias", "t5_bias"),
     Model("ALiBi", "alibi", scalings=("ntk",)), Model("NoPE", "nope"), Model("KERPLE log", "kerple", ("--kerple-variant", "log")),
     Model("FIRE", "fire", ("--fire-init-threshold", "64")),
     # The ALiBi family completed (issue 63): learned slopes and FoX's data-dependent ALiBi, as the comparison's.
     Model("ALiBi, learned slopes", "learned_alibi"), Model("FoX (forget gate)", "fox")),
    strides=("0",), updates=5600, data="fairseq_alibi_lab.retrieval", scorer="fairseq_alibi_lab.retrieval",
    report="fairseq_alibi_lab.retrieval")


# Streaming with attention sinks (fairseq_alibi_lab/stream_eval.py): models trained as the comparison's
# (their own checkpoints), each scored at L in blocks and with the exact sliding window (stride 1:
# fairseq-eval-lm's recomputation, the reference), then streamed through a cache of L keys.
EXPERIMENTS["streaming"] = Experiment(
    "Streaming with attention sinks: ALiBi, rotary and the sinusoidal twin trained as in the comparison (L=64), "
    "WikiText-2 valid and test each scored as one stream through a cache of 64 keys (window only, 1 and 4 sink "
    "tokens), valid beside nonoverlapping blocks at L, a sliding window of stride L/2 and fairseq-eval-lm's exact "
    "sliding window (stride 1: 32 times the sliding window's cost, 15-30 minutes a model on a 2-core CPU, two at once).",
    (Model("ALiBi", "alibi"), Model("Rotary", "rotary"), SINUSOIDAL), multiples=(1,), strides=("0", "/2", "1"),
    scorer="fairseq_alibi_lab.stream_eval", report="fairseq_alibi_lab.stream_eval")


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
EXPERIMENTS["conversion"] = Experiment(
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
    updates=200, prepare="fairseq_alibi_lab.conversion", scorer="fairseq_alibi_lab.conversion",
    report="fairseq_alibi_lab.conversion")


# The conversion of a GPT-2 (issue 44's experiment): its fine-tunes take 200 updates (the conversion's
# FINETUNE), from a GPT-2 that trained for the small recipe's 1400; the GPT-2 and its continuation
# keep their learned positions, which end at L, so they are scored at L only.
DISTILLATION = ("--criterion", "lm_distillation", "--teacher-path", "{gpt2}", "--distill-weight", "0.5",
                "--distill-temperature", "2")
EXPERIMENTS["gpt2-alibi"] = Experiment(
    "A GPT-2 (learned positions) trained with transformers at L=64 stands in for a downloaded gpt2: imported, "
    "given ALiBi, recovered for 200 updates with and without distillation from itself, against the GPT-2 "
    "continued for the same 200 updates and the comparison's ALiBi trained from scratch.",
    (Model("GPT-2 (imported)", "", start="gpt2", longest=1),
     Model("GPT-2 continued", "learned", start="gpt2", longest=1),
     Model("GPT-2 -> ALiBi, converted", "", start="converted"),
     Model("GPT-2 -> ALiBi, recovered", "alibi", start="converted"),
     Model("GPT-2 -> ALiBi, recovered with distillation", "alibi", DISTILLATION, start="converted"),
     Model("ALiBi from scratch (comparison)", "alibi", shared=("comparison", "ALiBi"))),
    recipe="gpt2_small", updates=200, prepare="fairseq_alibi_lab.gpt2_conversion")


# The second scale (issue 48: a GPU's call of minutes): the small recipe's optimiser and schedule on a
# model of 6 layers, d 256 (8 heads of 32: FlexAttention compiles them), at L=512 with 16 sequences
# per update, 800 updates (about 3 epochs of WikiText-2), lr 0.002 (not tuned: the small recipe's
# 0.003 was tuned for d 128); checkpoints kept at the end only.
SCALE2_FLAGS = ("--decoder-layers", "6", "--decoder-embed-dim", "256", "--decoder-input-dim", "256",
                "--decoder-output-dim", "256", "--decoder-ffn-embed-dim", "1024", "--decoder-attention-heads", "8",
                "--max-tokens", "8192", "--lr", "0.002", "--save-interval-updates", "800", "--keep-interval-updates", "1",
                "--no-epoch-checkpoints")
EXPERIMENTS["scale2"] = Experiment(
    "The comparison at a second scale, on a GPU in fp16: ALiBi, the sinusoidal twin, rotary (+YaRN at "
    "evaluation), KERPLE and FIRE, 6 layers of d 256 trained at L=512, scored to 8L.",
    (SINUSOIDAL, Model("Rotary", "rotary", scalings=("yarn",)), dataclasses.replace(ALIBI, scalings=()),
     Model("KERPLE log", "kerple", ("--kerple-variant", "log")),
     Model("FIRE", "fire", ("--fire-init-threshold", "512"))),
    train_length=512, multiples=(1, 2, 4, 8), train_flags=SCALE2_FLAGS, updates=800)


# Where each experiment's results are committed (its tables rebuild from them with --tables --out).
COMMITTED = os.path.join("examples", "wikitext2", "results")


def declared_updates(experiment, length):
    """An experiment's training updates: its own, else its recipe's --max-update."""
    return experiment.updates or int(recipes.last_value(recipes.recipe(experiment.recipe, length), "--max-update"))


def slug(label):
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def names(model):
    """What --models takes for model: its label, the label's slug, and slug@K, the one trained at K x L
    (the trade's sinusoidal models share a label)."""
    return model.label, slug(model.label), f"{slug(model.label)}@{model.train_multiple}"


def duration(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class Runner:
    def __init__(self, name, experiment, args):
        self.name, self.experiment, self.args = name, experiment, args
        self.length = args.train_length or experiment.train_length
        self.seeds = tuple(args.seeds or experiment.seeds)
        self.kind = recipes.RECIPE_KIND[experiment.recipe]  # causal LM, masked LM, encoder-decoder
        self.masked = self.kind == "masked LM"
        self.seq2seq = self.kind == "encoder-decoder"  # its data and sizes are the tasks': no L
        self.updates = args.updates or declared_updates(experiment, self.length)
        self.out = args.out or os.path.join("runs", name)
        self.checkpoints = args.checkpoints or os.path.join("checkpoints", experiment.checkpoints or name)
        self.models = [m for m in experiment.models if not args.models or set(names(m)) & set(args.models)]
        self.lengths = sorted({lv for m in self.models for lv in self.model_lengths(m)})  # the floor's, the tables'
        self.results = os.path.join(self.out, "results.jsonl")
        # What every row records of the run; train_flags also keys "already done" (identity_problem).
        self.fields = json.dumps({"experiment": name, "recipe": experiment.recipe, "train_flags": shlex.join(args.train_flags)})

    def train_length(self, model):
        return model.train_multiple * self.length

    def row_fields(self, checkpoint):
        """What every row of checkpoint records of the run (self.fields), and the training data its run
        recorded (recipes.TRAINING_DATA; none for a checkpoint not trained by scripts/train.sh)."""
        trained_on = recipes.recorded_training_data(os.path.dirname(checkpoint))
        return json.dumps({**json.loads(self.fields), **({"train_data_sha256": trained_on} if trained_on else {})})

    def model_lengths(self, model):
        """The L_valid values model is scored at (--lengths, else its multiples or the experiment's, of L)."""
        lengths = self.args.lengths or [m * self.length for m in model.multiples or self.experiment.multiples]
        return [lv for lv in lengths if not model.longest or lv <= model.longest * self.train_length(model)]

    def save_dir(self, model, seed):
        if model.shared:  # the other experiment's own directory (default checkpoints)
            experiment, label = model.shared
            return os.path.join("checkpoints", EXPERIMENTS[experiment].checkpoints or experiment,
                                f"{slug(label)}-L{self.train_length(model)}-s{seed}")
        length = "" if self.seq2seq else f"-L{self.train_length(model)}"
        return os.path.join(self.checkpoints, f"{model.directory or slug(model.label)}{length}-s{seed}")

    def checkpoint(self, model, seed):
        """The checkpoint scored for (model, seed): the last of its training, the one it kept after
        kept_at's updates, or the prepared one it is."""
        if not model.method and not model.shared:
            return self.prepared(model.start, seed)
        if model.kept_at:
            return self.kept(model, seed)
        return os.path.join(self.save_dir(model, seed), "checkpoint_last.pt")

    def kept(self, model, seed):
        """fairseq's checkpoint_EPOCH_UPDATES.pt after kept_at's updates; where the run is not here,
        the one the results name (the epoch is fairseq's to say)."""
        save, updates = self.save_dir(model, seed), self.prepared_updates(model.kept_at, seed)
        pattern = re.compile(re.escape(os.path.join(save, "checkpoint_")) + rf"\d+_{updates}\.pt")
        found = sorted(os.path.join(save, name) for name in (os.listdir(save) if os.path.isdir(save) else ())
                       if pattern.fullmatch(os.path.join(save, name)))
        named = [r["checkpoint"] for r in read_rows(self.results) if pattern.fullmatch(r.get("checkpoint") or "")]
        return (found or named or [os.path.join(save, f"checkpoint_?_{updates}.pt")])[0]

    def prepared(self, name, seed, make=False):
        return importlib.import_module(self.experiment.prepare).checkpoint(name, self, seed, make)

    def prepared_updates(self, name, seed):
        """The training updates of the prepared checkpoint `name` (without making it)."""
        return importlib.import_module(self.experiment.prepare).updates(name, self, seed)

    def training_updates(self, model, seed):
        """The --max-update model's run trains to: the experiment's (+ plus's)."""
        return self.updates + (self.prepared_updates(model.plus, seed) if model.plus else 0)

    def model_updates(self, model, seed=None):
        """The updates a scored row of model names: the shared experiment's, the prepared checkpoint's
        where it is scored as it is (an import: none), kept_at's, else its training's."""
        if model.shared:
            return declared_updates(EXPERIMENTS[model.shared[0]], self.length)
        if not model.method:
            return self.prepared_updates(model.start, seed)
        return self.prepared_updates(model.kept_at, seed) if model.kept_at else self.training_updates(model, seed)

    def model_seeds(self, model, seeds):
        return [s for s in seeds if not model.seeds or s in model.seeds]

    def flags(self, model, seed):
        """model's flags, a "{name}" made and replaced by its prepared checkpoint; --finetune-from-model
        its start."""
        named = [self.prepared(f[1:-1], seed, make=True) if re.fullmatch(r"\{\w+\}", f) else f for f in model.flags]
        return named + (["--finetune-from-model", self.prepared(model.start, seed, make=True)] if model.start else [])

    def take_shared(self):
        """The committed rows of the shared models' runs, relabelled, into OUT (those it lacks); one
        line naming the command where some are missing."""
        for model in self.models:
            if not model.shared:
                continue
            experiment, label = model.shared
            wanted = {self.checkpoint(model, seed) for seed in self.seeds}
            rows = [dict(r, label=model.label) for r in read_rows(os.path.join(COMMITTED, experiment, "results.jsonl"))
                    if r.get("label") == label and r.get("checkpoint") in wanted and r.get("scaling", "none") == "none"
                    and r.get("updates") == self.model_updates(model)]
            append_new(self.results, rows)
            for seed in self.seeds:
                if any(self.missing(model, self.checkpoint(model, seed), self.model_updates(model)).values()):
                    raise SystemExit(f"error: {COMMITTED}/{experiment}/results.jsonl lacks rows of {label} (seed {seed}) "
                                     f"that {self.name} shows: run scripts/experiment.py {experiment} --models {slug(label)} "
                                     f"--seeds {seed} and commit its results first")

    def train(self, model, seed, save=None, updates=None):
        """scripts/train.sh (a masked LM or encoder-decoder: scripts/train_once.sh), which resumes an
        interrupted run and leaves a finished one; its log is appended to SAVE/train.log, its time and
        memory to SAVE/resources.jsonl. Returns the checkpoint scored. save, updates: a prepare
        module's own run (the conversion's teacher), else the model's."""
        if not model.method:  # a prepared checkpoint, scored as it is
            return self.prepared(model.start, seed, make=True)
        save = save or self.save_dir(model, seed)
        updates = updates or self.training_updates(model, seed)
        os.makedirs(save, exist_ok=True)
        common = [*self.experiment.train_flags, *self.flags(model, seed), "--seed", str(seed), "--max-update", str(updates),
                  "--log-interval", "50", "--no-progress-bar", *self.args.train_flags]
        if self.kind != "causal LM":  # train_once.sh writes the log and measures
            command = [os.path.join("scripts", "train_once.sh"), save, f"{model.label} (seed {seed})", "--",
                       "fairseq-train", self.binarized, "--save-dir", save, "--user-dir", "fairseq_alibi", "--arch", model.method,
                       *recipes.recipe(self.experiment.recipe, self.train_length(model), 1, self.updates), *common]
        else:
            command = [sys.executable, os.path.join("scripts", "measure.py"), os.path.join(save, "resources.jsonl"), "--",
                       os.path.join("scripts", "train.sh"), model.method, str(self.train_length(model)), self.data, save,
                       self.experiment.recipe, "--", *common]
        with open(os.devnull if self.kind != "causal LM" else os.path.join(save, "train.log"), "a") as log:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True)
            with stopped_together(proc):
                self.follow(proc, log, "" if self.seq2seq else " at L")
        if proc.wait() != 0:  # the log's last line says why (a one-line refusal, fairseq's exception)
            with open(os.path.join(save, "train.log")) as log:
                why = ([line.strip() for line in log if line.strip()] or ["(no output)"])[-1]
            raise SystemExit(f"error: training {model.label} (seed {seed}) failed: {why} (the whole log: {save}/train.log)")
        return self.checkpoint(model, seed) if save == self.save_dir(model, seed) else os.path.join(save, "checkpoint_last.pt")

    @staticmethod
    def follow(proc, log, where):
        """The training's output into its log; its validations (at `where`) and errors shown."""
        for line in proc.stdout:
            log.write(line)
            log.flush()  # tail -f SAVE/train.log follows it
            valid = re.search(r"valid on .*\| ppl ([\d.]+) .*\| num_updates (\d+)", line)
            if valid:
                print(f"    {valid[2]} updates: validation perplexity {valid[1]}{where}", flush=True)
            elif re.search(r"done training|already trained|error", line):
                print("   ", line.split(" | ")[-1].rstrip(), flush=True)

    def evaluations(self, model):
        """(scaling, L_valid, stride) to score: every length and stride; scalings past L only (at L
        they change nothing)."""
        lengths = self.model_lengths(model)
        jobs = [("none", lv, s) for lv in lengths for s in self.experiment.strides]
        jobs += [(sc, lv, s) for sc in model.scalings for lv in lengths if lv > self.train_length(model)
                 for s in self.experiment.strides]
        return jobs

    def scorings(self, model):
        """(row label, extra scripts/eval.sh flags) of each way the model is scored."""
        if not self.experiment.documents:
            return [(model.label, [])]
        return [(f"{model.label}, {suffix}", ["--model-overrides", overrides])
                for suffix, overrides in DOCUMENT_SCORINGS.items()]

    def evaluate(self, model, checkpoint):
        """Score what is missing from the results, in one scripts/eval.sh process per scoring (where
        only some is missing, the lengths, strides and scalings it spans are all scored again)."""
        missing = self.missing(model, checkpoint, checkpoints.checkpoint_summary(checkpoint)[2])
        for label, flags in self.scorings(model):
            if missing[label]:
                self.score(label, checkpoint, missing[label], flags)
        return any(missing.values())

    def missing(self, model, checkpoint, updates):
        """Each scoring's label -> the (scaling, L_valid, stride) the results lack for checkpoint (an
        encoder-decoder: the test buckets)."""
        if self.seq2seq:
            done = exact_match.scored_buckets(read_rows(self.results), model.label, checkpoint, updates)
            return {model.label: [bucket for bucket in self.buckets if bucket not in done]}
        rows = read_rows(self.results)
        problem = files.identity_problem(rows, checkpoint, self.identity(model, checkpoint), self.results)
        if problem:
            raise SystemExit(f"error: {problem} (--out)")
        done = files.Measured(rows)
        return {label: [(scaling, l_valid, stride) for scaling, l_valid, stride in self.evaluations(model)
                        if measurement(label, checkpoint, updates, l_valid, stride_of(stride, l_valid)[1], scaling,
                                       self.experiment.split, files.overrides_text(flags[1]) if flags else None) not in done]
                for label, flags in self.scorings(model)}

    def identity(self, model, checkpoint):
        """What rows of checkpoint must record to be this run's (files.identity_problem): the file now
        at its path, the data scored, the training flags and data (a shared model's are its own
        experiment's)."""
        identity = {"checkpoint_sha256": files.fingerprint(checkpoint) if os.path.isfile(checkpoint) else None,
                    "data_sha256": None, "train_flags": None if model.shared else shlex.join(self.args.train_flags),
                    "train_data_sha256": None}
        data = getattr(self, "data", None)  # set by run(); --tables has none
        if data and os.path.isfile(os.path.join(data, f"{self.experiment.split}.idx")):
            identity["data_sha256"] = files.data_fingerprint(data, self.experiment.split)
        if data and not model.shared and os.path.isfile(os.path.join(data, "train.idx")):
            identity["train_data_sha256"] = files.data_fingerprint(data, "train")
        return identity

    def scored_elsewhere(self, model, seed):
        """Every row of (model, seed) at the declared updates is in the results, but its checkpoint is
        not here (a fresh machine, the rows kept in git): it is done, not trained again."""
        checkpoint = self.checkpoint(model, seed)
        return not os.path.exists(checkpoint) and not any(self.missing(model, checkpoint, self.model_updates(model, seed)).values())

    def orphaned(self, jobs):
        """The (model, seed) runs of which OUT holds some rows but not all, of a checkpoint that is not
        here (a fresh machine, the rows kept in git): trained again, each would be another checkpoint
        file, whose rows cannot join these (files.identity_problem), found only after its training."""
        named = {r.get("checkpoint") for name in self.scored_files() for r in read_rows(os.path.join(self.out, name))}
        return [f"{model.label} seed {seed}" for model, seed in jobs if not model.shared
                for checkpoint in [self.checkpoint(model, seed)]
                if checkpoint in named and not os.path.exists(checkpoint) and not self.scored_elsewhere(model, seed)]

    def score(self, label, checkpoint, jobs, flags):
        scalings, lengths, strides = ([*dict.fromkeys(job[i] for job in jobs)] for i in range(3))
        lengths = " ".join(map(str, sorted(lengths)))
        env = dict(os.environ)
        if self.seq2seq:  # exact_match.py decodes the buckets the results lack
            command = [sys.executable, os.path.join("examples", "synthetic", "exact_match.py"), checkpoint, self.binarized,
                       self.buckets_file, self.results, "--label", label, "--fields", self.row_fields(checkpoint)]
        elif self.masked:
            command = [sys.executable, os.path.join("scripts", "eval_mlm.py"), checkpoint, self.data, self.results,
                       "--lengths", lengths, "--split", self.experiment.split, "--label", label, "--fields",
                       self.row_fields(checkpoint)]
        else:  # eval.sh takes its options from the environment; a user's own scalings are not ours
            env.update(LABEL=label, ROW_FIELDS=self.row_fields(checkpoint), SCALING=" ".join(scalings), SPLIT=self.experiment.split)
            for name in ("ALIBI_SCALING", "SCALING_FACTOR", "ALIBI_SCALING_FACTOR"):
                env.pop(name, None)
            command = [os.path.join("scripts", "eval.sh"), checkpoint, self.data, self.results, lengths,
                       " ".join(strides), "--", *flags]
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        with stopped_together(proc):
            _, errors = proc.communicate()
        if proc.returncode != 0:
            log = os.path.join(self.out, "scoring-errors.log")  # the whole of it, for a crash's cause
            with open(log, "a") as f:
                f.write(f"== {label} ({checkpoint}), {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n{errors}\n")
            last = (errors.strip().splitlines() or [f"error: scoring {label} failed"])[-1]
            raise SystemExit(f"{last} (all of it in {log})")

    def floor(self):
        """The unigram row, once per length and stride: unigram.py adds those OUT lacks (an
        encoder-decoder has none: exact match's floor is 0, and its table names every model below
        90% in distribution)."""
        if self.seq2seq:
            return
        scorer = importlib.import_module(self.experiment.scorer) if self.experiment.scorer else None
        if hasattr(scorer, "write_floors"):  # a task's own floors, from its test prompts (retrieval's)
            scorer.write_floors(self)
        subprocess.run([sys.executable, os.path.join("scripts", "unigram.py"), self.data, self.results,
                        "--lengths", " ".join(map(str, self.lengths)), "--strides", " ".join(self.experiment.strides),
                        "--split", self.experiment.split, "--fields", self.fields,
                        *(["--masked-lm"] if self.masked else [])], check=True)

    def tabulate(self):
        """Tables and figures from the rows of the declared runs at the declared updates (earlier
        rows, of other recipes or runs, stay in the file but not in the tables): every declared
        model's and seed's, whatever part of them this invocation ran (--models, --seeds)."""
        models, seeds = self.experiment.models, sorted({*self.experiment.seeds, *self.seeds})
        lengths = {lv for m in models for lv in self.model_lengths(m)}
        updates = {self.checkpoint(m, s): self.model_updates(m, s) for m in models for s in self.model_seeds(m, seeds)}
        if self.seq2seq:  # exact match per task and size bucket (examples/synthetic/table.py)
            rows = [r for r in read_rows(self.results) if r.get("checkpoint") in updates and r.get("updates") == updates[r["checkpoint"]]]
            return synthetic_table.write_table(rows, self.out) if rows else ""
        every = read_rows(self.results)
        rows = [r for r in every
                if (r.get("model") == "unigram" or (r.get("checkpoint") in updates and r.get("updates") == updates[r["checkpoint"]]))
                and r["l_valid"] in lengths]
        if self.args.tables and len(rows) < len(every):  # said, never dropped unseen
            print(left_out([r for r in every if r not in rows], updates, lengths, self.name), flush=True)
        table_rows = results.keyed(rows)  # the last measurement of a configuration wins
        if not table_rows:
            return ""
        printed = results.write_tables(table_rows, self.out)
        if self.experiment.report:
            printed += "\n" + (importlib.import_module(self.experiment.report).report(rows, self.out) or "")
        return printed

    def run(self):
        os.makedirs(self.out, exist_ok=True)
        lock = open(os.path.join(self.out, ".lock"), "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise SystemExit(f"error: another scripts/experiment.py is running on {self.out}: wait for it, or give --out")
        if self.args.tables:
            print(self.tabulate() or f"no rows of {self.name}'s runs in {self.results} yet")
            return
        if self.seq2seq:
            self.data = prepare_synthetic(self.args.data or os.path.join("data-bin", "synthetic"), self.args.task_flags)
            self.binarized, self.buckets_file = os.path.join(self.data, "bin"), os.path.join(self.data, "text", "buckets.txt")
            with open(self.buckets_file) as f:
                self.buckets = [line.split()[0] for line in f if line.strip()]
        else:
            self.data = self.binarized = self.args.data or (
                importlib.import_module(self.experiment.data).prepare_data(self) if self.experiment.data
                else prepare_wikitext2(self.experiment.documents))
            if self.args.data and self.experiment.data:  # data the experiment cannot use: refused before any training
                problem = getattr(importlib.import_module(self.experiment.data), "data_problem", lambda data: None)(self.data)
                if problem:
                    raise SystemExit(f"error: {problem}")
        start, started = time.time(), time.strftime("%Y-%m-%dT%H:%M:%S%z")
        jobs = [(m, s) for s in self.seeds for m in self.models if s in self.model_seeds(m, self.seeds)]  # seed by seed
        record = {"command": "python scripts/experiment.py " + shlex.join(sys.argv[1:]), "commit": provenance.commit(),
                  "machine": provenance.machine(), "started": started, "jobs": len(jobs),
                  # the float summation order, so a training's trajectory, depends on it
                  "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset (torch: one per core)")}
        invocations = os.path.join(self.out, "runs.jsonl")
        # Recorded as it starts, so that a run killed outright (a session's end) still leaves its line.
        append_lines(invocations, [json.dumps(dict(record, event="started"))])
        scored = (f"scored by exact match on {len(self.buckets)} size buckets" if self.seq2seq else
                  f"at L={self.length}, scored at {' '.join(map(str, self.lengths))}, strides {' '.join(self.experiment.strides)}")
        print(f"== {self.name}: {len(self.models)} models x {len(self.seeds)} seeds, {self.experiment.recipe} recipe, "
              f"{self.updates} updates {scored} -> {self.out}", flush=True)
        try:
            orphaned = self.orphaned(jobs)
            if orphaned:
                raise SystemExit(f"error: {self.out} holds some rows of {', '.join(orphaned)}, scored on checkpoints that are "
                                 "not on this machine: trained again they would be other checkpoint files, whose rows "
                                 f"cannot join those. Carry the checkpoints ({self.checkpoints}) here to continue, or "
                                 "give another --out to run them anew")
            self.floor()
            self.take_shared()
            if self.args.parallel > 1:
                self.run_parallel(jobs, start)
            else:
                self.run_in_turn(jobs, start)
            printed = self.tabulate()
        except KeyboardInterrupt:
            append_lines(invocations, [json.dumps(dict(record, event="stopped", wall_s=round(time.time() - start, 1)))])
            raise
        except SystemExit as refusal:  # a refusal or a failed job: its line, so that no "started" stands alone
            append_lines(invocations, [json.dumps(dict(record, event="failed", wall_s=round(time.time() - start, 1),
                                                       why=(str(refusal.code).strip().splitlines() or [""])[-1]))])
            raise
        append_lines(invocations, [json.dumps(dict(record, event="finished", wall_s=round(time.time() - start, 1)))])
        print(printed)
        print(f"== {self.name} done in {duration(time.time() - start)}: tables and figures in {self.out}")

    def run_in_turn(self, jobs, start):
        worked = []  # seconds of the jobs that did work (for the estimate)
        for number, (model, seed) in enumerate(jobs, 1):
            job_start = time.time()
            elapsed = job_start - start
            left = f", about {duration(sum(worked) / len(worked) * (len(jobs) - number + 1))} left" if worked else ""
            print(f"== [{number}/{len(jobs)}] {model.label}, seed {seed} ({duration(elapsed)} so far{left})", flush=True)
            if model.shared:
                print(f"    {model.shared[0]}'s run (its committed rows): nothing to do", flush=True)
                continue
            if self.scored_elsewhere(model, seed):
                print("    already scored (its checkpoint is not on this machine): nothing to do", flush=True)
                continue
            checkpoint = self.train(model, seed)
            scored = self.evaluate(model, checkpoint)
            if self.experiment.scorer:
                scored = importlib.import_module(self.experiment.scorer).score_model(self, model, seed, checkpoint) or scored
            if scored and number < len(jobs):
                self.tabulate()  # what is done so far, in case the run is stopped
            if time.time() - job_start > 30:
                worked.append(time.time() - job_start)

    def run_parallel(self, jobs, start):
        """Each (model, seed) by a runner of its own (its rows in OUT/parts/<run>), --parallel at a
        time (small models leave a GPU, or many cores, mostly idle); each part's rows are appended
        to OUT/results.jsonl as it ends. Stopped and rerun, it continues as run_in_turn does."""
        waiting, running, failed = [job for job in jobs if not job[0].shared and not self.scored_elsewhere(*job)], {}, []
        if len(waiting) < len(jobs):
            print(f"== {len(jobs) - len(waiting)} of {len(jobs)} already scored (their checkpoints are not on this "
                  "machine): nothing to do for them", flush=True)
        while waiting or running:
            while waiting and len(running) < self.args.parallel:
                model, seed = waiting.pop(0)
                part = os.path.join(self.out, "parts", os.path.basename(self.save_dir(model, seed)))
                self.start_part(model, seed, part)
                command = [sys.executable, os.path.abspath(__file__), self.name, "--models", names(model)[2],
                           "--seeds", str(seed), "--out", part, "--checkpoints", self.checkpoints, "--data", self.data,
                           "--updates", str(self.updates), "--train-length", str(self.length),
                           *(["--lengths", *map(str, self.args.lengths)] if self.args.lengths else []),
                           "--train-flags", shlex.join(self.args.train_flags),
                           *(["--task-flags", shlex.join(self.args.task_flags)] if self.args.task_flags else [])]
                # Unless told, the parts share the cores out: N parts of a thread per core each would
                # oversubscribe them N times.
                threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // self.args.parallel))
                with open(os.path.join(part, "runner.log"), "a") as log:
                    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                            env=dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=threads))
                running[proc] = (model, seed, part)
            with stopped_together(*running):
                while not (ended := [proc for proc in running if proc.poll() is not None]):
                    time.sleep(1)
            proc = ended[0]
            model, seed, part = running.pop(proc)
            self.merge(part)
            ok = proc.returncode == 0
            if not ok:
                with open(os.path.join(part, "runner.log")) as log:
                    last = (log.read().strip().splitlines() or [""])[-1]
                failed.append(f"{model.label}, seed {seed}: {last} (see {part}/runner.log)")
            print(f"== {len(jobs) - len(waiting) - len(running)}/{len(jobs)} ended ({duration(time.time() - start)} "
                  f"so far): {model.label}, seed {seed}{'' if ok else ' FAILED'}", flush=True)
            self.tabulate()
        if failed:
            raise SystemExit("error: some runs failed:\n  " + "\n  ".join(failed))

    def scored_files(self):
        """The files under OUT that rows go to: results.jsonl, and the scorer's own (its ROWS)."""
        scorer = importlib.import_module(self.experiment.scorer) if self.experiment.scorer else None
        return (os.path.basename(self.results), *((scorer.ROWS,) if scorer else ()))

    def start_part(self, model, seed, part):
        """A part begins with the rows OUT already holds for its (model, seed), and the floor's, so
        that its runner scores only what OUT lacks (a run begun one at a time, continued in parallel)."""
        os.makedirs(part, exist_ok=True)
        checkpoint = self.checkpoint(model, seed)
        for name in self.scored_files():
            append_new(os.path.join(part, name), [r for r in read_rows(os.path.join(self.out, name))
                                                  if r.get("checkpoint") == checkpoint or r.get("model") == "unigram"])

    def merge(self, part):
        """Append a part's model rows that OUT's files do not hold yet (the floor is OUT's own)."""
        for name in self.scored_files():
            append_new(os.path.join(self.out, name), [r for r in read_rows(os.path.join(part, name))
                                                      if r.get("model") != "unigram"])


def left_out(rows, updates, lengths, name):
    """One line: how many rows a table leaves out, and why (with an example of each)."""
    why = {}
    for r in rows:
        if r.get("model") != "unigram" and r.get("checkpoint") not in updates:
            reason, example = f"of checkpoints {name} does not declare here (another --checkpoints?)", r.get("checkpoint")
        elif r.get("model") != "unigram" and r.get("updates") != updates[r["checkpoint"]]:
            reason, example = "at other updates than declared", r.get("updates")
        else:
            reason, example = "at lengths not declared", r["l_valid"]
        why.setdefault(reason, [0, example])[0] += 1
    return f"left out of the tables: {len(rows)} rows: " + "; ".join(
        f"{n} {reason}, e.g. {example}" for reason, (n, example) in why.items())


def append_new(path, rows):
    """Append to the results file `path` those of `rows` it does not hold yet (row for row)."""
    have = {json.dumps(r, sort_keys=True) for r in read_rows(path)}
    new = [json.dumps(r) for r in rows if json.dumps(r, sort_keys=True) not in have]
    if new:
        append_lines(path, new)


@contextlib.contextmanager
def stopped_together(*procs):
    """If the runner is stopped (Ctrl-C, SIGTERM), so is proc with everything it started (its own
    session): no trainer is left running unseen, writing to a directory a rerun will use. And as
    the runner yields, so do they: on Linux a new session is a new scheduling group (autogroup),
    where the runner's `nice` no longer counts, so the group is given the runner's niceness."""
    niceness = os.nice(0)
    for proc in procs if niceness > 0 else ():
        with contextlib.suppress(OSError), open(f"/proc/{proc.pid}/autogroup", "w") as group:
            group.write(str(niceness))
    try:
        yield
    except BaseException:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in procs:
            with contextlib.suppress(ChildProcessError):
                proc.wait()
        raise


def prepare_synthetic(directory, task_flags):
    """The synthetic tasks in DIRECTORY/text (examples/synthetic/make_tasks.py: made once, other
    options over made ones refused), binarized with one dictionary in DIRECTORY/bin (written whole:
    a temporary directory renamed into place)."""
    text, binarized = os.path.join(directory, "text"), os.path.join(directory, "bin")
    if subprocess.run([sys.executable, os.path.join("examples", "synthetic", "make_tasks.py"), text, *task_flags]).returncode:
        raise SystemExit(1)
    if not os.path.isdir(binarized):
        with open(os.path.join(text, "buckets.txt")) as f:
            tests = ",".join(os.path.join(text, line.split()[0]) for line in f if line.strip())
        partial = binarized + ".part"
        shutil.rmtree(partial, ignore_errors=True)  # an interrupted earlier attempt's
        with open(os.path.join(directory, "preprocess.log"), "w") as log:
            done = subprocess.run(["fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt",
                                   "--trainpref", os.path.join(text, "train"), "--validpref", os.path.join(text, "valid"),
                                   "--testpref", tests, "--destdir", partial, "--joined-dictionary", "--workers", "2"],
                                  stdout=log, stderr=subprocess.STDOUT)
        if done.returncode:
            raise SystemExit(f"error: fairseq-preprocess failed on {text} (its log: {directory}/preprocess.log)")
        os.rename(partial, binarized)
    return directory


def prepare_wikitext2(documents=False):
    """data-bin/wikitext-2 (-documents: with <doc> between articles), as scripts/prepare-wikitext.sh
    makes it (from WIKITEXT2_SOURCE, else ../shared/data/wikitext-2 if present, else the download
    mirror; skipped when done)."""
    shared = os.path.join("..", "shared", "data", "wikitext-2")
    source = os.environ.get("WIKITEXT2_SOURCE") or (shared if os.path.isdir(shared) else "")
    flags = ["--documents"] if documents else []
    if subprocess.run([os.path.join("scripts", "prepare-wikitext.sh"), *flags, "2", *([source] if source else [])]).returncode:
        raise SystemExit(1)
    return "data-bin/wikitext-2" + ("-documents" if documents else "")


# The environment variables of the bash presets (examples/wikitext2/common.sh) and the runner's options
# for them; not DATA, OUT or CHECKPOINTS: names too common to refuse (a GPU machine here sets OUT).
PRESET_VARIABLES = {"L": "--train-length", "UPDATES": "--updates", "L_VALID": "--lengths",
                    "TRAIN_FLAGS": "--train-flags", "VARIANTS": "--models",
                    "SLIDING": "nothing (the declaration scores both strides)",
                    "LITTLEBIRD_BLOCK": "an experiment declared with littlebird(BLOCK, PACK)",
                    "LITTLEBIRD_PACK": "an experiment declared with littlebird(BLOCK, PACK)",
                    "ALIBI_L": "--train-length", "SINUSOIDAL_LS": "nothing (the trade's declaration: multiples of L)",
                    "SEEDS": "--seeds", "TASK_FLAGS": "--task-flags"}


@files.one_line_on_disk_faults
def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="the experiment: " + ", ".join(EXPERIMENTS))
    p.add_argument("--list", action="store_true", help="list the experiments and their models")
    p.add_argument("--seeds", type=int, nargs="+", help="training seeds (default: the declaration's)")
    p.add_argument("--models", nargs="+", help="only these models (labels, or their lower-case-hyphen form; "
                   "NAME@K: the one trained at K x L, e.g. sinusoidal@16 in trade)")
    p.add_argument("--updates", type=int, help="training updates (default: the recipe's)")
    p.add_argument("--train-length", type=int, help="L (default: the declaration's)")
    p.add_argument("--lengths", type=int, nargs="+", help="L_valid values (default: the declaration's multiples of L)")
    p.add_argument("--data", help="a binarized data directory (default: WikiText-2, prepared if needed; synthetic: "
                   "where its tasks are made, DATA/text and DATA/bin, default data-bin/synthetic)")
    p.add_argument("--out", help="results, tables and figures (default: runs/NAME)")
    p.add_argument("--checkpoints", help="checkpoints (default: checkpoints/NAME)")
    p.add_argument("--train-flags", default="", help="extra fairseq-train flags for every model (toy sizes)")
    p.add_argument("--task-flags", default="", help="synthetic only: examples/synthetic/make_tasks.py options (toy sizes)")
    p.add_argument("--parallel", type=int, default=1,
                   help="run this many (model, seed) jobs at once (a GPU or many cores; default 1: one at a time)")
    p.add_argument("--tables", action="store_true",
                   help="only rebuild the tables and figures from OUT/results.jsonl (rows merged from elsewhere)")
    args = p.parse_args()
    if args.list or not args.name:
        for name, e in EXPERIMENTS.items():
            print(f"{name}: {e.about}\n    models: {', '.join(m.label + (f' (at {m.train_multiple}L)' if m.train_multiple > 1 else '') for m in e.models)}; seeds {' '.join(map(str, e.seeds))}")
        return
    if args.name not in EXPERIMENTS:
        p.error(f"unknown experiment '{args.name}': use one of {', '.join(EXPERIMENTS)} (--list describes them)")
    # The bash presets read these; the runner does not: a run that silently ignored L=128 would
    # train and tabulate L=64 under the user's belief that it is L=128.
    for variable, option in PRESET_VARIABLES.items():
        if os.environ.get(variable):
            p.error(f"{variable}={os.environ[variable]} is not read by the experiment runner (it takes options): "
                    f"use {option}, or unset {variable}")
    experiment = EXPERIMENTS[args.name]
    known = {name for m in experiment.models for name in names(m)}
    for name in args.models or ():
        if name not in known:
            shown = dict.fromkeys(names(m)[1 if m.train_multiple == 1 else 2] for m in experiment.models)
            p.error(f"unknown model '{name}' for {args.name}: use one of {', '.join(shown)}")
    for name, values in (("--seeds", args.seeds), ("--lengths", args.lengths), ("--updates", [args.updates]),
                         ("--train-length", [args.train_length]), ("--parallel", [args.parallel])):
        if any(v is not None and v < (0 if name == "--seeds" else 1) for v in values or ()):
            p.error(f"{name} must be {'non-negative' if name == '--seeds' else 'positive'} integers")
    if args.task_flags and experiment.recipe != "synthetic":
        p.error(f"--task-flags is for the synthetic tasks, not {args.name}: leave it out")
    args.train_flags, args.task_flags = shlex.split(args.train_flags), shlex.split(args.task_flags)
    # A model is its declaration: flags that make another one would be trained and tabulated under its label.
    declared = [f for f in args.train_flags if f.split("=")[0] in ("--arch", "--user-dir", "--task", "--tokens-per-sample")]
    if declared:
        p.error(f"--train-flags may not set {', '.join(declared)}: each model's architecture, task and L are its "
                "declaration's (use --train-length for L, or declare another experiment)")
    # Nor what a model's declaration sets (KERPLE's variant, an encoder's ALiBi, LittleBird's blocks):
    # trained so, it would be tabulated under a label that says otherwise.
    selected = [m for m in experiment.models if not args.models or set(names(m)) & set(args.models)]
    owned = {}
    for m in selected:
        for f in m.flags:  # its sizes aside (the toy runs shrink a twin's declared dimensions)
            if f.startswith("--") and not re.fullmatch(r"--(encoder|decoder)-[a-z-]*(layers|dim|heads)", f.split("=")[0]) \
                    and m.label not in owned.setdefault(f.split("=")[0], []):
                owned[f.split("=")[0]].append(m.label)
    overridden = [f"{f.split('=')[0]} ({', '.join(owned[f.split('=')[0]])})" for f in args.train_flags
                  if f.split("=")[0] in owned and f.split("=")[0] not in recipes.BOOKKEEPING]
    if overridden:
        p.error(f"--train-flags may not set {', '.join(overridden)}: the model's declaration sets it, and its label "
                "says so; declare another model or experiment for another value")
    # Paths given are the caller's; defaults (runs/, checkpoints/, data-bin/) are the repository's.
    # Those inside the repository are kept relative to it, as the defaults are: rows name the same
    # checkpoint whichever way it was given, and no machine's paths.
    for name in ("data", "out", "checkpoints"):
        if getattr(args, name):
            path = os.path.abspath(getattr(args, name))
            inside = os.path.relpath(path, REPO)
            setattr(args, name, path if inside.split(os.sep)[0] == ".." else inside)
    os.chdir(REPO)
    Runner(args.name, experiment, args).run()


def cli():
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops as Ctrl-C does
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("\nstopped: run the same command again to continue (finished work is kept)")


if __name__ == "__main__":
    cli()
