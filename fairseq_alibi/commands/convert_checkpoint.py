"""Convert a transformer LM checkpoint into this plugin's ALiBi model.

    python -m fairseq_alibi.commands.convert_checkpoint alibi_wt103_L512.pt alibi_wt103_L512.alibi.pt
    python -m fairseq_alibi.commands.convert_checkpoint --replace-positions sinusoidal.pt alibi_init.pt

Two kinds of source:
- A checkpoint of the paper's fork (alibi_wt103_L*.pt), trained with ALiBi. It says
  `transformer_lm_wiki103`, so stock fairseq loads it silently as a sinusoidal model (about twice
  the true perplexity). It is recognised by its `max_tokens` model field, which the fork added.
- A stock `transformer_lm` with learned or sinusoidal positions (or an imported GPT-2's
  `gpt2_transformer_lm`, its --masked-output-symbols kept), only with --replace-positions:
  its position embeddings are dropped and ALiBi takes their place, a different model that needs
  fine-tuning (see the README: "Give an existing model ALiBi"). Without the flag it is refused,
  because scoring it as ALiBi is silently wrong.
The model config becomes `alibi_transformer_lm` (same dimensions, no position embeddings), config
fields the plugin does not know and the position parameters and buffers are dropped, every other
weight is kept, and `fairseq_alibi_conversion` in the checkpoint records the source. An ALiBi
checkpoint passes through unchanged (conversion is idempotent), except that one trained before the
slope-scaling options existed gets their defaults, so that --model-overrides can set them.
"""
import argparse
import dataclasses
import logging
import os
import sys

import torch

from fairseq.models.transformer_lm import TransformerLanguageModelConfig

from fairseq_alibi.tools import dictionaries
from fairseq_alibi.checks import ConfigError
from fairseq_alibi.models.decoder import fairseq_config
from fairseq_alibi.tools.files import one_line_on_disk_faults, written_whole
from fairseq_alibi.positions import METHODS
from fairseq_alibi.tools.checkpoints import checkpoint_kind, with_article

logger = logging.getLogger(__name__)

POSITION_PREFIX = "decoder.embed_positions."  # learned: .weight; sinusoidal: ._float_tensor
# The ALiBi model's options beyond the stock transformer LM's (its method's, the kernel's, documents').
ALIBI_CONFIG = fairseq_config(METHODS["alibi"])  # alibi_transformer_lm's options
ALIBI_FIELDS = [f for f in dataclasses.fields(ALIBI_CONFIG)
                if f.name not in {g.name for g in dataclasses.fields(TransformerLanguageModelConfig)}]
# Top-level key of the converted checkpoint saying where it came from (fairseq ignores it).
PROVENANCE = "fairseq_alibi_conversion"


def with_config(state):
    """The loaded checkpoint with its config as fairseq's sections (a dict): an argparse-era checkpoint's
    `args` converted as fairseq converts it when it loads one, so that every tool reads either layout."""
    if state.get("cfg") is None and state.get("args") is not None:
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf
        from omegaconf import OmegaConf

        from fairseq_alibi import plugin  # noqa: F401  (the plugin's architectures, which the conversion looks up)

        state["cfg"] = OmegaConf.to_container(convert_namespace_to_omegaconf(state.pop("args")), resolve=True,
                                              enum_to_str=True)
    return state


def source_positions(model_cfg) -> str:
    if "max_tokens" in model_cfg:
        return "alibi (the paper's fork)"
    if model_cfg.get("no_token_positional_embeddings"):
        return "none"
    return "learned" if model_cfg.get("decoder_learned_pos") else "sinusoidal"


def convert_state(state, replace_positions=False, name="checkpoint"):
    """Return the converted checkpoint dict (the input is modified in place)."""
    if state.get("cfg") is not None or state.get("args") is not None:
        kind = checkpoint_kind(state)  # a masked LM's or translation model's config is a Namespace
        if kind != "causal LM":
            raise ConfigError(f"{name} is {with_article(kind)} checkpoint: only causal "
                              "language models (transformer_lm) are converted")
    cfg = with_config(state).get("cfg")  # checkpoints from argparse-era fairseq too
    if cfg is None or "model" not in cfg or "model" not in state:
        raise ConfigError(f"{name} has no model config or weights: is it a fairseq checkpoint?")
    from omegaconf import OmegaConf

    if not isinstance(cfg, dict):
        cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    state["cfg"] = cfg
    model_cfg = cfg["model"]
    arch = model_cfg.get("arch") or model_cfg.get("_name")
    if str(model_cfg.get("_name")).startswith("alibi_"):
        missing = [f for f in ALIBI_FIELDS if f.name not in model_cfg]
        if missing:  # trained before these options: fairseq drops --model-overrides of absent fields
            model_cfg.update({f.name: f.default for f in missing})
            logger.info("added %s to %s", ", ".join(f.name for f in missing), name)
        else:
            logger.info("%s is already an ALiBi checkpoint (%s): copied unchanged", name, model_cfg["_name"])
        return state
    task = (cfg.get("task") or {}).get("_name")
    if task != "language_modeling" or not str(arch).startswith(("transformer_lm", "gpt2_transformer_lm")):
        raise ConfigError(
            f"{name} is a {task} / {arch} checkpoint, not a transformer language model: only "
            "language_modeling transformer_lm checkpoints can be converted"
        )
    positions = source_positions(model_cfg)
    if positions != "alibi (the paper's fork)" and not replace_positions:
        raise ConfigError(
            f"{name} is a stock {arch} with {positions} positions, not a checkpoint of the paper's fork "
            "(no max_tokens field): scoring it as ALiBi would be wrong; pass --replace-positions to drop "
            "its positions for ALiBi, then fine-tune it"
        )

    known = {f.name for f in dataclasses.fields(ALIBI_CONFIG)}
    dropped = sorted(k for k in model_cfg if k not in known and k != "_name")
    new_cfg = {k: v for k, v in model_cfg.items() if k in known}
    # so --model-overrides can set them; an imported GPT-2's --masked-output-symbols kept
    new_cfg.update({f.name: f.default for f in ALIBI_FIELDS if f.name not in new_cfg})
    new_cfg["_name"] = "alibi_transformer_lm"
    new_cfg["arch"] = "alibi_transformer_lm_wiki103" if "wiki103" in str(arch) else "alibi_transformer_lm"
    new_cfg["no_token_positional_embeddings"] = True
    new_cfg["decoder_learned_pos"] = False
    cfg["model"] = new_cfg
    dropped_weights = sorted(k for k in state["model"] if k.startswith(POSITION_PREFIX))
    for key in dropped_weights:
        del state["model"][key]
    state[PROVENANCE] = {
        "source": os.path.abspath(name), "source_arch": arch, "source_positions": positions,
        "dropped_weights": dropped_weights, "dropped_config_fields": dropped,
    }
    logger.info("converted %s (%s, %s positions) to %s; dropped weights %s and config fields %s",
                name, arch, positions, new_cfg["arch"], dropped_weights, dropped)
    return state


@one_line_on_disk_faults
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="the checkpoint to convert, e.g. alibi_wt103_L512.pt")
    p.add_argument("target", help="where to write the converted checkpoint (a new file)")
    p.add_argument("--replace-positions", action="store_true",
                   help="convert a stock transformer_lm: drop its learned or sinusoidal positions for ALiBi")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not os.path.isfile(args.source):
        raise ConfigError(f"no checkpoint at {args.source}")
    if os.path.exists(args.target):  # the source itself too, under any name
        raise ConfigError(f"{args.target} exists: write the converted checkpoint to a new file "
                          "(nothing is overwritten)")
    try:
        os.makedirs(os.path.dirname(os.path.abspath(args.target)), exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the directory of {args.target} ({e.strerror or e}): give another target")
    try:
        state = torch.load(args.source, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001  (unpickling errors have many types)
        raise ConfigError(f"{args.source} is not a readable checkpoint ({type(e).__name__})")
    if not isinstance(state, dict):
        raise ConfigError(f"{args.source} is not a fairseq checkpoint (a {type(state).__name__})")
    converted = convert_state(state, replace_positions=args.replace_positions, name=args.source)
    kept = dictionaries.checkpoint_dictionary(args.source)
    model_cfg = converted["cfg"]["model"]
    if kept and os.path.isfile(os.path.join(kept, "dict.txt")) and not model_cfg.get(dictionaries.RECORDED):
        model_cfg[dictionaries.RECORDED] = dictionaries.dictionary_fingerprint(kept)  # recorded inside it too
    with written_whole(args.target) as partial:  # a failed write (a full disk) leaves no truncated checkpoint
        try:
            torch.save(converted, partial)
        except RuntimeError as e:  # torch's zip writer reports a full disk so
            raise OSError(28, f"torch.save: {str(e).strip().splitlines()[0]}")
    if kept:  # the converted model reads the same words: its dictionary goes beside it too
        other = dictionaries.keep(kept, os.path.dirname(os.path.abspath(args.target)))
        if other:
            logger.warning("not kept beside %s: %s", args.target, other)
    print(f"wrote {args.target}: load it with --user-dir fairseq_alibi (no --model-overrides needed)")


if __name__ == "__main__":
    main()
