"""ALiBi (Press, Smith & Lewis, ICLR 2022): -m_h (i - j), the paper's slopes (alibi.alibi_slopes),
optionally rescaled at inference without retraining (alibi.scale_slopes: linear, ntk statically;
dynamic_ntk per query)."""
import dataclasses
from typing import Optional

import torch

from fairseq_alibi.alibi_bias import SCALINGS, alibi_slopes, check_scaling, dynamic_factors, ntk_exponents, scale_slopes
from fairseq_alibi.positions.position_method import MethodConfig, PositionMethod, check_train_length, option, per_head, register, signed_distance


@register("alibi", "ALiBi")
class Alibi(PositionMethod):
    name = "alibi"

    @dataclasses.dataclass
    class Config(MethodConfig):
        alibi_scaling: str = option(
            "none", "slope scaling at inference, no retraining: linear (all slopes / a), ntk (NTK-ALiBi: "
            "steepest head kept, flattest / a), dynamic_ntk (ntk with a = max(1, factor * tokens so far / "
            "alibi_train_length) per query); at evaluation set it with --model-overrides",
            choices=SCALINGS, inference_only=True)
        alibi_scaling_factor: float = option(
            1.0, "a for linear and ntk (L_valid / L_train extends the training length to L_valid); for "
            "dynamic_ntk, a multiplier of its per-query a")
        alibi_train_length: Optional[int] = option(
            None, "the training --tokens-per-sample, needed by dynamic_ntk", inference_only=True)

        def build(self, heads, head_dim, embed_dim):
            check_train_length("alibi", self.alibi_scaling, "dynamic_ntk", self.alibi_train_length)
            return Alibi(heads, self.alibi_scaling, self.alibi_scaling_factor, self.alibi_train_length)

    def __init__(self, heads: int, scaling: str = Config.alibi_scaling, factor: float = Config.alibi_scaling_factor,
                 train_length: Optional[int] = Config.alibi_train_length):
        super().__init__()
        check_scaling(scaling, factor)
        if scaling == "dynamic_ntk" and not (train_length and train_length >= 1):
            raise ValueError(f"dynamic_ntk slope scaling needs the training length, got {train_length}")
        self.scaling, self.factor, self.train_length = scaling, float(factor), train_length
        slopes = torch.tensor(alibi_slopes(heads), dtype=torch.float32)
        if scaling in ("linear", "ntk"):  # static: the same slopes for every query
            slopes = scale_slopes(slopes, scaling, factor)
        # A buffer so that .to(device) moves it; not persistent: checkpoints stay stock-shaped.
        self.register_buffer("slopes", slopes, persistent=False)

    @property
    def linear_slopes(self):
        return None if self.scaling == "dynamic_ntk" else self.slopes

    def query_slopes(self, query_pos):
        """(heads,) or, under dynamic scaling, (heads, ..., Tq): a per query (alibi.dynamic_factors)."""
        if self.scaling != "dynamic_ntk":
            return self.slopes
        factors = dynamic_factors(query_pos, self.train_length, self.factor)  # (..., Tq)
        return per_head(self.slopes.float(), factors) / factors[None] ** per_head(ntk_exponents(self.slopes), factors)

    def bias(self, query_pos, key_pos):
        distance = -signed_distance(query_pos, key_pos)  # j - i
        slopes = self.query_slopes(query_pos).float()
        slopes = per_head(slopes, distance) if slopes.dim() == 1 else slopes.unsqueeze(-1)
        return slopes * distance  # -m (i - j)

    def elementwise_bias(self):
        if self.scaling == "dynamic_ntk":  # a per query, not written elementwise
            return None
        slopes = self.slopes.float()
        return lambda head, query_pos, key_pos: -slopes[head] * (query_pos - key_pos)
