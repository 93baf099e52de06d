"""fairseq-alibi-import-hf HF_DIR OUT_DIR: a Hugging Face GPT-2 (`GPT2LMHeadModel`: config.json and
model.safetensors or pytorch_model.bin; its tokenizer files if present) as a stock fairseq
`transformer_lm` with learned positions: OUT_DIR/checkpoint.pt and OUT_DIR/dict.txt, which
fairseq-eval-lm, fairseq-generate and the hub interface load, and which convert_checkpoint
--replace-positions turns into an ALiBi model (docs/hugging-face.md).

The vocabulary: fairseq's index is the GPT-2 id + 4 (fairseq's four special symbols come first;
dict.txt lists the ids as fairseq's GPT-2 dictionaries do), and fairseq's </s>, which starts every
context and ends every line, is GPT-2's <|endoftext|>: its embedding. <s>, <pad> and <unk> get zero
embeddings. So that fairseq's softmax is GPT-2's, the model is `gpt2_transformer_lm` with
--masked-output-symbols: <s>, <pad>, <unk> (which the GPT-2 lacks) and <|endoftext|>'s own index
(fairseq's </s> predicts the end of text) never take probability (models/masked_output.py).
A GPT-2 whose tokenizer is a fairseq dictionary already (hf/tokenizer.py's word-level
tokenizer: fairseq's four specials at ids 0-3, as examples/wikitext2/gpt2_standin.py trains)
keeps its ids, and dict.txt lists its words: stock `transformer_lm`, nothing to mask. With tokenizer files, the hub interface encodes raw text as the GPT-2 tokenizer does
(fairseq's hf_byte_bpe reads the same vocab.json and merges.txt).
"""
import argparse
import json
import os
import shutil
import sys

import torch

from fairseq_alibi.tools import dictionaries
from fairseq_alibi.tools.files import folder_written_whole, new_folder_problem, one_line_on_disk_faults
from fairseq_alibi.tools.provenance import commit

SPECIALS = 4  # fairseq's <s>, <pad>, </s>, <unk>
HF_TOKENIZER = "hf-tokenizer"  # the folder the imported model's own tokenizer files are kept in
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt")
ACTIVATIONS = {"gelu_new": "gelu_accurate", "gelu_pytorch_tanh": "gelu_accurate", "gelu": "gelu", "relu": "relu"}


class CannotImport(SystemExit):
    def __init__(self, message):
        super().__init__(f"fairseq-alibi-import-hf: {message}")


def read_gpt2(hf_dir):
    """The GPT2LMHeadModel of the folder, or CannotImport naming why it is not one we can map: every
    weight the config asks for is in the files and every tensor of the files is one it asks for (a
    config of another model, or of more layers than the weights hold, is refused, never filled with
    random weights)."""
    path = os.path.join(hf_dir, "config.json")
    if not os.path.isfile(path):
        raise CannotImport(f"{hf_dir} is not a Hugging Face model folder (no config.json)")
    try:
        config = json.load(open(path))
    except ValueError:
        raise CannotImport(f"{path} is not JSON") from None
    if not isinstance(config, dict) or config.get("model_type") != "gpt2":
        kind = config.get("model_type") if isinstance(config, dict) else None
        raise CannotImport(f"{hf_dir} holds a {kind!r} model, not GPT-2 (model_type 'gpt2')")
    from transformers import GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # its report of missing weights is ours to give, in one line
    hf_logging.disable_progress_bar()
    try:
        # mismatched sizes reported, not raised: refused below with their names
        model, loading = GPT2LMHeadModel.from_pretrained(hf_dir, output_loading_info=True, ignore_mismatched_sizes=True)
    except Exception as error:  # noqa: BLE001  (a truncated or foreign file raises many types)
        raise CannotImport(f"{hf_dir}: its weights do not load ({type(error).__name__}: "
                           f"{(str(error).strip().splitlines() or [''])[0][:200]})") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    for what, keys in (("lacks weights its config.json asks for", loading["missing_keys"]),
                       ("holds weights its config.json has no place for", loading["unexpected_keys"]),
                       ("holds weights of other shapes than its config.json says", loading["mismatched_keys"])):
        if keys:
            names = sorted(k if isinstance(k, str) else k[0] for k in keys)
            raise CannotImport(f"{hf_dir} {what} ({len(names)}: {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}): "
                               "its config.json is not its weights' (another model's, or another size)")
    model = model.float().eval()
    c = model.config
    unsupported = [("activation_function", c.activation_function not in ACTIVATIONS),
                   ("scale_attn_by_inverse_layer_idx", c.scale_attn_by_inverse_layer_idx),
                   ("scale_attn_weights", not c.scale_attn_weights),
                   ("layer_norm_epsilon", c.layer_norm_epsilon != 1e-5),
                   ("add_cross_attention", c.add_cross_attention)]
    for name, bad in unsupported:
        if bad:
            raise CannotImport(f"{hf_dir}: GPT-2's {name} = {getattr(c, name)!r} has no fairseq transformer_lm equivalent")
    return model


def tied(gpt2):
    """Whether the output layer is the input embeddings (GPT-2's default) or a matrix of its own."""
    return gpt2.lm_head.weight.data_ptr() == gpt2.transformer.wte.weight.data_ptr()


def vocabulary_problem(hf_dir, gpt2, words):
    """None if the folder's tokenizer and end-of-text id fit the weights, else why not (one line)."""
    size, eos = gpt2.config.vocab_size, gpt2.config.eos_token_id
    if words is None and (not isinstance(eos, int) or isinstance(eos, bool) or not 0 <= eos < size):
        return (f"{hf_dir}: its eos_token_id {eos!r} is not a token of its {size} (fairseq's </s>, which starts "
                "every context, is GPT-2's end of text): set it in config.json")
    if words is not None and len(words) != size:
        return f"{hf_dir}: its tokenizer has {len(words)} words, its weights {size}: the tokenizer is another model's"
    model = tokenizer_model(hf_dir, "BPE")
    if model is not None:
        path = os.path.join(hf_dir, "tokenizer.json")
        added = [t.get("id", -1) for t in json.load(open(path, encoding="utf-8")).get("added_tokens", [])]
        largest = max([*model["vocab"].values(), *added], default=-1)
        if largest >= size:
            return (f"{hf_dir}: its tokenizer gives ids up to {largest}, its weights have {size} rows: the tokenizer "
                    "is another model's")
    return None


def fairseq_flags(config, shared=True, masked=()):
    """fairseq-train's flags for the GPT-2 of config; shared: its output layer is its input embeddings;
    masked: the dictionary indices it never predicts (gpt2_transformer_lm), else stock transformer_lm."""
    arch = ["--arch", "gpt2_transformer_lm", "--masked-output-symbols", ",".join(map(str, masked))] if masked else [
        "--arch", "transformer_lm"]
    return [*arch, "--decoder-layers", str(config.n_layer), "--decoder-embed-dim", str(config.n_embd),
            "--decoder-input-dim", str(config.n_embd), "--decoder-output-dim", str(config.n_embd),
            "--decoder-ffn-embed-dim", str(config.n_inner or 4 * config.n_embd),
            "--decoder-attention-heads", str(config.n_head), "--decoder-normalize-before", "--decoder-learned-pos",
            "--no-scale-embedding", *(["--share-decoder-input-output-embed"] if shared else []),
            "--activation-fn", ACTIVATIONS[config.activation_function],
            "--tokens-per-sample", str(config.n_positions), "--max-target-positions", str(config.n_positions),
            "--dropout", str(config.resid_pdrop), "--attention-dropout", str(config.attn_pdrop)]


def tokenizer_model(hf_dir, kind):
    """The model section of the folder's tokenizer.json if it is a `kind` model (BPE, WordLevel), else None."""
    path = os.path.join(hf_dir, "tokenizer.json")
    if not os.path.isfile(path):
        return None
    try:
        model = json.load(open(path, encoding="utf-8")).get("model", {})
    except (ValueError, AttributeError):
        raise CannotImport(f"{path} is not a tokenizers JSON file: remove it, or give the model's own") from None
    return model if model.get("type") == kind else None


def fairseq_words(hf_dir):
    """The words of a word-level tokenizer that is a fairseq dictionary (fairseq's four specials at
    ids 0-3), in id order; None for any other tokenizer (GPT-2's BPE)."""
    model = tokenizer_model(hf_dir, "WordLevel")
    if model is None:
        return None
    words = sorted(model["vocab"], key=model["vocab"].get)
    return words if words[:SPECIALS] == ["<s>", "<pad>", "</s>", "<unk>"] else None


class Taken(dict):
    """GPT-2's tensors by name, each to be taken exactly once (take): what is left or taken twice
    is a weight the import would drop or duplicate unseen."""

    def __init__(self, tensors):
        super().__init__(tensors)
        self.taken = []

    def take(self, name):
        self.taken.append(name)
        return self[name]

    def problem(self):
        twice = sorted({n for n in self.taken if self.taken.count(n) > 1})
        left = sorted(set(self) - set(self.taken))
        if twice or left:
            return f"GPT-2 tensors {'used twice: ' + ', '.join(twice) if twice else 'left unused: ' + ', '.join(left)}"
        return None


def gpt2_state(gpt2, fairseq_state, padding_idx, eos, offset=SPECIALS):
    """fairseq's state dict (its own keys, every one filled) from GPT-2's weights, every one of them
    used exactly once (its tied lm_head is its input embeddings: one tensor); fairseq index = GPT-2
    id + offset."""
    hf = Taken({k: v.detach().float() for k, v in gpt2.state_dict().items()
                if not (k == "lm_head.weight" and tied(gpt2))})
    d = gpt2.config.n_embd

    def vocabulary(tokens):  # GPT-2's rows at fairseq's indices; fairseq's </s> is GPT-2's end of text
        rows = torch.zeros(tokens.size(0) + offset, d)
        rows[offset:] = tokens
        if offset:
            rows[eos] = tokens[gpt2.config.eos_token_id]
        return rows

    state = {"decoder.embed_tokens.weight": vocabulary(hf.take("transformer.wte.weight"))}
    state["decoder.output_projection.weight"] = (state["decoder.embed_tokens.weight"] if tied(gpt2)
                                                 else vocabulary(hf.take("lm_head.weight")))
    positions = hf.take("transformer.wpe.weight")
    state["decoder.embed_positions.weight"] = torch.cat([torch.zeros(padding_idx + 1, d), positions])
    for i in range(gpt2.config.n_layer):
        h, f = f"transformer.h.{i}.", f"decoder.layers.{i}."
        # Conv1D keeps (in, out): transposed; c_attn packs q, k, v along its output.
        qkv_weight, qkv_bias = hf.take(f"{h}attn.c_attn.weight"), hf.take(f"{h}attn.c_attn.bias")
        for name, chunk in zip(("q_proj", "k_proj", "v_proj"), range(3)):
            state[f"{f}self_attn.{name}.weight"] = qkv_weight[:, chunk * d:(chunk + 1) * d].t()
            state[f"{f}self_attn.{name}.bias"] = qkv_bias[chunk * d:(chunk + 1) * d]
        pairs = {"self_attn.out_proj": "attn.c_proj", "fc1": "mlp.c_fc", "fc2": "mlp.c_proj"}
        for ours, theirs in pairs.items():
            state[f"{f}{ours}.weight"], state[f"{f}{ours}.bias"] = hf.take(f"{h}{theirs}.weight").t(), hf.take(f"{h}{theirs}.bias")
        for ours, theirs in {"self_attn_layer_norm": "ln_1", "final_layer_norm": "ln_2"}.items():
            state[f"{f}{ours}.weight"], state[f"{f}{ours}.bias"] = hf.take(f"{h}{theirs}.weight"), hf.take(f"{h}{theirs}.bias")
    state["decoder.layer_norm.weight"], state["decoder.layer_norm.bias"] = (hf.take("transformer.ln_f.weight"),
                                                                             hf.take("transformer.ln_f.bias"))
    problem = hf.problem()
    if problem:
        raise CannotImport(f"{problem}: this GPT-2 has weights the import does not map")
    missing = [k for k, v in fairseq_state.items() if k not in state and v.is_floating_point() and not k.endswith("version")]
    if missing:
        raise RuntimeError(f"GPT-2 import left fairseq parameters unset: {missing}")
    return {**fairseq_state, **{k: v.contiguous().clone() for k, v in state.items()}}


def byte_level_files(hf_dir, out_dir):
    """vocab.json and merges.txt for fairseq's hf_byte_bpe: copied, or read from tokenizer.json.
    False if the folder has no byte-level BPE tokenizer."""
    if all(os.path.isfile(os.path.join(hf_dir, n)) for n in ("vocab.json", "merges.txt")):
        for name in ("vocab.json", "merges.txt"):
            shutil.copyfile(os.path.join(hf_dir, name), os.path.join(out_dir, name))
        return True
    model = tokenizer_model(hf_dir, "BPE")
    if model is None:
        return False
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(model["vocab"], f, ensure_ascii=False)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for merge in model["merges"]:
            f.write((merge if isinstance(merge, str) else " ".join(merge)) + "\n")
    return True


def import_gpt2(hf_dir, out_dir, seed=None):
    """hf_dir's GPT2LMHeadModel as a fairseq checkpoint in the new folder out_dir; seed: the seed it
    was trained with, recorded as its training seed (else fairseq's default, 1, stands there)."""
    if new_folder_problem(out_dir):
        raise CannotImport(new_folder_problem(out_dir))
    gpt2 = read_gpt2(hf_dir)
    problem = vocabulary_problem(hf_dir, gpt2, fairseq_words(hf_dir))
    if problem:
        raise CannotImport(problem)
    from fairseq import options, tasks  # after the checks: a refusal does not wait seconds for fairseq
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    with folder_written_whole(out_dir) as partial:
        words = fairseq_words(hf_dir)
        with open(os.path.join(partial, "dict.txt"), "w") as f:
            f.writelines(f"{w} 1\n" for w in (words[SPECIALS:] if words else range(gpt2.config.vocab_size)))
        has_bpe = words is None and byte_level_files(hf_dir, partial)
        kept = [n for n in HF_TOKENIZER_FILES if os.path.isfile(os.path.join(hf_dir, n))]
        if kept:  # the model's own tokenizer, as it came (the export's is made from dict.txt and the BPE files)
            os.makedirs(os.path.join(partial, HF_TOKENIZER))
            for name in kept:
                shutil.copyfile(os.path.join(hf_dir, name), os.path.join(partial, HF_TOKENIZER, name))
        from fairseq.data import Dictionary

        from fairseq_alibi import plugin  # noqa: F401  (gpt2_transformer_lm)

        dictionary = Dictionary.load(os.path.join(partial, "dict.txt"))
        # fairseq's symbols the GPT-2 lacks, and its end of text's own index (</s> is it): no probability
        masked = [] if words else [dictionary.bos(), dictionary.pad(), dictionary.unk(),
                                   gpt2.config.eos_token_id + SPECIALS]
        argv = ["--task", "language_modeling", partial, *fairseq_flags(gpt2.config, shared=tied(gpt2), masked=masked)]
        cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
        task = tasks.setup_task(cfg.task)
        model = task.build_model(cfg.model)
        state = gpt2_state(gpt2, model.state_dict(), dictionary.pad(), dictionary.eos(), 0 if words else SPECIALS)
        model.load_state_dict(state, strict=True)
        container = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
        container["task"]["data"] = os.path.abspath(out_dir)
        if seed is not None:
            container["common"]["seed"] = seed
        if has_bpe:
            container["bpe"] = {"_name": "hf_byte_bpe", "bpe_merges": os.path.join(os.path.abspath(out_dir), "merges.txt"),
                                "bpe_vocab": os.path.join(os.path.abspath(out_dir), "vocab.json"),
                                "bpe_add_prefix_space": False}
        torch.save({"cfg": container, "model": model.state_dict(), "extra_state": {},
                    "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "none",
                                           "lr_scheduler_state": {}, "num_updates": 0}],
                    "fairseq_alibi_import": {"source": os.path.basename(os.path.abspath(hf_dir)), "from": "GPT2LMHeadModel",
                                             "commit": commit()},
                    dictionaries.RECORDED: dictionaries.dictionary_fingerprint(partial)},
                   os.path.join(partial, "checkpoint.pt"))


@one_line_on_disk_faults
def main(argv=None):
    parser = argparse.ArgumentParser(prog="fairseq-alibi-import-hf", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hf_dir", help="a GPT2LMHeadModel folder (save_pretrained's, or a downloaded gpt2)")
    parser.add_argument("out_dir", help="a new or empty directory: checkpoint.pt, dict.txt (and the BPE files)")
    parser.add_argument("--seed", type=int, help="the seed the model was trained with, recorded as its training "
                        "seed (results rows read it; without it fairseq's default, 1, stands there)")
    args = parser.parse_args(argv)
    from fairseq_alibi.hf import environment_problem

    if environment_problem():
        raise SystemExit(f"{parser.prog}: {environment_problem()}")
    import logging

    import warnings

    # fairseq's loading notes, hydra's on its own API as fairseq calls it: a refusal is one line
    for name in ("fairseq", "hydra"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.simplefilter("ignore", UserWarning)
    import_gpt2(args.hf_dir, args.out_dir, args.seed)
    print(f"imported {args.hf_dir} to {args.out_dir}/checkpoint.pt", file=sys.stderr)


if __name__ == "__main__":
    main()
