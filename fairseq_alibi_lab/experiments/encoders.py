"""The masked LMs (RoBERTa-style encoders): the five encoder ALiBi variants against their twins, and
LittleBird against the dense encoders of its size."""
from fairseq_alibi_lab.claims import Claim
from fairseq_alibi_lab.experiments.base import Experiment, Model, register

# The masked-LM encoders of the bidirectional experiment, one recipe for all: the five encoder ALiBi
# variants and fairseq's RoBERTa encoder with sinusoidal or learned positions (the twins).
# Every encoder scales its token embeddings by sqrt(d) (--scale-embedding, fairseq's transformer
# convention): without it the sinusoidal twin's unit-scale sinusoids drown RoBERTa's std-0.02 token
# embeddings, and with it both twins learn from context within the recipe's 3000 updates
# (examples/wikitext2/results/mlm-diagnosis/). An ALiBi encoder adds no positions, so its embedding
# LayerNorm makes the scale a no-op (tests/library/test_bidirectional.py).
SCALED = ("--scale-embedding",)
ENCODER_VARIANTS = ("symmetric", "one_sided", "learned", "ruoss", "bialibi")  # --encoder-alibi
ENCODERS = (*(Model(f"ALiBi {variant}", "alibi_roberta_small", ("--encoder-alibi", variant, *SCALED))
              for variant in ENCODER_VARIANTS),
            Model("Sinusoidal", "alibi_roberta_small", ("--encoder-alibi", "none", *SCALED)),
            # its table 16L long (rows past L never trained), so that it is scored at every length
            Model("Learned positions", "alibi_roberta_small",
                  ("--encoder-alibi", "none", "--encoder-learned-pos", "--max-positions", "1024", *SCALED)))
# The masked LMs of the bidirectional comparison (nonoverlapping; masked-token perplexity).
MLM_VARIANTS = tuple(f"ALiBi {variant}" for variant in ("symmetric", "ruoss", "bialibi", "learned", "one_sided"))
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
register("mlm", Experiment(
    "Masked LMs (RoBERTa-style encoders) trained at L=64, scored to 16L on one fixed mask.",
    ENCODERS, recipe="masked_lm", strides=("0",), claims=MLM))  # eval_mlm.py: nonoverlapping blocks only




def littlebird(block, pack):
    """LittleBird (blocks of `block` tokens, a pack of `pack`) without and with padding insertion."""
    flags = ("--block-size", str(block), "--pack-length", str(pack))
    return (Model("LittleBird", "littlebird_roberta_small", flags),
            Model("LittleBird + padding insertion", "littlebird_roberta_small", (*flags, "--padding-insertion", "0.5")))


DENSE = {m.label: m for m in ENCODERS}
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
register("littlebird", Experiment(
    "LittleBird (blocks of 8, a pack of 8: 8 blocks at L=64, sparse in training) against the dense "
    "encoders of its size, as mlm; the dense ones are mlm's own runs (its checkpoints).",
    (*littlebird(8, 8), DENSE["ALiBi bialibi"], DENSE["Sinusoidal"]), recipe="masked_lm", strides=("0",),
    checkpoints="mlm", claims=LITTLEBIRD))
register("littlebird-long", Experiment(
    "LittleBird with its own setting (blocks and pack of 64) trained at L=512, where its window is "
    "sparse (8 blocks), against dense BiALiBi at the same L, scored to 8L.",
    (*littlebird(64, 64)[:1], DENSE["ALiBi bialibi"]), recipe="masked_lm", train_length=512,
    multiples=(1, 2, 4, 8), strides=("0",), claims=LITTLEBIRD_LONG))
