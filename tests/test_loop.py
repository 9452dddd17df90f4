"""`python -m selfverify.loop` end to end on a tiny job: outputs, determinism, resume, wandb."""

import json
import math
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from selfverify.loop import main
from selfverify.utils.tracking import read_metrics


def _run(run_dir: Path, overrides: list[str]) -> dict:
    assert main(["--run-dir", str(run_dir), "--no-progress", *overrides]) == 0
    return json.loads((run_dir / "summary.json").read_text())


def test_tiny_job_writes_everything(tmp_path, tiny_overrides):
    summary = _run(tmp_path / "run", tiny_overrides)
    run = tmp_path / "run"
    for key in ("cold_start_accuracy", "final_accuracy", "wall_seconds"):
        assert key in summary
    # The summary reports the held-out evaluations the run logged: the first (step 0) and the last.
    evals = [r for r in read_metrics(run) if r["phase"] == "eval"]
    assert evals[0]["step"] == 0 and summary["cold_start_accuracy"] == evals[0]["accuracy"]
    assert summary["final_accuracy"] == evals[-1]["accuracy"]
    assert (run / "config.yaml").read_text().count("hidden_size: 32") == 1
    phases = [r["phase"] for r in read_metrics(run)]
    assert phases.count("sft") == 6 and phases.count("rl") == 4 and phases.count("eval") == 3
    rl = [r for r in read_metrics(run) if r["phase"] == "rl"]
    for key in ("reward", "entropy", "clipfrac_low", "clipfrac_high", "grad_norm", "response_length"):
        assert key in rl[0]
    assert (run / "curves.png").stat().st_size > 10_000
    for name in ("cold_start", "final"):
        model = AutoModelForCausalLM.from_pretrained(run / "checkpoints" / name)
        tok = AutoTokenizer.from_pretrained(run / "checkpoints" / name)
        assert model.config.hidden_size == 32 and tok.eos_token == "<eos>"


def test_tiny_job_with_the_tasks_step_labels_as_process_rewards(tmp_path, tiny_overrides):
    # The rewards themselves: test_rl_step.py::test_rl_pipeline_rewards_outcomes_or_the_tasks_step_labels.
    summary = _run(tmp_path / "run", [*tiny_overrides, "reward.mode=mix"])
    rl = [r for r in read_metrics(tmp_path / "run") if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2, 3, 4] and "final_accuracy" in summary


def test_same_seed_same_metrics(tmp_path, tiny_overrides):
    _run(tmp_path / "a", tiny_overrides)
    _run(tmp_path / "b", tiny_overrides)
    assert read_metrics(tmp_path / "a") == read_metrics(tmp_path / "b")
    _run(tmp_path / "c", [*tiny_overrides, "seed=1"])
    assert read_metrics(tmp_path / "a") != read_metrics(tmp_path / "c")


def test_killed_run_resumes_to_the_same_result(tmp_path, tiny_overrides, kill_midway):
    overrides = [*tiny_overrides, "rl.steps=8", "checkpoint_every=2"]
    _run(tmp_path / "whole", overrides)
    run = tmp_path / "killed"
    # Kill it mid-RL, after at least one RL checkpoint.
    kill_midway(run, overrides, lambda m: sum(r["phase"] == "rl" for r in m) >= 3)
    assert not (run / "summary.json").exists()
    _run(run, overrides)
    assert read_metrics(run) == read_metrics(tmp_path / "whole")


def test_cosine_rl_schedule_decays_to_a_tenth_and_resumes(tmp_path, tiny_overrides, kill_midway):
    overrides = [*tiny_overrides, "rl.steps=8", "checkpoint_every=2", "rl.lr=1e-3", "rl.lr_schedule=cosine"]
    overrides += ["sft.lr=1e-3", "sft.warmup_steps=2"]
    _run(tmp_path / "whole", overrides)
    # Each line logs the learning rate its step used: SFT's warm-up starts at half the rate, and RL's
    # cosine starts at 1e-3 and reaches a tenth of it after step 8.
    metrics = read_metrics(tmp_path / "whole")
    assert [r["lr"] for r in metrics if r["phase"] == "sft"][:2] == pytest.approx([5e-4, 1e-3])
    lrs = [r["lr"] for r in metrics if r["phase"] == "rl"]
    assert lrs == pytest.approx([1e-3 * (0.1 + 0.45 * (1 + math.cos(math.pi * k / 8))) for k in range(8)])
    run = tmp_path / "killed"
    kill_midway(run, overrides, lambda m: sum(r["phase"] == "rl" for r in m) >= 3)
    _run(run, overrides)
    assert read_metrics(run) == read_metrics(tmp_path / "whole")


def test_wandb_offline_logging(tmp_path, tiny_overrides, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    _run(tmp_path / "run", [*tiny_overrides, "wandb.enabled=true", "wandb.mode=offline"])
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb"))[0].stat().st_size > 1000
