"""Gated attention (Qiu et al., NeurIPS 2025, arXiv:2505.06708; Qwen3-Next): the attention output of
each head times a sigmoid gate of the layer's own input, before the output projection,

    Y'_h = Y_h * sigmoid(X W_h + b_h),

X the layer's attention input (after its pre-norm), query-dependent and head-specific: elementwise (one
gate per output dimension: the paper's best, W (C, heads x head_dim)) or headwise (one per head, W (C,
heads)). Any kernel takes it (it changes the output, not the weights); per token, so a cache needs nothing.
"""
import dataclasses

import torch
from torch import Tensor, nn

from fairseq_alibi.attention_options.option import AttentionOption, OptionConfig, register_option
from fairseq_alibi.positions.position_method import option

GATES = ("none", "elementwise", "headwise")


@register_option
@dataclasses.dataclass
class OutputGateConfig(OptionConfig):
    name = "output_gate"
    flag = "--output-gate"

    output_gate: str = option(
        "none", "a sigmoid gate of the layer's input on each head's attention output (Qiu et al. 2025): "
        "elementwise (one per output dimension) or headwise (one per head)", choices=GATES)

    def enabled(self) -> bool:
        if self.output_gate not in GATES:
            raise ValueError(f"--output-gate {self.output_gate!r}: use one of {', '.join(GATES)}")
        return self.output_gate != "none"

    def build(self, heads: int, head_dim: int, embed_dim: int) -> "OutputGate":
        return OutputGate(self.output_gate, heads, head_dim, embed_dim)


class OutputGate(AttentionOption):
    def __init__(self, kind: str, heads: int, head_dim: int, embed_dim: int):
        super().__init__()
        self.kind, self.heads = str(kind), heads  # a plain string (fairseq passes its choice enum)
        self.proj = nn.Linear(embed_dim, heads * head_dim if kind == "elementwise" else heads)

    def output(self, out: Tensor, x: Tensor) -> Tensor:
        gate = torch.sigmoid(self.proj(x))  # (T, batch, heads x head_dim or heads)
        gate = gate.view(*gate.shape[:2], self.heads, -1).permute(1, 2, 0, 3)  # (batch, heads, T, head_dim or 1)
        return out * gate.to(out.dtype)

    def extra_repr(self) -> str:
        return self.kind
