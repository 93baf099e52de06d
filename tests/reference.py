"""The paper's equation written out naively: an independent reference for the model."""
import math

import torch
import torch.nn.functional as F

from fairseq_alibi.alibi import alibi_slopes


def naive_attention(attn, x, slopes):
    """softmax(q k^T / sqrt(d) + m * [-(i-1), ..., -1, 0]) v, one head and one query at a time.

    x: (T, C) for one sequence; the weights are the module's q/k/v/out projections.
    """
    T, C = x.shape
    H = len(slopes)
    d = C // H
    q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    out = torch.zeros(T, C)
    for h in range(H):
        sl = slice(h * d, (h + 1) * d)
        for i in range(T):
            scores = q[i, sl] @ k[: i + 1, sl].T / math.sqrt(d)
            scores = scores + slopes[h] * torch.arange(-i, 1, dtype=torch.float32)
            out[i, sl] = torch.softmax(scores, -1) @ v[: i + 1, sl]
    return attn.out_proj(out)


def naive_model(model, tokens, features_only=False):
    """The whole decoder, one sequence at a time, with the naive attention above."""
    dec = model.decoder
    slopes = alibi_slopes(dec.layers[0].self_attn.num_heads)
    outs = []
    for seq in tokens:
        x = dec.embed_scale * dec.embed_tokens(seq)
        x = dec.project_in_dim(x) if dec.project_in_dim is not None else x
        for layer in dec.layers:
            pre = layer.normalize_before
            h = layer.self_attn_layer_norm(x) if pre else x
            x = x + naive_attention(layer.self_attn, h, slopes)
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
