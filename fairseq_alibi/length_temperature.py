"""A length temperature for any causal method: each query's attention logits multiplied by a factor
that grows with the number of keys it sees (n: its position + 1; with packed documents its place in
its document + 1), as production models do past their training length. Pure torch, no fairseq.

Kinds (--length-temperature):
- logn, at test time (Qwen's LogN): tau(n) = max(1, ln n / ln L), L = --length-temperature-length,
  the training length: 1 up to L, so that a model trained without it is unchanged there.
- ssmax, trained (Scalable-Softmax, Nakanishi 2025, arXiv:2501.19399): tau_h(n) = s_h ln n, one s per
  head and layer, kept positive (s = exp(a), a learned) and starting at 1 / ln L (tau = 1 at L).
Forms (--length-temperature-form), for a method with a bias b(i, j):
- qk: the queries scaled, tau q.k / sqrt(d) + b(i, j): the bias (ALiBi's decay) kept as it is;
- logit: the whole logit, tau (q.k / sqrt(d) + b(i, j)): ALiBi's slopes sharpened by tau.
Without a bias the two are the same. A kernel that adds the bias itself takes the logit form only if it
can scale it per query (Kernel.scales_bias_per_query: sdpa's mask, the separable kernel's columns).
"""
import dataclasses
import math
from typing import Optional

import torch
from torch import Tensor, nn

from fairseq_alibi.positions.position_method import option

KINDS = ("none", "logn", "ssmax")
FORMS = ("qk", "logit")
# logn at test time, as an evaluation's SCALING (scripts/eval.sh) any causal method of the plugin takes:
# its name -> the form; L is the checkpoint's training length.
TEST_TIME = {"logn": "qk", "logn_logit": "logit"}


@dataclasses.dataclass
class TemperatureConfig:
    """The temperature's options (a model's; checked once, in build)."""

    length_temperature: str = option(
        "none", "a length temperature: each query's logits times a factor growing with the keys it sees n: logn "
        "(max(1, ln n / ln L), at test time) or ssmax (s_h ln n, s learned per head and layer)", choices=KINDS)
    length_temperature_form: str = option(
        "qk", "what the length temperature multiplies: qk (the queries: a bias such as ALiBi's kept as it is) or "
        "logit (the whole logit, the bias included)", choices=FORMS)
    length_temperature_length: int = option(
        0, "L of the length temperature: the training length (logn is 1 up to L; ssmax starts at 1 there)")

    @classmethod
    def from_args(cls, args) -> "TemperatureConfig":
        return cls(**{f.name: getattr(args, f.name, f.default) for f in dataclasses.fields(cls)})

    def build(self, heads: int) -> Optional["LengthTemperature"]:
        """One layer's temperature (None without one); a bad option raises ValueError, one line."""
        if self.length_temperature not in KINDS:
            raise ValueError(f"--length-temperature {self.length_temperature!r}: use one of {', '.join(KINDS)}")
        if self.length_temperature_form not in FORMS:
            raise ValueError(f"--length-temperature-form {self.length_temperature_form!r}: use one of {', '.join(FORMS)}")
        if self.length_temperature == "none":
            return None
        if self.length_temperature_length < 2:
            raise ValueError(f"--length-temperature {self.length_temperature} needs --length-temperature-length, the "
                             f"training length L (at least 2), got {self.length_temperature_length}")
        return LengthTemperature(self.length_temperature, self.length_temperature_form, self.length_temperature_length,
                                 heads)


class LengthTemperature(nn.Module):
    """One layer's temperature: forward(keys_seen) -> the factor of each query, (1 or batch, 1 or heads,
    T, 1) fp32, for keys_seen (T,) or (batch, T), each query's count of keys (>= 1)."""

    def __init__(self, kind: str, form: str, length: int, heads: int):
        super().__init__()
        self.kind, self.form, self.length = kind, form, length
        if kind == "ssmax":
            self.log_scale = nn.Parameter(torch.full((heads,), -math.log(math.log(length))))

    def forward(self, keys_seen: Tensor) -> Tensor:
        log_n = keys_seen.float().log()
        rows = log_n if log_n.dim() == 2 else log_n[None]  # (1 or batch, T)
        if self.kind == "logn":
            return (rows / math.log(self.length)).clamp(min=1.0)[:, None, :, None]
        return self.log_scale.float().exp()[None, :, None, None] * rows[:, None, :, None]

    def extra_repr(self) -> str:
        return f"{self.kind}, form {self.form}, L {self.length}"
