"""The benchmark's smallest configuration runs end to end (a smoke test: no timing assertions)."""
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


def test_benchmark_smoke_measures_each_kind_of_mode_against_the_baseline():
    """Each way bench.py builds a model: stock, ALiBi by kernel, the fork's mask, the plugin's
    other methods by name (T5 with its blocked evaluation, KERPLE a method added since), a mode on a
    kernel or auto's rule named (MODE@KERNEL)."""
    modes = ["sinusoidal", "alibi", "alibi_dense", "fork", "t5", "kerple", "learned_alibi@auto-no-separable"]
    proc = subprocess.run([sys.executable, "benchmarks/bench.py", "--smoke", "--modes", *modes], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| ")]
    table = [r for r in rows if len(r) == 9 and "tokens/s" not in r[5]]
    paired = [r for r in rows if len(r) == 3 and "mode" not in r[1]]
    kinds = ["training", "bare forward", "eval, nonoverlapping"]
    assert sorted((r[0].strip(), r[4].strip()) for r in table) == sorted((k, m) for k in kinds for m in modes)
    assert [p[1].strip() for p in paired] == modes
    assert all(float(p[2]) > 0 for p in paired) and float(paired[0][2]) == 1.0
    for what, length, stride, windows, mode, tps, mib, speed, memory in (map(str.strip, r) for r in table):
        assert float(tps) > 0 and float(mib) > 0, (what, mode)
        assert float(speed) > 0 and float(memory) > 0
        if mode == "sinusoidal":
            assert float(speed) == 1.0 and float(memory) == 1.0
    refused = subprocess.run([sys.executable, "benchmarks/bench.py", "--smoke", "--modes", "sinusoidal@separable"], cwd=REPO,
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "a plugin mode @ one of auto, auto-no-separable" in refused.stderr.splitlines()[-1]


def test_fox_bias_benchmark_times_both_ways_on_equal_masks(tmp_path):
    """At 2,048 tokens the bias is made in blocks (positions/fox.py); the script refuses masks that
    differ, so a row is both ways on the same mask."""
    import json

    out = tmp_path / "fox.md"
    proc = subprocess.run([sys.executable, "benchmarks/fox_bias.py", "--lengths", "2048", "--heads", "2", "--rounds", "2",
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.with_suffix(".json").read_text())
    assert [(r["length"], r["part"]) for r in rows] == [(2048, "mask"), (2048, "attention")]
    for r in rows:
        assert len(r["full_rows_s"]) == len(r["blocked_s"]) == 2 and r["speedup"] > 0
    assert "| 2048 | mask + SDPA |" in out.read_text()


def test_littlebird_benchmark_smoke_measures_each_encoder_against_dense():
    proc = subprocess.run([sys.executable, "benchmarks/littlebird.py", "--lengths", "128 256", "--modes", "eval",
                           "--repeats", "1"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in proc.stdout.splitlines() if line.startswith("| ")]
    rows = [r for r in rows if r[0].isdigit()]
    assert sorted((r[0], r[1]) for r in rows) == sorted(
        (t, e) for t in ("128", "256") for e in ("dense BiALiBi", "LittleBird b=64 s=64", "LittleBird b=8 s=8"))
    for length, encoder, tps, mib, speed, memory, growth in rows:
        assert float(tps) > 0 and float(speed) > 0 and float(mib) >= 0
        assert length == "256" or growth == ""  # memory against the same encoder at T/2
        if encoder == "dense BiALiBi":
            assert float(speed) == 1.0 and memory in ("1.00", "")


@pytest.mark.slow
def test_the_device_script_runs_every_step_at_toy_sizes_and_keeps_a_stopped_steps_rows(tmp_path, wt2_slice):
    """benchmarks/device.py --dry-run: the GPU call's steps (the GPU tests, Table 1, the kernels against
    the floor, the backend check, the main job through the runner) at toy sizes on CPU, so that the
    script cannot rot between the rare calls that have a GPU. Its kernels step is stopped at its limit
    mid-way by design (a last length far too long): the rows it measured before are kept, each step's
    time split is in the record, and OUT holds only what the device tool brings back (8 files)."""
    import json
    import subprocess
    import sys

    out = tmp_path / "device"
    done = subprocess.run([sys.executable, "benchmarks/device.py", "--dry-run", "--out", str(out), "--work",
                           str(tmp_path / "work"), "--data", wt2_slice], capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]  # the kernels step was stopped
    record = json.loads((out / "device.json").read_text())
    assert list(record["steps"]) == ["tests", "table1", "kernels", "backends", "main"]  # in order of value
    assert {name: step["status"] for name, step in record["steps"].items()} == {
        "tests": 0, "table1": 0, "kernels": "stopped", "backends": 0, "main": 0}, done.stdout[-3000:]
    steps = json.dumps(record["steps"])
    assert str(tmp_path) not in steps and REPO not in steps  # the provenance's paths are OUT's, WORK's, the repository's
    kernels = [json.loads(line) for line in (out / "rows-kernels.jsonl").read_text().splitlines()]
    assert {r["length"] for r in kernels} >= {16} and 8192 not in {r["length"] for r in kernels}
    assert {"warmup_s", "timed_s", "speed"} <= set(kernels[0]) and record["steps"]["kernels"]["rows"].startswith(
        f"{len(kernels)} rows; ")
    assert "import" in record["steps"]["table1"]["rows"] and "warmup" in record["steps"]["table1"]["rows"]
    tests = [json.loads(line) for line in (out / "rows-tests.jsonl").read_text().splitlines()]
    assert tests and {r["outcome"] for r in tests} == {"skipped"}  # no GPU here: test_gpu.py skips, each said
    main = [json.loads(line) for line in (out / "rows-main.jsonl").read_text().splitlines()]
    assert {r["label"] for r in main} >= {"ALiBi", "Unigram (add-one)"}
    log = (out / "device.log").read_text()
    assert "== kernels: stopped after" in log and "table1 | " in log
    assert len([p for p in out.rglob("*") if p.is_file()]) <= 8


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc, where no folder can be made")
def test_the_device_script_on_a_disk_it_cannot_write_is_one_line():
    """Its OUT on a read-only disk once ended in a traceback (a lent GPU's minutes spent on it)."""
    done = subprocess.run([sys.executable, "benchmarks/device.py", "--dry-run", "--out", "/proc/self/fairseq-alibi-device"],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "error: cannot use /proc/self/fairseq-alibi-device (No such file or directory): give another path"], done.stderr
