"""Sandwich (Chi et al., ACL 2023, arXiv:2212.10356), parameter-free: head h = 1..H adds

    (sum_{k=1..d/2} cos(|i - j| / 10000^(2k/d)) - d/2) / (8h / H),   d the head dimension

(NeMo 1.x's SandwichRelativePositionEmbedding): 0 at distance 0, negative beyond."""
import dataclasses

import torch

from fairseq_alibi.positions.position_method import MethodConfig, PositionMethod, per_head, register, signed_distance


@register("sandwich", "Sandwich")
class Sandwich(PositionMethod):
    name = "sandwich"

    @dataclasses.dataclass
    class Config(MethodConfig):
        def build(self, heads, head_dim, embed_dim):
            return Sandwich(heads, head_dim)

    def __init__(self, heads: int, head_dim: int):
        super().__init__()
        if head_dim < 2 or head_dim % 2:
            raise ValueError(f"Sandwich sums over d/2 frequencies: the head dimension must be even, got {head_dim}")
        self.heads, self.head_dim = heads, head_dim

    def constants(self, device):
        """(d/2,) frequencies and (heads,) scales 8h / H, in fp32 (computed, not kept as buffers: a
        model cast to fp16 would round them)."""
        k = torch.arange(1, self.head_dim // 2 + 1, device=device, dtype=torch.float64)
        frequencies = (10000.0 ** (-2 * k / self.head_dim)).float()
        return frequencies, 8 * torch.arange(1, self.heads + 1, device=device, dtype=torch.float32) / self.heads

    def bias(self, query_pos, key_pos):
        frequencies, head_scales = self.constants(query_pos.device)
        distance = signed_distance(query_pos, key_pos).abs()
        waves = torch.cos(distance.unsqueeze(-1) * frequencies).sum(-1) - self.head_dim // 2
        return waves[None] / per_head(head_scales, waves)

    def elementwise_bias(self):
        half = self.head_dim // 2

        def sandwich(head, query_pos, key_pos):
            # Each frequency computed from integers here, not captured: torch.compile would make a
            # captured float an input it cannot bind (PyTorch 2.11 on an H100).
            distance = (query_pos - key_pos).abs().float()
            waves = sum(torch.cos(distance * 10000.0 ** (-2 * k / self.head_dim)) for k in range(1, half + 1)) - half
            return waves / ((head + 1) * 8.0 / self.heads)  # 8h / H, h from 1

        return sandwich
