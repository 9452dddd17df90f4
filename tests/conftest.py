import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

from selfverify.utils.tracking import read_metrics

# Tests share two cores; keep torch from oversubscribing them.
torch.set_num_threads(1)
os.environ.setdefault("WANDB_SILENT", "true")
# No hub here: a test that reached for one would fail at once instead of after minutes of retries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Fuzz tests: a fixed seed and budget, so CI runs the same inputs every time and within its time; no
# single input may take more than a second. HYPOTHESIS_PROFILE=explore searches longer, at random.
settings.register_profile(
    "ci", derandomize=True, max_examples=200, deadline=1000, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("explore", max_examples=5000, deadline=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# A tiny but complete job of the RL-only pipeline: every phase runs, in seconds (tiny_loop: the loop).
TINY = [
    "pipeline=rl",
    "reward.mode=outcome",
    "model.hidden_size=32",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "task.n_heldout=16",
    "sft.steps=6",
    "sft.batch_size=8",
    "rl.steps=4",
    "rl.prompts_per_step=2",
    "rl.group_size=4",
    "rl.max_new_tokens=16",
    "rl.eval_every=2",
    "checkpoint_every=2",
    "threads=1",
]


# vLLM's CPU build lives in an environment of its own: $SELFVERIFY_VLLM_PYTHON, else .venv-vllm/bin/python
# (the README's test command creates it).
VLLM_PYTHON = os.environ.get(
    "SELFVERIFY_VLLM_PYTHON", str(Path(__file__).parents[1] / ".venv-vllm/bin/python")
)


@pytest.fixture(scope="session")
def vllm_python() -> str:
    assert Path(VLLM_PYTHON).exists(), (
        f"no vLLM environment at {VLLM_PYTHON}: create it as the README's test command does, or set "
        "SELFVERIFY_VLLM_PYTHON"
    )
    return VLLM_PYTHON


@pytest.fixture
def tiny_overrides() -> list[str]:
    return list(TINY)


@pytest.fixture
def tiny_loop() -> list[str]:
    """pipeline=selfverify at a size that runs in seconds (on top of tiny_overrides)."""
    return [
        "pipeline=selfverify",
        "rl.steps=4",
        "loop.rounds=2",
        "loop.judge_sft_steps=3",
        "loop.judge_sft_batch_size=8",
        "loop.judge_pool=12",
        "loop.judge_val_samples=8",
        "loop.judge_extend_steps=2",
        "loop.judge_max_extends=1",
        "loop.judge_round_extends=0",
        "loop.judge_max_new_tokens=24",
        "loop.verifier_rl_steps=2",
        "loop.meta_rl_steps=2",
        "loop.judge_prompts_per_step=2",
        "loop.judge_group_size=2",
        "loop.scaled_samples=6",
        "loop.scaled_n=2",
        "loop.scaled_m=2",
        "loop.scaled_k=1",
        "loop.auto_sft_steps=2",
        "loop.eval_samples=8",
    ]


def _kill_midway(run_dir: Path, overrides: list[str], ready: Callable[[list[dict]], bool]) -> None:
    """Start a real ``python -m selfverify.loop`` run and SIGKILL it once ``ready(metrics)`` holds."""
    cmd = [sys.executable, "-m", "selfverify.loop", "--run-dir", str(run_dir), "--no-progress", *overrides]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not ready(read_metrics(run_dir)):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.fixture
def kill_midway() -> Callable[[Path, list[str], Callable[[list[dict]], bool]], None]:
    return _kill_midway
