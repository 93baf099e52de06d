"""The lab's layout: every module name is used once in the library and the lab (a name says which file it
is), but inside an experiment's own folder (experiments/retrieval/: its claims.py, cli.py), whose folder
says whose they are; a registered method is listed wherever the lab lists methods; the lab's shared
modules import no fairseq; and the library's tests import neither the lab nor scripts/."""
import ast
import collections
import os
import subprocess
import sys

from conftest import REPO, modules

PACKAGES = ("fairseq_alibi", "fairseq_alibi_lab")
EXPERIMENTS = "fairseq_alibi_lab/experiments/"


def in_an_experiments_folder(path):
    return path.startswith(EXPERIMENTS) and "/" in path[len(EXPERIMENTS):]


def test_every_module_name_is_used_once():
    by_name = collections.defaultdict(list)
    for path in modules(PACKAGES):
        if not path.endswith("__init__.py") and not in_an_experiments_folder(path):
            by_name[os.path.basename(path)].append(path)
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}
    assert any(in_an_experiments_folder(path) for path in modules(PACKAGES))  # the exception is seen


def test_every_registered_method_is_trained_by_train_sh_and_in_the_comparison():
    """Adding a method is adding a file to positions/: scripts/train.sh and the comparison experiment list it."""
    from fairseq_alibi.positions import METHODS
    from fairseq_alibi_lab.experiments import EXPERIMENTS

    usage = subprocess.run([f"{REPO}/scripts/train.sh", "--help"], capture_output=True, text=True).stdout
    compared = {model.method for model in EXPERIMENTS["comparison"].models}
    for method in METHODS:
        assert method in usage.split("usage:")[-1], method
        assert method in compared, method


def test_the_labs_shared_modules_import_without_fairseq():
    code = ("import sys, fairseq_alibi_lab.recipes, fairseq_alibi_lab.runner, fairseq_alibi_lab.experiments; "
            "assert 'fairseq' not in sys.modules, 'fairseq imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]


def imported_or_run(path):
    """The lab modules a test file imports and the scripts/ it runs (a path in a string)."""
    with open(path) as f:
        tree = ast.parse(f.read())
    found = set()
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found |= {n for n in names if n.split(".")[0] == "fairseq_alibi_lab"}
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("scripts/") and \
                not any(c.isspace() for c in node.value):  # a path, not prose
            found.add(node.value)
        if isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.Constant) and str(v.value).startswith("/scripts/")
                                                   for v in node.values):
            found.add("scripts/ (an f-string)")
    return found


def test_the_librarys_tests_import_neither_the_lab_nor_scripts():
    """tests/library is the library's units: what runs scripts/ or imports the lab is in tests/lab or
    tests/end_to_end."""
    library = os.path.join(REPO, "tests", "library")
    found = {name: imported_or_run(os.path.join(library, name)) for name in sorted(os.listdir(library))
             if name.endswith(".py")}
    assert {name: sorted(what) for name, what in found.items() if what} == {}
    assert imported_or_run(os.path.join(REPO, "tests", "end_to_end", "test_scripts.py"))  # the check sees them
