"""The stock fairseq flags that give our small architectures with fairseq's own positions (the
sinusoidal and learned-position twins the experiments compare with): plain strings, importable
without torch or fairseq (scripts/train.sh, the experiment runner, the tests)."""

# scripts/train.sh's METHODs of a causal LM that train a stock twin below (fairseq's own positions), not a
# plugin model: the sinusoidal twin (small, wiki103) and the learned-position one (gpt2_small).
TWIN_METHODS = ("sinusoidal", "learned")

# alibi_transformer_small's dimensions (models/encoder.py), and the stock fairseq flags that give them
# with sinusoidal positions: the encoder-decoder twin of the synthetic experiment.
TRANSLATION_SMALL_DIMS = {"layers": 3, "embed_dim": 128, "ffn_embed_dim": 512, "attention_heads": 8}
TRANSLATION_TWIN_FLAGS = "--arch transformer " + " ".join(
    f"--{side}-{name.replace('_', '-')} {value}" for side in ("encoder", "decoder")
    for name, value in TRANSLATION_SMALL_DIMS.items())

# Stock fairseq flags giving the small architecture's dimensions with sinusoidal positions.
SMALL_TWIN_FLAGS = (
    "--arch transformer_lm --decoder-layers 4 --decoder-embed-dim 128 --decoder-input-dim 128 "
    "--decoder-output-dim 128 --decoder-ffn-embed-dim 512 --decoder-attention-heads 8 "
    "--decoder-normalize-before --adaptive-input --adaptive-input-cutoff 2000,10000 "
    "--adaptive-softmax-cutoff 2000,10000 --tie-adaptive-weights --tie-adaptive-proj"
)

# Stock fairseq flags giving gpt2_small_architecture with learned positions (a GPT-2 of the small
# dimensions as fairseq-alibi-import-hf writes it; n_positions = the training length).
GPT2_SMALL_TWIN_FLAGS = (
    "--arch transformer_lm --decoder-layers 4 --decoder-embed-dim 128 --decoder-input-dim 128 "
    "--decoder-output-dim 128 --decoder-ffn-embed-dim 512 --decoder-attention-heads 8 "
    "--decoder-normalize-before --decoder-learned-pos --no-scale-embedding "
    "--share-decoder-input-output-embed --activation-fn gelu_accurate"
)
