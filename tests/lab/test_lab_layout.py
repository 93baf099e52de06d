"""The lab's layout: every module name is used once in the library and the lab (a name says which file it
is), but inside an experiment's own folder (experiments/retrieval/: its claims.py, cli.py), whose folder
says whose they are; a registered method is listed wherever the lab lists methods; the lab's shared
modules import no fairseq; the library's tests import neither the lab nor scripts/; no import loop runs
through a lab module, deferred imports counted; and kinds and stages are given a job and a context,
never the runner or its command line (issue 92's shape, checked by structure, not by line counts)."""
import ast
import collections
import os
import re
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


def lab_imports():
    """{lab module: the lab modules it imports anywhere in its file (deferred imports in functions too),
    and the packages above it (importing a module runs them)}; the declarations package imports every
    module under it (experiments/__init__.py)."""
    names = {}
    for path in modules(("fairseq_alibi_lab",)):
        name = path[:-3].replace("/", ".")
        names[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
    graph = {}
    for name, path in names.items():
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        with open(os.path.join(REPO, path)) as f:
            tree = ast.parse(f.read())
        wanted = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                wanted |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
                wanted |= {base, *(f"{base}.{a.name}" for a in node.names)}
        if name == "fairseq_alibi_lab.experiments":
            wanted |= {other for other in names if other.startswith(name + ".")}
        edges = set()
        for target in wanted:
            while target and target not in names:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.add(target)
        parts = name.split(".")
        edges |= {".".join(parts[:i]) for i in range(2, len(parts)) if ".".join(parts[:i]) in names}
        graph[name] = edges
    return graph


def loops(graph):
    """The strongly connected groups of more than one module (Tarjan's algorithm, written out)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_loop_runs_through_a_lab_module_deferred_imports_counted():
    """The declarations package imports its modules, and they import it back (Python's own package
    order); any other loop (a module the declarations import that imports them again, even inside a
    function) is refused: the module would be half-initialised for whichever side came first."""
    graph = lab_imports()
    assert "fairseq_alibi_lab.experiments" in graph["fairseq_alibi_lab.claims_cli"]  # deferred and top-level imports seen
    outside = [[m for m in group if not m.startswith("fairseq_alibi_lab.experiments")] for group in loops(graph)]
    assert [group for group in outside if group] == []
    # the check sees a loop: one deferred import back from a module the declarations import
    graph["fairseq_alibi_lab.claims"] = graph["fairseq_alibi_lab.claims"] | {"fairseq_alibi_lab.experiments"}
    assert any("fairseq_alibi_lab.claims" in group for group in loops(graph))


def given(function):
    """A stage's or kind's function (a partial's own), its parameter names and its source."""
    import functools
    import inspect

    while isinstance(function, functools.partial):
        function = function.func
    if isinstance(function, (staticmethod, classmethod)):
        function = function.__func__
    if not inspect.isfunction(function) and not inspect.ismethod(function):  # a callable object: its __call__
        function = function.__call__
    return function, set(inspect.signature(function).parameters), inspect.getsource(function)


def test_kinds_and_stages_are_given_a_job_and_a_context_never_the_runner():
    """Every stage an experiment declares (Stages and its Prepared) and every kind's method takes what
    jobs.Context and jobs.Job hold: no parameter is the runner or its command line, and no body reads a
    runner's attributes or the command line's namespace."""
    import dataclasses

    from fairseq_alibi_lab.experiments import EXPERIMENTS
    from fairseq_alibi_lab.kinds import KINDS

    functions = []
    for experiment in EXPERIMENTS.values():
        stages = experiment.stages
        for field in dataclasses.fields(stages):
            value = getattr(stages, field.name)
            if field.name == "prepared" and value:
                functions += [value.path, value.updates, value.make]
            elif callable(value):
                functions.append(value)
        functions += [record for model in experiment.models for record in model.records]
    for kind in KINDS.values():
        functions += [member for name, member in vars(kind).items() if callable(member) and not name.startswith("_")]
    checked = set()
    for function in functions:
        function, parameters, source = given(function)
        where = f"{function.__module__}.{function.__qualname__}"
        assert not parameters & {"runner", "run", "args"}, where
        assert not re.search(r"\b(runner|run)\.\w|\bargs\.(train_flags|data|out|seeds|models|updates)\b", source), where
        checked.add(where)
    assert {"fairseq_alibi_lab.experiments.conversion.teacher.make", "fairseq_alibi_lab.kinds.CausalLM.train_command",
            "fairseq_alibi_lab.experiments.retrieval.score.score_model",
            "fairseq_alibi_lab.experiments.streaming.stages.stream", "fairseq_alibi_lab.learned_slopes.record",
            "fairseq_alibi_lab.experiments.conversion.recovery.Curve.__call__"} <= checked


def test_the_runner_asks_a_job_what_a_model_declares_of_prepared_checkpoints():
    """start, plus, kept_at and shared are resolved once, by jobs.build: the runner reads none of them."""
    with open(os.path.join(REPO, "fairseq_alibi_lab", "runner.py")) as f:
        source = f.read()
    assert re.findall(r"\.(start|plus|kept_at|shared|method)\b", source) == []
    assert "job.needs" in source and "job.trains" in source  # what it asks instead
