"""What an attention option declares, the registry, and the dense attention the options that read the
logits run on. Pure torch, no fairseq.

An option is a Config (its flags, each an option(...) with its one default and help; enabled(); build())
registered here, and the module build() gives each layer, which may
- reshape the logits (adjust_logits: selective attention's subtraction; its kept state rides in the
  incremental cache, batch first, so that beams reorder it),
- weigh them in place of softmax (weighs, weights: the sink logit's extra denominator, stick-breaking),
- change the attention's output (output: the output gate), from the layer's input.
An option that reads the logits (reads_logits) runs on the dense path: the model's kernel is sdpa's mask,
asked for at build (models/factory.py refuses another kernel by name in one line).
"""
import dataclasses
from typing import ClassVar, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

OPTIONS: Dict[str, type] = {}  # name -> its Config class


def register_option(config_class):
    if config_class.name in OPTIONS:
        raise ValueError(f"attention option {config_class.name!r} registered twice")
    OPTIONS[config_class.name] = config_class
    return config_class


@dataclasses.dataclass
class OptionConfig:
    """An option's flags (subclasses add option(...) fields). name: the registry's and the layer's key; flag:
    the flag that turns it on (in messages)."""

    name: ClassVar[str] = ""
    flag: ClassVar[str] = ""
    reads_logits: ClassVar[bool] = False
    weighs: ClassVar[bool] = False  # replaces softmax: at most one such option per model
    takes_documents: ClassVar[bool] = True

    @classmethod
    def from_args(cls, args) -> "OptionConfig":
        """Its flags from a model's arguments; one a checkpoint predates reads as its default."""
        return cls(**{f.name: getattr(args, f.name, f.default) for f in dataclasses.fields(cls)})

    def enabled(self) -> bool:
        raise NotImplementedError

    def build(self, heads: int, head_dim: int, embed_dim: int) -> "AttentionOption":
        raise NotImplementedError


class AttentionOption(nn.Module):
    """One layer's option: the interface's defaults change nothing."""

    def adjust_logits(self, logits: Tensor, state: Optional[Tensor]) -> Tuple[Tensor, Optional[Tensor]]:
        """logits (batch, heads, T, S) fp32, the bias and masks added (-inf where a query must not look),
        the T queries the last T of S positions; state: what the previous call kept (incremental
        decoding), or None. Returns the new logits and what to keep."""
        return logits, None

    def weights(self, logits: Tensor) -> Tensor:
        """The attention weights (batch, heads, T, S) of the logits, in place of softmax (weighs)."""
        raise NotImplementedError

    def output(self, out: Tensor, x: Tensor) -> Tensor:
        """out (batch, heads, T, head_dim), x (T, batch, C) the layer's attention input."""
        return out


def configs_from_args(args) -> List[OptionConfig]:
    """The enabled options' configs, in the registry's order (one order for every layer)."""
    configs = [OPTIONS[name].from_args(args) for name in sorted(OPTIONS)]
    return [config for config in configs if config.enabled()]


def check_options(configs: List[OptionConfig], documents: bool) -> Optional[str]:
    """None if these options go together (documents: packed documents kept apart), else why not, one line."""
    weighing = [config.flag for config in configs if config.weighs]
    if len(weighing) > 1:
        return f"{' and '.join(weighing)} each replace softmax's weights: choose one"
    refused = [config.flag for config in configs if documents and not config.takes_documents]
    if refused:
        return f"{', '.join(refused)} does not keep packed documents apart: drop it or --document-separator"
    return None


def build_options(configs: List[OptionConfig], heads: int, head_dim: int, embed_dim: int) -> Optional[nn.ModuleDict]:
    """One layer's options (None without any), keyed by name: their parameters' checkpoint names."""
    if not configs:
        return None
    return nn.ModuleDict({config.name: config.build(heads, head_dim, embed_dim) for config in configs})


def logit_readers(options) -> List[str]:
    """The flags of those of these options (their names, configs or a layer's ModuleDict; None: none) that read
    every logit, and so run on the dense path."""
    classes = [OPTIONS[option] if isinstance(option, str) else type(option) for option in (options or ())]
    return [config_class.flag for config_class in classes if config_class.reads_logits]


def apply_outputs(options: Optional[nn.ModuleDict], out: Tensor, x: Tensor) -> Tensor:
    """The heads' outputs out (batch, heads, T, head_dim) with each option's output change (the output gate), x
    (T, batch, C) the layer's attention input."""
    for option in (options or {}).values():
        out = option.output(out, x)
    return out


def diagonal(query_len: int, key_len: int, device) -> Tensor:
    """(T, S) bool: each query's own key (the T queries the last T of S positions)."""
    return torch.eye(key_len, dtype=torch.bool, device=device)[key_len - query_len:]


# Without gradients (evaluation) the dense path runs in blocks of query rows of at most this many (query, key)
# pairs per row of the batch and head, each block over the keys its last query sees: every option reads a
# query's own row (selective attention its state, carried from block to block as from call to call), so the
# same rows, with memory bounded by the block instead of T x S (128L = 8,192 tokens: 256 MiB a head whole).
BLOCK_PAIRS = 2**21


def dense_attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], dropout_p: float,
                    options: nn.ModuleDict, states: Dict[str, Tensor],
                    recorded: Optional[List[Tensor]] = None) -> Tuple[Tensor, Dict[str, Tensor]]:
    """Attention written out (fp32 logits, the options between logits and output): q, k, v (batch, heads, T
    or S, d), the T queries the last T of the S keys, mask (1 or batch, 1 or heads, T, S) additive (None:
    every key), dropout on the weights. Returns the output (q's dtype) and what each option keeps (by name)
    for the next call. recorded: a list the attention weights (batch, heads, T, S) are appended to, whole (a
    measurement: what each query gives each key)."""
    query_len, key_len = q.size(2), k.size(2)
    rows = max(1, BLOCK_PAIRS // key_len)
    if torch.is_grad_enabled() or query_len <= rows or recorded is not None:
        return attention_rows(q, k, v, mask, dropout_p, options, states, recorded)
    outs, kept = [], dict(states)
    for start in range(0, query_len, rows):
        end = min(query_len, start + rows)
        seen = key_len - query_len + end  # the block's queries are the last of these keys
        block_mask = None if mask is None else mask[..., start:end, :seen]
        out, kept = attention_rows(q[:, :, start:end], k[:, :, :seen], v[:, :, :seen], block_mask, dropout_p, options,
                                   kept)
        outs.append(out)
    return torch.cat(outs, dim=2), kept


def attention_rows(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], dropout_p: float,
                   options: nn.ModuleDict, states: Dict[str, Tensor],
                   recorded: Optional[List[Tensor]] = None) -> Tuple[Tensor, Dict[str, Tensor]]:
    """dense_attention over all of q's rows at once."""
    logits = torch.matmul(q.float(), k.float().transpose(-1, -2)) * q.size(-1) ** -0.5
    if mask is not None:
        logits = logits + mask.float()
    kept = {}
    for name, option in options.items():
        logits, kept[name] = option.adjust_logits(logits, states.get(name))
    weighing = [option for name, option in options.items() if OPTIONS[name].weighs]
    weights = weighing[0].weights(logits) if weighing else torch.softmax(logits, dim=-1)
    if recorded is not None:
        recorded.append(weights.detach())
    if dropout_p > 0:
        weights = F.dropout(weights, p=dropout_p)
    return torch.matmul(weights, v.float()).to(q.dtype), {name: state for name, state in kept.items() if state is not None}
