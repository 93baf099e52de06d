"""The causal decoder and language model of every position method of the plugin.

One decoder class (PositionDecoder) holds its position method (positions/; built and checked
by factory.causal_positions) and, before the layer loop, builds from the current lengths one
AttentionBias for every layer (attention.attention_bias): the method's bias with the causal mask
folded in, the rotation of queries and keys, or a kernel that adds the bias itself. So any batch
size and evaluation length work, and incremental decoding gets each new query's row. Each method
is registered as `<method>_transformer_lm` with its own options (register_position_lm), for
every method of the registry (positions/).
"""
import dataclasses
from dataclasses import field
from typing import Dict, List, Optional

from torch import Tensor, nn

from fairseq import options
from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoder
from fairseq.models.transformer_lm import (TransformerLanguageModel, TransformerLanguageModelConfig, base_lm_architecture,
                                         transformer_lm_baevski_wiki103)
from fairseq.modules import AdaptiveInput

from fairseq_alibi.tools import dictionaries
from fairseq_alibi.models.attention import RelativeDecoderLayer, SquareMaskCache, attention_bias, is_right_padding, wrap_layer
from fairseq_alibi.checks import UNBOUNDED_POSITIONS, ConfigError, check_heads
from fairseq_alibi.documents import find_documents
from fairseq_alibi.attention_options import OPTIONS, build_options, logit_readers
from fairseq_alibi.length_temperature import TemperatureConfig
from fairseq_alibi.models.factory import attention_options, causal_positions, document_separator, length_temperature
from fairseq_alibi.models.masked_output import MASKED_OUTPUT_FIELD, mask_output
from fairseq_alibi.kernels import KERNEL_NAMES
from fairseq_alibi.positions import METHODS


def check_decoder_args(args, method: str):
    """Reject configurations that would silently mix `method` with something else."""
    if getattr(args, "decoder_learned_pos", False):
        raise ConfigError(
            f"--decoder-learned-pos adds position embeddings, which {method} replaces: drop the flag "
            "(for a learned-position baseline use stock --arch transformer_lm)"
        )
    check_heads(args.decoder_embed_dim, getattr(args, "decoder_attention_heads", None))
    if getattr(args, "character_embeddings", False):
        raise ConfigError("--character-embeddings is not supported: drop the flag")
    if getattr(args, "cross_self_attention", False):
        raise ConfigError(f"--cross-self-attention is not supported by the {method} decoder: drop it")


def check_recorded_dictionary(args, dictionary):
    """A model whose config records its training data's dictionary (--dictionary-sha256) is refused other data."""
    recorded = getattr(args, dictionaries.RECORDED, None)  # None: not recorded (older checkpoints)
    if recorded and recorded != dictionaries.fingerprint(dictionary.symbols[dictionary.nspecial:]):
        raise ConfigError(f"this model was trained on another dictionary than the data's ({dictionaries.RECORDED} "
                          f"{recorded}): give the data it was trained on")


DICTIONARY_HELP = ("the training data's dictionary, as 16 hex digits of its words' sha256 (scripts/train.sh sets it): "
                   "the model is refused data of another dictionary, whatever dict.txt sits beside its checkpoint")
# The option as a fairseq model config field (name, type, dataclass field).
RECORDED_DICTIONARY_FIELD = (dictionaries.RECORDED, Optional[str], field(default=None, metadata={"help": DICTIONARY_HELP}))


class PositionDecoder(TransformerDecoder):
    """Transformer decoder without position embeddings; its self-attention adds what `positions`
    says, through the attention kernel named `kernel`. Cross-attention (encoder-decoder models)
    is fairseq's own, without positions."""

    def __init__(self, args, dictionary, embed_tokens, positions: nn.Module, kernel: str = "auto",
                 no_encoder_attn: bool = True, separator: Optional[int] = None, temperature=(None, False),
                 options=()):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.document_separator = separator  # a dictionary index: packed documents kept apart (documents.py)
        # A length temperature (factory.length_temperature: its options, and whether it scales the bias):
        # each layer its own (ssmax's learned factors are the layer's).
        config, self.bias_scaled = temperature
        for layer in self.layers:
            layer.self_attn.temperature = config.build(args.decoder_attention_heads) if config else None
        # Registered under the method's own name: its checkpoint keys (T5's decoder.relative_attention_bias.weight).
        self.positions_name = positions.name
        self.add_module(positions.name, positions)
        self.attention_kernel = kernel
        self.attention_dropout = getattr(args, "attention_dropout", 0.0)
        heads = args.decoder_attention_heads
        for layer in self.layers:  # a data-dependent method's own module in each layer; the attention options'
            layer.self_attn.layer_bias = positions.layer_bias()
            layer.self_attn.options = build_options(list(options), heads, args.decoder_embed_dim // heads,
                                                    args.decoder_embed_dim)
        # An option that reads every logit (factory.attention_options) takes the dense path.
        self.dense_attention = bool(logit_readers(options))
        self.mask_cache = SquareMaskCache()

    @property
    def positions(self):
        return self._modules[self.positions_name]

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(cfg)
        return wrap_layer(RelativeDecoderLayer(cfg, no_encoder_attn), cfg)

    def max_positions(self):
        return UNBOUNDED_POSITIONS

    def extract_features_scriptable(
        self,
        prev_output_tokens,
        encoder_out: Optional[Dict[str, List[Tensor]]] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        if full_context_alignment:
            raise ValueError("full_context_alignment is not supported by this decoder")
        key_len = prev_output_tokens.size(1)  # in incremental decoding: cached + new tokens
        # From all S tokens (cached ones included): a separator starts a document for what follows.
        documents = (find_documents(prev_output_tokens, self.document_separator)
                     if self.document_separator is not None else None)
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
        tokens = prev_output_tokens.contiguous()

        x = self.embed_scale * self.embed_tokens(tokens)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        x = x.transpose(0, 1)  # B x T x C -> T x B x C

        padding_mask = tokens.eq(self.padding_idx) if incremental_state is None else None
        if padding_mask is not None and is_right_padding(padding_mask):
            # fairseq's LM batches: padded keys lie in the future of every real query, so the
            # causal mask already hides them; only other padding has to be masked.
            padding_mask = None
        bias = attention_bias(self.positions, x, tokens.size(1), key_len, padding_mask, causal=True,
                              kernel=self.attention_kernel, cache=self.mask_cache,
                              dropout=self.training and self.attention_dropout > 0, documents=documents,
                              scaled=self.bias_scaled, dense=self.dense_attention)

        # Encoder-decoder models: cross-attention is fairseq's own, over the encoder's padding.
        encoder_states = encoder_out["encoder_out"][0] if encoder_out and encoder_out["encoder_out"] else None
        encoder_padding = (encoder_out["encoder_padding_mask"][0]
                           if encoder_out and encoder_out["encoder_padding_mask"] else None)
        inner_states: List[Optional[Tensor]] = [x]
        for layer in self.layers:
            x = layer(x, bias, padding_mask, encoder_states, encoder_padding, incremental_state)
            inner_states.append(x)

        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)  # T x B x C -> B x T x C
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        return x, {"attn": [None], "inner_states": inner_states}

    def upgrade_state_dict_named(self, state_dict, name):
        # The paper's checkpoints keep the unused sinusoidal buffer of the stock decoder.
        state_dict.pop(f"{name}.embed_positions._float_tensor", None)
        return super().upgrade_state_dict_named(state_dict, name)


class PositionLanguageModel(TransformerLanguageModel):
    """A transformer LM with a PositionDecoder whose method is the class's `position_method`
    (set by register_position_lm)."""

    position_method = "alibi"
    method_name = "ALiBi"  # in error messages

    @classmethod
    def build_model(cls, args, task):
        check_decoder_args(args, cls.method_name)
        positions, kernel = causal_positions(cls.position_method, args)
        temperature = length_temperature(args, positions, kernel)
        option_configs = attention_options(args, kernel)
        separator = document_separator(args, task.source_dictionary)
        args.no_token_positional_embeddings = True
        if args.decoder_layers_to_keep:
            args.decoder_layers = len(args.decoder_layers_to_keep.split(","))
        if getattr(args, "max_target_positions", None) is None:
            args.max_target_positions = UNBOUNDED_POSITIONS

        dictionary = task.source_dictionary
        check_recorded_dictionary(args, dictionary)
        if args.adaptive_input:
            embed_tokens = AdaptiveInput(
                len(dictionary), dictionary.pad(), args.decoder_input_dim,
                args.adaptive_input_factor, args.decoder_embed_dim,
                options.eval_str_list(args.adaptive_input_cutoff, type=int),
                args.quant_noise_pq, args.quant_noise_pq_block_size,
            )
        else:
            embed_tokens = cls.build_embedding(args, dictionary, args.decoder_input_dim)
        if args.tie_adaptive_weights and not (
            args.adaptive_input
            and args.adaptive_input_factor == args.adaptive_softmax_factor
            and args.adaptive_softmax_cutoff == args.adaptive_input_cutoff
            and args.decoder_input_dim == args.decoder_output_dim
        ):
            raise ConfigError(
                "--tie-adaptive-weights needs --adaptive-input with the same cutoff, factor and "
                "dimension as the adaptive softmax"
            )
        decoder = PositionDecoder(args, task.target_dictionary, embed_tokens, positions, kernel, separator=separator,
                                  temperature=temperature, options=option_configs)
        mask_output(decoder, getattr(args, "masked_output_symbols", None))  # an imported GPT-2's (imported_gpt2.py)
        return cls(decoder)


def small_architecture(args):
    """CPU scale, a shrunken wiki103 model: 4 layers, d 128, FFN 512, 8 heads (head dim 16),
    pre-norm, tied adaptive input/softmax with cutoffs 2000,10000 (sized for WikiText-2's 33k
    words; criterion adaptive_loss). Trains on WikiText-2 in minutes on 2 cores.

    Its sinusoidal twin is stock fairseq: twins.SMALL_TWIN_FLAGS.
    """
    args.decoder_layers = getattr(args, "decoder_layers", 4)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 128)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 512)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 8)
    args.adaptive_input = getattr(args, "adaptive_input", True)
    args.adaptive_input_cutoff = getattr(args, "adaptive_input_cutoff", "2000,10000")
    args.adaptive_softmax_cutoff = getattr(args, "adaptive_softmax_cutoff", "2000,10000")
    args.tie_adaptive_weights = getattr(args, "tie_adaptive_weights", True)
    args.tie_adaptive_proj = getattr(args, "tie_adaptive_proj", True)
    base_lm_architecture(args)  # pre-norm, input/output dims = embed dim


def one_matrix_small(args, **layout):
    """The small architecture's dimensions (FFN 4 d) with tanh GELU (gelu_accurate) and one output
    matrix tied to the embeddings (no adaptive input or softmax), plus a layout's own defaults."""
    args.decoder_layers = getattr(args, "decoder_layers", 4)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 128)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 4 * args.decoder_embed_dim)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 8)
    args.activation_fn = getattr(args, "activation_fn", "gelu_accurate")
    args.share_decoder_input_output_embed = getattr(args, "share_decoder_input_output_embed", True)
    for name, value in layout.items():
        setattr(args, name, getattr(args, name, value))
    base_lm_architecture(args)  # pre-norm, final LayerNorm, input/output dims = embed dim


def bloom_small_architecture(args):
    """one_matrix_small in BLOOM's exact layout: a LayerNorm on the embeddings and no embedding scale,
    so that `fairseq-alibi-export-hf` writes stock BLOOM with its one output matrix tied to the
    embeddings, as BLOOM's own checkpoints are (docs/hugging-face.md: where it was run).
    A checkpoint of this preset from before the scale was dropped keeps its config (scaled): it
    exports as then, the scale folded into untied input embeddings."""
    one_matrix_small(args, layernorm_embedding=True, no_scale_embedding=True)


def gpt2_small_architecture(args):
    """one_matrix_small in GPT-2's layout (no embedding scale; gelu_accurate is GPT-2's gelu_new), the
    one a GPT-2 imported by `fairseq-alibi-import-hf` and given ALiBi (`convert_checkpoint
    --replace-positions`) fine-tunes in. Its learned-positions twin (the GPT-2 itself, continued) is
    stock fairseq: twins.GPT2_SMALL_TWIN_FLAGS."""
    one_matrix_small(args, no_scale_embedding=True)


def wiki103_architecture(args):
    """The paper's 247M model: Baevski & Auli's transformer_lm_wiki103 without positions."""
    transformer_lm_baevski_wiki103(args)


DOCUMENT_SEPARATOR_HELP = (
    "packed documents: a dictionary symbol that ends a document (e.g. <doc>, which "
    "scripts/prepare-wikitext.sh --documents writes between articles); no query attends to "
    "another document and positions count from each document's start; at evaluation set or "
    "drop it with --model-overrides \"{'document_separator': None}\"")
ATTENTION_KERNEL_HELP = (
    "attention kernel (kernels/): sdpa (PyTorch, dense mask), flash (FlashAttention-2 >= 2.4, GPU, "
    "fp16/bf16, ALiBi or no bias), flex (FlexAttention, ALiBi or no bias), blocked (CPU, no T x S mask; "
    "ALiBi, T5 bias at evaluation, any bias with packed documents), separable (PyTorch's fused causal attention with "
    "the bias as extra query/key columns: ALiBi, learned slopes, FoX, with their gradients), auto (flash where it can run, else "
    "on CPU separable to train learned slopes or FoX, to evaluate FoX, and to evaluate ALiBi past 512 tokens (each head "
    "skipping the keys its bias silences), blocked to train ALiBi past 512 tokens, else sdpa), auto-no-separable (auto "
    "before separable joined it: what the committed experiments trained and were scored with); at evaluation set it "
    "with --model-overrides")


def fairseq_config(method_class):
    """fairseq's transformer LM options, the method's own (its Config's fields, their defaults, help
    and choices), the length temperature's (length_temperature.py), the attention
    options' (attention_options/), --document-separator and
    --attention-kernel (and ALiBi's older --alibi-attention)."""
    fields = []
    option_fields = [field_ for name in sorted(OPTIONS) for field_ in dataclasses.fields(OPTIONS[name])]
    for option in (*dataclasses.fields(method_class.Config), *dataclasses.fields(TemperatureConfig), *option_fields):
        kind = ChoiceEnum(list(option.metadata["choices"])) if "choices" in option.metadata else option.type
        fields.append((option.name, kind, field(default=option.default, metadata={"help": option.metadata["help"]})))
    fields.append(("document_separator", Optional[str], field(default=None, metadata={"help": DOCUMENT_SEPARATOR_HELP})))
    fields.append(RECORDED_DICTIONARY_FIELD)
    fields.append(MASKED_OUTPUT_FIELD)
    fields.append(("attention_kernel", ChoiceEnum(list(KERNEL_NAMES)), field(
        default="auto", metadata={"help": ATTENTION_KERNEL_HELP})))
    if method_class.method == "alibi":  # the option's name before --attention-kernel; still read (models/factory.py)
        fields.append(("alibi_attention", ChoiceEnum(list(KERNEL_NAMES)), field(
            default="auto", metadata={"help": "the older name of --attention-kernel (used where that is auto)"})))
    name = method_class.method.title().replace("_", "")
    return dataclasses.make_dataclass(f"{name}TransformerLanguageModelConfig", fields,
                                      bases=(TransformerLanguageModelConfig,))


def register_position_lm(method_class):
    """`--arch <method>_transformer_lm` (the config's defaults: stock transformer_lm dimensions,
    6 x 512, post-norm), `_small` and `_wiki103`, with the options of fairseq_config."""
    model_name = f"{method_class.method}_transformer_lm"
    cls = type(f"{method_class.method.title().replace('_', '')}TransformerLanguageModel", (PositionLanguageModel,),
               {"position_method": method_class.method, "method_name": method_class.label, "__module__": __name__})
    register_model(model_name, dataclass=fairseq_config(method_class))(cls)
    register_model_architecture(model_name, f"{model_name}_small")(small_architecture)
    register_model_architecture(model_name, f"{model_name}_wiki103")(wiki103_architecture)
    if method_class.method == "alibi":  # the one method stock BLOOM computes
        register_model_architecture(model_name, f"{model_name}_bloom_small")(bloom_small_architecture)
        # the method a GPT-2 is given (--replace-positions)
        register_model_architecture(model_name, f"{model_name}_gpt2_small")(gpt2_small_architecture)
    return cls


# Every registered method's models: name -> model class.
POSITION_LMS = {method: register_position_lm(method_class) for method, method_class in METHODS.items()}
