"""Rotary (RoFormer, GPT-J's interleaved layout; the paper's baseline): queries and keys rotated by
their positions, no bias; scaled at inference by rotary.ROTARY_SCALINGS (linear, ntk, yarn)."""
import dataclasses
import math
from typing import Optional

from fairseq_alibi.rotary_angles import ROTARY_SCALINGS, check_rotary, rotary_angles
from fairseq_alibi.positions.position_method import MethodConfig, PositionMethod, check_train_length, option, register


@register("rotary", "rotary")
class Rotary(PositionMethod):
    name = "rotary"
    has_bias = False

    @dataclasses.dataclass
    class Config(MethodConfig):
        rotary_base: float = option(10000.0, "theta_k = base^(-2k/head_dim)")
        rotary_scaling: str = option(
            "none", "at inference, no retraining: linear (positions / s), ntk (base * s^(d/(d-2))), yarn "
            "(per-frequency ramp and attention temperature 0.1 ln s + 1; needs rotary_train_length); set it "
            "with --model-overrides", choices=ROTARY_SCALINGS, inference_only=True)
        rotary_scaling_factor: float = option(
            1.0, "s >= 1: L_valid / L_train extends the training length to L_valid")
        rotary_train_length: Optional[int] = option(
            None, "the training --tokens-per-sample, needed by yarn", inference_only=True)

        def build(self, heads, head_dim, embed_dim):
            check_train_length("rotary", self.rotary_scaling, "yarn", self.rotary_train_length)
            return Rotary(head_dim, self.rotary_base, self.rotary_scaling, self.rotary_scaling_factor,
                          self.rotary_train_length)

    def __init__(self, head_dim: int, base: float = Config.rotary_base, scaling: str = Config.rotary_scaling,
                 factor: float = Config.rotary_scaling_factor, train_length: Optional[int] = Config.rotary_train_length):
        super().__init__()
        if not (math.isfinite(base) and base > 1):
            raise ValueError(f"the rotary base must be a finite number above 1 (theta_k = base^(-2k/d)), got {base}")
        check_rotary(head_dim, scaling, factor, train_length)
        self.head_dim, self.base = head_dim, base
        self.scaling, self.factor, self.train_length = scaling, float(factor), train_length

    def rotary(self, positions):
        return rotary_angles(positions, self.head_dim, self.base, self.scaling, self.factor, self.train_length)
