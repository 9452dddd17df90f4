"""scripts/bench_trl.py for real: selfverify's RL step and TRL's GRPOTrainer on the same tiny cold-started
model, in one invocation, with selfverify's step profiled by part."""

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import TINY

SCRIPT = Path(__file__).parents[1] / "scripts" / "bench_trl.py"


def test_bench_trl_runs_both_sides_and_profiles_the_step(tmp_path: Path) -> None:
    model = [o for o in TINY if o.startswith(("model.", "sft.", "task.", "threads"))]
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(SCRIPT), "--steps", "2", "--profile", "--out", str(out), *model]
    cmd += ["rl.prompts_per_step=2", "rl.group_size=4", "rl.max_new_tokens=16", "rl.micro_batch_size=8"]
    # As from a shell: a group of one that an earlier test set up leaves RANK and WORLD_SIZE in this
    # process's environment, and accelerate would read them as a launcher's.
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    for side in ("selfverify", "trl"):
        figures = results[side]
        assert len(figures["steps"]) == 2
        assert figures["step_seconds_median"] > 0 and figures["rollout_tokens_per_s"] > 0
        assert figures["training_tokens_per_s"] > 0 and figures["peak_rss_mib"] > 0
        assert 0.0 <= figures["mean_reward"] <= 1.0
        # 2 prompts x 4 samples a step, each response at most 16 tokens
        assert [s["responses"] for s in figures["steps"]] == [8, 8]
        assert 1 <= figures["mean_response_tokens"] <= 16
    ratio = results["ratio"]["step_seconds_median"]
    assert ratio == results["selfverify"]["step_seconds_median"] / results["trl"]["step_seconds_median"]
    # The profile: every part of the step timed, the parts within the step.
    parts = results["selfverify"]["parts_median"]
    for name in ("rl_step/generate", "rl_step/reward", "rl_step/update", "update/forward", "update/backward"):
        assert parts[name] > 0, name
    assert parts["update/backward"] < parts["rl_step/update"] < results["selfverify"]["step_seconds_median"]
    assert "selfverify's RL step by part" in done.stdout
    # The cold start it made for want of --init is an ordinary HF directory, named for reuse.
    assert "pass --init" in done.stderr
    assert list(tmp_path.glob("runs/bench-trl-init-*/checkpoints/cold_start/config.json"))
