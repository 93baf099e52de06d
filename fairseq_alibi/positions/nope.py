"""NoPE (Kazemnejad et al., NeurIPS 2023, arXiv:2305.19466): no position information at all; the
causal mask alone tells a token what came before it."""
import dataclasses

from fairseq_alibi.positions.position_method import MethodConfig, PositionMethod, register


@register("nope", "NoPE")
class NoPositions(PositionMethod):
    name = "nope"
    has_bias = False

    @dataclasses.dataclass
    class Config(MethodConfig):
        def build(self, heads, head_dim, embed_dim):
            return NoPositions()
