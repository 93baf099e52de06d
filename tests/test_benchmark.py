"""The benchmark's smallest configuration runs end to end (a smoke test: no timing assertions)."""
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


def test_benchmark_smoke_measures_every_mode_against_the_baseline():
    proc = subprocess.run([sys.executable, "benchmarks/bench.py", "--smoke"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| ") and "tokens/s" not in line]
    assert len(rows) == 9  # (training, eval, sliding) x (sinusoidal, alibi, fork)
    for what, length, stride, windows, mode, tps, mib, speed, memory in (map(str.strip, r) for r in rows):
        assert float(tps) > 0 and float(mib) > 0, (what, mode)
        assert float(speed) > 0 and float(memory) > 0
        if mode == "sinusoidal":
            assert float(speed) == 1.0 and float(memory) == 1.0
