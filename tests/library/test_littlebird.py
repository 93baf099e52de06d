"""LittleBird: the blocked attention against a dense reference (values and gradients), the window
rule written out block by block, the whole layer against the paper's five equations written out
query by query, pack attention against fairseq's MultiheadAttention, padding independence, and
the masked-LM architecture's one-line errors."""
import math

import pytest
import torch
import torch.nn.functional as F

from conftest import build_model, random_tokens
from fairseq_alibi.checks import ConfigError
from fairseq_alibi.bidirectional import build_variant
from fairseq_alibi.littlebird import (LittleBirdLayer, Projections, dense_window_attention, insert_padding,
                                      pack_attention, pad_to_blocks, take_back, unpacked_window_attention,
                                      window_bias, window_logits)

# (block size, blocks, pack length): dense (1 to 4 blocks) and windowed, b = 1 included
SHAPES = [(4, 1, 3), (4, 3, 2), (3, 4, 5), (4, 5, 3), (2, 9, 1), (5, 12, 4), (1, 7, 2), (3, 6, 6)]


def rule_blocks(q, n):
    """The blocks query block q of an n-block row sees, as the issue words it: the first block,
    its own and its neighbours, always 4 blocks at the edges; every block when n <= 4."""
    if n <= 4:
        return set(range(n))
    if q <= 1:
        return {0, 1, 2, 3}
    if q == n - 1:
        return {0, n - 3, n - 2, n - 1}
    return {0, q - 1, q, q + 1}


def trained_bialibi(heads, seed=0):
    """BiALiBi away from its start: alpha != 0, past != future."""
    alibi = build_variant("bialibi", heads).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        alibi.first_token.copy_(torch.randn(heads, generator=g, dtype=torch.float64))
        alibi.log_past.add_(0.5 * torch.randn(heads, generator=g, dtype=torch.float64))
        alibi.log_future.add_(0.5 * torch.randn(heads, generator=g, dtype=torch.float64))
    return alibi


def paper_d(alibi, h, i, j):
    """D[i, j] of the paper, one entry: 0 on the diagonal, alpha to or from token 0, a slope times
    the distance otherwise (past for keys before the query)."""
    if i == j:
        return 0.0
    if i == 0 or j == 0:
        return alibi.first_token[h].item()
    return alibi.log_past[h].exp().item() * (i - j) if j < i else alibi.log_future[h].exp().item() * (j - i)


def paper_d_pack(alibi, h, b):
    return (alibi.log_past[h].exp().item() + alibi.log_future[h].exp().item()) / 2 * b


def random_inputs(b, n, s, batch=3, heads=4, d_h=6, seed=0, padded=True):
    g = torch.Generator().manual_seed(seed)
    T = b * n
    q, k, v = (torch.randn(batch, heads, T, d_h, generator=g, dtype=torch.float64) for _ in range(3))
    pack_k, pack_v = (torch.randn(batch, heads, s, d_h, generator=g, dtype=torch.float64) for _ in range(2))
    lengths = torch.randint(1, T + 1, (batch,), generator=g)
    lengths[0] = T  # one row without padding
    mask = torch.arange(T)[None] >= lengths[:, None] if padded else None
    return q, k, v, pack_k, pack_v, mask


@pytest.mark.parametrize("b,n,s", SHAPES)
def test_blocked_equals_dense_reference_in_fp64_with_padding(b, n, s):
    q, k, v, pack_k, pack_v, mask = random_inputs(b, n, s)
    alibi = trained_bialibi(4)
    inputs = [t.clone().requires_grad_() for t in (q, k, v, pack_k, pack_v)]
    blocked = unpacked_window_attention(*inputs, window_bias(alibi, b * n, b, mask), mask)
    dense = dense_window_attention(q, k, v, pack_k, pack_v, alibi, b, mask)
    real = ~mask  # padded query rows are dropped by the layer; compare where it keeps them
    torch.testing.assert_close(blocked[real[:, None].expand_as(blocked[..., 0])], dense[real[:, None].expand_as(dense[..., 0])],
                               rtol=1e-12, atol=1e-12)
    # gradients too (the dense reference through autograd, the blocked one through its gathers)
    weight = torch.randn(blocked.shape, dtype=torch.float64) * real[:, None, :, None]
    grads = torch.autograd.grad((blocked * weight).sum(), inputs)
    dense_inputs = [t.clone().requires_grad_() for t in (q, k, v, pack_k, pack_v)]
    dense = dense_window_attention(*dense_inputs[:5], alibi, b, mask)
    dense_grads = torch.autograd.grad((dense * weight).sum(), dense_inputs)
    for got, expected in zip(grads, dense_grads):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_four_blocks_or_fewer_is_unmasked_dense_attention(n):
    """Every key of the row, the bias written out entry by entry, one softmax over pack + keys."""
    b, s = 3, 2
    q, k, v, pack_k, pack_v, _ = random_inputs(b, n, s, padded=False)
    alibi = trained_bialibi(4)
    T, H = b * n, 4
    bias = torch.tensor([[[-paper_d(alibi, h, i, j) for j in range(T)] for i in range(T)] for h in range(H)],
                        dtype=torch.float64)
    pack_bias = torch.tensor([-paper_d_pack(alibi, h, b) for h in range(H)], dtype=torch.float64)
    logits = torch.cat([q @ pack_k.transpose(-1, -2) + pack_bias[:, None, None], q @ k.transpose(-1, -2) + bias], -1)
    weights = logits.softmax(-1)
    expected = weights[..., :s] @ pack_v + weights[..., s:] @ v
    got = unpacked_window_attention(q, k, v, pack_k, pack_v, window_bias(alibi, T, b))
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("b,n,s", [(4, 5, 3), (2, 9, 1), (5, 12, 4), (1, 7, 2), (3, 4, 6)])
def test_every_row_has_exactly_4b_plus_s_finite_logits_at_the_rule_s_keys(b, n, s):
    q, k, _, pack_k, _, _ = random_inputs(b, n, s, padded=False)
    bias = window_bias(trained_bialibi(4), b * n, b)
    logits = window_logits(q, k, pack_k, bias)  # (B, H, groups, queries, s + key blocks * b)
    rows = logits.flatten(0, 3)
    assert rows.shape[1] == s + 4 * b and torch.isfinite(rows).all()
    # which keys those columns are: the key blocks of each query's group, against the rule
    groups = bias.key_blocks[0]
    for query in range(b * n):
        group = query // b if n > 4 else 0
        assert set(groups[group].tolist()) == rule_blocks(query // b, n), (query, groups[group])
        assert len(set(groups[group].tolist())) == 4  # no block twice


@pytest.mark.parametrize("b,n,length", [(2, 9, 9), (3, 8, 13), (2, 10, 7), (4, 6, 24)])
def test_a_padded_row_sees_what_its_own_length_gives_it(b, n, length):
    """A row of `length` real tokens in a batch padded to n blocks: its queries' finite window
    logits are exactly the real keys of the rule for its own block count."""
    q, k, _, pack_k, _, _ = random_inputs(b, n, 2, batch=1, padded=False)
    mask = (torch.arange(b * n) >= length)[None]
    bias = window_bias(trained_bialibi(4), b * n, b, mask)
    logits = window_logits(q, k, pack_k, bias, mask)
    own_blocks = math.ceil(length / b)
    for query in range(length):
        group = query // b if n > 4 else 0
        finite = torch.isfinite(logits[0, 0, group, query - group * (b * n // logits.size(2)), 2:])
        keys = (bias.key_blocks[0, group, :, None] * b + torch.arange(b)).flatten()[finite]
        expected = {j for j in range(length) if j // b in rule_blocks(query // b, own_blocks)}
        assert set(keys.tolist()) == expected, query
        assert torch.isfinite(logits[0, :, group, :, :2]).all()  # pack keys never masked


def test_pack_attention_equals_fairseq_multihead_attention_with_the_same_weights():
    from fairseq.modules import MultiheadAttention

    torch.manual_seed(0)
    C, H, s, T, B = 16, 4, 3, 11, 2
    fairseq_attention = MultiheadAttention(C, H, encoder_decoder_attention=True).double().eval()
    ours = Projections(C, H).double()
    ours.load_state_dict(fairseq_attention.state_dict())
    pack, x = torch.randn(B, s, C, dtype=torch.float64), torch.randn(B, T, C, dtype=torch.float64)
    mask = torch.arange(T)[None] >= torch.tensor([[T], [6]])
    expected, _ = fairseq_attention(pack.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), key_padding_mask=mask)
    torch.testing.assert_close(pack_attention(ours, pack, x, mask), expected.transpose(0, 1), rtol=1e-12, atol=1e-12)


def naive_layer(layer, alibi, b, x, pack, length):
    """The paper's five equations for one input x (T, C) whose first `length` rows are real,
    query by query, with the layer's own weights (eval mode: no dropout)."""
    C, H = x.size(1), alibi.first_token.numel()
    d_h = C // H
    linear = lambda m, t: t @ m.weight.T + m.bias  # noqa: E731
    norm = lambda m, t: F.layer_norm(t, (C,), m.weight, m.bias, m.eps)  # noqa: E731
    heads = lambda t: t.reshape(t.size(0), H, d_h).transpose(0, 1)  # noqa: E731
    x = x[:length]

    # C_p = Attn(P, X); P' = LN(C_p + P)
    a = layer.pack_attn
    scores = heads(linear(a.q_proj, pack)) @ heads(linear(a.k_proj, x)).transpose(-1, -2) / math.sqrt(d_h)
    context = scores.softmax(-1) @ heads(linear(a.v_proj, x))
    c_p = linear(a.out_proj, context.transpose(0, 1).reshape(-1, C))
    next_pack = norm(layer.pack_layer_norm, c_p + pack)

    # C_x = USWAttn(X, C_p): one softmax over [pack keys; window keys] for every query
    a = layer.self_attn
    q, k, v = heads(linear(a.q_proj, x)), heads(linear(a.k_proj, x)), heads(linear(a.v_proj, x))
    pack_k, pack_v = heads(linear(a.k_proj, c_p)), heads(linear(a.v_proj, c_p))
    n = math.ceil(length / b)
    out = torch.zeros(H, length, d_h, dtype=x.dtype)
    for i in range(length):
        keys = [j for j in range(length) if j // b in rule_blocks(i // b, n)]
        for h in range(H):
            logits = [q[h, i] @ pack_k[h, t] / math.sqrt(d_h) - paper_d_pack(alibi, h, b) for t in range(pack.size(0))]
            logits += [q[h, i] @ k[h, j] / math.sqrt(d_h) - paper_d(alibi, h, i, j) for j in keys]
            w = torch.stack(logits).softmax(0)
            out[h, i] = w[:len(pack_k[h])] @ pack_v[h] + w[len(pack_k[h]):] @ v[h, keys]
    c_x = linear(a.out_proj, out.transpose(0, 1).reshape(length, C))
    # A = LN(C_x + X); X' = LN(FFN(A) + A)
    a_ = norm(layer.self_attn_layer_norm, c_x + x)
    return norm(layer.final_layer_norm, linear(layer.fc2, F.gelu(linear(layer.fc1, a_))) + a_), next_pack


@pytest.mark.parametrize("b,lengths,s", [(3, [20, 13], 2), (4, [11, 4], 3), (2, [15, 15], 1)])
def test_layer_equals_the_five_equations_written_naively(b, lengths, s):
    torch.manual_seed(0)
    C, H = 16, 4
    layer = LittleBirdLayer(C, H, 32).double().eval()
    alibi = trained_bialibi(H)
    x = torch.randn(len(lengths), max(lengths), C, dtype=torch.float64)
    pack = torch.randn(len(lengths), s, C, dtype=torch.float64)
    mask = torch.arange(max(lengths))[None] >= torch.tensor(lengths)[:, None]
    padded, padded_mask = pad_to_blocks(x.masked_fill(mask[..., None], 0), mask, b)
    with torch.no_grad():
        got, got_pack = layer(padded, pack, window_bias(alibi, padded.size(1), b, padded_mask), padded_mask)
    for row, length in enumerate(lengths):
        with torch.no_grad():
            expected, expected_pack = naive_layer(layer, alibi, b, x[row], pack[row], length)
        torch.testing.assert_close(got[row, :length], expected, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(got_pack[row], expected_pack, rtol=1e-10, atol=1e-10)
        assert (got[row, length:] == 0).all()  # padded rows zeroed


SMALL = ["--encoder-layers", "2", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
         "--encoder-attention-heads", "4", "--block-size", "4", "--pack-length", "3"]


def test_model_outputs_for_real_tokens_do_not_depend_on_the_padding_that_follows():
    """The whole masked LM, alone (batch 1) and padded by 1 to 17 tokens beside a longer input
    (batch 2): the window of a row follows its own length."""
    model, d = build_model("littlebird_roberta_small", extra=SMALL, task="masked_lm")
    model = model.double()
    with torch.no_grad():
        for p in model.encoder.sentence_encoder.alibi.parameters():
            p.add_(0.3 * torch.randn(p.shape, dtype=torch.float64))
    tokens = random_tokens(len(d), 1, 22)  # 6 blocks of 4
    with torch.no_grad():
        alone = model(tokens)[0]
        for pad in (1, 2, 6, 17):
            other = random_tokens(len(d), 1, 22 + pad, seed=pad)
            batch = torch.cat([torch.cat([tokens, torch.full((1, pad), d.pad())], 1), other])
            torch.testing.assert_close(model(batch)[0][:1, :22], alone, rtol=1e-10, atol=1e-10)


def test_padding_insertion_round_trip_and_training_step():
    g = torch.Generator().manual_seed(0)
    x, mask = torch.randn(3, 9, 5, generator=g), torch.zeros(3, 9, dtype=torch.bool)
    mask[2, 6:] = True
    spread, spread_mask, where = insert_padding(x, mask, 7, generator=g)
    assert spread.shape == (3, 16, 5) and (spread[:, 0] == x[:, 0]).all()
    assert (spread_mask.sum(1) == torch.tensor([7, 7, 10])).all()  # 7 inserted, row 2's own 3 kept
    assert (spread[:2][spread_mask[:2]] == 0).all() and (where.diff(1) > 0).all()  # inserted slots empty
    torch.testing.assert_close(take_back(spread, where), x)

    model, d = build_model("littlebird_roberta_small", extra=[*SMALL, "--padding-insertion", "0.5"], task="masked_lm")
    model.train()
    tokens = random_tokens(len(d), 2, 13)
    out = model(tokens)[0]
    assert out.shape == (2, 13, len(d))
    out.logsumexp(-1).mean().backward()
    encoder = model.encoder.sentence_encoder
    assert encoder.pack.grad.abs().sum() > 0 and encoder.alibi.first_token.grad.abs().sum() > 0


@pytest.mark.parametrize("flags,message", [
    (["--block-size", "0"], "the block size must be at least 1"),
    (["--pack-length", "0"], "the pack length must be at least 1"),
    (["--padding-insertion", "-1"], "--padding-insertion"),
    (["--encoder-normalize-before"], "post-norm"),
    (["--encoder-attention-heads", "3"], "multiple of the head count"),
])
def test_impossible_settings_are_refused_at_build_in_one_line(flags, message):
    with pytest.raises(ConfigError) as error:
        build_model("littlebird_roberta_small", extra=flags, task="masked_lm")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_paper_defaults_and_the_command_line_refusal(wt2_slice, tmp_path):
    import subprocess

    from conftest import REPO

    model, _ = build_model("littlebird_roberta_small", task="masked_lm")
    encoder = model.encoder.sentence_encoder
    assert encoder.block_size == 64 and encoder.pack.shape == (64, 128)  # the paper's b and s
    proc = subprocess.run(["fairseq-train", wt2_slice, "--user-dir", "fairseq_alibi", "--task", "masked_lm",
                           "--arch", "littlebird_roberta_small", "--block-size", "0", "--cpu", "--max-tokens", "512",
                           "--save-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--block-size/--pack-length/--encoder-embed-dim: the block size must be at least 1" in proc.stderr.strip().splitlines()[-1]
