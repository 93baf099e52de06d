"""From a model's arguments to its position method (positions.py) and its attention kernel: the
one place where a method's options are read and checked, once, when the model is built, each
check one line (ConfigError). No module of the plugin checks an option anywhere else.

    positions, kernel = causal_positions("kerple", args)    # a decoder's
    positions = encoder_positions("symmetric", heads)        # an encoder's (bidirectional ALiBi)

Options a checkpoint predates read as their defaults (getattr), so old checkpoints load.
"""
from typing import Optional, Tuple

from .base import ConfigError, config_check
from .bidirectional import EncoderAlibi
from .kernels import KERNEL_NAMES, flash_installed, takes_bias
from .methods import CAUSAL_METHODS
from .positions import Alibi, Fire, Kerple, NoPositions, PositionMethod, Rotary, Sandwich, T5Bias


def scaling_options(args, method: str, needs_length: str):
    """(scaling, factor, training length) of an inference-time scaling (alibi_*, rotary_*);
    `needs_length`: the scaling that needs the training length."""
    scaling = getattr(args, f"{method}_scaling", "none")
    train_length = getattr(args, f"{method}_train_length", None)
    if train_length is not None and train_length < 1:
        raise ConfigError(f"{method}_train_length is the training --tokens-per-sample, a positive integer; "
                          f"got {train_length}")
    if scaling == needs_length and not train_length:
        raise ConfigError(f"{method}_scaling {needs_length} needs {method}_train_length, the training "
                          "--tokens-per-sample (scripts/eval.sh sets it from the checkpoint)")
    return scaling, getattr(args, f"{method}_scaling_factor", 1.0), train_length


def alibi(args, heads, head_dim):
    return config_check(Alibi, heads, *scaling_options(args, "alibi", "dynamic_ntk"),
                        flags="--alibi-scaling/--alibi-scaling-factor")


def rotary(args, heads, head_dim):
    scaling, factor, train_length = scaling_options(args, "rotary", "yarn")
    return config_check(Rotary, head_dim, getattr(args, "rotary_base", 10000.0), scaling, factor, train_length,
                        flags="--rotary-scaling/--rotary-scaling-factor/head dimension")


def t5_bias(args, heads, head_dim):
    return config_check(T5Bias, heads, args.t5_num_buckets, args.t5_max_distance, args.decoder_embed_dim**-0.5,
                        flags="--t5-num-buckets/--t5-max-distance")


def kerple(args, heads, head_dim):
    return config_check(Kerple, heads, getattr(args, "kerple_variant", "log"), flags="--kerple-variant")


def sandwich(args, heads, head_dim):
    return config_check(Sandwich, heads, head_dim, flags="--decoder-embed-dim/--decoder-attention-heads")


def fire(args, heads, head_dim):
    return config_check(Fire, heads, getattr(args, "fire_mlp_width", 32), getattr(args, "fire_init_c", 0.1),
                        getattr(args, "fire_init_threshold", 512.0),
                        flags="--fire-mlp-width/--fire-init-c/--fire-init-threshold")


def nope(args, heads, head_dim):
    return NoPositions()


# Method name (methods.CAUSAL_METHODS, the `<method>_transformer_lm` models) -> builder from the arguments.
CAUSAL = {"alibi": alibi, "rotary": rotary, "t5_bias": t5_bias, "nope": nope, "kerple": kerple,
          "sandwich": sandwich, "fire": fire}
assert tuple(CAUSAL) == CAUSAL_METHODS


def causal_positions(method: str, args) -> Tuple[PositionMethod, str]:
    """The decoder's position method and attention kernel name (--alibi-attention for ALiBi; auto
    for the others), every option checked."""
    heads = args.decoder_attention_heads
    positions = CAUSAL[method](args, heads, args.decoder_embed_dim // heads)
    kernel = getattr(args, "alibi_attention", "auto") if method == "alibi" else "auto"
    check_kernel(kernel, positions, "--alibi-attention")
    return positions, kernel


def check_kernel(kernel: str, positions: PositionMethod, flag: str):
    if kernel not in KERNEL_NAMES:
        raise ConfigError(f"unknown {flag} {kernel!r}: use one of {', '.join(KERNEL_NAMES)}")
    why_not = takes_bias(kernel, positions) if kernel not in ("auto", "sdpa") else None
    if why_not and getattr(positions, "scaling", None) == "dynamic_ntk":
        why_not = "it takes one slope per head, not the per-query slopes of dynamic_ntk scaling"
    if why_not:
        raise ConfigError(f"{flag} {kernel}: {why_not}; use auto or sdpa")
    if kernel == "flash" and flash_installed():
        raise ConfigError(f"{flag} flash: {flash_installed()}; or use auto")


def encoder_positions(variant: str, heads: int) -> EncoderAlibi:
    return config_check(EncoderAlibi, variant, heads, flags="--encoder-alibi")


def document_separator(args, dictionary) -> Optional[int]:
    """The dictionary index of --document-separator, or None without it."""
    symbol = getattr(args, "document_separator", None)
    if symbol is None:
        return None
    if symbol in (dictionary.pad_word, dictionary.unk_word) or dictionary.index(symbol) == dictionary.unk():
        why = ("padding" if symbol == dictionary.pad_word else "the unknown-word symbol" if symbol == dictionary.unk_word
               else "not in the dictionary")
        raise ConfigError(f"--document-separator {symbol!r} is {why}: give a symbol of the data's dict.txt that ends "
                          "each document (scripts/prepare-wikitext.sh --documents writes <doc> between articles)")
    return dictionary.index(symbol)
