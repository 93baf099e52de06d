"""A Hugging Face causal LM that computes exactly what this plugin's fairseq decoders compute: any
position method of positions/ (and fairseq's own sinusoidal or learned position embeddings), pre-
or post-norm layers, fairseq's activations, adaptive input and adaptive softmax (whose
log-probabilities are returned as the logits: log-softmax leaves them unchanged).

The exporter (hf/export.py) writes this file into the exported folder with the position math
(positions/, slopes.py, alibi_bias.py, rotary_angles.py, t5_buckets.py) bundled above it (hf/bundle.py), so that
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
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

# bundled: dropped from the exported file
from fairseq_alibi.attention_options.option import (OPTIONS, apply_outputs, build_options, dense_attention,
                                                    logit_readers)
from fairseq_alibi.length_temperature import LengthTemperature  # bundled: dropped from the exported file
from fairseq_alibi.positions import METHODS, build_method  # bundled: dropped from the exported file
from fairseq_alibi.positions.position_method import causal_mask, fold_padding  # bundled: dropped from the exported file
from fairseq_alibi.rotary_angles import apply_rotary  # bundled: dropped from the exported file

ABSOLUTE_POSITIONS = ("sinusoidal", "learned")  # fairseq's position embeddings, added to the input


class FairseqAlibiConfig(PreTrainedConfig):
    model_type = "fairseq_alibi"

    def __init__(self, vocab_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, activation="relu", normalize_before=True, final_layer_norm=True,
                 layernorm_embedding=False, embed_scale=1.0, input_dim=None, output_dim=None,
                 adaptive_input=None, adaptive_softmax=None, positions="alibi", position_options=None,
                 max_positions=None, padding_idx=1, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                 fairseq_alibi=None, use_cache=True, masked_output_symbols=None, attention_options=None,
                 length_temperature=None, **kwargs):
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
        # vocabulary indices the model never predicts (logits -inf): fairseq's specials an imported GPT-2 lacks
        self.masked_output_symbols = list(masked_output_symbols or [])
        # The attention options (attention_options/) by name, each its flags' values: {"sink_logit": {...}}.
        self.attention_options = dict(attention_options or {})
        # A length temperature (length_temperature.py): {"kind", "form", "length"}, or None. Each query's n is
        # the keys it sees: its position + 1 (from the row's first real token; in a sink cache, its slot + 1).
        self.length_temperature = dict(length_temperature) if length_temperature else None
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


def sinusoidal_embeddings(rows, dim, padding_idx):
    """fairseq's SinusoidalPositionalEmbedding at the table rows `rows` (any shape; its get_embedding's
    values, computed from the rows rather than looked up, so that a traced graph takes any length): sin
    in the first half, cos in the second, row padding_idx zero."""
    half = dim // 2
    frequencies = torch.exp(torch.arange(half, dtype=torch.float, device=rows.device) * -(math.log(10000) / (half - 1)))
    angles = rows.float().unsqueeze(-1) * frequencies
    out = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
    if dim % 2:
        out = torch.cat([out, torch.zeros_like(out[..., :1])], dim=-1)
    return out.masked_fill((rows == padding_idx).unsqueeze(-1), 0.0)


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
            self.masked = list(config.masked_output_symbols)  # not a buffer: from_pretrained leaves those unset
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
            logits = F.linear(x, self.weight)
            if self.masked:
                logits = logits.index_fill(-1, torch.tensor(self.masked, device=x.device), float("-inf"))
            return logits
        words = self.head_words(self.head_proj(x) if self.head_proj is not None else x)
        head = torch.cat([words, self.head_clusters(x)], dim=-1).log_softmax(-1)
        first = self.cutoff[0]
        bands = [head[..., :first]]
        for i, tail in enumerate(self.tails):
            bands.append(tail(x).log_softmax(-1) + head[..., first + i, None])
        return torch.cat(bands, dim=-1)


class SinkLayer(CacheLayerMixin):
    """One layer's streaming cache (StreamingLLM): the keys and values of the text's first `sinks`
    tokens and of its last `window` - 1, so that the next token sees sinks + window. Keys are kept
    as computed (before any rotation): positions are re-assigned inside the cache at every step."""

    is_sliding = True
    is_croppable = False

    def __init__(self, sinks, window):
        super().__init__()
        self.sinks, self.window, self.seen = sinks, window, 0  # seen: tokens of the text so far

    def lazy_initialization(self, key_states, value_states):
        self.keys, self.values = key_states[..., :0, :], value_states[..., :0, :]
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        """Every key and value the next T tokens see (the kept ones, then theirs); keeps for the
        token after them the sinks and the last window - 1."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys, values = torch.cat([self.keys, key_states], -2), torch.cat([self.values, value_states], -2)
        positions = torch.cat([kept_positions(self.seen, self.sinks, self.window, keys.device),
                               torch.arange(self.seen, self.seen + key_states.size(-2), device=keys.device)])
        self.seen += key_states.size(-2)
        keep = (positions < self.sinks) | (positions > self.seen - self.window)
        self.keys, self.values = keys[..., keep, :], values[..., keep, :]
        return keys, values

    def get_seq_length(self):
        return self.seen  # the text's length: generate() counts positions by it

    def get_mask_sizes(self, query_length):
        return self.keys.size(-2) + query_length if self.is_initialized else query_length, 0

    def get_max_length(self):
        return self.sinks + self.window - 1


def kept_positions(seen, sinks, window, device):
    """The text positions a sink cache holds after `seen` tokens: the first sinks, the last window - 1."""
    return torch.cat([torch.arange(min(sinks, seen), device=device),
                      torch.arange(min(seen, max(sinks, seen - window + 1)), seen, device=device)])


class SinkCache(Cache):
    """StreamingLLM's cache (Xiao et al., ICLR 2024) for this model: the first `sinks` tokens and a
    window of the last `window` (the current one included), every position counted inside the
    cache (a query at slot min(i, sinks + window - 1), a window key at its distance from it in the
    text, sink j at slot j), so that no position exceeds sinks + window - 1 however long the text.
    Memory is bounded; each token is computed once. Build it with model.sink_cache(sinks, window)."""

    def __init__(self, sinks, window, num_layers):
        super().__init__(layers=[SinkLayer(sinks, window) for _ in range(num_layers)])

    @property
    def seen(self):
        return self.layers[0].seen


def sink_cache_problem(config, method, sinks, window):
    """Why this model (its position method: None for position embeddings) cannot stream with a sink
    cache of (sinks, window), or None."""
    if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
        return f"sinks must be a whole number >= 0, got {sinks!r}"
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        return f"window must be a whole number >= 1 (the current token included), got {window!r}"
    if method is None:
        return (f"{config.positions} position embeddings are added to the input, so they cannot be re-assigned "
                "inside the cache: stream a model of a relative method (alibi, t5_bias, kerple, rotary, nope, ...)")
    reading = logit_readers(config.attention_options)
    if reading and method.rotary(torch.zeros(1, dtype=torch.long)) is not None:
        return f"{' and '.join(reading)} with rotary cannot stream yet (each key is rotated twice in the cache)"
    if method.layer_bias() is not None:
        return (f"{method.label}'s bias depends on every token between key and query, which a sink cache drops: "
                "stream a model of a position-only method")
    return None


def stream_attention(q, k, v, mask, rotary, options=None):
    """Attention of T queries over the keys a sink cache gives them. mask (B or 1, heads or 1, T, K):
    the bias in cache positions and -inf on the keys a query does not see. rotary: None, or
    ((cos, sin) of the queries at their slot, of the queries at their text position - base, of the
    keys, sink keys at their slot and window keys at text position - base; the sink keys' columns):
    a query's scores against the sinks and against the window take its two rotations. options: the
    layer's attention options that read the logits (the dense path; none with rotary: refused)."""
    if options is not None:
        return dense_attention(q, k, v, mask, 0.0, options, {})[0]
    if rotary is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype))
    at_slot, at_text, keys_at, sink_columns = rotary
    k = apply_rotary(k, *keys_at)
    scores = torch.where(sink_columns, apply_rotary(q, *at_slot) @ k.transpose(-1, -2),
                         apply_rotary(q, *at_text) @ k.transpose(-1, -2))
    weights = (scores.float() / math.sqrt(q.size(-1)) + mask).softmax(-1)
    return weights.to(v.dtype) @ v


class SelfAttention(nn.Module):
    def __init__(self, config, layer_bias):
        super().__init__()
        d, self.heads = config.hidden_size, config.num_attention_heads
        self.head_dim = d // self.heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))
        self.layer_bias = layer_bias  # FoX: this layer's forget gate (positions.LayerBias)
        self.dropout = config.attention_dropout
        configs = [OPTIONS[name](**values) for name, values in config.attention_options.items()]
        self.options = build_options(configs, self.heads, self.head_dim, d)  # fairseq's parameter names
        self.reads_logits = bool(logit_readers(configs))
        temperature = config.length_temperature
        self.temperature = LengthTemperature(temperature["kind"], temperature["form"], temperature["length"],
                                             self.heads) if temperature else None

    def forward(self, x, mask, padded, rotary, cache, layer, keys_seen=None):
        """x (B, T, C); mask (B or 1, heads or 1, T, S) additive fp32 with -inf, or None (causal,
        T == S); padded: the padded keys (B, S) or None; rotary: cos, sin (B, 1, T, head_dim / 2);
        keys_seen (B or 1, T): each query's n, for a length temperature."""
        batch, length, _ = x.shape
        q, k, v = (proj(x).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        if self.temperature is not None:  # each query times its factor; the logit form its bias too (fp32, as the mask)
            factor = self.temperature(keys_seen)
            q = q * factor.to(q.dtype)
            if self.temperature.form == "logit" and mask is not None:  # the bias scaled, -inf kept (ssmax's n = 1: 0)
                mask = torch.where(mask.isinf(), mask, mask * factor)
        if isinstance(cache, SinkCache):  # keys kept unrotated: rotated at their slot in stream_attention
            k, v = cache.update(k, v, layer)
            options = self.options if self.reads_logits else None
            return self.output(stream_attention(q, k, v, mask, rotary, options), x)
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
            mask = mask if mask is not None else causal_mask(length, extra.size(-1), torch.float32, x.device)
            # in place where no gradient needs extra (one full-size tensor less), as fairseq's attention
            mask = extra.add_(mask) if not extra.requires_grad else extra + mask
        elif cache is not None:
            k, v = cache.update(k, v, layer)
        dropout = self.dropout if self.training else 0.0
        if mask is None and (torch.jit.is_tracing() or self.reads_logits) and length > 1:
            # a traced length is a tensor, which is_causal does not take; the options read each logit
            mask = causal_mask(length, k.size(-2), torch.float32, x.device)
        if self.reads_logits:
            out, _ = dense_attention(q, k, v, mask, dropout, self.options, {})
        elif mask is None:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=length > 1)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype), dropout_p=dropout)
        return self.output(out, x)

    def output(self, out, x):
        """The heads' outputs (B, heads, T, head_dim), an output gate's applied (x: the layer's input), projected."""
        out = apply_outputs(self.options, out, x.transpose(0, 1))
        return self.out_proj(out.transpose(1, 2).reshape(out.size(0), out.size(2), -1))


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

    def forward(self, x, mask, padded, rotary, cache, layer, keys_seen=None):
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x = residual + self.dropout(self.self_attn(x, mask, padded, rotary, cache, layer, keys_seen))
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

    def embed(self, tokens, query_pos):
        x = self.embed_scale * self.embed_tokens(tokens)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if self.absolute is not None:  # fairseq's position embeddings count from padding_idx + 1
            rows = query_pos + self.padding_idx + 1
            if self.absolute == "learned":
                x = x + self.embed_positions(rows)
            else:
                x = x + sinusoidal_embeddings(rows, x.size(-1), self.padding_idx).to(x)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        return self.dropout(x)

    def output(self, x):
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        return x

    def stream(self, tokens, cache):
        """The next T tokens of every row through a sink cache (SinkCache: positions inside the cache)."""
        length = tokens.size(1)
        sinks, window, seen = cache.layers[0].sinks, cache.layers[0].window, cache.seen
        device = tokens.device
        text = torch.arange(seen, seen + length, device=device)  # the queries' text positions
        keys = torch.cat([kept_positions(seen, sinks, window, device), text])  # the keys' (kept, then new)
        sink = keys < sinks
        visible = (keys[None] <= text[:, None]) & (sink[None] | (keys[None] > text[:, None] - window))
        slot = text.clamp(max=sinks + window - 1)  # each query's position in the cache
        key_pos = torch.where(sink[None], keys[None], slot[:, None] - text[:, None] + keys[None])  # (T, K)
        mask = torch.zeros(visible.shape, device=device).masked_fill(~visible, float("-inf"))[None, None]
        method = self.positions
        bias = method.bias(slot[:, None], key_pos)  # (heads, T, 1, K)
        if bias is not None:
            mask = mask + bias[:, :, 0][None]
        rotary, at_slot = None, method.rotary(slot)
        if at_slot is not None:  # window scores by text distance, from a base kept small
            base = int(keys[~sink].min()) if (~sink).any() else 0
            shaped = lambda angles: tuple(a[None, None] for a in angles)  # noqa: E731
            rotary = (shaped(at_slot), shaped(method.rotary(text - base)),
                      shaped(method.rotary(torch.where(sink, keys, keys - base))), sink)
        x = self.embed(tokens, None)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, None, rotary, cache, i, (slot + 1)[None])
        return self.output(x)

    def forward(self, tokens, attention_mask, cache):
        if isinstance(cache, SinkCache):
            return self.stream(tokens, cache)
        batch, length = tokens.shape
        past = cache.get_seq_length() if cache is not None else 0
        key_len = past + length
        if attention_mask is None:
            attention_mask = torch.ones(batch, key_len, dtype=torch.long, device=tokens.device)
        # Each row's positions, from its first real token (padding: 0, and masked).
        key_pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        query_pos = key_pos[:, -length:]
        x = self.embed(tokens, query_pos)

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
            x = layer(x, mask, padded, rotary, cache, i, query_pos + 1)
        return self.output(x)


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

    def sink_cache(self, sinks, window):
        """A StreamingLLM cache for this model (SinkCache): pass it as the cache (or generate()'s
        past_key_values) to score or generate an endless text in bounded memory."""
        problem = sink_cache_problem(self.config, self.decoder.positions, sinks, window)
        if problem:
            raise ValueError(problem)
        return SinkCache(sinks, window, self.config.num_hidden_layers)

    def forward(self, input_ids=None, attention_mask=None, cache=None, use_cache=None, labels=None,
                logits_to_keep=0, **kwargs):
        cache = cache if cache is not None else kwargs.pop("past_key_values", None)  # its name before 5.x's last ones
        use_cache = use_cache if use_cache is not None else (self.config.use_cache and not self.training)
        if use_cache and cache is None:
            cache = DynamicCache()
        if isinstance(cache, SinkCache) and attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError("a sink cache streams rows without padding: give rows of one length (attention_mask all 1)")
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
