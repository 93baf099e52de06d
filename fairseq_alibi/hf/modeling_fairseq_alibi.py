"""A Hugging Face causal LM that computes exactly what this plugin's fairseq decoders compute: any
position method of positions/ (and fairseq's own sinusoidal or learned position embeddings), pre-
or post-norm layers, fairseq's activations, adaptive input and adaptive softmax (whose
log-probabilities are returned as the logits: log-softmax leaves them unchanged).

The exporter (hf/export.py) writes this file into the exported folder with the position math
(positions/, alibi.py, rotary.py, t5_bias.py) bundled above it (hf/bundle.py), so that
`AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)` needs torch and transformers
only. Parameter names are fairseq's (decoder.layers.N.self_attn.q_proj.weight, ...) wherever the
layout is the same.

Positions count from each row's first real token (attention_mask), so a padded row (left or right)
gives what the row alone gives. The bias is computed in fp32 and added in the model's dtype, as in
fairseq.
"""
import math
import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from fairseq_alibi.positions import METHODS, build_method  # bundled: dropped from the exported file
from fairseq_alibi.positions.base import causal_mask, fold_padding  # bundled: dropped from the exported file
from fairseq_alibi.rotary import apply_rotary  # bundled: dropped from the exported file

ABSOLUTE_POSITIONS = ("sinusoidal", "learned")  # fairseq's position embeddings, added to the input


class FairseqAlibiConfig(PreTrainedConfig):
    model_type = "fairseq_alibi"

    def __init__(self, vocab_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, activation="relu", normalize_before=True, final_layer_norm=True,
                 layernorm_embedding=False, embed_scale=1.0, input_dim=None, output_dim=None,
                 adaptive_input=None, adaptive_softmax=None, positions="alibi", position_options=None,
                 max_positions=None, padding_idx=1, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                 fairseq_alibi=None, use_cache=True, **kwargs):
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.intermediate_size, self.activation = intermediate_size, activation
        self.normalize_before, self.final_layer_norm = normalize_before, final_layer_norm
        self.layernorm_embedding, self.embed_scale = layernorm_embedding, embed_scale
        # Dimensions of the token embeddings and of the output layer, where they differ from
        # hidden_size (fairseq's project_in_dim / project_out_dim).
        self.input_dim, self.output_dim = input_dim or hidden_size, output_dim or hidden_size
        # {"cutoff": [...], "dims": [...]}: one embedding per band of the vocabulary, each projected
        # to input_dim (fairseq's AdaptiveInput). None: one embedding table.
        self.adaptive_input = adaptive_input
        # {"cutoff": [...], "head_dim": int or None, "tail_dims": [...]} (fairseq's AdaptiveSoftmax):
        # the head scores the first band and one cluster per tail band. None: one output matrix.
        self.adaptive_softmax = adaptive_softmax
        # A method of positions/ (its options in position_options), or fairseq's "sinusoidal" or
        # "learned" embeddings (max_positions rows of them).
        self.positions, self.position_options = positions, dict(position_options or {})
        self.max_positions, self.padding_idx = max_positions, padding_idx
        self.dropout, self.attention_dropout, self.activation_dropout = dropout, attention_dropout, activation_dropout
        self.use_cache = use_cache
        self.fairseq_alibi = fairseq_alibi or {}  # where the model came from: method, training length, commit
        kwargs.setdefault("tie_word_embeddings", False)  # the exported weights are copies, not ties
        super().__init__(**kwargs)


def activation_fn(name):
    """fairseq's activations (fairseq.utils.get_activation_fn), written out."""
    functions = {
        "relu": F.relu,
        "gelu": lambda x: F.gelu(x.float()).type_as(x),
        "gelu_accurate": lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3)))),
        "tanh": torch.tanh,
        "linear": lambda x: x,
        "swish": lambda x: x * torch.sigmoid(x),
    }
    return functions[name]


def sinusoidal_table(rows, dim, padding_idx):
    """fairseq's SinusoidalPositionalEmbedding.get_embedding: sin in the first half, cos in the
    second, row padding_idx zero."""
    half = dim // 2
    frequencies = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    angles = torch.arange(rows, dtype=torch.float).unsqueeze(1) * frequencies.unsqueeze(0)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).view(rows, -1)
    if dim % 2:
        table = torch.cat([table, torch.zeros(rows, 1)], dim=1)
    table[padding_idx, :] = 0
    return table


def build_position_method(config):
    """The config's method of positions/, checked and built as the plugin builds it: on the CPU,
    also where transformers builds the model on the meta device (the checks read numbers)."""
    heads, d = config.num_attention_heads, config.hidden_size
    with torch.device("cpu"):
            return build_method(config.positions, METHODS[config.positions].Config(**config.position_options), heads,
                            d // heads, d)


class TokenEmbedding(nn.Module):
    """One table, or fairseq's adaptive input: band i of the vocabulary embedded in dims[i] and
    projected to input_dim."""

    def __init__(self, config):
        super().__init__()
        adaptive = config.adaptive_input
        self.cutoff = list(adaptive["cutoff"]) if adaptive else [config.vocab_size]
        if adaptive:
            self.embeddings = nn.ModuleList()
            for i, dim in enumerate(adaptive["dims"]):
                size = self.cutoff[i] - (self.cutoff[i - 1] if i else 0)
                self.embeddings.append(nn.Sequential(nn.Embedding(size, dim), nn.Linear(dim, config.input_dim, bias=False)))
        else:
            self.weight = nn.Parameter(torch.empty(config.vocab_size, config.input_dim))
        self.dim = config.input_dim

    def forward(self, tokens):
        if not hasattr(self, "embeddings"):
            return F.embedding(tokens, self.weight)
        out = self.embeddings[0][1].weight.new_zeros(*tokens.shape, self.dim)
        for i, band in enumerate(self.embeddings):
            low = self.cutoff[i - 1] if i else 0
            inside = (tokens >= low) & (tokens < self.cutoff[i])
            if inside.any():
                out[inside] = band(tokens[inside] - low)
        return out


class OutputLayer(nn.Module):
    """Logits from one matrix, or fairseq's adaptive softmax as log-probabilities: the head's
    log-softmax over the first band's words and one cluster per tail; a tail word's is its
    cluster's plus its log-softmax within the band."""

    def __init__(self, config):
        super().__init__()
        adaptive = config.adaptive_softmax
        self.adaptive = adaptive is not None
        if not self.adaptive:
            self.weight = nn.Parameter(torch.empty(config.vocab_size, config.output_dim))
            return
        self.cutoff = list(adaptive["cutoff"])
        head_dim = adaptive.get("head_dim")
        self.head_proj = nn.Linear(config.output_dim, head_dim, bias=False) if head_dim else None
        self.head_words = nn.Linear(head_dim or config.output_dim, self.cutoff[0], bias=False)
        self.head_clusters = nn.Linear(config.output_dim, len(self.cutoff) - 1, bias=False)
        self.tails = nn.ModuleList(
            nn.Sequential(nn.Linear(config.output_dim, dim, bias=False),
                          nn.Linear(dim, self.cutoff[i + 1] - self.cutoff[i], bias=False))
            for i, dim in enumerate(adaptive["tail_dims"]))

    def forward(self, x):
        if not self.adaptive:
            return F.linear(x, self.weight)
        words = self.head_words(self.head_proj(x) if self.head_proj is not None else x)
        head = torch.cat([words, self.head_clusters(x)], dim=-1).log_softmax(-1)
        first = self.cutoff[0]
        bands = [head[..., :first]]
        for i, tail in enumerate(self.tails):
            bands.append(tail(x).log_softmax(-1) + head[..., first + i, None])
        return torch.cat(bands, dim=-1)


class SelfAttention(nn.Module):
    def __init__(self, config, layer_bias):
        super().__init__()
        d, self.heads = config.hidden_size, config.num_attention_heads
        self.head_dim = d // self.heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))
        self.layer_bias = layer_bias  # FoX: this layer's forget gate (positions.LayerBias)
        self.dropout = config.attention_dropout

    def forward(self, x, mask, padded, rotary, cache, layer):
        """x (B, T, C); mask (B or 1, heads or 1, T, S) additive fp32 with -inf, or None (causal,
        T == S); padded: the padded keys (B, S) or None; rotary: cos, sin (B, 1, T, head_dim / 2)."""
        batch, length, _ = x.shape
        q, k, v = (proj(x).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        if rotary is not None:  # keys are cached rotated, at their own positions
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        if self.layer_bias is not None:
            # The forget gates' cumulative log f (fp64) rides in the cache as two extra key channels,
            # its high and low parts in the keys' dtype, so that the cache's own reordering and
            # cropping keep it with its keys (exact to ~2^-48 of it in fp32, ~2^-16 in bf16).
            state = None
            if cache is not None and cache.get_seq_length(layer) > 0:
                cached = cache.layers[layer].keys
                state = cached[..., -2].double() + cached[..., -1].double()
            extra, cumulative = self.layer_bias(x.transpose(0, 1), q, k, padded, state)
            if cache is not None:
                new = cumulative[..., -length:]
                high = new.to(k.dtype)
                low = (new - high.double()).to(k.dtype)
                k_stored = torch.cat([k, high[..., None], low[..., None]], -1)
                k_all, v = cache.update(k_stored, v, layer)
                k = k_all[..., :-2]
            mask = extra + (mask if mask is not None else causal_mask(length, extra.size(-1), torch.float32, x.device))
        elif cache is not None:
            k, v = cache.update(k, v, layer)
        dropout = self.dropout if self.training else 0.0
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=length > 1)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype), dropout_p=dropout)
        return self.out_proj(out.transpose(1, 2).reshape(batch, length, -1))


class DecoderLayer(nn.Module):
    def __init__(self, config, layer_bias):
        super().__init__()
        d = config.hidden_size
        self.self_attn = SelfAttention(config, layer_bias)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, config.intermediate_size), nn.Linear(config.intermediate_size, d)
        self.final_layer_norm = nn.LayerNorm(d)
        self.activation = activation_fn(config.activation)
        self.normalize_before = config.normalize_before
        self.dropout, self.activation_dropout = nn.Dropout(config.dropout), nn.Dropout(config.activation_dropout)

    def forward(self, x, mask, padded, rotary, cache, layer):
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x = residual + self.dropout(self.self_attn(x, mask, padded, rotary, cache, layer))
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = residual + self.dropout(self.fc2(self.activation_dropout(self.activation(self.fc1(x)))))
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x


class Decoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        d = config.hidden_size
        self.embed_tokens = TokenEmbedding(config)
        self.embed_scale = config.embed_scale
        self.project_in_dim = nn.Linear(config.input_dim, d, bias=False) if config.input_dim != d else None
        self.padding_idx = config.padding_idx
        self.absolute = config.positions if config.positions in ABSOLUTE_POSITIONS else None
        method = None
        if self.absolute == "learned":
            self.embed_positions = nn.Embedding(config.max_positions + config.padding_idx + 1, d)
        elif self.absolute is None:
            method = build_position_method(config)
            self.positions_name = method.name
            self.add_module(method.name, method)
        self.layernorm_embedding = nn.LayerNorm(d) if config.layernorm_embedding else None
        self.layers = nn.ModuleList(
            DecoderLayer(config, method.layer_bias() if method is not None else None)
            for _ in range(config.num_hidden_layers))
        self.layer_norm = nn.LayerNorm(d) if config.final_layer_norm else None
        self.project_out_dim = nn.Linear(d, config.output_dim, bias=False) if config.output_dim != d else None
        self.dropout = nn.Dropout(config.dropout)

    @property
    def positions(self):
        return self._modules[self.positions_name] if self.absolute is None else None

    def forward(self, tokens, attention_mask, cache):
        batch, length = tokens.shape
        past = cache.get_seq_length() if cache is not None else 0
        key_len = past + length
        if attention_mask is None:
            attention_mask = torch.ones(batch, key_len, dtype=torch.long, device=tokens.device)
        # Each row's positions, from its first real token (padding: 0, and masked).
        key_pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        query_pos = key_pos[:, -length:]
        x = self.embed_scale * self.embed_tokens(tokens)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if self.absolute is not None:  # fairseq's position embeddings count from padding_idx + 1
            rows = query_pos + self.padding_idx + 1
            if self.absolute == "learned":
                x = x + self.embed_positions(rows)
            else:
                table = sinusoidal_table(int(rows.max()) + 1, x.size(-1), self.padding_idx).to(x)
                x = x + table[rows]
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout(x)

        padded = attention_mask[:, :key_len] == 0
        padded = padded if padded.any() else None
        mask, rotary = None, None
        method = self.positions
        if method is not None:
            rotated = method.rotary(query_pos)
            rotary = None if rotated is None else tuple(r[:, None] for r in rotated)
            bias = method.bias(query_pos, key_pos)  # (heads, B, T, S)
            if bias is not None:
                mask = bias.transpose(0, 1)
        if mask is not None or padded is not None or length != key_len:
            mask = (mask if mask is not None else torch.zeros(1, 1, 1, 1, device=x.device)) + causal_mask(
                length, key_len, torch.float32, x.device)
            if padded is not None:
                mask = fold_padding(mask, padded)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, padded, rotary, cache, i)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        return x


class FairseqAlibiForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = FairseqAlibiConfig
    base_model_prefix = "decoder"
    _no_split_modules = ["DecoderLayer"]
    _supports_sdpa = True

    def __init__(self, config):
        super().__init__(config)
        self.decoder = Decoder(config)
        self.output_layer = OutputLayer(config)
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module):
        # from_pretrained fills the weights; it asks here for what no file holds: the position
        # method's buffers (ALiBi's slopes, not persistent), rebuilt by the method's constructor,
        # and, for a model made from its config alone, fairseq's initial embeddings.
        if module is self.decoder.positions:
            for name, buffer in build_position_method(self.config).named_buffers():
                module.get_buffer(name).copy_(buffer)
        elif isinstance(module, (TokenEmbedding, OutputLayer)) and hasattr(module, "weight"):
            nn.init.normal_(module.weight, std=module.weight.size(1) ** -0.5)

    def get_input_embeddings(self):
        return self.decoder.embed_tokens

    def forward(self, input_ids=None, attention_mask=None, cache=None, use_cache=None, labels=None,
                logits_to_keep=0, **kwargs):
        cache = cache if cache is not None else kwargs.pop("past_key_values", None)  # its name before 5.x's last ones
        use_cache = use_cache if use_cache is not None else (self.config.use_cache and not self.training)
        if use_cache and cache is None:
            cache = DynamicCache()
        x = self.decoder(input_ids, attention_mask, cache if use_cache else None)
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        logits = self.output_layer(x)
        loss = None
        if labels is not None:
            loss = F.nll_loss(logits[:, :-1].float().log_softmax(-1).flatten(0, 1), labels[:, 1:].flatten(),
                              ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE_FIELD: cache if use_cache else None})


# The output's cache field: `cache` in the latest transformers 5.x, `past_key_values` before.
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
