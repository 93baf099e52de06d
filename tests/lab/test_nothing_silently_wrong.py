"""Issue 67's classes, each as a user met it: the data decides "done", measured fields are the
scorer's, a declared model is what trains, claims count one experiment's runs, and a disk that
refuses (read-only, full) is one line naming the path, with nothing half-written left behind."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, run, snapshot

PYTHON = sys.executable


def one_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


# ---- class 3: the data decides "done" ----

@pytest.mark.slow
def test_a_finished_run_is_not_already_trained_on_other_data(toy_checkpoint, wt2_slice, tmp_path):
    """The toy run, finished on the slice, asked for again with the same flags on a slice whose
    training text differs by one token: refused before anything is written, not "already trained"."""
    save = os.path.dirname(toy_checkpoint)
    other = tmp_path / "other"
    shutil.copytree(wt2_slice, other)
    data = bytearray((other / "train.bin").read_bytes())
    data[100] ^= 1
    (other / "train.bin").write_bytes(bytes(data))
    from conftest import TOY

    command = ["scripts/train.sh", "alibi", "32", None, save, "small", "--", "--max-update", "30", "--max-tokens", "1024", *TOY]
    before = snapshot(save)
    same = subprocess.run([c if c else wt2_slice for c in command], capture_output=True, text=True, cwd=REPO)
    assert same.returncode == 0 and "already trained" in same.stdout, same.stdout + same.stderr
    proc = subprocess.run([c if c else str(other) for c in command], capture_output=True, text=True, cwd=REPO)
    # (on a CPU, train.sh's warning that it trains without a GPU comes first)
    assert proc.returncode != 0 and "other training data" in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert "already trained" not in proc.stdout
    assert snapshot(save) == before


def test_rows_of_a_checkpoint_trained_on_other_data_are_not_this_runs():
    from fairseq_alibi_lab.result_rows import identity_problem

    rows = [{"checkpoint": "c.pt", "train_data_sha256": "aaaa"}, {"checkpoint": "d.pt"}]
    assert "trained on other data" in identity_problem(rows, "c.pt", {"train_data_sha256": "bbbb"}, "out.jsonl")
    assert identity_problem(rows, "c.pt", {"train_data_sha256": "aaaa"}, "out.jsonl") is None
    assert identity_problem(rows, "d.pt", {"train_data_sha256": "bbbb"}, "out.jsonl") is None  # recorded none: not known


def test_retire_run_again_after_a_stop_keeps_the_rows_of_the_checkpoint_here(tmp_path):
    """--retire's command is what a stopped run is continued with (the runner says "run the same command
    again"): the second time, the rows scored on the file now at the path are the new training's and
    stay; only rows of another file (or of a path with no file) move, each once."""
    from fairseq_alibi_lab.result_rows import RETIRED, read_rows, retire

    old, new = ({"checkpoint": "c.pt", "checkpoint_sha256": sha, "l_valid": 64} for sha in ("old0", "new1"))
    unrecorded, other = {"checkpoint": "c.pt", "l_valid": 128}, {"checkpoint": "d.pt", "checkpoint_sha256": "d0"}
    with open(tmp_path / "results.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in (old, new, unrecorded, other))
    assert retire(str(tmp_path), ["results.jsonl"], {"c.pt": "new1"}, "trained again") == (2, 1)
    assert read_rows(str(tmp_path / "results.jsonl")) == [new, other]
    assert read_rows(str(tmp_path / RETIRED)) == [dict(old, retired="trained again"), dict(unrecorded, retired="trained again")]
    assert retire(str(tmp_path), ["results.jsonl"], {"c.pt": "new1"}, "trained again") == (0, 1)  # run again: nothing moves
    assert len(read_rows(str(tmp_path / RETIRED))) == 2
    assert retire(str(tmp_path), ["results.jsonl"], {"c.pt": None, "d.pt": None}, "gone") == (2, 0)  # no file: all of it
    assert read_rows(str(tmp_path / "results.jsonl")) == []

def test_retrieval_refuses_a_plain_corpus_before_any_training(wt2_slice, tmp_path):
    proc = subprocess.run([PYTHON, "scripts/experiment.py", "retrieval", "--data", wt2_slice, "--out", str(tmp_path / "out"),
                           "--checkpoints", str(tmp_path / "checkpoints"), "--models", "alibi", "--seeds", "1"],
                          capture_output=True, text=True, cwd=REPO)
    assert "is not a retrieval set" in proc.stderr.strip().splitlines()[-1] and proc.returncode != 0, proc.stderr[-2000:]
    assert not [f for _, _, names in os.walk(tmp_path / "checkpoints") for f in names]  # nothing trained


@pytest.mark.slow
def test_retrieval_rows_of_other_prompts_and_scalings_a_model_lacks_are_refused(toy_checkpoint, wt2_slice, tmp_path):
    """score() on rows of the same checkpoint scored on other prompts: refused, not reused; a scaling
    the model has no field for (YaRN on ALiBi): refused, not labelled."""
    from fairseq_alibi.tools.files import fingerprint

    tests = tmp_path / "test.jsonl"
    tests.write_text(json.dumps({"task": "passkey", "length": 32, "depth": 0.0, "prompt": " ".join(["the"] * 31), "answer": "the"}) + "\n")
    out = tmp_path / "retrieval.jsonl"
    out.write_text(json.dumps({"checkpoint": toy_checkpoint, "prompts_sha256": "0123456789abcdef", "task": "passkey",
                               "length": 32, "depth": 0.0}) + "\n")
    before = out.read_bytes()
    score = [PYTHON, "-m", "fairseq_alibi_lab.retrieval", "score", toy_checkpoint, wt2_slice, str(tests), str(out)]
    line = one_line(subprocess.run(score, capture_output=True, text=True, cwd=REPO))
    assert "another prompts_sha256" in line and fingerprint(str(tests)) in line
    line = one_line(subprocess.run([*score, "--scalings", "none", "yarn"], capture_output=True, text=True, cwd=REPO))
    assert "SCALING=yarn" in line
    assert out.read_bytes() == before


# ---- class 4: measured fields are the scorer's; NaN is an error ----

def test_fields_may_not_replace_what_a_row_measures():
    from fairseq_alibi_lab.result_rows import row_fields

    assert row_fields('{"experiment": "x", "note": "mine"}') == {"experiment": "x", "note": "mine"}
    for measured in ("perplexity", "sinks", "accuracy", "checkpoint", "prompts_sha256"):
        with pytest.raises(SystemExit, match=f"not replace what they measure: drop {measured}"):
            row_fields(json.dumps({measured: 1}))


@pytest.mark.slow  # subprocesses: the fast suite stays under 3 minutes
@pytest.mark.parametrize("tool", [["-m", "fairseq_alibi_lab.stream_eval", "c.pt", "data", "out.jsonl", "--cache", "8"],
                                  ["-m", "fairseq_alibi_lab.retrieval", "score", "c.pt", "data", "t.jsonl", "out.jsonl"]])
def test_the_scorers_refuse_fields_that_replace_measurements(tool, tmp_path):
    proc = subprocess.run([PYTHON, *tool, "--fields", '{"perplexity": 1.0}'], capture_output=True, text=True, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=REPO))
    assert "drop perplexity" in proc.stderr.strip().splitlines()[-1], proc.stderr[-2000:]


def test_a_nan_score_is_an_error_not_a_row(tmp_path):
    from fairseq_alibi_lab.result_rows import append_lines, read_rows

    out = str(tmp_path / "rows.jsonl")
    append_lines(out, [json.dumps({"label": "NaN in a name is fine", "perplexity": 3.0})])
    for bad in (float("nan"), float("inf")):
        with pytest.raises(SystemExit, match="a score came out"):
            append_lines(out, [json.dumps({"label": "x", "perplexity": bad})])
    assert [r["perplexity"] for r in read_rows(out)] == [3.0]


# ---- class 5: a declared model is what trains ----

@pytest.mark.slow  # subprocesses: the fast suite stays under 3 minutes
@pytest.mark.parametrize("flags, named", [("--kerple-variant power", "--kerple-variant (KERPLE log, KERPLE power)"),
                                          ("--fire-init-threshold=512", "--fire-init-threshold (FIRE)")])
def test_train_flags_may_not_change_a_declared_model(flags, named, tmp_path):
    proc = subprocess.run([PYTHON, "scripts/experiment.py", "comparison", f"--train-flags={flags}", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and named in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert not (tmp_path / "o").exists()


# ---- class 6: claims count one experiment's runs ----

@pytest.mark.slow  # subprocesses: the fast suite stays under 3 minutes
def test_claims_refuse_another_experiments_rows_and_another_run_as_seeds(tmp_path):
    committed = os.path.join(REPO, "examples", "wikitext2", "results")
    proc = subprocess.run([PYTHON, "scripts/claims.py", os.path.join(committed, "trade", "results.jsonl"), "--experiment", "comparison"],
                          capture_output=True, text=True, cwd=REPO)
    assert "holds rows of the trade experiment" in one_line(proc) and "--experiment trade" in proc.stderr
    rows = [json.loads(line) for line in open(os.path.join(committed, "comparison", "results.jsonl"))]
    alibi = next(r for r in rows if r.get("label") == "ALiBi")
    other_run = dict(alibi, seed=4, updates=alibi["updates"] // 2, checkpoint="elsewhere/checkpoint_last.pt")
    mixed = tmp_path / "results.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in [*rows, other_run]))
    proc = subprocess.run([PYTHON, "scripts/claims.py", str(mixed)], capture_output=True, text=True, cwd=REPO)
    assert "rows of 'ALiBi' at" in one_line(proc) and "more seeds" in proc.stderr


# ---- class 7: a disk that refuses is one line, nothing half-written ----

@pytest.fixture(scope="module")
def refusing_disks(tmp_path_factory):
    """(a read-only file system, a 64 KiB one): small tmpfs mounts where the machine allows them."""
    root = tmp_path_factory.mktemp("disks")
    readonly, full = root / "readonly", root / "full"
    readonly.mkdir(), full.mkdir()
    mounted = []
    for where, options in ((readonly, "ro,size=64k"), (full, "size=64k")):
        if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True).returncode:
            break
        mounted.append(where)
    if len(mounted) < 2:
        for where in mounted:
            subprocess.run(["umount", str(where)])
        pytest.skip("no tmpfs mounts on this machine (needs root): the read-only and full disks are not simulated here")
    try:  # full: every write after this one fails
        with open(full / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass
    yield readonly, full
    for where in mounted:
        subprocess.run(["umount", str(where)])


@pytest.mark.slow
def test_every_writer_on_a_read_only_or_full_disk_says_so_in_one_line(refusing_disks, toy_checkpoint, wt2_slice, tmp_path):
    from gpt2_shapes import save_gpt2

    save_gpt2(tmp_path / "hf", tie=True)
    committed = os.path.join(REPO, "examples", "wikitext2", "results", "comparison", "results.jsonl")
    source = os.path.join(REPO, "..", "shared", "data", "wikitext-2")
    for disk in refusing_disks:
        tools = {
            "import": ["-m", "fairseq_alibi.hf.import_gpt2", str(tmp_path / "hf"), f"{disk}/imported"],
            "export": ["-m", "fairseq_alibi.hf.export", toy_checkpoint, f"{disk}/exported"],
            "convert": ["-m", "fairseq_alibi.commands.convert_checkpoint", toy_checkpoint, f"{disk}/converted/alibi.pt"],
            "claims": ["scripts/claims.py", committed, "--out", f"{disk}/claims.md"],
            "results": ["scripts/results.py", committed, "--out", f"{disk}/tables"],
            "retrieval make": ["-m", "fairseq_alibi_lab.retrieval", "make", f"{disk}/retrieval", "--source", source],
            "runner --out": ["scripts/experiment.py", "main", "--data", wt2_slice, "--out", f"{disk}/runs"],
            "runner --checkpoints": ["scripts/experiment.py", "main", "--data", wt2_slice, "--out", str(tmp_path / f"runs-{disk.name}"),
                                     "--checkpoints", f"{disk}/checkpoints", "--train-flags=--max-tokens 512"],
        }
        for name, argv in tools.items():
            proc = subprocess.run([PYTHON, *argv], capture_output=True, text=True, cwd=REPO)
            # the runner and the converter say what they do as they go: their last line is the fault's
            line = proc.stderr.strip().splitlines()[-1] if name.startswith(("runner", "convert")) else one_line(proc)
            assert proc.returncode != 0 and "Traceback" not in proc.stderr, (name, proc.stderr[-3000:])
            assert ("Read-only" in line or "full" in line or "No space" in line), (name, disk, line)
            leftovers = [n for n in os.listdir(disk) if n.endswith(".part") or ".part" in n]
            assert not leftovers, (name, leftovers)


@pytest.mark.slow
def test_fairseq_alibi_train_keeps_and_records_its_dictionary(wt2_slice, tmp_path):
    """A model trained with the plugin's fairseq-train (a stock twin: its config has no dictionary
    field) keeps dict.txt beside it and records it inside: another corpus's dictionary is refused."""
    import torch

    from fairseq_alibi.tools import dictionaries

    save = tmp_path / "save"
    run(["fairseq-alibi-train", wt2_slice, "--task", "language_modeling", "--arch", "transformer_lm", "--decoder-layers", "1",
         "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32", "--decoder-attention-heads", "2",
         "--tokens-per-sample", "16", "--max-tokens", "256", "--max-update", "1", "--optimizer", "adam", "--lr", "0.001",
         "--save-dir", str(save), "--cpu", "--no-progress-bar", "--disable-validation", "--no-epoch-checkpoints"])
    assert (save / "dict.txt").read_bytes() == open(os.path.join(wt2_slice, "dict.txt"), "rb").read()
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state[dictionaries.RECORDED] == dictionaries.dictionary_fingerprint(wt2_slice)
    other = tmp_path / "other"
    other.mkdir()
    (other / "dict.txt").write_text("".join(f"w{i} 1\n" for i in range(len(dictionaries.words(str(save / "dict.txt"))))))
    assert "another dictionary" in dictionaries.check(str(save / "checkpoint_last.pt"), str(other))


def test_retrieval_test_prompts_that_are_missing_broken_or_of_no_asked_length_are_one_line(tmp_path):
    from fairseq_alibi_lab.experiments.retrieval.prompts import read_tests

    good = {"task": "passkey", "length": 64, "depth": 0.0, "prompt": " ".join(["a"] * 63), "answer": "b"}
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    (tmp_path / "other.jsonl").write_text(json.dumps({"rows": 1}) + "\n")
    (tmp_path / "good.jsonl").write_text(json.dumps(good) + "\n")
    for name, message in (("missing.jsonl", "no test prompts at"), ("broken.jsonl", "is not JSON lines"),
                          ("other.jsonl", "holds no test prompts")):
        with pytest.raises(SystemExit, match=message):
            read_tests(str(tmp_path / name))
    assert read_tests(str(tmp_path / "good.jsonl")) == [good]
    proc = subprocess.run([PYTHON, "-m", "fairseq_alibi_lab.retrieval", "score", "c.pt", "data", str(tmp_path / "good.jsonl"),
                           str(tmp_path / "out.jsonl"), "--lengths", "128"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode != 0 and "its lengths are 64" in proc.stderr.strip().splitlines()[-1], proc.stderr[-2000:]


def test_a_torchaudio_for_another_torch_is_named_in_one_line_only_where_transformers_fails_on_it(monkeypatch):
    """What pip install ".[hf]" alone leaves (fairseq pulls the newest torchaudio): transformers 5 does
    not import it for what the tools use, so the tools run (tests/end_to_end/test_install.py); where
    transformers does fail on it, they say so at start in one line."""
    import importlib.metadata
    import sys

    import torch

    from fairseq_alibi.hf import environment_problem

    versions, real = {"torchaudio": "0.1.0", "torch": torch.__version__}, importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: versions[name] if name in versions else real(name))
    assert environment_problem() is None  # transformers imports: nothing to refuse
    monkeypatch.setitem(sys.modules, "transformers.modeling_utils", None)  # its import now fails
    line = environment_problem()
    assert "torchaudio 0.1.0" in line and torch.__version__ in line and "pip uninstall torchaudio" in line
    versions["torchaudio"] = torch.__version__  # built for this torch: never refused
    assert environment_problem() is None
