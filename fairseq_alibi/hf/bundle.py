"""The exported model's one self-contained modeling file, as Hugging Face's remote code wants it
(transformers copies only flat relative imports beside a modeling file): the position math of
this package (slopes.py, alibi_bias.py, rotary_angles.py, t5_buckets.py, positions/, attention_options/) and
hf/modeling_fairseq_alibi.py, in
that order, each without its imports of this package. Nothing is rewritten by hand: the exported
model runs the same source the plugin runs."""
import ast
import inspect
import os

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELING = os.path.join(PACKAGE, "hf", "modeling_fairseq_alibi.py")
FILE_NAME = os.path.basename(MODELING)


def sources():
    """The files to bundle, dependencies first: the math modules, positions/position_method.py, the length
    temperature, each
    registered method's file, attention_options/option.py and each registered option's file, then the model."""
    from fairseq_alibi.attention_options import OPTIONS
    from fairseq_alibi.positions import METHODS

    methods = []
    for cls in METHODS.values():
        path = inspect.getsourcefile(cls)
        if path not in methods:
            methods.append(path)
    math = [os.path.join(PACKAGE, name) for name in ("slopes.py", "alibi_bias.py", "rotary_angles.py", "t5_buckets.py")]
    options = sorted({inspect.getsourcefile(config) for config in OPTIONS.values()})
    return [*math, os.path.join(PACKAGE, "positions", "position_method.py"), os.path.join(PACKAGE, "length_temperature.py"),
            *methods,
            os.path.join(PACKAGE, "attention_options", "option.py"), *options, MODELING]


def own_imports(tree):
    """The line ranges (1-based, inclusive) of the module's imports of this package (relative or
    by name), and of its docstring."""
    spans = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("fairseq_alibi")):
            spans.append((node.lineno, node.end_lineno))
        elif isinstance(node, ast.Import) and any(a.name.startswith("fairseq_alibi") for a in node.names):
            spans.append((node.lineno, node.end_lineno))
    if ast.get_docstring(tree) is not None:  # a docstring line may read like an import to transformers' check
        spans.append((tree.body[0].lineno, tree.body[0].end_lineno))
    return spans


def defined_names(tree):
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def bundled_source() -> str:
    """The modeling file's text. A name defined in two of the bundled files would silently take
    the later one's meaning: refused (a RuntimeError: a bug of this package, not of its user)."""
    parts, owner = [], {}
    for path in sources():
        text = open(path, encoding="utf-8").read()
        tree = ast.parse(text)
        relative = os.path.relpath(path, os.path.dirname(PACKAGE))
        for name in defined_names(tree) - {"__all__"}:
            if name in owner:
                raise RuntimeError(f"{name} is defined in both {owner[name]} and {relative}: rename one to bundle them")
            owner[name] = relative
        dropped = {line for start, end in own_imports(tree) for line in range(start, end + 1)}
        lines = [line for number, line in enumerate(text.splitlines(), 1) if number not in dropped]
        parts.append(f"# ---- {relative} ----\n" + "\n".join(lines).strip("\n") + "\n")
    header = ('"""A causal LM exported by fairseq-alibi (fairseq-alibi-export-hf): the position math of\n'
              "fairseq_alibi and its Hugging Face model, in one file (needs torch and transformers only).\"\"\"\n")
    return header + "\n\n".join(parts)
