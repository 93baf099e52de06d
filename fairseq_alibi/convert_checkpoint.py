"""Convert a checkpoint of the paper's fork (alibi_wt103_L*.pt) into this plugin's model.

    python -m fairseq_alibi.convert_checkpoint alibi_wt103_L512.pt alibi_wt103_L512.alibi.pt

The fork's checkpoints say `transformer_lm_wiki103`, so stock fairseq loads them silently as a
sinusoidal model (about twice the true perplexity). This rewrites the model config to
`alibi_transformer_lm` (same dimensions, no position embeddings), drops the fork-only
`max_tokens` field and the unused sinusoid buffer `decoder.embed_positions._float_tensor`, and
keeps every weight. A fork checkpoint is recognised by its `max_tokens` model field, which the
fork added and stock fairseq lacks; `--force` converts other transformer LMs anyway.
"""
import argparse
import dataclasses
import logging

import torch

from .alibi_lm import AlibiTransformerLanguageModelConfig
from .decoder import ConfigError

logger = logging.getLogger(__name__)

POSITION_BUFFER = "decoder.embed_positions._float_tensor"
ALIBI_FIELDS = [f for f in dataclasses.fields(AlibiTransformerLanguageModelConfig) if f.name.startswith("alibi_")]


def convert_state(state, force=False, name="checkpoint"):
    """Return the converted checkpoint dict (the input is modified in place)."""
    cfg = state.get("cfg")
    if cfg is None and state.get("args") is not None:  # checkpoints from argparse-era fairseq
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf

        cfg = convert_namespace_to_omegaconf(state.pop("args"))
    if cfg is None or "model" not in cfg or "model" not in state:
        raise ConfigError(f"{name} has no model config or weights: is it a fairseq checkpoint?")
    from omegaconf import OmegaConf

    if not isinstance(cfg, dict):
        cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    model_cfg = cfg["model"]
    arch = model_cfg.get("arch") or model_cfg.get("_name")
    if str(model_cfg.get("_name")).startswith("alibi_"):
        missing = [f for f in ALIBI_FIELDS if f.name not in model_cfg]
        if not missing:
            raise ConfigError(f"{name} is already an ALiBi checkpoint ({model_cfg['_name']}): nothing to do")
        # Trained before these options existed: fairseq drops --model-overrides of absent fields.
        model_cfg.update({f.name: f.default for f in missing})
        state["cfg"] = cfg
        logger.info("added %s to %s", ", ".join(f.name for f in missing), name)
        return state
    task = (cfg.get("task") or {}).get("_name")
    if task != "language_modeling" or not str(arch).startswith("transformer_lm"):
        raise ConfigError(
            f"{name} is a {task} / {arch} checkpoint, not a transformer language model: only the "
            "paper's transformer_lm checkpoints can be converted"
        )
    if "max_tokens" not in model_cfg and not force:
        raise ConfigError(
            f"{name} lacks the fork's max_tokens model field, so it looks like a stock (sinusoidal) "
            "model that ALiBi would score wrongly; pass --force to convert it anyway"
        )

    known = {f.name for f in dataclasses.fields(AlibiTransformerLanguageModelConfig)}
    dropped = sorted(k for k in model_cfg if k not in known and k != "_name")
    new_cfg = {k: v for k, v in model_cfg.items() if k in known}
    new_cfg.update({f.name: f.default for f in ALIBI_FIELDS})  # so --model-overrides can set them
    new_cfg["_name"] = "alibi_transformer_lm"
    new_cfg["arch"] = "alibi_transformer_lm_wiki103" if "wiki103" in str(arch) else "alibi_transformer_lm"
    new_cfg["no_token_positional_embeddings"] = True
    new_cfg["decoder_learned_pos"] = False
    cfg["model"] = new_cfg
    state["cfg"] = cfg
    state["model"].pop(POSITION_BUFFER, None)
    logger.info("converted %s (%s) to %s; dropped config fields %s", name, arch, new_cfg["arch"], dropped)
    return state


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="a checkpoint of the fork, e.g. alibi_wt103_L512.pt")
    p.add_argument("target", help="where to write the converted checkpoint")
    p.add_argument("--force", action="store_true", help="convert a checkpoint without the fork's marker")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.source == args.target:
        raise ConfigError("write the converted checkpoint to a new file, not over the original")
    state = torch.load(args.source, map_location="cpu", weights_only=False)
    torch.save(convert_state(state, force=args.force, name=args.source), args.target)
    print(f"wrote {args.target}: load it with --user-dir fairseq_alibi (no --model-overrides needed)")


if __name__ == "__main__":
    main()
