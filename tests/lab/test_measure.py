"""fairseq_alibi_lab/measure.py's lines, and which of them trade_table.measured takes for a training's cost."""
import json
import sys

import pytest

from fairseq_alibi_lab import measure
from fairseq_alibi_lab.trade_table import measured


def test_a_call_records_its_cpu_seconds_beside_its_wall_time(tmp_path):
    out = tmp_path / "resources.jsonl"
    for command in (["sleep", "1.5"], [sys.executable, "-c", "import time; t = time.process_time()\nwhile time.process_time() - t < 1.5: pass"]):
        with pytest.raises(SystemExit) as ended:
            measure.main([str(out), "--", *command])
        assert ended.value.code == 0
    waited, computed = map(json.loads, out.read_text().splitlines())
    assert waited["seconds"] >= 1.5 and waited["cpu_s"] < 0.5  # a call that waits computes next to nothing
    assert computed["cpu_s"] >= 1.5 and computed["seconds"] >= computed["cpu_s"] - 0.2


def lines(save, calls):
    save.mkdir()
    (save / "resources.jsonl").write_text("".join(json.dumps(dict(zip(("exit", "seconds", "cpu_s", "peak_mib"), c))) + "\n"
                                                  for c in calls))
    return str(save / "checkpoint_last.pt")


def test_the_training_is_the_longest_call_that_computed_not_one_that_waited_for_it(tmp_path):
    """A parallel part's call that waited on the run's lock while the continuation's part trained its first stage
    lasts as long (here 0.3 s longer) with the waiting process's memory: not the training. A killed call that trained
    makes the run resumed; a short call that found it finished does not."""
    one = lines(tmp_path / "one", [(0, 2002.2, 1990.0, 810.8), (0, 2002.5, 3.4, 232.3), (0, 3.9, 3.1, 231.4)])
    assert {k: measured(one)[k] for k in ("seconds", "peak_mib", "resumed", "calls")} == {
        "seconds": 2002.2, "peak_mib": 810.8, "resumed": 0, "calls": 3}
    resumed = lines(tmp_path / "resumed", [(-15, 1269.4, 1250.0, 812.5), (0, 1679.2, 1660.0, 834.2), (0, 1680.0, 3.0, 234.1)])
    assert {k: measured(resumed)[k] for k in ("seconds", "peak_mib", "resumed")} == {"seconds": 1679.2, "peak_mib": 834.2, "resumed": 1}
    # Lines written before measure.py recorded CPU seconds: their wall time is all there is (the waiting call taken).
    old = tmp_path / "old"
    old.mkdir()
    (old / "resources.jsonl").write_text("".join(json.dumps({"exit": 0, "seconds": s, "peak_mib": m}) + "\n"
                                                 for s, m in ((2002.2, 810.8), (2002.5, 232.3))))
    legacy = measured(str(old / "checkpoint_last.pt"))
    assert (legacy["peak_mib"], legacy["resumed"]) == (232.3, 1)


def test_a_run_whose_log_shows_it_loading_its_own_last_checkpoint_was_resumed(tmp_path):
    """A call killed with the session writes no line (rotary seed 4 of long-context-recipes: 4,500 updates, then
    one measured call of the last 1,100): fairseq's log beside the checkpoint says the run was resumed. A
    continuation that loaded another run's checkpoint (the curriculum's first stage) was not."""
    one = lines(tmp_path / "rotary-L64-s4", [(0, 636.1, 620.0, 794.6)])
    assert measured(one)["resumed"] == 0
    log = tmp_path / "rotary-L64-s4" / "train.log"
    log.write_text("| INFO | fairseq.trainer | No existing checkpoint found checkpoints/x/rotary-L64-s4/checkpoint_last.pt\n"
                   "| INFO | fairseq.trainer | Loaded checkpoint checkpoints/x/rotary-L64-s4/checkpoint_last.pt (epoch 3 @ 4500 updates)\n")
    assert measured(one)["resumed"] == 1
    continued = lines(tmp_path / "yarn-L256-s4", [(0, 1017.5, 1000.0, 810.8)])
    (tmp_path / "yarn-L256-s4" / "train.log").write_text(
        "| INFO | fairseq.trainer | Loaded checkpoint checkpoints/x/rotary-L64-s4/checkpoint_3_4200.pt (epoch 3 @ 4200 updates)\n")
    assert measured(continued)["resumed"] == 0
