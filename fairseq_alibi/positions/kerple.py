"""KERPLE (Chi et al., NeurIPS 2022, arXiv:2205.09921): a conditionally positive definite kernel of
|i - j| with two parameters per head,

    log:   -r1_h log(1 + r2_h |i - j|)        r1, r2 > 0
    power: -r1_h |i - j|^r2_h                 r1 > 0, 0 < r2 <= 2

initialised as the official code (chijames/KERPLE, ParallelKerpleLog/ParallelKerplePower): the
scale-2 draw first (log: r1 ~ U(0, 2), then r2 ~ U(0, 1); power: the exponent r2 ~ U(0, 2), then
r1 ~ U(0, 1)), and, as there, clamped in place to [1e-2, (2)] before each use, so a parameter
pushed out of range by a step comes back to its bound and keeps its gradient. (NeMo's older copy
kept the coefficient as a plain zero tensor: a bias of 0, always.)"""
import dataclasses

import torch
from torch import nn

from fairseq_alibi.positions.position_method import MethodConfig, PositionMethod, option, per_head, register, signed_distance

KERPLE_VARIANTS = ("log", "power")


@register("kerple", "KERPLE")
class Kerple(PositionMethod):
    name = "kerple"
    eps = 1e-2

    @dataclasses.dataclass
    class Config(MethodConfig):
        kerple_variant: str = option("log", "log: -r1 log(1 + r2 |i-j|); power: -r1 |i-j|^r2 (0 < r2 <= 2)",
                                     choices=KERPLE_VARIANTS)

        def build(self, heads, head_dim, embed_dim):
            return Kerple(heads, self.kerple_variant)

    def __init__(self, heads: int, variant: str = Config.kerple_variant):
        super().__init__()
        if variant not in KERPLE_VARIANTS:
            raise ValueError(f"unknown KERPLE variant {variant!r}: use one of {', '.join(KERPLE_VARIANTS)}")
        self.variant = variant
        if variant == "log":
            self.r1 = nn.Parameter(torch.rand(heads) * 2)
            self.r2 = nn.Parameter(torch.rand(heads))
        else:
            self.r2 = nn.Parameter(torch.rand(heads) * 2)
            self.r1 = nn.Parameter(torch.rand(heads))

    def clamp_(self):
        """As the official code, before each use: back to the bounds, keeping the gradient."""
        with torch.no_grad():
            self.r1.clamp_(min=self.eps)
            self.r2.clamp_(min=self.eps, max=2.0 if self.variant == "power" else None)

    def bias(self, query_pos, key_pos):
        self.clamp_()
        distance = signed_distance(query_pos, key_pos).abs()
        r1, r2 = per_head(self.r1.float(), distance), per_head(self.r2.float(), distance)
        if self.variant == "log":
            return -r1 * torch.log1p(r2 * distance)
        return -r1 * distance.pow(r2)

    def elementwise_bias(self):
        self.clamp_()
        r1, r2 = self.r1.float(), self.r2.float()
        if self.variant == "log":
            return lambda head, query_pos, key_pos: -r1[head] * torch.log1p(r2[head] * (query_pos - key_pos).abs().float())
        return lambda head, query_pos, key_pos: -r1[head] * (query_pos - key_pos).abs().float().pow(r2[head])
