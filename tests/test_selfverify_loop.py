"""The self-verification loop (pipeline=selfverify) end to end on a tiny job: every reward mode,
per-round figures, resume after a kill."""

import json
from pathlib import Path

import pytest
import torch

from selfverify.checkpoint import STATE_FILE
from selfverify.loop import main
from selfverify.tracking import read_metrics
from verifiers.generative import FORMAT_VERSION

ROUND_KEYS = {
    "generator_accuracy",
    "verifier_f1",
    "meta_accuracy",
    "meta_parse_rate",
    "verifier_parse_rate",
    "auto_label_agreement",
    "auto_label_discard_rate",
    "reward_hacking_gap",
}


def _run(run_dir: Path, overrides: list[str]) -> dict:
    assert main(["--run-dir", str(run_dir), "--no-progress", *overrides]) == 0
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize(
    "mode", ["outcome", "process", "self_verify", "mix", "process objective=ppo", "process objective=dapo"]
)
def test_every_reward_mode_completes_with_round_figures(tmp_path, tiny_overrides, tiny_loop, mode):
    summary = _run(tmp_path / "run", [*tiny_overrides, *tiny_loop, *f"reward.mode={mode}".split()])
    assert [r["round"] for r in summary["rounds"]] == [0, 1]
    assert set(summary["rounds"][0]) >= ROUND_KEYS
    assert 0.0 <= summary["final_accuracy"] <= 1.0 and "cold_start_accuracy" in summary
    phases = {r["phase"] for r in read_metrics(tmp_path / "run")}
    assert {"sft", "judge_sft", "verifier_rl", "meta_rl", "rl", "round"} <= phases
    assert (tmp_path / "run" / "curves.png").stat().st_size > 10_000
    for role in ("generator", "judge"):
        assert (tmp_path / "run" / "checkpoints" / "latest" / role / "config.json").exists()


def test_killed_loop_resumes_to_the_same_result(tmp_path, tiny_overrides, tiny_loop, kill_midway):
    overrides = [*tiny_overrides, *tiny_loop, "reward.mode=process"]
    _run(tmp_path / "whole", overrides)
    run = tmp_path / "killed"
    # Kill it inside round 0's generator RL.
    kill_midway(run, overrides, lambda m: any(r["phase"] == "rl" for r in m))
    assert not (run / "summary.json").exists()
    _run(run, overrides)
    assert read_metrics(run) == read_metrics(tmp_path / "whole")


def test_a_judge_of_another_analysis_format_is_refused(tmp_path, tiny_overrides, tiny_loop, capsys):
    """Resuming, or starting the rounds from, a loop bundle whose judge writes another analysis format
    stops with the format named instead of training it on misread outputs."""
    cold = tmp_path / "cold"
    _run(cold, [*tiny_overrides, *tiny_loop, "loop.rounds=0"])
    latest = cold / "checkpoints" / "latest"
    state = torch.load(latest / STATE_FILE, weights_only=False)
    assert state["format_version"] == FORMAT_VERSION
    torch.save({**state, "format_version": 3}, latest / STATE_FILE)
    # A one-line error naming the format, not a traceback.
    assert main(["--run-dir", str(tmp_path / "rounds"), "--no-progress", *tiny_overrides, *tiny_loop,
                 f"init_from={latest}"]) == 2  # fmt: skip
    assert "analysis format 3" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "rounds" / "metrics.jsonl").exists()
    # Resuming the run itself.
    assert main(["--run-dir", str(cold), "--no-progress", *tiny_overrides, *tiny_loop, "loop.rounds=0"]) == 2
    assert "analysis format 3" in " ".join(capsys.readouterr().err.split())
