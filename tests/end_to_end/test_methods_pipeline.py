"""Every position method added since the paper trains with scripts/train.sh (fairseq-train with the
plugin) and evaluates past its training length with scripts/eval.sh (fairseq-eval-lm),
nonoverlapping and sliding; rotary's scalings are evaluation options, refused at training."""
import json
import math
import os
import subprocess

import pytest

from conftest import REPO, TOY, run

pytestmark = pytest.mark.slow

# Two methods end to end (CI's time): one with a learned bias and an option of its own, and rotary
# with its scaling. Every method's fairseq registration and build are tested in
# test_position_methods.py; past the build they share one decoder.
METHODS = {"kerple": ["--kerple-variant", "power"], "rotary": []}


def test_every_method_trains_and_evaluates_at_four_times_its_length(wt2_slice, tmp_path):
    out = tmp_path / "results.jsonl"
    for method, flags in METHODS.items():
        save = tmp_path / method
        run(["scripts/train.sh", method, "32", wt2_slice, save, "small", "--", "--max-update", "3",
             "--max-tokens", "1024", *TOY, *flags])
        run(["scripts/eval.sh", save / "checkpoint_last.pt", wt2_slice, out, "32 128", "0 /2"])
    run(["scripts/eval.sh", tmp_path / "rotary" / "checkpoint_last.pt", wt2_slice, out, "128"],
        env=dict(os.environ, SCALING="yarn"))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 * len(METHODS) + 1
    assert {r["model"] for r in rows} == {f"{m}_transformer_lm_small" for m in METHODS}
    assert all(math.isfinite(r["perplexity"]) and r["perplexity"] > 1 for r in rows)
    yarn = rows[-1]
    assert yarn["scaling"] == "yarn" and yarn["scaling_factor"] == 4.0 and yarn["l_valid"] == 128
    plain = next(r for r in rows if r["model"].startswith("rotary") and r["l_valid"] == 128 and r["stride"] == 0)
    assert yarn["perplexity"] != plain["perplexity"]  # the scaling reached the model
    table = run(["python", "scripts/results.py", out, "--out", tmp_path / "tables"])
    for label in ("KERPLE", "Rotary + YaRN"):
        assert label in table


def test_rotary_scaling_is_refused_at_training_and_on_other_models(wt2_slice, tmp_path):
    proc = subprocess.run(["scripts/train.sh", "rotary", "32", wt2_slice, tmp_path / "s", "small", "--",
                           "--rotary-scaling", "yarn"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1 and "--rotary-scaling is for evaluation" in proc.stderr.strip().splitlines()[-1]
    proc = subprocess.run(["scripts/train.sh", "cubic", "32", wt2_slice, tmp_path / "s", "small"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "unknown method 'cubic'" in proc.stderr and "kerple" in proc.stderr
    assert not (tmp_path / "s").exists()
