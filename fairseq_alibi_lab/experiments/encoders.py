"""The masked LMs (RoBERTa-style encoders): the five encoder ALiBi variants against their twins, and
LittleBird against the dense encoders of its size."""
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
register("mlm", Experiment(
    "Masked LMs (RoBERTa-style encoders) trained at L=64, scored to 16L on one fixed mask.",
    ENCODERS, recipe="masked_lm", strides=("0",)))  # eval_mlm.py: nonoverlapping blocks only




def littlebird(block, pack):
    """LittleBird (blocks of `block` tokens, a pack of `pack`) without and with padding insertion."""
    flags = ("--block-size", str(block), "--pack-length", str(pack))
    return (Model("LittleBird", "littlebird_roberta_small", flags),
            Model("LittleBird + padding insertion", "littlebird_roberta_small", (*flags, "--padding-insertion", "0.5")))


DENSE = {m.label: m for m in ENCODERS}
register("littlebird", Experiment(
    "LittleBird (blocks of 8, a pack of 8: 8 blocks at L=64, sparse in training) against the dense "
    "encoders of its size, as mlm; the dense ones are mlm's own runs (its checkpoints).",
    (*littlebird(8, 8), DENSE["ALiBi bialibi"], DENSE["Sinusoidal"]), recipe="masked_lm", strides=("0",),
    checkpoints="mlm"))
register("littlebird-long", Experiment(
    "LittleBird with its own setting (blocks and pack of 64) trained at L=512, where its window is "
    "sparse (8 blocks), against dense BiALiBi at the same L, scored to 8L.",
    (*littlebird(64, 64)[:1], DENSE["ALiBi bialibi"]), recipe="masked_lm", train_length=512,
    multiples=(1, 2, 4, 8), strides=("0",)))
