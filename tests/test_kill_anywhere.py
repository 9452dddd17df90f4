"""scripts/kill_anywhere.py, the kill-and-resume benchmark: where it kills, and how it reads where a
run would resume (a whole benchmark takes half an hour: docs/results/performance.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from selfverify.runtime.checkpoint import write_state

SCRIPT = Path(__file__).parents[1] / "scripts" / "kill_anywhere.py"
spec = importlib.util.spec_from_file_location("kill_anywhere", SCRIPT)
kill_anywhere = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kill_anywhere)


def test_kill_points_spread_over_every_phase_instance() -> None:
    timeline = [(0.0, "cold_start", 0), (10.0, "judges", 0), (30.0, "verifier", 0), (34.0, "done", -1)]
    points = kill_anywhere.kill_points(timeline, 5)
    assert [p for p, _ in points] == [("cold_start", 0)] * 2 + [("judges", 0)] * 2 + [("verifier", 0)]
    assert [t for _, t in points] == pytest.approx([10 / 3, 20 / 3, 20 / 3, 40 / 3, 2.0])


def test_it_reads_the_phase_a_run_would_resume_at(tmp_path: Path) -> None:
    assert kill_anywhere.checkpoint_phase(tmp_path) is None  # no checkpoint yet
    latest = tmp_path / "checkpoints" / "latest"
    write_state(latest, {"phase": "generator", "round": 1, "step": 20})
    assert kill_anywhere.checkpoint_phase(tmp_path) == ("generator", 1)
