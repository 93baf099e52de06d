"""Bidirectional ALiBi in fairseq: an encoder without position embeddings whose self-attention
adds one of bidirectional/'s variants (--encoder-alibi), and two models built on it:

- alibi_roberta (task masked_lm): RoBERTa with this encoder. --encoder-alibi none keeps
  fairseq's own RoBERTa encoder with sinusoidal positions (or, with --encoder-learned-pos,
  learned ones, i.e. stock --arch roberta): the twins.
- alibi_transformer (task translation): this encoder, the causal ALiBi decoder (decoder.py's
  PositionDecoder with positions.Alibi) and fairseq's cross-attention, which has no positions (as
  in T5 and the fork's issue #5).
"""
import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta.model import RobertaEncoder, RobertaModel
from fairseq.models.roberta.model import base_architecture as roberta_base_architecture
from fairseq.models.transformer import TransformerConfig, TransformerEncoderBase, TransformerModel
from fairseq.models.transformer import base_architecture as transformer_base_architecture
from fairseq.modules.transformer_sentence_encoder import init_bert_params

from fairseq_alibi.models.attention import RelativeEncoderLayer, attention_bias, wrap_layer
from fairseq_alibi.checks import UNBOUNDED_POSITIONS, ConfigError, check_heads
from fairseq_alibi.bidirectional import DEFAULT, VARIANTS
from fairseq_alibi.models.decoder import ATTENTION_KERNEL_HELP, PositionDecoder, check_decoder_args
from fairseq_alibi.models.factory import causal_positions, encoder_positions
from fairseq_alibi.kernels import KERNEL_NAMES
from fairseq_alibi.twins import TRANSLATION_SMALL_DIMS


class AlibiTransformerEncoder(TransformerEncoderBase):
    """fairseq's transformer encoder without position embeddings; every layer adds the bias of
    its position method (bidirectional.EncoderAlibi, shared by the layers, as in the paper) with
    padded keys masked."""

    def __init__(self, cfg, dictionary, embed_tokens, variant: str):
        cfg.no_token_positional_embeddings = True
        super().__init__(cfg, dictionary, embed_tokens)
        self.alibi = encoder_positions(variant, cfg.encoder.attention_heads)  # checkpoint keys *.alibi.*

    def build_encoder_layer(self, cfg):
        return wrap_layer(RelativeEncoderLayer(cfg), cfg)

    def max_positions(self):
        return UNBOUNDED_POSITIONS

    def forward_scriptable(self, src_tokens, src_lengths: Optional[Tensor] = None,
                           return_all_hiddens: bool = False, token_embeddings: Optional[Tensor] = None):
        padding_mask = src_tokens.eq(self.padding_idx)
        has_pads = bool(padding_mask.any())
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings)
        if has_pads:
            x = x * (1 - padding_mask.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)  # B x T x C -> T x B x C

        length = src_tokens.size(1)
        # Rebuilt every forward (no cache): learned slopes need their gradient.
        bias = attention_bias(self.alibi, x, length, length, padding_mask if has_pads else None, causal=False)
        encoder_states = [x] if return_all_hiddens else []
        for layer in self.layers:
            x = layer(x, padding_mask if has_pads else None, attn_mask=bias)
            if return_all_hiddens:
                encoder_states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return encoder_output(x, src_tokens, self.padding_idx, encoder_embedding, encoder_states)


def encoder_output(x: Tensor, src_tokens: Tensor, padding_idx: int, encoder_embedding: Tensor, encoder_states):
    """fairseq's encoder output dictionary, for x (T x B x C) computed from src_tokens (B x T)."""
    src_lengths = src_tokens.ne(padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1)
    return {
        "encoder_out": [x],  # T x B x C
        "encoder_padding_mask": [src_tokens.eq(padding_idx)],  # B x T
        "encoder_embedding": [encoder_embedding],  # B x T x C
        "encoder_states": encoder_states,  # List[T x B x C]
        "fc_results": [],
        "src_tokens": [],
        "src_lengths": [src_lengths],
    }


def check_encoder_args(args, left_padded: bool):
    """Once, when the model is built (the variant itself: factory.encoder_positions)."""
    if getattr(args, "encoder_learned_pos", False):
        raise ConfigError("--encoder-learned-pos adds position embeddings, which encoder ALiBi replaces: "
                          "drop the flag (or use --encoder-alibi none for the position-embedding twin)")
    check_heads(args.encoder_embed_dim, args.encoder_attention_heads, "encoder")
    if encoder_positions(args.encoder_alibi, args.encoder_attention_heads).first_token_anchored and left_padded:
        raise ConfigError(f"{args.encoder_alibi} anchors its first-token term at index 0, which left padding moves: "
                          "pass --left-pad-source (in fairseq 0.12 that flag turns left padding off)")


class UnboundedRobertaEncoder(RobertaEncoder):
    """RoBERTa's encoder for positions that extend to any length (ALiBi, LittleBird, sinusoidal):
    the task need not drop inputs longer than training."""

    def max_positions(self):
        return UNBOUNDED_POSITIONS


class AlibiRobertaEncoder(UnboundedRobertaEncoder):
    def build_encoder(self, args, dictionary, embed_tokens):
        encoder = AlibiTransformerEncoder(TransformerConfig.from_namespace(args), dictionary, embed_tokens,
                                          args.encoder_alibi)
        encoder.apply(init_bert_params)  # as RoBERTa's own (it leaves the ALiBi parameters alone)
        return encoder


class SinusoidalRobertaEncoder(UnboundedRobertaEncoder):
    """fairseq's RoBERTa encoder, unchanged, with sinusoidal positions: they extend themselves
    (the learned twin's table ends at --max-positions)."""


def options(config):
    """The config's fields that are options (not FairseqDataclass's _name)."""
    return [option for option in dataclasses.fields(config) if not option.name.startswith("_")]


def fill_defaults(args, config):
    """The config's defaults for the options args lacks (an architecture's function runs before
    the parser's defaults where a checkpoint or a test builds the model from bare args)."""
    for option in options(config):
        if getattr(args, option.name, None) is None:
            setattr(args, option.name, option.default)


def options_beside(base, config):
    """A model's add_args: its base model's flags, then its nested Config's fields (each default and help
    written there once)."""
    def add_args(parser):
        base.add_args(parser)
        gen_parser_from_dataclass(parser, config())
    return staticmethod(add_args)


@register_model("alibi_roberta")
class AlibiRobertaModel(RobertaModel):
    """RoBERTa (masked LM) with an encoder ALiBi variant in place of position embeddings."""

    @dataclass
    class Config(FairseqDataclass):
        """alibi_roberta's options beside RoBERTa's own (fairseq's RoBERTa takes argparse flags: these
        are added to them, each default and help written here once)."""
        encoder_alibi: ChoiceEnum([*VARIANTS, "none"]) = field(default=DEFAULT, metadata={
            "help": "the bidirectional ALiBi variant (fairseq_alibi/bidirectional/); none: fairseq's RoBERTa "
                    "encoder with sinusoidal positions (the twin)"})
        encoder_learned_pos: bool = field(default=False, metadata={
            "help": "with --encoder-alibi none: learned positions (stock --arch roberta)"})
        no_token_positional_embeddings: bool = field(default=False, metadata={
            "help": "with --encoder-alibi none: no positions at all (NoPE; the encoder sees its input as a bag of "
                    "tokens, the control for what position embeddings add)"})
        scale_embedding: bool = field(default=False, metadata={
            "help": "multiply the token embeddings by sqrt(d) before positions are added (fairseq's transformer "
                    "convention; RoBERTa's, the default, does not). Under RoBERTa's embedding LayerNorm it changes "
                    "nothing for an encoder without position embeddings"})

    add_args = options_beside(RobertaModel, Config)

    @classmethod
    def build_model(cls, args, task):
        position_defaults(args)
        roberta_base_architecture(args)
        if getattr(args, "max_positions", None) is None:  # as RoBERTa: the learned table's size
            args.max_positions = args.tokens_per_sample
        if args.encoder_alibi == "none":  # a twin: fairseq's own encoder and position embeddings
            if args.no_token_positional_embeddings and args.encoder_learned_pos:
                raise ConfigError("--no-token-positional-embeddings drops the positions that --encoder-learned-pos "
                                  "would learn: give one of them")
            twin = RobertaEncoder if args.encoder_learned_pos else SinusoidalRobertaEncoder
            return cls(args, twin(args, task.source_dictionary))
        if args.no_token_positional_embeddings:
            raise ConfigError("--no-token-positional-embeddings is for --encoder-alibi none (an ALiBi encoder "
                              "has no position embeddings already): drop it")
        check_encoder_args(args, left_padded=False)  # masked_lm pads on the right
        return cls(args, AlibiRobertaEncoder(args, task.source_dictionary))


def position_defaults(args, config=AlibiRobertaModel.Config):
    """The config's defaults where unset (before RoBERTa's base architecture, which would turn
    learned positions on)."""
    fill_defaults(args, config)
    if getattr(args, "scale_embedding", False):  # RoBERTa's base architecture would set it True
        args.no_scale_embedding = False


# CPU scale, the LM preset's dimensions (head dim 16): alibi_roberta_small's, littlebird_roberta_small's.
ROBERTA_SMALL_DIMS = {"encoder_layers": 4, "encoder_embed_dim": 128, "encoder_ffn_embed_dim": 512,
                      "encoder_attention_heads": 8}


def roberta_small_dims(args):
    """ROBERTA_SMALL_DIMS where not given, then RoBERTa's other defaults."""
    for name, value in ROBERTA_SMALL_DIMS.items():
        setattr(args, name, getattr(args, name, value))
    roberta_base_architecture(args)


@register_model_architecture("alibi_roberta", "alibi_roberta_small")
def roberta_small_architecture(args):
    """CPU scale: 4 layers, d 128, FFN 512, 8 heads."""
    position_defaults(args)
    roberta_small_dims(args)


@register_model_architecture("alibi_roberta", "alibi_roberta_base")
def roberta_base_size_architecture(args):
    """RoBERTa base: 12 layers, d 768, FFN 3072, 12 heads."""
    position_defaults(args)
    roberta_base_architecture(args)


@register_model("alibi_transformer")
class AlibiTransformerModel(TransformerModel):
    """Encoder-decoder: encoder ALiBi (--encoder-alibi), the causal ALiBi decoder, and
    cross-attention without positions. Its twin is stock --arch transformer (sinusoidal)."""

    @dataclass
    class Config(FairseqDataclass):
        """alibi_transformer's options beside fairseq's transformer's."""
        encoder_alibi: ChoiceEnum(list(VARIANTS)) = field(default=DEFAULT, metadata={
            "help": "the bidirectional ALiBi variant (fairseq_alibi/bidirectional/)"})
        attention_kernel: ChoiceEnum(list(KERNEL_NAMES)) = field(default="auto", metadata={
            "help": "the decoder's " + ATTENTION_KERNEL_HELP})
        alibi_attention: ChoiceEnum(list(KERNEL_NAMES)) = field(default="auto", metadata={
            "help": "the older name of --attention-kernel (used where that is auto)"})

    add_args = options_beside(TransformerModel, Config)

    @classmethod
    def build_model(cls, args, task):
        fill_defaults(args, cls.Config)
        transformer_base_architecture(args)
        check_encoder_args(args, left_padded=getattr(args, "left_pad_source", True))
        check_decoder_args(args, "ALiBi")
        causal_positions("alibi", args)  # the decoder's options, checked before anything is built
        args.no_token_positional_embeddings = True
        args.max_source_positions = args.max_target_positions = UNBOUNDED_POSITIONS
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return AlibiTransformerEncoder(TransformerConfig.from_namespace(cfg), src_dict, embed_tokens, cfg.encoder_alibi)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        positions, kernel = causal_positions("alibi", cfg)
        return PositionDecoder(TransformerConfig.from_namespace(cfg), tgt_dict, embed_tokens, positions, kernel,
                               no_encoder_attn=False)


@register_model_architecture("alibi_transformer", "alibi_transformer_small")
def transformer_small_architecture(args):
    """CPU scale, for the synthetic tasks: 3 + 3 layers, d 128, FFN 512, 8 heads."""
    fill_defaults(args, AlibiTransformerModel.Config)
    for side in ("encoder", "decoder"):
        for name, value in TRANSLATION_SMALL_DIMS.items():
            setattr(args, f"{side}_{name}", getattr(args, f"{side}_{name}", value))
    transformer_base_architecture(args)


@register_model_architecture("alibi_transformer", "alibi_transformer_base")
def transformer_base_size_architecture(args):
    """Vaswani et al.'s base: 6 + 6 layers, d 512, FFN 2048, 8 heads."""
    fill_defaults(args, AlibiTransformerModel.Config)
    transformer_base_architecture(args)
