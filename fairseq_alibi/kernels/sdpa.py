"""sdpa: PyTorch's scaled_dot_product_attention with the dense (1 or batch, heads, T, S) mask that
attention.py builds (the method's bias, the causal -inf, padding, documents). Takes any bias and
gives every learned parameter its gradient: the reference every other kernel is tested against,
and auto's last resort."""
from .base import Kernel, register


class Sdpa(Kernel):
    name = "sdpa"


register(Sdpa())
