"""The causal position methods by name, their inference-only flags, and the encoder-decoder's
dimensions: plain Python, no import, so that the shell scripts and the experiment runner read them
cheaply (`runpy.run_path`) from the same definition as the factory (factory.CAUSAL builds each
method) and encoder.py."""

# --arch <method>_transformer_lm[_small|_wiki103]; scripts/train.sh METHOD.
CAUSAL_METHODS = ("alibi", "rotary", "t5_bias", "nope", "kerple", "sandwich", "fire")
# Options that change a trained model's scoring (scripts/eval.sh's SCALING): refused at training.
INFERENCE_ONLY = {"alibi": ("--alibi-scaling", "--alibi-train-length"),
                  "rotary": ("--rotary-scaling", "--rotary-train-length")}

# alibi_transformer_small's dimensions (encoder.py), and the stock fairseq flags that give them
# with sinusoidal positions: the encoder-decoder twin of the synthetic experiment.
TRANSLATION_SMALL_DIMS = {"layers": 3, "embed_dim": 128, "ffn_embed_dim": 512, "attention_heads": 8}
TRANSLATION_TWIN_FLAGS = "--arch transformer " + " ".join(
    f"--{side}-{name.replace('_', '-')} {value}" for side in ("encoder", "decoder")
    for name, value in TRANSLATION_SMALL_DIMS.items())
