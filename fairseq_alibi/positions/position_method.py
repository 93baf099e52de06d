"""What every position method shares: the interface attention asks of it, its options' base
config, and the registry. Pure torch, no fairseq import.

A method is one class, registered under a name (`@register("fire", "FIRE")`), with a nested
`Config` dataclass (a subclass of MethodConfig): each field is one option, written once with its
default, help and choices (`option(...)`), and named as the command-line flag it becomes
(`fire_mlp_width` -> `--fire-mlp-width`). `Config.build(heads, head_dim, embed_dim)` makes the
module; its checks raise ValueError, run once when the model is built (build_method).

What attention asks of a method (attention.attention_bias, once per forward, and each layer):
- bias(query_pos, key_pos): the additive bias, (heads, ..., Tq, Tk) in fp32, for queries at
  query_pos (..., Tq) and keys at key_pos (..., Tk), positions counted from 0 (the leading dims
  let every row have its own positions). Defined for every pair: attention masks the future of
  a causal model and padded keys itself, in place (so bias returns a new tensor, never a
  buffer). None: the method adds no such bias (has_bias False).
- rotary(positions): cos, sin (*positions.shape, head_dim / 2) that rotate queries and keys at
  these positions, or None.
- layer_bias(): a module for each layer whose bias depends on the data (the layer's input, its
  queries and keys): LayerBias below. None: the bias depends on positions only.
- linear_slopes: (heads,) m if the bias is exactly -m_h (i - j) (ALiBi without per-query
  scaling): kernels that compute that bias themselves (FlashAttention-2, FlexAttention, the
  blocked CPU kernel) take it from here. None otherwise.
- elementwise_bias(): the same bias as a function of one (head, query position, key position),
  elementwise on broadcastable integer tensors, fp32: what FlexAttention's score_mod adds
  (kernels/flex.py). Built once per forward, reading the parameters then, so that their gradients
  flow through it. None: not written so (flex then refuses the method).
- constant_beyond(): (window, (heads,) value) if the bias is one constant per head for every
  distance i - j >= window (T5's last bucket), which the blocked kernel uses at evaluation.
- kernels: the attention kernels that can compute this method at all (None: any kernel that takes
  its bias, kernels.takes_bias); a data-dependent bias needs the dense mask ("sdpa",).
- name: the attribute the model registers it under (its checkpoint keys: decoder.<name>.*).
"""
import dataclasses
import math
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor, nn


def per_head(values: Tensor, like: Tensor) -> Tensor:
    """(heads,) -> (heads, 1, ..., 1), to broadcast against `like` (..., Tq, Tk)."""
    return values.view(-1, *([1] * like.dim()))


def signed_distance(query_pos: Tensor, key_pos: Tensor) -> Tensor:
    """(..., Tq, Tk) fp32: i - j, >= 0 for the keys a causal query sees."""
    return query_pos.unsqueeze(-1).float() - key_pos.unsqueeze(-2).float()


def causal_mask(query_len: int, key_len: int, dtype, device) -> Tensor:
    """(1, 1, T, S): 0 where query i (the last T of S positions) may look, -inf on the future (the
    plugin's attention and the exported model's)."""
    future = torch.ones(query_len, key_len, dtype=torch.bool, device=device).triu(key_len - query_len + 1)
    return torch.zeros(query_len, key_len, dtype=dtype, device=device).masked_fill(future, float("-inf"))[None, None]


def fold_padding(mask: Tensor, padding_mask: Tensor) -> Tensor:
    """Mask padded keys too: (batch, heads or 1, T, S)."""
    query_len, key_len = mask.shape[-2:]
    diagonal = torch.eye(key_len, dtype=torch.bool, device=mask.device)[-query_len:]
    # A padded query still attends to itself, so that no row is all -inf (NaN).
    return mask.masked_fill(padding_mask[:, None, None, :] & ~diagonal, float("-inf"))


def heads_first(bias: Tensor) -> Tensor:
    """(..., Tq, Tk, heads) -> (heads, ..., Tq, Tk)."""
    return bias.permute(-1, *range(bias.dim() - 1))


class PositionMethod(nn.Module):
    """The interface's defaults: no bias, no rotation, no data, no kernel shortcuts. Nothing here
    calls anything: attention asks the method, the method never calls back."""

    name = "positions"
    method = ""  # the registry's name (register)
    label = ""  # for tables and messages
    has_bias = True
    linear_slopes: Optional[Tensor] = None
    kernels: Optional[Tuple[str, ...]] = None

    def bias(self, query_pos: Tensor, key_pos: Tensor) -> Optional[Tensor]:
        return None

    def rotary(self, positions: Tensor) -> Optional[Tuple[Tensor, Tensor]]:
        return None

    def elementwise_bias(self) -> Optional[Callable[[Tensor, Tensor, Tensor], Tensor]]:
        return None

    def constant_beyond(self) -> Optional[Tuple[int, Tensor]]:
        return None

    def layer_bias(self) -> Optional["LayerBias"]:
        return None

    def adds_bias(self) -> bool:
        """Whether attention gets anything from it beyond the causal pattern: a bias, or one each layer
        makes from its input (FoX); rotary and NoPE attend as plain causal attention does."""
        return self.has_bias or type(self).layer_bias is not PositionMethod.layer_bias


class LayerBias(nn.Module):
    """A bias computed in each layer from the data (one module per layer; its parameters are the
    layer's: decoder.layers.N.self_attn.layer_bias.*). forward(x, q, k, padding, state) gets the
    layer's attention input x (T, batch, C) of the T new tokens, their queries and all keys
    (batch, heads, T or S, head_dim), the padded keys (batch, S) or None, and what it kept for
    the cached keys in incremental decoding (batch-first, or None); it returns the bias over all S
    keys, (batch, heads, T, S) fp32 (at future keys, which attention masks, anything not NaN or
    +inf: FoX puts -inf there), and what to keep. The caller may add to it in place."""

    def forward(self, x: Tensor, q: Tensor, k: Tensor, padding: Optional[Tensor],
                state: Optional[Tensor]) -> Tuple[Tensor, Optional[Tensor]]:
        raise NotImplementedError

    # key_terms(x, padding, state) -> (terms (batch, heads, S), what to keep): the same bias as a
    # per-key term, bias(i, j) = terms[j] + something constant along query i's row (which softmax
    # ignores), for the separable kernel; a method whose layer bias has it lists "separable" in its
    # kernels. None: not separable.
    key_terms = None


def option(default, help: str, choices: Optional[Tuple] = None, inference_only: bool = False):
    """A method's option: its one default, help, choices; inference_only: set at evaluation
    (--model-overrides), refused at training (commands/cli.py)."""
    metadata = {"help": help, "inference_only": inference_only}
    if choices is not None:
        metadata["choices"] = tuple(choices)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass
class MethodConfig:
    """A method's options (no fields here). Subclasses add fields (option(...)) and build()."""

    def build(self, heads: int, head_dim: int, embed_dim: int) -> PositionMethod:
        raise NotImplementedError

    @classmethod
    def from_args(cls, args) -> "MethodConfig":
        """From a model's arguments (argparse or omegaconf): options a checkpoint predates read
        as their defaults, so that old checkpoints load."""
        return cls(**{f.name: getattr(args, f.name, f.default) for f in dataclasses.fields(cls)})

    @classmethod
    def flags(cls) -> str:
        return "/".join(flag(f.name) for f in dataclasses.fields(cls))

    def check(self):
        """Choices and finiteness of every option, from the fields' declarations."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if "choices" in f.metadata and value not in f.metadata["choices"]:
                raise ValueError(f"unknown {flag(f.name)} {value!r}: use one of {', '.join(f.metadata['choices'])}")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{flag(f.name)} must be a finite number, got {value}")


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_train_length(prefix: str, scaling: str, needs: str, train_length: Optional[int]):
    """The shared check of an inference-time scaling's training length (ALiBi's dynamic_ntk,
    rotary's yarn need it)."""
    if train_length is not None and train_length < 1:
        raise ValueError(f"{prefix}_train_length is the training --tokens-per-sample, a positive integer; "
                         f"got {train_length}")
    if scaling == needs and not train_length:
        raise ValueError(f"{prefix}_scaling {needs} needs {prefix}_train_length, the training "
                         "--tokens-per-sample (scripts/eval.sh sets it from the checkpoint)")


# name -> method class, in registration order (the package imports every file of positions/).
METHODS: Dict[str, type] = {}


def register(method: str, label: str):
    """Class decorator: the method's registry name (`--arch <method>_transformer_lm`,
    scripts/train.sh METHOD) and its label."""

    def add(cls):
        if method in METHODS:
            raise ValueError(f"position method {method!r} registered twice")
        if not (isinstance(cls.__dict__.get("Config"), type) and issubclass(cls.Config, MethodConfig)):
            raise TypeError(f"{cls.__name__} needs a nested Config(MethodConfig) dataclass")
        cls.method, cls.label = method, label
        METHODS[method] = cls
        return cls

    return add


def build_method(method: str, config: MethodConfig, heads: int, head_dim: int, embed_dim: int) -> PositionMethod:
    """The method's module for a layer shape; every check a ValueError: the shared ones (heads),
    the options' declared ones (Config.check), then the method's own (its constructor)."""
    if heads is None or heads < 1:
        raise ValueError(f"{METHODS[method].label} needs at least one attention head, got {heads}")
    config.check()
    return config.build(heads, head_dim, embed_dim)
