"""fairseq imports scikit-learn and scipy.stats at its top for two components the lab never runs (the
audio_classification task's ROC curve, the sentence_prediction criterion's F1, Matthews and
correlations): about a third of the CPU of `import fairseq` (1.8 of 5.2 s measured here), paid by every
process the runner starts, and most of the test suite's time. In the lab's processes those two modules are
deferred while fairseq imports: fairseq's names for them call the real function on first use, and
once fairseq is imported the modules are absent again, so a later `import scipy.stats` is the real one.
Pure Python; nothing here imports fairseq, sklearn or scipy."""
import contextlib
import importlib
import importlib.abc
import importlib.util
import sys
import types

DEFERRED = ("sklearn", "sklearn.metrics", "scipy.stats")


def deferred_function(module, name):
    """fairseq's handle on MODULE.NAME: the real function, imported at its first call."""
    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{module}.{name}, imported at its first call (fairseq_alibi_lab.fairseq_start)."
    return call


class DeferredModule(types.ModuleType):
    """Stands in for a module while fairseq imports: each name read is its deferred function; a submodule
    named in DEFERRED is set as an attribute by deferred_while_fairseq_imports."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return deferred_function(self.__name__, name)


@contextlib.contextmanager
def deferred_while_fairseq_imports():
    """DEFERRED's modules stand in sys.modules for the block (those not imported already) and are taken
    out after it, with any attribute the block set to one on its parent."""
    placed = {name: DeferredModule(name) for name in DEFERRED if name not in sys.modules}
    for name, module in placed.items():
        parent, _, child = name.rpartition(".")
        if parent in placed:
            setattr(placed[parent], child, module)
    sys.modules.update(placed)
    try:
        yield
    finally:
        for name, module in placed.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
            parent, _, child = name.rpartition(".")
            if parent in sys.modules and getattr(sys.modules[parent], child, None) is module:
                delattr(sys.modules[parent], child)


class FairseqStart(importlib.abc.MetaPathFinder):
    """Found first for "fairseq" (once): its spec from the other finders, its module run with DEFERRED's
    modules deferred. Leaves sys.meta_path as it found it."""

    def find_spec(self, name, path=None, target=None):
        if name != "fairseq":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, run = spec.loader, spec.loader.exec_module

        def exec_module(module):
            try:
                with deferred_while_fairseq_imports():
                    run(module)
            finally:
                del loader.exec_module  # the loader's own method again
        loader.exec_module = exec_module  # this spec's loader only; its class (and resources) unchanged
        return spec


def install():
    """From the lab's __init__: a no-op where fairseq is imported or the finder is in place."""
    if "fairseq" not in sys.modules and not any(isinstance(f, FairseqStart) for f in sys.meta_path):
        sys.meta_path.insert(0, FairseqStart())
