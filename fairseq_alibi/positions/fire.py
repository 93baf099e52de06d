"""FIRE (Li et al., ICLR 2024, arXiv:2310.04418): b(i, j) = f(psi(i - j) / psi(max(L, i))),
psi(x) = log(c |x| + 1), f an MLP 1 -> width -> heads (ReLU), c and the threshold L learned
(L = |multiplier| * init_threshold, the multiplier learned from 1). "Progressive interpolation":
the query's own position normalises its distances, so every distance maps into [0, 1] at any
length past L. As the widely copied module (no official code), with eps 1e-6 in the divisor."""
import dataclasses

import torch
from torch import nn

from fairseq_alibi.positions.position_method import MethodConfig, PositionMethod, heads_first, option, register, signed_distance


@register("fire", "FIRE")
class Fire(PositionMethod):
    name = "fire"
    eps = 1e-6

    @dataclasses.dataclass
    class Config(MethodConfig):
        fire_mlp_width: int = option(32, "hidden width of FIRE's MLP (1 -> width -> heads)")
        fire_init_c: float = option(0.1, "initial c of psi(x) = log(c x + 1), learned")
        fire_init_threshold: float = option(
            512.0, "initial threshold L of the normaliser psi(max(L, i)), learned (as a multiplier of this value)")

        def build(self, heads, head_dim, embed_dim):
            return Fire(heads, self.fire_mlp_width, self.fire_init_c, self.fire_init_threshold)

    def __init__(self, heads: int, width: int = Config.fire_mlp_width, init_c: float = Config.fire_init_c,
                 init_threshold: float = Config.fire_init_threshold):
        super().__init__()
        if width < 1:
            raise ValueError(f"FIRE needs an MLP width of at least 1, got {width}")
        if not (0 < init_c < float("inf") and 0 < init_threshold < float("inf")):
            raise ValueError(f"FIRE's c and threshold must start positive and finite, got {init_c} and {init_threshold}")
        self.mlp = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, heads))
        self.c = nn.Parameter(torch.tensor(float(init_c)))
        self.threshold_multiplier = nn.Parameter(torch.tensor(1.0))
        self.init_threshold = float(init_threshold)

    # Without gradients the MLP runs on chunks of query rows of at most this many (query, key)
    # pairs: its hidden layer (pairs x width) stays small at any length (34 GB at 16384 tokens).
    CHUNK_PAIRS = 2**21

    def bias(self, query_pos, key_pos):
        rows = max(1, self.CHUNK_PAIRS // max(1, key_pos.size(-1)))
        if torch.is_grad_enabled() or query_pos.size(-1) <= rows:
            return self.rows_bias(query_pos, key_pos)
        return torch.cat([self.rows_bias(query_pos[..., start:start + rows], key_pos)
                          for start in range(0, query_pos.size(-1), rows)], dim=-2)

    def rows_bias(self, query_pos, key_pos):
        c = self.c.float()
        threshold = (self.threshold_multiplier.float() * self.init_threshold).abs()
        normaliser = torch.maximum(query_pos.float(), threshold)  # (..., Tq)
        distance = torch.log(torch.abs(c * signed_distance(query_pos, key_pos)) + 1)
        scale = torch.log(torch.abs(c * normaliser) + 1) + self.eps
        weight = self.mlp[0].weight
        out = self.mlp((distance / scale.unsqueeze(-1)).unsqueeze(-1).to(weight.dtype))  # (..., Tq, Tk, heads)
        return heads_first(out).float()

    def elementwise_bias(self):
        """The MLP written out over its hidden units (a score_mod takes elementwise operations only)."""
        c = self.c.float()
        threshold = (self.threshold_multiplier.float() * self.init_threshold).abs()
        w1, b1 = self.mlp[0].weight[:, 0].float(), self.mlp[0].bias.float()
        w2, b2 = self.mlp[2].weight.float(), self.mlp[2].bias.float()
        eps = c.new_tensor(self.eps)  # a tensor: torch.compile cannot bind a captured float (PyTorch 2.11)

        def fire(head, query_pos, key_pos):
            query = query_pos.float()
            distance = torch.log(torch.abs(c * (query - key_pos.float())) + 1)
            x = distance / (torch.log(torch.abs(c * torch.maximum(query, threshold)) + 1) + eps)
            out = b2[head]
            for unit in range(w1.numel()):
                out = out + w2[head, unit] * torch.relu(w1[unit] * x + b1[unit])
            return out

        return fire
