"""Every command block of README.md, CONTRIBUTING.md and docs/ names what exists: its scripts and files
in the repository, its `python -m` modules, console scripts, make targets and experiments, and every
checkpoint folder it names is one a run of ours writes (the committed rows name them). Two of the
docs' commands once named checkpoints/main/ALiBi-L64-s1, which the main job never writes. The README's
Python block runs on a toy model (tests/end_to_end/test_pipeline.py); the quick start runs in CI."""
import glob
import importlib.util
import json
import os
import re
import shlex

import pytest

from conftest import REPO

DOCS = ["README.md", "CONTRIBUTING.md", *sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))]
# What a command may run that is the user's, or made by an earlier command of its block, not ours.
USERS = ("path/to/", "imported/", "exported/", "wikitext-103/", "data-bin/", "runs/", "checkpoints/")


def command_blocks():
    """(doc, block index, [command lines]) of every bash block, continuations joined, comments dropped."""
    found = []
    for doc in DOCS:
        text = open(os.path.join(REPO, doc), encoding="utf-8").read()
        for index, block in enumerate(re.findall(r"```bash\n(.*?)```", text, re.S)):
            joined = re.sub(r"\\\n\s*", " ", block)
            lines = []
            inside_quotes = False
            for line in joined.splitlines():
                if inside_quotes:  # a python -c "..." body over several lines
                    inside_quotes = line.count('"') % 2 == 0
                    continue
                if line.count('"') % 2:
                    inside_quotes = True
                lines.append(line)
            found.append((doc, index, lines))
    return found


def words_of(line):
    line = line.split(" #")[0].split("# ")[0] if not line.lstrip().startswith("#") else ""
    try:
        return shlex.split(line)
    except ValueError:  # an open quote of a python -c body: its first line is enough
        return shlex.split(line.split('"')[0])


@pytest.fixture(scope="module")
def ours():
    """(console scripts, make targets, experiments, checkpoint folders the committed rows name)."""
    from fairseq_alibi_lab.experiments import EXPERIMENTS

    from importlib.metadata import entry_points

    scripts = {e.name for e in entry_points(group="console_scripts") if e.name.startswith("fairseq-alibi-")}
    targets = set(re.findall(r"^([\w-]+):", open(os.path.join(REPO, "Makefile")).read(), re.M))
    folders = set()
    for path in glob.glob(os.path.join(REPO, "examples", "**", "*.jsonl"), recursive=True):
        for line in open(path):
            checkpoint = json.loads(line).get("checkpoint") if line.strip() else None
            if isinstance(checkpoint, str) and checkpoint.startswith("checkpoints/"):
                folders.add(os.path.dirname(checkpoint))
    return scripts, targets, set(EXPERIMENTS), folders


@pytest.mark.parametrize("doc, index, lines", command_blocks(), ids=lambda v: v if isinstance(v, str) else None)
def test_every_command_names_what_exists(doc, index, lines, ours):
    scripts, targets, experiments, folders = ours
    for line in lines:
        words = [w for w in words_of(line) if "=" not in w or w.startswith("-")]  # VAR=value prefixes left out
        if not words:
            continue
        head, rest = words[0], words[1:]
        where = f"{doc}, block {index + 1}: {line.strip()}"
        if head in ("python", "python3") and rest[:1] == ["-m"]:
            assert importlib.util.find_spec(rest[1]) is not None, where
        elif head in ("python", "python3") and rest and rest[0].endswith(".py"):
            assert os.path.isfile(os.path.join(REPO, rest[0])), where
            if rest[0] == "scripts/experiment.py" and len(rest) > 1 and not rest[1].startswith("-"):
                assert rest[1] in experiments, where
        elif head.startswith("fairseq-alibi-"):
            assert head in scripts, where
        elif head == "make":
            assert all(t in targets for t in rest if not t.startswith("-")), where
        elif "/" in head and not head.startswith(USERS):
            assert os.access(os.path.join(REPO, head), os.X_OK), where
        for word in words:
            parts = word.split("/")
            if parts[0] == "checkpoints" and len(parts) > 2 and (parts[1] == "main" or parts[1] in experiments):
                # a run of ours: its folder is one that run writes
                assert "/".join(parts[:3]) in folders, f"{where}: {'/'.join(parts[:3])} is not a folder the {parts[1]} run writes"
            if word.startswith(("scripts/", "examples/", "benchmarks/", "fairseq_alibi/", "fairseq_alibi_lab/", "docs/")):
                assert os.path.exists(os.path.join(REPO, word.split(":")[0])), where


@pytest.mark.parametrize("doc", DOCS)
def test_every_python_block_compiles_and_imports_what_exists(doc):
    text = open(os.path.join(REPO, doc), encoding="utf-8").read()
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        compile(block, doc, "exec")
        for module in re.findall(r"^\s*(?:from|import) ([\w.]+)", block, re.M):
            assert importlib.util.find_spec(module) is not None, f"{doc}: {module}"
