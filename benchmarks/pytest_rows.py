"""A pytest plugin for the device script: each test's outcome appended to $PYTEST_ROWS (JSON lines)
the moment it is known, flushed, so that a test run stopped at its limit keeps every outcome it had.

    PYTEST_ROWS=rows.jsonl python -m pytest -p pytest_rows ...   (benchmarks/ on the path)"""
import os
import time

from provenance import append_row

STARTED = time.time()


def pytest_runtest_logreport(report):
    """One row per test: its call's outcome, or the set-up's or tear-down's where that failed or skipped."""
    if report.when == "call" or report.outcome != "passed":
        row = {"step": "tests", "test": report.nodeid, "when": report.when, "outcome": report.outcome,
               "seconds": round(report.duration, 2), "since_start_s": round(time.time() - STARTED, 1)}
        if report.outcome == "failed":
            row["error"] = str(report.longrepr).strip().splitlines()[-1][:300] if report.longrepr else ""
        elif report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            row["reason"] = report.longrepr[-1][:200]
        append_row(os.environ.get("PYTEST_ROWS"), row)
