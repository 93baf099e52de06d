"""From a model's arguments to its position method (positions/) and its attention kernel: the
one place where a method's options are read and checked, once, when the model is built, each
check one line (ConfigError). No module of the plugin checks an option anywhere else.

    positions, kernel = causal_positions("kerple", args)    # a decoder's
    positions = encoder_positions("symmetric", heads)        # an encoder's (bidirectional ALiBi)

Options a checkpoint predates read as their defaults (MethodConfig.from_args), so old checkpoints load.
"""
import dataclasses
from typing import List, Optional, Tuple

from fairseq_alibi.attention_options import OptionConfig, configs_from_args
from fairseq_alibi.attention_options.option import check_options, logit_readers
from fairseq_alibi.checks import ConfigError, config_check
from fairseq_alibi.bidirectional import EncoderAlibi, build_variant
from fairseq_alibi.kernels import AUTO_RULES, KERNEL_NAMES, KERNELS, takes_bias
from fairseq_alibi.length_temperature import TemperatureConfig
from fairseq_alibi.positions import METHODS, PositionMethod, build_method


def causal_positions(method: str, args) -> Tuple[PositionMethod, str]:
    """The decoder's position method and attention kernel name (--attention-kernel; ALiBi's
    older --alibi-attention where --attention-kernel is left at auto), every option checked."""
    heads = args.decoder_attention_heads
    config = METHODS[method].Config.from_args(args)
    positions = config_check(build_method, method, config, heads, args.decoder_embed_dim // heads,
                             args.decoder_embed_dim, flags=config.flags() or "--decoder-embed-dim/--decoder-attention-heads")
    kernel, flag = chosen_kernel(args)
    check_kernel(kernel, positions, flag)
    return positions, kernel


def chosen_kernel(args) -> Tuple[str, str]:
    """(the kernel a model's options choose, the flag that chose it): --attention-kernel, or ALiBi's
    older --alibi-attention where --attention-kernel is left at auto."""
    kernel, flag = getattr(args, "attention_kernel", None) or "auto", "--attention-kernel"
    legacy = getattr(args, "alibi_attention", None)
    if kernel == "auto" and legacy and legacy != "auto":
        kernel, flag = legacy, "--alibi-attention"
    return kernel, flag


# The kernels that take dynamic NTK's per-query slopes (the others take one slope per head).
PER_QUERY_SLOPE_KERNELS = (*AUTO_RULES, "sdpa")


def check_kernel(kernel: str, positions: PositionMethod, flag: str):
    if kernel not in KERNEL_NAMES:
        raise ConfigError(f"unknown {flag} {kernel!r}: use one of {', '.join(KERNEL_NAMES)}")
    why_not = None
    if kernel not in PER_QUERY_SLOPE_KERNELS and getattr(positions, "scaling", None) == "dynamic_ntk":
        why_not = "it takes one slope per head, not the per-query slopes of dynamic_ntk scaling"
    if why_not is None and kernel not in AUTO_RULES:
        why_not = takes_bias(kernel, positions)
    if why_not:
        raise ConfigError(f"{flag} {kernel}: {why_not}; use auto or sdpa")
    not_installed = KERNELS[kernel].installed() if kernel not in AUTO_RULES else None
    if not_installed:
        raise ConfigError(f"{flag} {kernel}: {not_installed}; or use auto")


def length_temperature(args, positions: PositionMethod, kernel: str) -> Tuple[Optional[TemperatureConfig], bool]:
    """(the length temperature's options, checked, or None without one; whether it scales the method's bias
    per query: its logit form, on a method with a bias); a kernel asked for by name must take that."""
    config = TemperatureConfig.from_args(args)
    config_check(config.build, args.decoder_attention_heads)
    if config.length_temperature == "none":
        return None, False
    scaled = config.length_temperature_form == "logit" and positions.adds_bias()
    flag = chosen_kernel(args)[1]
    why_not = takes_bias(kernel, positions, scaled=scaled) if scaled and kernel not in AUTO_RULES else None
    if why_not:
        raise ConfigError(f"{flag} {kernel}: {why_not}; use auto, sdpa or separable")
    # Without a bias the two forms are one: the queries scaled.
    return dataclasses.replace(config, length_temperature_form="logit" if scaled else "qk"), scaled


def attention_options(args, kernel: str) -> List[OptionConfig]:
    """The attention options a model's flags enable (attention_options/), checked together; one that reads the
    logits runs on the dense path, so a kernel asked for by name must be sdpa."""
    configs = config_check(configs_from_args, args)
    documents = getattr(args, "document_separator", None) is not None
    why_not = check_options(configs, documents)
    if why_not:
        raise ConfigError(why_not)
    reading = logit_readers(configs)
    if reading and kernel not in (*AUTO_RULES, "sdpa"):
        raise ConfigError(f"{chosen_kernel(args)[1]} {kernel}: {', '.join(reading)} reads every logit, which the dense "
                          "path (sdpa) computes; use auto or sdpa")
    return configs


def encoder_positions(variant: str, heads: int) -> EncoderAlibi:
    return config_check(build_variant, variant, heads, flags="--encoder-alibi")


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
