"""LittleBird in fairseq: a masked LM (task masked_lm) whose encoder is LittleBird's layers
(littlebird.py) with BiALiBi (bidirectional/'s "bialibi", the same module as alibi_roberta's
--encoder-alibi bialibi), a learned pack, and RoBERTa's embeddings and LM head.

    fairseq-train DATA --user-dir fairseq_alibi --task masked_lm --criterion masked_lm \\
        --arch littlebird_roberta_small --block-size 8 --pack-length 8 [--padding-insertion 0.5] ...

The dense twin of the same size is --arch alibi_roberta_small --encoder-alibi bialibi.
"""
import torch
from torch import nn

from fairseq import utils
from dataclasses import dataclass, field

from fairseq.dataclass import FairseqDataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta.model import RobertaModel
from fairseq.models.roberta.model import base_architecture as roberta_base_architecture
from fairseq.models.transformer import TransformerConfig, TransformerEncoderBase
from fairseq.modules.transformer_sentence_encoder import init_bert_params

from fairseq_alibi.checks import UNBOUNDED_POSITIONS, ConfigError, config_check
from fairseq_alibi.models.encoder import UnboundedRobertaEncoder, encoder_output, fill_defaults, options_beside, roberta_small_dims
from fairseq_alibi.models.factory import encoder_positions
from fairseq_alibi.littlebird import (PAPER_BLOCK_SIZE, PAPER_PACK_LENGTH, LittleBirdLayer, check_littlebird, insert_padding,
                         pad_to_blocks, take_back, window_bias)


class LittleBirdEncoder(TransformerEncoderBase):
    """fairseq's encoder (embeddings, embedding LayerNorm, dropout) without position embeddings,
    with LittleBird layers. The flow, in order: embed; (training) insert padding; pad to whole
    blocks; BiALiBi for that length, once; the layers, each passing its pack P' to the next; drop
    the added padding."""

    def __init__(self, cfg, dictionary, embed_tokens, block_size: int, pack_length: int, padding_insertion: float):
        cfg.no_token_positional_embeddings = True
        super().__init__(cfg, dictionary, embed_tokens)
        self.alibi = encoder_positions("bialibi", cfg.encoder.attention_heads)  # the positions interface
        self.block_size, self.padding_insertion = block_size, padding_insertion
        embed_dim = cfg.encoder.embed_dim
        self.pack = nn.Parameter(torch.randn(pack_length, embed_dim) * embed_dim ** -0.5)  # P, as LUNA's

    def build_encoder_layer(self, cfg):
        return LittleBirdLayer(cfg.encoder.embed_dim, cfg.encoder.attention_heads, cfg.encoder.ffn_embed_dim,
                               utils.get_activation_fn(cfg.activation_fn), cfg.dropout, cfg.attention_dropout,
                               cfg.activation_dropout)

    def max_positions(self):
        return UNBOUNDED_POSITIONS

    def upgrade_state_dict_named(self, state_dict, name):
        """Nothing to upgrade: no position table, and its layers are not fairseq's (whose renames
        the base class would apply)."""
        return state_dict

    def forward_scriptable(self, src_tokens, src_lengths=None, return_all_hiddens: bool = False, token_embeddings=None):
        padding_mask = src_tokens.eq(self.padding_idx)  # B x T
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings)  # B x T x C
        length = x.size(1)
        inserted = None
        if self.training and self.padding_insertion > 0 and length > 1:
            x, padding_mask, inserted = insert_padding(x, padding_mask, round(self.padding_insertion * length))
        x, padding_mask = pad_to_blocks(x, padding_mask, self.block_size)
        x = x.masked_fill(padding_mask[..., None], 0.0)
        mask = padding_mask if padding_mask.any() else None
        bias = window_bias(self.alibi, x.size(1), self.block_size, mask, x.device)
        pack = self.pack.to(x.dtype).expand(x.size(0), -1, -1)

        def unpadded(h):  # B x T' x C -> T x B x C, the input's own positions
            h = take_back(h, inserted) if inserted is not None else h[:, :length]
            return h.transpose(0, 1)

        encoder_states = [unpadded(x)] if return_all_hiddens else []
        for layer in self.layers:
            x, pack = layer(x, pack, bias, mask)
            if return_all_hiddens:
                encoder_states.append(unpadded(x))
        return encoder_output(unpadded(x), src_tokens, self.padding_idx, encoder_embedding, encoder_states)


class LittleBirdRobertaEncoder(UnboundedRobertaEncoder):
    def build_encoder(self, args, dictionary, embed_tokens):
        encoder = LittleBirdEncoder(TransformerConfig.from_namespace(args), dictionary, embed_tokens,
                                    args.block_size, args.pack_length, args.padding_insertion)
        encoder.apply(init_bert_params)  # as RoBERTa's own (the pack and BiALiBi are left as built)
        return encoder


def check_littlebird_args(args):
    """Once, when the model is built."""
    config_check(check_littlebird, args.block_size, args.pack_length, args.encoder_embed_dim,
                 args.encoder_attention_heads, flags="--block-size/--pack-length/--encoder-embed-dim")
    if not 0 <= args.padding_insertion <= 16:
        raise ConfigError(f"--padding-insertion is the padding inserted per training input as a fraction of "
                          f"its length (0 = off): use 0 to 16, got {args.padding_insertion}")
    if args.encoder_normalize_before:
        raise ConfigError("LittleBird's layer is post-norm (LayerNorm after each residual, the paper's "
                          "equations): drop --encoder-normalize-before")
    if getattr(args, "encoder_layerdrop", 0) > 0:
        raise ConfigError("--encoder-layerdrop is not supported by littlebird_roberta (each layer's pack "
                          "feeds the next): drop it")


@register_model("littlebird_roberta")
class LittleBirdRobertaModel(RobertaModel):
    """RoBERTa (masked LM) with LittleBird's encoder layers."""

    @dataclass
    class Config(FairseqDataclass):
        """littlebird_roberta's options beside RoBERTa's own (argparse flags there), the paper's values
        the defaults."""
        block_size: int = field(default=PAPER_BLOCK_SIZE, metadata={
            "help": "LittleBird's window block b in tokens (the paper's): each token sees 4b tokens around it"})
        pack_length: int = field(default=PAPER_PACK_LENGTH, metadata={"help": "LittleBird's pack length s (the paper's)"})
        padding_insertion: float = field(default=0.0, metadata={
            "help": "the paper's padding insertion: in training, this fraction of each input's length in masked "
                    "padding at random places after the first token (0: off)"})

    add_args = options_beside(RobertaModel, Config)

    @classmethod
    def build_model(cls, args, task):
        littlebird_defaults(args)
        roberta_base_architecture(args)
        if getattr(args, "max_positions", None) is None:
            args.max_positions = args.tokens_per_sample
        check_littlebird_args(args)
        return cls(args, LittleBirdRobertaEncoder(args, task.source_dictionary))


def littlebird_defaults(args):
    """LittleBirdRobertaModel.Config's defaults where unset; no position embeddings (RoBERTa's base
    architecture would turn learned ones on)."""
    fill_defaults(args, LittleBirdRobertaModel.Config)
    args.encoder_learned_pos = False


@register_model_architecture("littlebird_roberta", "littlebird_roberta_small")
def littlebird_small_architecture(args):
    """CPU scale: alibi_roberta_small's dimensions (4 layers, d 128, FFN 512, 8 heads)."""
    littlebird_defaults(args)
    roberta_small_dims(args)


@register_model_architecture("littlebird_roberta", "littlebird_roberta_base")
def littlebird_base_architecture(args):
    """RoBERTa base: 12 layers, d 768, FFN 3072, 12 heads."""
    littlebird_defaults(args)
    roberta_base_architecture(args)
