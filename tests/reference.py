"""The position methods written out naively, one head and one query at a time: an independent
reference for the models (the paper's equations, RoFormer's rotation, T5's buckets, KERPLE's
kernels, Sandwich's cosine sum, FIRE's MLP of the normalised log distance, learned slopes, FoX's
sums of log forget gates)."""
import functools
import math

import torch
import torch.nn.functional as F

from fairseq_alibi.alibi_bias import alibi_slopes


def naive_rotate(u, position, base=10000.0):
    """RoFormer: rotate each pair (u[2k], u[2k+1]) by position * base^(-2k/d)."""
    out = u.clone()
    d = u.numel()
    for k in range(d // 2):
        angle = position * base ** (-2 * k / d)
        c, s = math.cos(angle), math.sin(angle)
        out[2 * k] = u[2 * k] * c - u[2 * k + 1] * s
        out[2 * k + 1] = u[2 * k] * s + u[2 * k + 1] * c
    return out


def naive_t5_bucket(distance, num_buckets=32, max_distance=128):
    """T5's _relative_position_bucket for a causal query (bidirectional=False), for one distance."""
    n = max(distance, 0)
    exact = num_buckets // 2
    if n < exact:
        return n
    bucket = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return min(bucket, num_buckets - 1)


def naive_mlp(mlp, value):
    """FIRE's f (Linear 1 -> w, ReLU, Linear w -> heads) of one scalar, written out."""
    first, last = mlp[0], mlp[2]
    hidden = [max(0.0, float(first.weight[u, 0]) * value + float(first.bias[u])) for u in range(first.out_features)]
    return [sum(float(last.weight[h, u]) * hidden[u] for u in range(len(hidden))) + float(last.bias[h])
            for h in range(last.out_features)]


def naive_bias(positions, heads, head_dim):
    """bias(h, i, j) of a causal position method (keys j <= i), from its formula and parameters."""
    kind = type(positions).__name__
    if kind in ("Rotary", "NoPositions", "ForgetGates"):  # FoX's bias is each layer's (naive_layer_bias)
        return lambda h, i, j: 0.0
    if kind == "LearnedAlibi":
        slopes = [math.exp(s) for s in positions.log_slopes.tolist()]
        return lambda h, i, j: -slopes[h] * (i - j)
    if kind == "T5Bias":
        table = positions.weight
        return lambda h, i, j: float(table[naive_t5_bucket(i - j, positions.num_buckets, positions.max_distance), h])
    if kind == "Kerple":
        r1, r2 = positions.r1.tolist(), positions.r2.tolist()
        if positions.variant == "log":
            return lambda h, i, j: -r1[h] * math.log(1 + r2[h] * abs(i - j))
        return lambda h, i, j: -r1[h] * abs(i - j) ** r2[h]
    if kind == "Sandwich":
        d = head_dim
        return lambda h, i, j: ((sum(math.cos(abs(i - j) / 10000 ** (2 * k / d)) for k in range(1, d // 2 + 1)) - d / 2)
                                / (8 * (h + 1) / heads))
    if kind == "Fire":
        c, L = float(positions.c), abs(float(positions.threshold_multiplier) * positions.init_threshold)

        @functools.lru_cache(maxsize=None)
        def fire_heads(i, j):
            x = math.log(c * abs(i - j) + 1) / (math.log(c * max(L, i) + 1) + 1e-6)
            return naive_mlp(positions.mlp, x)
        return lambda h, i, j: fire_heads(i, j)[h]
    assert kind == "Alibi" and positions.scaling in ("none", "linear", "ntk")
    slopes = positions.slopes.tolist() if positions.scaling != "none" else alibi_slopes(heads)
    return lambda h, i, j: -slopes[h] * (i - j)


def naive_layer_bias(attn, x):
    """A layer's data-dependent bias for its input x (T, C), or None: FoX's forget gates, the
    sum over t = j+1..i of log sigmoid(w_h . x_t + b_h), one term at a time."""
    gate = getattr(attn, "layer_bias", None)  # a stock model's attention has none
    if gate is None:
        return None
    weight, bias = gate.proj.weight.tolist(), gate.proj.bias.tolist()
    rows = x.tolist()

    @functools.lru_cache(maxsize=None)
    def log_f(h, t):
        z = sum(w * v for w, v in zip(weight[h], rows[t])) + bias[h]
        return -math.log1p(math.exp(-z)) if z >= 0 else z - math.log1p(math.exp(z))

    return lambda h, i, j: sum(log_f(h, t) for t in range(j + 1, i + 1))


def position_terms(model):
    """(bias(h, i, j), rotate(u, position)) of the model's position method; for a stock model
    (no position method: its weights under the paper's equation), ALiBi's."""
    dec = model.decoder
    attn = dec.layers[0].self_attn
    if not hasattr(dec, "positions"):
        slopes = alibi_slopes(attn.num_heads)
        return (lambda h, i, j: -slopes[h] * (i - j)), None
    positions = dec.positions
    rotate = None
    if type(positions).__name__ == "Rotary":
        assert positions.scaling == "none"
        rotate = lambda u, p: naive_rotate(u, p, positions.base)  # noqa: E731
    return naive_bias(positions, attn.num_heads, attn.head_dim), rotate


def naive_temperature(attn, h, i):
    """A length temperature's factor for head h's query i, which sees i + 1 keys, and its form, as
    length_temperature.py's docstring states them (1 and "qk" without one)."""
    temperature = getattr(attn, "temperature", None)
    if temperature is None:
        return 1.0, "qk"
    if temperature.kind == "logn":
        return max(1.0, math.log(i + 1) / math.log(temperature.length)), temperature.form
    return math.exp(float(temperature.log_scale[h])) * math.log(i + 1), temperature.form


def naive_attention(attn, x, bias, rotate=None, weights=None):
    """softmax(q_i k_j / sqrt(d) + bias(h, i, j)) v over keys j <= i, one head and query at a time; with a
    length temperature tau (naive_temperature) tau q_i k_j / sqrt(d) + bias (form qk) or tau (q_i k_j /
    sqrt(d) + bias) (form logit); with attention options (attention_options/) as their papers state them:
    naive_selective's subtraction, naive_weights in place of softmax, naive_gate on the output.

    x: (T, C) for one sequence; the weights are the module's q/k/v/out projections. weights: a list the
    attention weights (heads, T, T; 0 past each query) are appended to.
    """
    T, C = x.shape
    H = attn.num_heads
    d = C // H
    q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    logits = [[None] * T for _ in range(H)]  # head, query: its logits over keys 0..i
    for h in range(H):
        sl = slice(h * d, (h + 1) * d)
        qh, kh = q[:, sl], k[:, sl]
        if rotate is not None:
            qh = torch.stack([rotate(qh[p], p) for p in range(T)])
            kh = torch.stack([rotate(kh[p], p) for p in range(T)])
        for i in range(T):
            tau, form = naive_temperature(attn, h, i)
            if form == "logit":
                logits[h][i] = torch.stack([tau * (qh[i] @ kh[j] / math.sqrt(d) + bias(h, i, j)) for j in range(i + 1)])
            else:
                logits[h][i] = torch.stack([tau * (qh[i] @ kh[j]) / math.sqrt(d) + bias(h, i, j) for j in range(i + 1)])
    options = getattr(attn, "options", None) or {}
    if "selective" in options:
        logits = naive_selective(logits)
    out, given = torch.zeros(T, C), torch.zeros(H, T, T)
    for h in range(H):
        sl = slice(h * d, (h + 1) * d)
        for i in range(T):
            given[h, i, : i + 1] = naive_weights(options, h, logits[h][i])
            out[i, sl] = given[h, i, : i + 1] @ v[: i + 1, sl]
    if weights is not None:
        weights.append(given)
    if "output_gate" in options:
        out = out * naive_gate(options["output_gate"], x, H, d)
    return attn.out_proj(out)


def naive_selective(logits):
    """Selective attention (Leviathan et al. 2025): every head's logit l_h(i, j) less F(i, j), the sum over the
    queries k with j < k < i of max(0, l_0(k, j)), head 0's; the first key (j = 0) never lowered."""
    def lowered(i, j):
        return sum(max(0.0, float(logits[0][k][j])) for k in range(j + 1, i)) if j > 0 else 0.0

    return [[row - torch.tensor([lowered(i, j) for j in range(i + 1)]) for i, row in enumerate(head)] for head in logits]


def naive_weights(options, h, row):
    """A query's weights over keys 0..i from its logits: softmax; with a sink logit s_h, exp(l_j) / (exp(s_h) +
    sum exp(l_j')); stick-breaking, A_j = sigmoid(l_j) prod_{j < k < i} (1 - sigmoid(l_k)) for j < i and what
    is left, 1 - sum A_j, on the query's own key."""
    if "sink_logit" in options:
        sink = float(options["sink_logit"].logit[h])
        weights = [math.exp(float(value)) for value in row]
        return torch.tensor([w / (math.exp(sink) + sum(weights)) for w in weights])
    if "stick_breaking" in options:
        i, beta = len(row) - 1, [1 / (1 + math.exp(-float(value))) for value in row]
        taken = [beta[j] * math.prod(1 - beta[k] for k in range(j + 1, i)) for j in range(i)]
        return torch.tensor([*taken, 1.0 - sum(taken)], dtype=torch.float32)
    return torch.softmax(row, -1)


def naive_gate(gate, x, heads, head_dim):
    """Gated attention (Qiu et al. 2025): sigmoid(x W + b) per output dimension (elementwise) or per head
    (headwise, repeated over its dimensions), (T, C)."""
    g = torch.sigmoid(x @ gate.proj.weight.T + gate.proj.bias)
    return g if gate.kind == "elementwise" else g.repeat_interleave(head_dim, dim=1)


def naive_model(model, tokens, features_only=False, weights=None):
    """The whole decoder, one sequence at a time, with the naive attention above; weights: a list each
    sequence's layers' attention weights (heads, T, T) are appended to, layer by layer."""
    dec = model.decoder
    bias, rotate = position_terms(model)
    outs = []
    for seq in tokens:
        x = dec.embed_scale * dec.embed_tokens(seq)
        x = dec.project_in_dim(x) if dec.project_in_dim is not None else x
        for layer in dec.layers:
            pre = layer.normalize_before
            h = layer.self_attn_layer_norm(x) if pre else x
            data_bias = naive_layer_bias(layer.self_attn, h)
            layer_bias = bias if data_bias is None else (lambda hd, i, j, b=data_bias: bias(hd, i, j) + b(hd, i, j))
            x = x + naive_attention(layer.self_attn, h, layer_bias, rotate, weights)
            x = x if pre else layer.self_attn_layer_norm(x)
            h = layer.final_layer_norm(x) if pre else x
            x = x + layer.fc2(F.relu(layer.fc1(h)))
            x = x if pre else layer.final_layer_norm(x)
        if dec.layer_norm is not None:
            x = dec.layer_norm(x)
        x = dec.project_out_dim(x) if dec.project_out_dim is not None else x
        outs.append(x if features_only else dec.output_projection(x))
    return torch.stack(outs)


def assert_same_logits(model, reference, tokens, rtol=1e-4, atol=1e-5):
    """model's logits equal reference's, in one full forward and step by step with the cache."""
    with torch.no_grad():
        expected = reference(tokens)[0].float()
        torch.testing.assert_close(model(tokens)[0].float(), expected, rtol=rtol, atol=atol)
        state = {}
        steps = [model(tokens[:, : t + 1], incremental_state=state)[0] for t in range(tokens.size(1))]
    torch.testing.assert_close(torch.cat(steps, dim=1).float(), expected, rtol=rtol, atol=atol)


def assert_reordered_cache_is_the_full_forward(model, tokens, order, steps=8):
    """Beam search reorders the cache between steps (fairseq's reorder_incremental_state): after `steps` tokens
    cached and the rows reordered by `order`, the cached steps equal the full forward of the reordered rows."""
    with torch.no_grad():
        state = {}
        for t in range(steps):
            model(tokens[:, : t + 1], incremental_state=state)
        model.decoder.reorder_incremental_state_scripting(state, order)
        reordered = tokens[order]
        cached = [model(reordered[:, : t + 1], incremental_state=state)[0] for t in range(steps, tokens.size(1))]
        expected = model(reordered)[0][:, steps:]
    torch.testing.assert_close(torch.cat(cached, dim=1), expected, rtol=1e-5, atol=1e-5)


def naive_greedy(model, dictionary, prompt, new):
    """The `new` token ids a fairseq LM decodes greedily after </s> and the prompt's words: the argmax of its
    whole forward's log-probabilities (an adaptive softmax's too), token by token."""
    ids = torch.tensor([[dictionary.eos()] + [dictionary.index(w) for w in prompt.split()]])
    with torch.no_grad():
        for _ in range(new):
            log_probs = model.get_normalized_probs(model(ids), log_probs=True)
            ids = torch.cat([ids, log_probs[:, -1:].argmax(-1)], dim=1)
    return ids[0, -new:].tolist()
