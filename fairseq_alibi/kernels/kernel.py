"""What every attention kernel declares, the registry, and the choice of a kernel for an input.
Pure torch, no fairseq import.

A kernel is one object registered under its name (`register(Blocked())`), with:
- installed(): None, or why it can never run here (a library missing): checked at build.
- takes(positions, documents): None if it can add this method's bias (documents: with packed
  documents), else why not. Checked at build for a kernel asked for by name.
- unusable(positions, x, dropout, documents): None if it can run this input, else why not.
- trains_bias(documents): whether the method's learned parameters get their gradient through it
  (a kernel that computes -m (i - j) from slopes it was given does not).
- auto_priority and auto_wants(positions, x, query_len): where auto tries it (lowest first; None:
  never) and whether auto wants it for this input; sdpa is auto's last resort.
- prepare(positions, dtype, documents, query_len): once per forward, what every layer calls
  (.attend(q, k, v, dropout_p)); None: the dense mask (models/attention.py) and PyTorch's SDPA.
- sdpa_computes_the_same: whether sdpa given the dense mask computes what this kernel does, so that
  an input it cannot run may fall back to sdpa; a kernel for which it is False refuses instead.
- scales_bias_per_query: whether its attend takes query_scale, a factor for each query's bias (the
  logit form of a length temperature, length_temperature.py); scaled: a model asks for that.

q, k, v are (batch, heads, T, d), queries bottom-right aligned with keys (the last T of S).
"""
from typing import Dict, Optional

import torch
from torch import Tensor

from fairseq_alibi.checks import warn_once

# auto's rules, by name: the kernels each may not pick. "auto" is the current rule; a rule an earlier
# version of auto followed keeps its name, so that an experiment trained under it can pin it and
# train again digit for digit (auto-no-separable: auto before the separable kernel joined it).
AUTO_RULES = {"auto": (), "auto-no-separable": ("separable",)}

# The longest input that auto leaves to the dense mask on CPU: up to 512 tokens it is faster there
# (benchmarks/attention-cpu.md: evaluation 1.6 against 2.4 ms at 512, 6.6 against 5.3 ms at 1024;
# training 50 against 54 ms at 512, 96 against 76 ms at 1024).
BLOCKED_ABOVE = 512


class Kernel:
    name = ""
    auto_priority: Optional[int] = None
    sdpa_computes_the_same = True
    scales_bias_per_query = False

    def installed(self) -> Optional[str]:
        return None

    def takes(self, positions, documents: bool = False) -> Optional[str]:
        return None

    def unusable(self, positions, x: Tensor, dropout: bool, documents: bool) -> Optional[str]:
        return None

    def trains_bias(self, documents: bool) -> bool:
        return True

    def auto_wants(self, positions, x: Tensor, query_len: int) -> bool:
        return False

    def prepare(self, positions, dtype, documents=None, query_len: int = 0):
        return None


KERNELS: Dict[str, Kernel] = {}


def register(kernel: Kernel) -> Kernel:
    if kernel.name in KERNELS or kernel.name in AUTO_RULES:
        raise ValueError(f"attention kernel {kernel.name!r} registered twice (or named as an auto rule)")
    KERNELS[kernel.name] = kernel
    return kernel


def takes_bias(name: str, positions, documents: bool = False, scaled: bool = False) -> Optional[str]:
    """None if kernel `name` can ever add this method's bias (scaled: times a factor per query), else why
    not (checked at build for a kernel asked for by name; a method may name the only kernels it takes,
    positions.kernels)."""
    if positions.kernels is not None and name not in positions.kernels:
        return (f"{positions.label or 'this method'} takes {' or '.join(positions.kernels)} only "
                "(its bias depends on the data)")
    if scaled and not KERNELS[name].scales_bias_per_query:
        return "it cannot scale the bias per query (--length-temperature-form logit)"
    return KERNELS[name].takes(positions, documents)


def unusable(name: str, positions, x: Tensor, dropout: bool, documents: bool = False,
             scaled: bool = False) -> Optional[str]:
    """None if kernel `name` can run this input (x: the layer input, dropout: attention dropout in
    training, documents: packed documents to keep apart, scaled: the bias times a factor per query),
    else why not."""
    kernel = KERNELS[name]
    why_not = (takes_bias(name, positions, documents, scaled) or kernel.installed()
               or kernel.unusable(positions, x, dropout, documents))
    if why_not is None and torch.is_grad_enabled() and not kernel.trains_bias(documents) and \
            any(p.requires_grad for p in positions.parameters()):
        why_not = "it gives the method's learned parameters no gradient (training)"
    return why_not


def choose_kernel(requested: str, positions, x: Tensor, query_len: int, padding: bool, dropout: bool,
                  documents: bool = False, scaled: bool = False) -> str:
    """The kernel for this input. Padding to fold in needs the dense mask (sdpa). auto (or another
    rule of AUTO_RULES): the first kernel (by auto_priority) the rule allows that wants the input and
    can run it, else sdpa. A kernel asked for
    by name that cannot run this input leaves it to sdpa, which computes the same (every kernel that
    does not, refuses), with one warning: never an error from inside forward (what can never work
    is refused at build)."""
    if requested == "sdpa" or padding:
        return "sdpa"
    if requested in AUTO_RULES:
        ranked = sorted((k for k in KERNELS.values() if k.auto_priority is not None and k.name not in AUTO_RULES[requested]),
                        key=lambda k: k.auto_priority)
        for kernel in ranked:
            if kernel.auto_wants(positions, x, query_len) and \
                    unusable(kernel.name, positions, x, dropout, documents, scaled) is None:
                return kernel.name
        return "sdpa"
    why_not = unusable(requested, positions, x, dropout, documents, scaled)
    if why_not:
        if not KERNELS[requested].sdpa_computes_the_same:
            raise ValueError(f"attention kernel {requested} cannot run here ({why_not}), and sdpa would compute "
                             "something else")
        warn_once(f"attention kernel {requested} cannot run here ({why_not}): using sdpa, which computes "
                  "the same; choose auto to let the model pick")
        return "sdpa"
    return requested


def build_kernel(name: str, positions, dtype, documents=None, query_len: int = 0):
    """What the layers call in place of the dense path, for a kernel chosen by choose_kernel (once
    per forward: query_len, the new queries, is needed with documents only); None for sdpa."""
    return KERNELS[name].prepare(positions, dtype, documents, query_len)
