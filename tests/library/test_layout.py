"""The library's layers as docs/layout.md says them: the math (the top level and positions/, kernels/,
bidirectional/) imports no fairseq; fairseq is imported in models/ (and by plugin.py, which registers
them), by the tools that run fairseq's own (tools/cli.py) or read checkpoints through it (the
converters). (Module names: tests/lab/test_lab_layout.py, which reads the lab too.)"""
import ast
import os

from conftest import REPO, modules

PACKAGES = ("fairseq_alibi",)
FAIRSEQ_SIDE = ("fairseq_alibi/models/", "fairseq_alibi/plugin.py", "fairseq_alibi/tools/cli.py",
                "fairseq_alibi/tools/convert_checkpoint.py",
                "fairseq_alibi/hf/")  # hf/: the importer and exporter read and write fairseq checkpoints


def imports_fairseq(path):
    with open(os.path.join(REPO, path)) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        if any(n == "fairseq" or n.startswith("fairseq.") for n in names):
            return True
    return False


def test_only_the_fairseq_side_imports_fairseq():
    library = list(modules(PACKAGES))
    outside = [p for p in library if imports_fairseq(p) and not p.startswith(FAIRSEQ_SIDE)]
    assert outside == [], "fairseq imported outside models/, plugin.py, tools/cli.py and the converters: " + ", ".join(outside)
    assert any(imports_fairseq(p) for p in library if p.startswith("fairseq_alibi/models/"))  # the check sees imports
