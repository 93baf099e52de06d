"""Packed documents (--document-separator): for every causal method, a packed row A + separator + B
gives, at B's positions, B's logits alone and, at A's, those of A + separator alone; the cache
across a separator equals the full forward; rows with and without separators batch together; each
kernel (blocked, flex, flash's variable-length contract) equals the dense path."""
import pytest
import torch
import torch.nn.functional as F

from conftest import TINY, build_model, random_tokens
from reference import assert_same_logits
from test_kernels import documented_flash_attn_func
from test_position_methods import METHODS, perturb
from fairseq_alibi.checks import ConfigError
from fairseq_alibi.documents import Documents, document_bias, find_documents
from fairseq_alibi.kernels import DocumentBlocks
from fairseq_alibi.positions import Alibi, Fire, T5Bias

VOCAB = 50
SEPARATOR = f"w{VOCAB - 1}"  # the last word: random_tokens(VOCAB + 3, ...) never draws it
# Methods that read the query's own position, not only i - j: dynamic NTK-ALiBi, FIRE (in METHODS).
VARIANTS = {**METHODS, "alibi_dynamic_ntk": ["--alibi-scaling", "dynamic_ntk", "--alibi-scaling-factor", "1",
                                             "--alibi-train-length", "6"]}


def model(variant, *flags, separator=SEPARATOR):
    torch.manual_seed(0)
    arch = variant.split("_")[0] if variant.startswith(("kerple", "alibi")) else variant
    extra = [*TINY, *VARIANTS[variant], *flags, *(["--document-separator", separator] if separator else [])]
    m, d = build_model(f"{arch}_transformer_lm", vocab=VOCAB, extra=extra)
    return perturb(m), d


def words(length, seed):
    return random_tokens(VOCAB + 3, 1, length, seed)  # indices 4 .. VOCAB + 2: never the separator


def logits(m, tokens):
    with torch.no_grad():
        return m(tokens)[0]


def naive_documents(row, separator):
    """ids and positions of one row, a token at a time."""
    ids, positions, doc, position = [], [], 0, 0
    for token in row:
        ids.append(doc)
        positions.append(position)
        position += 1
        if token == separator:
            doc, position = doc + 1, 0
    return ids, positions


def test_documents_are_found_as_written_out():
    s = 7
    rows = torch.tensor([[1, 2, s, 3, 4, 5, s, s, 6], [s, 1, 2, 3, 4, 5, 6, 7, s], [1, 2, 3, 4, 5, 6, 8, 8, 9]])
    found = find_documents(rows, s)
    for row, ids, positions in zip(rows.tolist(), found.ids.tolist(), found.positions.tolist()):
        assert (ids, positions) == naive_documents(row, s)
    assert find_documents(rows[2:], s) is None  # no separator: nothing changes
    assert find_documents(torch.tensor([[1, 2, s]]), s) is None  # the last token: nothing after it


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_packed_row_is_its_documents_alone(variant):
    m, d = model(variant)
    separator = torch.tensor([[d.index(SEPARATOR)]])
    a, b = words(13, 1), words(11, 2)  # past FIRE's threshold 8 and dynamic NTK's length 6
    packed = logits(m, torch.cat([a, separator, b], dim=1))
    torch.testing.assert_close(packed[:, 14:], logits(m, b), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed[:, :14], logits(m, torch.cat([a, separator], dim=1)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_cache_across_separators_equals_the_full_forward(variant):
    m, d = model(variant)
    tokens = words(26, 3)
    tokens[0, [5, 6, 17]] = d.index(SEPARATOR)  # two in a row: an empty document between them
    assert_same_logits(m, m, tokens, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["alibi", "rotary", "fire", "t5_bias"])
def test_rows_with_and_without_separators_batch_together(variant):
    m, d = model(variant)
    rows = torch.cat([words(20, 4), words(20, 5), words(20, 6)])
    rows[0, 8] = rows[2, 3] = rows[2, 12] = d.index(SEPARATOR)  # row 1 has none
    together = logits(m, rows)
    for i in range(3):
        torch.testing.assert_close(together[i:i + 1], logits(m, rows[i:i + 1]), rtol=1e-5, atol=1e-5)


def test_without_separators_the_option_changes_nothing():
    tokens = torch.cat([words(30, 7), words(30, 8)])
    with_option, _ = model("fire")
    without, _ = model("fire", separator=None)
    assert torch.equal(logits(with_option, tokens), logits(without, tokens))


def test_an_unknown_or_padding_symbol_is_refused_when_built():
    for symbol, why in [("<doc>", "not in the dictionary"), ("<pad>", "padding")]:
        with pytest.raises(ConfigError, match=f"--document-separator '{symbol}' is {why}"):
            build_model(extra=[*TINY, "--document-separator", symbol])


def random_documents(batch, length, seed):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 40, (batch, length), generator=g)  # separator 0: about every 40 tokens
    tokens[0, :] = torch.where(tokens[0] == 0, 1, tokens[0])  # one row without any
    return find_documents(tokens, 0)


@pytest.mark.parametrize("positions", [Alibi(4), T5Bias(4, 8, 20), Fire(4, 8, 0.1, 16)], ids=["alibi", "t5", "fire"])
@pytest.mark.parametrize("query_len,key_len", [(200, 200), (37, 200)])
def test_blocked_kernel_with_documents_equals_the_dense_mask(positions, query_len, key_len):
    """Output and gradients, blocks of 16 queries (so that blocks cross documents), a cache."""
    documents = random_documents(3, key_len, 0)
    torch.manual_seed(1)
    q = torch.randn(3, 4, query_len, 8, requires_grad=True)
    k, v = (torch.randn(3, 4, key_len, 8, requires_grad=True) for _ in range(2))
    keys = torch.arange(key_len)
    mask = document_bias(positions, documents, keys[key_len - query_len:], keys)
    dense = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    blocked = DocumentBlocks(positions, documents, torch.float32, block=16).attend(q, k, v, 0.0)
    torch.testing.assert_close(blocked, dense, rtol=1e-5, atol=1e-5)
    grads = [torch.autograd.grad(out.square().sum(), (q, k, v)) for out in (dense, blocked)]
    for expected, got in zip(*grads):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def twins(kernel, variant="alibi"):
    reference, d = model(variant, "--alibi-attention", "sdpa")
    other, _ = model(variant, "--alibi-attention", kernel)
    return reference, other, d


def packed_rows(d, length):
    rows = torch.cat([words(length, 9), words(length, 10)])
    rows[0, [length // 3, length // 3 + 1, 2 * length // 3]] = d.index(SEPARATOR)
    return rows


def test_blocked_kernel_in_the_model_equals_the_dense_path():
    reference, blocked, d = twins("blocked")
    tokens = packed_rows(d, 600)  # past BLOCKED_ABOVE: blocks of 256
    torch.testing.assert_close(logits(blocked, tokens), logits(reference, tokens), rtol=1e-4, atol=1e-5)


def test_flex_attention_with_documents_equals_the_dense_path():
    reference, flex, d = twins("flex")
    assert_same_logits(flex, reference, packed_rows(d, 24))


def documented_flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                      dropout_p=0.0, causal=False, alibi_slopes=None):
    """FlashAttention-2's documented variable-length semantics: (total, H, d) tensors, sequence i
    the rows cu_seqlens[i]:cu_seqlens[i + 1] of each, attended as documented_flash_attn_func."""
    assert cu_seqlens_q.dtype == cu_seqlens_k.dtype == torch.int32 and len(cu_seqlens_q) == len(cu_seqlens_k)
    out = []
    for i in range(len(cu_seqlens_q) - 1):
        qs, ks = slice(*cu_seqlens_q[i:i + 2].tolist()), slice(*cu_seqlens_k[i:i + 2].tolist())
        assert 0 < qs.stop - qs.start <= max_seqlen_q and 0 < ks.stop - ks.start <= max_seqlen_k
        out.append(documented_flash_attn_func(q[None, qs], k[None, ks], v[None, ks], dropout_p, causal, alibi_slopes)[0])
    return torch.cat(out)


def test_flash_path_with_documents_passes_fa2_its_sequences(monkeypatch):
    """On CPU the real kernel cannot run: check our variable-length call against FA2's contract,
    full forward and cached (keys of documents before the first query left out)."""
    import fairseq_alibi.kernels.flash as flash

    monkeypatch.setattr(flash, "flash_attn_func", documented_flash_attn_func, raising=False)
    monkeypatch.setattr(flash, "flash_attn_varlen_func", documented_flash_attn_varlen_func, raising=False)
    monkeypatch.setattr(flash, "flash_available", lambda x: None)
    monkeypatch.setattr(flash, "flash_installed", lambda: None)
    reference, flash, d = twins("flash")
    assert_same_logits(flash, reference, packed_rows(d, 24))


