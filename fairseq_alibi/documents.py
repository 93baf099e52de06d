"""Packed documents (--document-separator): which document each token belongs to and its position
counted from that document's start, found from the tokens of each batch. Pure torch.

A separator closes its document: the tokens after it start the next one. So a query attends to
its own document only, and a method that reads positions (FIRE's normaliser, dynamic NTK-ALiBi,
rotary) reads positions counted from the start of the query's document. The first document of a
row starts at the row's first token (a block cut from the middle of an article, as fairseq's
nonoverlapping and sliding windows cut them, counts from there, as without the option).
"""
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass
class Documents:
    ids: Tensor  # (batch, S) long: how many separators come before each token in its row
    positions: Tensor  # (batch, S) long: each token's position in its document, from 0

    def starts(self) -> Tensor:
        """(batch, S): the index of the first token of each token's document."""
        return torch.arange(self.ids.size(1), device=self.ids.device) - self.positions


def find_documents(tokens: Tensor, separator: int) -> Optional[Documents]:
    """Documents of tokens (batch, S) split after each `separator`; None where no row has a
    separator before its last token, so that nothing changes (one document per row, positions
    from 0 as without the option)."""
    is_separator = tokens.eq(separator)
    if not bool(is_separator[:, :-1].any()):
        return None
    index = torch.arange(tokens.size(1), device=tokens.device).expand_as(tokens)
    ids = is_separator.long().cumsum(1) - is_separator.long()  # separators strictly before
    # The first token of a document is the one after the latest separator before it.
    after_separator = torch.where(is_separator, index + 1, torch.zeros_like(index))
    starts = F.pad(after_separator.cummax(1).values[:, :-1], (1, 0))
    return Documents(ids, index - starts)


def document_bias(positions, documents: Documents, query_index: Tensor, key_index: Tensor,
                  causal: bool = True) -> Tensor:
    """(batch, heads or 1, Tq, Tk) fp32: the method's bias between the queries at query_index (Tq,)
    and the keys at key_index (Tk,) (indices into the rows' S tokens) at their positions in their
    documents, -inf between documents and, if causal, on the future."""
    ids, within = documents.ids, documents.positions
    allowed = ids[:, query_index, None] == ids[:, None, key_index]  # (batch, Tq, Tk)
    if causal:
        allowed &= key_index[None, None, :] <= query_index[None, :, None]
    bias = positions.bias(within[:, query_index], within[:, key_index]) if positions.has_bias else None
    if bias is None:
        bias = torch.zeros(allowed.shape, device=allowed.device)[:, None]
    else:
        bias = bias.transpose(0, 1)  # (heads, batch, Tq, Tk) -> (batch, heads, Tq, Tk)
    blocked = ~allowed[:, None]
    # In place where no gradient needs the values (one full-size pass less).
    return bias.masked_fill(blocked, float("-inf")) if bias.requires_grad else bias.masked_fill_(blocked, float("-inf"))
