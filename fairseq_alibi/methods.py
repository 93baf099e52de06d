"""The causal position methods by name, and their inference-only flags: plain Python, no import,
so that the shell scripts read them cheaply (`runpy.run_path`) from the same definition as the
factory (factory.CAUSAL builds each one)."""

# --arch <method>_transformer_lm[_small|_wiki103]; scripts/train.sh METHOD.
CAUSAL_METHODS = ("alibi", "rotary", "t5_bias", "nope", "kerple", "sandwich", "fire")
# Options that change a trained model's scoring (scripts/eval.sh's SCALING): refused at training.
INFERENCE_ONLY = {"alibi": ("--alibi-scaling", "--alibi-train-length"),
                  "rotary": ("--rotary-scaling", "--rotary-train-length")}
