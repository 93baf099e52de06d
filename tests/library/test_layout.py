"""The library's layers as docs/layout.md says them: the math (the top level and positions/, kernels/,
bidirectional/) imports no fairseq; fairseq is imported in models/ (and by plugin.py, which registers
them), by the commands that run fairseq's own (commands/) or read checkpoints through it (the
converters); tools/ (the pure helpers the commands and the lab share) imports nothing of the fairseq side.
(Module names: tests/lab/test_lab_layout.py, which reads the lab too.)"""
import ast
import os

from conftest import REPO, modules

PACKAGES = ("fairseq_alibi",)
FAIRSEQ_SIDE = ("fairseq_alibi/models/", "fairseq_alibi/plugin.py", "fairseq_alibi/commands/",
                "fairseq_alibi/hf/")  # hf/: the importer and exporter read and write fairseq checkpoints


def imported(path):
    """Every module path's imports name, deferred ones too."""
    with open(os.path.join(REPO, path)) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        yield from ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])


def imports_fairseq(path):
    return any(n == "fairseq" or n.startswith("fairseq.") for n in imported(path))


def test_the_pure_helpers_import_nothing_of_the_fairseq_side():
    """tools/ is what the commands and the lab share: it imports neither fairseq nor the library's models,
    commands, plugin or converters (no arrow back up from the helpers to what uses them)."""
    helpers = [p for p in modules(PACKAGES) if p.startswith("fairseq_alibi/tools/")]
    up = ("fairseq_alibi.models", "fairseq_alibi.commands", "fairseq_alibi.plugin", "fairseq_alibi.hf")
    assert {p: sorted(n for n in imported(p) if n.startswith(up) or n.split(".")[0] == "fairseq") for p in helpers} == \
        {p: [] for p in helpers}
    assert "fairseq_alibi/tools/checkpoints.py" in helpers


def test_only_the_fairseq_side_imports_fairseq():
    library = list(modules(PACKAGES))
    outside = [p for p in library if imports_fairseq(p) and not p.startswith(FAIRSEQ_SIDE)]
    assert outside == [], "fairseq imported outside models/, plugin.py, commands/ and the converters: " + ", ".join(outside)
    assert any(imports_fairseq(p) for p in library if p.startswith("fairseq_alibi/models/"))  # the check sees imports
