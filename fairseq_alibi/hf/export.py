"""fairseq-alibi-export-hf CHECKPOINT OUT_DIR: a causal LM of this plugin (any position method) or
fairseq's own transformer_lm (sinusoidal, learned or no positions) as a Hugging Face folder that
torch and transformers alone load:

    model = AutoModelForCausalLM.from_pretrained(OUT_DIR, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(OUT_DIR)

The folder holds config.json (the model's layout, its position method and options, and where it
came from), model.safetensors (fairseq's parameter names where the layout is the same), the
modeling file (hf/bundle.py) and a tokenizer that maps a text to the ids fairseq's dictionary
gives it (hf/tokenizer.py). Its logits are fairseq's log-probabilities up to a constant per
position (exactly them for an adaptive softmax).
"""
import argparse
import dataclasses
import enum
import json
import os
import sys

import torch

from fairseq_alibi.attention_options import OPTIONS
from fairseq_alibi.models import masked_output
from fairseq_alibi.tools.checkpoints import field, model_and_task, read_state
from fairseq_alibi.tools.files import folder_written_whole, new_folder_problem, one_line_on_disk_faults
from fairseq_alibi.tools.provenance import commit
from fairseq_alibi.hf.bundle import FILE_NAME, bundled_source

AUTO_MAP = {"AutoConfig": "modeling_fairseq_alibi.FairseqAlibiConfig",
            "AutoModelForCausalLM": "modeling_fairseq_alibi.FairseqAlibiForCausalLM"}


class CannotExport(SystemExit):
    """A model the export cannot represent: one line, nothing written."""

    def __init__(self, message):
        super().__init__(f"fairseq-alibi-export-hf: {message}")


def linear_weight(module):
    """The (out, in) matrix of a bias-free linear map of fairseq's adaptive softmax: nn.Linear or
    its TiedLinear (a shared weight, maybe transposed)."""
    if isinstance(module, torch.nn.Linear):
        return module.weight
    return module.weight.t() if module.transpose else module.weight


def adaptive_softmax_weights(softmax):
    """The adaptive softmax's layout (hf config) and weights under OutputLayer's names."""
    head, weights = softmax.head, {}
    if isinstance(head, torch.nn.Linear):  # untied: words and clusters in one matrix
        first = softmax.cutoff[0]
        weights["head_words.weight"], weights["head_clusters.weight"] = head.weight[:first], head.weight[first:]
        head_dim = None
    else:  # TiedHeadModule: the first input band's embeddings, maybe behind a projection
        words = head.word_proj
        head_dim = None
        if isinstance(words, torch.nn.Sequential):
            weights["head_proj.weight"] = words[0].weight
            head_dim, words = words[0].out_features, words[1]
        weights["head_words.weight"], weights["head_clusters.weight"] = linear_weight(words), head.class_proj.weight
    tail_dims = []
    for i, tail in enumerate(softmax.tail):  # Sequential(projection, dropout, output)
        projection, output = linear_weight(tail[0]), linear_weight(tail[2])
        weights[f"tails.{i}.0.weight"], weights[f"tails.{i}.1.weight"] = projection, output
        tail_dims.append(projection.size(0))
    return {"cutoff": list(softmax.cutoff), "head_dim": head_dim, "tail_dims": tail_dims}, weights


def position_layout(decoder, model_cfg):
    """(positions, position_options, max_positions) of the config for this decoder."""
    from fairseq.modules import LearnedPositionalEmbedding, SinusoidalPositionalEmbedding

    from fairseq_alibi.models.decoder import PositionDecoder
    from fairseq_alibi.positions import METHODS

    if isinstance(decoder, PositionDecoder):
        method = decoder.positions.method
        config = METHODS[method].Config.from_args(model_cfg)
        return method, {f: plain(getattr(config, f)) for f in config.__dataclass_fields__}, None
    positions = decoder.embed_positions
    if positions is None:
        return "nope", {}, None
    if isinstance(positions, LearnedPositionalEmbedding):
        return "learned", {}, positions.weight.size(0) - decoder.padding_idx - 1
    if isinstance(positions, SinusoidalPositionalEmbedding):
        return "sinusoidal", {}, None
    raise CannotExport(f"position embeddings of type {type(positions).__name__} are not supported")


def refuse_unsupported(decoder, name):
    if getattr(decoder, "document_separator", None) is not None:
        raise CannotExport(f"{name} keeps packed documents apart (--document-separator), which the exported model "
                           "does not: not supported yet")
    layer = decoder.layers[0]
    options = getattr(layer.self_attn, "options", None) or {}
    if getattr(layer.self_attn, "temperature", None) is not None and (options or getattr(layer.self_attn, "layer_bias", None)):
        raise CannotExport(f"{name} has a length temperature (--length-temperature) beside an attention option or a "
                           "layer's own bias (FoX), which the exported model does not combine: not supported yet")
    if "selective" in options:
        raise CannotExport(f"{name} has {OPTIONS['selective'].flag}, whose accumulation per key the exported model's "
                           "cache does not keep: not supported yet")
    for part, flag in (("c_attn", "--scale-heads"), ("attn_ln", "--scale-attn"), ("ffn_layernorm", "--scale-fc"),
                       ("w_resid", "--scale-resids"), ("encoder_attn", "an encoder")):
        if getattr(layer, part, None) is not None:
            raise CannotExport(f"{name} has {flag} (NormFormer or cross-attention), which the export does not support")
    if getattr(layer, "cross_self_attention", False):
        raise CannotExport(f"{name} uses --cross-self-attention, which the export does not support")


def plain(value):
    """A config value as JSON writes it (fairseq's ChoiceEnum options are enums of strings)."""
    return value.value if isinstance(value, enum.Enum) else value


def attention_options(layer, model_cfg):
    """{name: its flags' values} of the layer's attention options (attention_options/), as the config keeps them."""
    return {name: {f.name: plain(field(model_cfg, f.name)) for f in dataclasses.fields(OPTIONS[name])}
            for name in (getattr(layer.self_attn, "options", None) or {})}


def length_temperature(layer):
    """The layer's length temperature as the config keeps it ({"kind", "form", "length"}), or None; an ssmax's
    learned scales are the layers' own parameters (self_attn.temperature.log_scale)."""
    temperature = getattr(layer.self_attn, "temperature", None)
    return None if temperature is None else {"kind": temperature.kind, "form": temperature.form,
                                             "length": temperature.length}


def hf_model_of(model, dictionary, provenance):
    """The FairseqAlibiForCausalLM (built from this package's modeling file) with the fairseq
    model's weights: a strict load, so that every parameter of one is a parameter of the other."""
    from fairseq_alibi.hf.modeling_fairseq_alibi import FairseqAlibiConfig, FairseqAlibiForCausalLM

    decoder = model.decoder
    model_cfg = decoder.args  # the model's options, fairseq's and the method's
    positions, options, max_positions = position_layout(decoder, model_cfg)
    layer = decoder.layers[0]
    state = {f"decoder.{k}": v for k, v in decoder.state_dict().items()
             if not (k.startswith(("output_projection.", "adaptive_softmax.", "embed_positions._float_tensor"))
                     or k.endswith(("version", "_float_tensor")))}
    adaptive_input = None
    if hasattr(decoder.embed_tokens, "cutoff"):  # AdaptiveInput: its bands, under the same names
        adaptive_input = {"cutoff": list(decoder.embed_tokens.cutoff),
                          "dims": [band[0].embedding_dim for band in decoder.embed_tokens.embeddings]}
    adaptive_softmax = None
    if decoder.adaptive_softmax is not None:
        adaptive_softmax, output = adaptive_softmax_weights(decoder.adaptive_softmax)
        state.update({f"output_layer.{k}": v for k, v in output.items()})
    else:
        state["output_layer.weight"] = decoder.output_projection.weight
    input_dim = decoder.project_in_dim.in_features if decoder.project_in_dim is not None else decoder.embed_dim
    output_dim = decoder.project_out_dim.out_features if decoder.project_out_dim is not None else decoder.embed_dim
    config = FairseqAlibiConfig(
        vocab_size=len(dictionary), hidden_size=decoder.embed_dim, num_hidden_layers=len(decoder.layers),
        num_attention_heads=layer.self_attn.num_heads, intermediate_size=layer.fc1.out_features,
        activation=plain(field(model_cfg, "activation_fn") or "relu"), normalize_before=layer.normalize_before,
        final_layer_norm=decoder.layer_norm is not None, layernorm_embedding=decoder.layernorm_embedding is not None,
        embed_scale=float(decoder.embed_scale), input_dim=input_dim, output_dim=output_dim,
        adaptive_input=adaptive_input, adaptive_softmax=adaptive_softmax, positions=positions,
        position_options=options, max_positions=max_positions, padding_idx=dictionary.pad(),
        dropout=float(field(model_cfg, "dropout") or 0.0), attention_dropout=float(field(model_cfg, "attention_dropout") or 0.0),
        activation_dropout=float(field(model_cfg, "activation_dropout") or 0.0),
        # fairseq's language models start every context with </s> (an end of line), and end a line with it.
        bos_token_id=dictionary.eos(), eos_token_id=dictionary.eos(), pad_token_id=dictionary.pad(),
        masked_output_symbols=(masked_output.parse_symbols(field(model_cfg, "masked_output_symbols"), len(dictionary))),
        attention_options=attention_options(layer, model_cfg), length_temperature=length_temperature(layer),
        fairseq_alibi=provenance, auto_map=AUTO_MAP)
    hf = FairseqAlibiForCausalLM(config).eval()
    hf.load_state_dict({k: v.detach().clone().float() for k, v in state.items()}, strict=True)
    return hf


def bloom_layout_problem(hf_config):
    """None if the model is laid out as BLOOM is, so that stock BloomForCausalLM holds it exactly,
    else what differs (then the export writes our own class)."""
    c = hf_config
    differences = [
        (c.positions != "alibi", f"positions {c.positions}, not ALiBi"),
        (c.positions == "alibi" and c.position_options.get("alibi_scaling", "none") != "none", "scaled slopes"),
        (not c.normalize_before, "post-norm layers"),
        (not c.layernorm_embedding, "no LayerNorm on the embeddings"),
        (not c.final_layer_norm, "no final LayerNorm"),
        (c.activation != "gelu_accurate", f"activation {c.activation}, not tanh GELU (gelu_accurate)"),
        (c.intermediate_size != 4 * c.hidden_size, "an FFN other than 4 d"),
        (c.adaptive_input is not None or c.adaptive_softmax is not None, "adaptive input or softmax"),
        (c.input_dim != c.hidden_size or c.output_dim != c.hidden_size, "projected input or output dimensions"),
        (bool(c.masked_output_symbols), "symbols it never predicts (an imported GPT-2's)"),
    ]
    found = [why for differs, why in differences if differs]
    return ", ".join(found) if found else None


def bloom_model_of(hf):
    """Stock BloomForCausalLM with the weights of a FairseqAlibiForCausalLM in BLOOM's layout: q, k, v
    fused per head; the output matrix tied to the embeddings where the model has no embedding scale
    and one matrix (the bloom_small preset), else fairseq's scale folded into untied input embeddings."""
    from transformers import BloomConfig, BloomForCausalLM

    c = hf.config
    heads, d = c.num_attention_heads, c.hidden_size
    ours = hf.state_dict()
    # BLOOM's own layout: the output matrix is the input embeddings (no scale to fold in, one matrix)
    tied = c.embed_scale == 1.0 and torch.equal(ours["decoder.embed_tokens.weight"], ours["output_layer.weight"])
    config = BloomConfig(vocab_size=c.vocab_size, hidden_size=d, n_layer=c.num_hidden_layers, n_head=heads,
                         layer_norm_epsilon=1e-5, apply_residual_connection_post_layernorm=False,
                         hidden_dropout=c.dropout, attention_dropout=c.attention_dropout, tie_word_embeddings=tied,
                         bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id, pad_token_id=c.pad_token_id)
    config.fairseq_alibi = c.fairseq_alibi
    state = {"transformer.word_embeddings.weight": ours["decoder.embed_tokens.weight"] * c.embed_scale,
             "lm_head.weight": ours["output_layer.weight"]}
    for ours_name, theirs in (("decoder.layernorm_embedding", "transformer.word_embeddings_layernorm"),
                              ("decoder.layer_norm", "transformer.ln_f")):
        for p in ("weight", "bias"):
            state[f"{theirs}.{p}"] = ours[f"{ours_name}.{p}"]
    for i in range(c.num_hidden_layers):
        o, t = f"decoder.layers.{i}.", f"transformer.h.{i}."
        for p in ("weight", "bias"):
            q, k, v = (ours[f"{o}self_attn.{n}_proj.{p}"] for n in "qkv")
            # BLOOM's fused projection: per head, its q, k, v rows in turn.
            state[f"{t}self_attention.query_key_value.{p}"] = torch.stack(
                [x.reshape(heads, d // heads, *x.shape[1:]) for x in (q, k, v)], dim=1).reshape(3 * d, *q.shape[1:])
            pairs = {"self_attn.out_proj": "self_attention.dense", "fc1": "mlp.dense_h_to_4h", "fc2": "mlp.dense_4h_to_h",
                     "self_attn_layer_norm": "input_layernorm", "final_layer_norm": "post_attention_layernorm"}
            for a, b in pairs.items():
                state[f"{t}{b}.{p}"] = ours[f"{o}{a}.{p}"]
    bloom = BloomForCausalLM(config).eval()
    bloom.load_state_dict({k: v.clone() for k, v in state.items()}, strict=True)
    return bloom


def export(checkpoint, out_dir, data=None, remote_code=False, tokenizer=None):
    """Write the folder; SystemExit with one line (and nothing written) on bad input. tokenizer: the
    folder of a BPE dictionary's vocab.json and merges.txt (default: data's, else the checkpoint's)."""
    if new_folder_problem(out_dir):
        raise CannotExport(new_folder_problem(out_dir))
    hf, text_tokenizer = in_memory(checkpoint, data, remote_code, tokenizer)
    write_folder(hf, text_tokenizer, out_dir)
    return hf


def in_memory(checkpoint, data=None, remote_code=False, tokenizer=None):
    """(the transformers model, its tokenizer) that export() writes, in memory: what lm-eval's
    backend for checkpoints scores (lm_eval_backend.py). CannotExport (one line) on bad input."""
    from fairseq_alibi.models.build import load_checkpoint

    if not os.path.isfile(checkpoint):
        raise CannotExport(f"no checkpoint at {checkpoint}")
    data = data or os.path.dirname(os.path.abspath(checkpoint))
    if not os.path.isfile(os.path.join(data, "dict.txt")):
        raise CannotExport(f"no dict.txt in {data}: give the training data's directory with --data")
    text_tokenizer = exported_tokenizer(checkpoint, data, tokenizer)
    try:
        model, cfg, task = load_checkpoint(checkpoint, data, kind="causal LM")
    except SystemExit as error:  # load_checkpoint's one line
        raise CannotExport(str(error.code).removeprefix("error: ")) from None
    name = os.path.basename(checkpoint)
    refuse_unsupported(model.decoder, name)
    state = read_state(checkpoint)
    model_cfg, task_cfg = model_and_task(state)
    provenance = {"source": name, "arch": field(model_cfg, "arch") or field(model_cfg, "_name"),
                  "train_length": field(task_cfg, "tokens_per_sample"),
                  "updates": (state.get("optimizer_history") or [{}])[-1].get("num_updates"),
                  "exported_by": "fairseq-alibi-export-hf", "commit": commit()}
    hf = hf_model_of(model, task.source_dictionary, provenance)
    if not remote_code and bloom_layout_problem(hf.config) is None:
        hf = bloom_model_of(hf)
    return hf, text_tokenizer


def exported_tokenizer(checkpoint, data, tokenizer=None):
    """The tokenizer of data's dict.txt (hf/tokenizer.py), its BPE files from the folder `tokenizer`,
    else data's, else the checkpoint's; made before the model loads, so that a refusal is one line."""
    from fairseq.data import Dictionary

    from fairseq_alibi.hf.tokenizer import tokenizer_for

    if tokenizer and not os.path.isdir(tokenizer):
        raise CannotExport(f"--tokenizer {tokenizer} is not a directory")
    try:
        own = [data, os.path.dirname(os.path.abspath(checkpoint))]  # where the import and train.sh keep a model's BPE
        return tokenizer_for(Dictionary.load(os.path.join(data, "dict.txt")), [tokenizer] if tokenizer else own, kept=own)
    except SystemExit as error:
        raise CannotExport(f"{os.path.basename(checkpoint)}: {error.code}") from None


def write_folder(hf, tokenizer, out_dir):
    """The model, its modeling file and tokenizer, into out_dir (a new or empty directory) through a
    temporary sibling: an interrupted export leaves no half-written folder."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a refusal (a full disk) is one line
    with folder_written_whole(out_dir) as partial:
        hf.save_pretrained(partial)
        if hf.config.model_type == "fairseq_alibi":  # stock BLOOM needs no code of ours
            with open(os.path.join(partial, FILE_NAME), "w", encoding="utf-8") as f:
                f.write(bundled_source())
        tokenizer.save_pretrained(partial)
        # transformers 5 names its class TokenizersBackend, which 4.x (what TGI, older vLLM and
        # llama.cpp's converter pin) does not know; PreTrainedTokenizerFast loads in both, same ids.
        config_path = os.path.join(partial, "tokenizer_config.json")
        with open(config_path, encoding="utf-8") as f:
            tokenizer_config = json.load(f)
        tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
        with open(config_path, "w", encoding="utf-8") as f:
            json.dump(tokenizer_config, f, indent=2, ensure_ascii=False)


@one_line_on_disk_faults
def main(argv=None):
    parser = argparse.ArgumentParser(prog="fairseq-alibi-export-hf", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a causal LM checkpoint (fairseq-train's, with the plugin or stock)")
    parser.add_argument("out_dir", help="a new or empty directory")
    parser.add_argument("--data", help="the directory of the training data's dict.txt (default: the checkpoint's "
                                       "directory, where scripts/train.sh keeps a copy)")
    parser.add_argument("--tokenizer", help="a BPE model's vocab.json and merges.txt folder (default: --data's, else the "
                                            "checkpoint's; fairseq-alibi-import-hf writes them)")
    parser.add_argument("--remote-code", action="store_true",
                        help="write this package's model class even for a model in BLOOM's layout (which otherwise "
                             "becomes stock BLOOM: model_type bloom, no remote code)")
    args = parser.parse_args(argv)
    from fairseq_alibi.hf import environment_problem

    if environment_problem():
        raise SystemExit(f"{parser.prog}: {environment_problem()}")
    import logging

    logging.getLogger("fairseq").setLevel(logging.WARNING)  # its loading notes; a refusal is one line
    export(args.checkpoint, args.out_dir, args.data, args.remote_code, args.tokenizer)
    print(f"exported {args.checkpoint} to {args.out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
