"""The vLLM rollout engine: vLLM's CPU build, in an environment of its own, really samples; its
rollouts have HF generate's layout and its greedy answers; every weight sync is checked, and a sync
that did not happen is caught; the RL job runs on it.

vLLM's environment: the ``vllm_python`` fixture (conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from selfverify.config.schema import ModelSpec, RolloutConfig
from selfverify.loop import main
from selfverify.runtime.vllm_engine import LOGPROB_TOLERANCE, WeightSyncError
from selfverify.runtime.workers import build

# Head size 32: vLLM's CPU attention has no kernel for the smaller heads of the other tests' models.
SPEC = ModelSpec(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128)
PROMPTS = ["Q:1+2\n", "Q:5-3-1\n", "Q:7+1\n"]


def test_vllm_samples_as_hf_generate_and_every_sync_is_checked(vllm_python: str) -> None:
    served = build(SPEC, seed=0, rollout=RolloutConfig(engine="vllm", vllm_python=vllm_python))
    local = build(SPEC, seed=0)
    try:
        a = served.generate(PROMPTS, max_new_tokens=12, greedy=True)
        b = local.generate(PROMPTS, max_new_tokens=12, greedy=True)
        assert a.texts == b.texts and a.prompt_len == b.prompt_len
        assert torch.equal(a.response_mask, b.response_mask) and torch.equal(a.truncated, b.truncated)
        assert torch.equal(a.input_ids[:, : a.prompt_len], b.input_ids[:, : b.prompt_len])
        sampled = served.generate(PROMPTS * 2, max_new_tokens=12, temperature=1.0, seed=5)
        assert sampled.input_ids.shape[0] == 6 and len(set(sampled.texts)) > 1
        for w in (served, local):  # an update makes vLLM's weights stale: the next call syncs them
            w.start_sft(3e-2, warmup_steps=0, total_steps=2)
            w.sft_step(PROMPTS, ["1+2=3\nA:3", "5-3=2\n2-1=1\nA:1", "7+1=8\nA:8"])
        a = served.generate(PROMPTS, max_new_tokens=12, greedy=True)
        assert a.texts == local.generate(PROMPTS, max_new_tokens=12, greedy=True).texts
        stats = served.rollout_engine_stats()
        assert stats["vllm_weight_syncs"] == 2 and stats["vllm_max_logprob_diff"] <= 1e-3
        assert stats["vllm_logprob_tolerance"] == LOGPROB_TOLERANCE["float32"] == 1e-3

        served.sft_step(PROMPTS, ["1+2=3\nA:3", "5-3=2\n2-1=1\nA:1", "7+1=8\nA:8"])
        served.vllm.stale = False  # a sync that never happened: the check must see it
        with pytest.raises(WeightSyncError, match="did not reach vLLM"):
            served.vllm.check(served.vllm.probe_logprobs(served.model))
    finally:
        served.vllm.close()


def test_a_bfloat16_model_is_checked_at_the_tolerance_of_its_precision(vllm_python: str) -> None:
    """vLLM's bfloat16 kernels round otherwise than the trainer's, so the check's default gap follows
    the precision vLLM serves in; weights that did not arrive still fail it."""
    spec = replace(SPEC, dtype="bfloat16")
    served = build(spec, seed=0, rollout=RolloutConfig(engine="vllm", vllm_python=vllm_python))
    try:
        assert len(served.generate(PROMPTS, max_new_tokens=12, greedy=True).texts) == 3
        stats = served.rollout_engine_stats()
        assert stats["vllm_weight_syncs"] == 1
        assert stats["vllm_logprob_tolerance"] == LOGPROB_TOLERANCE["bfloat16"]
        assert stats["vllm_max_logprob_diff"] <= stats["vllm_logprob_tolerance"]
        with torch.no_grad():  # the trainer's weights move far, and vLLM never receives them
            for p in served.model.parameters():
                p.mul_(4.0)
        with pytest.raises(WeightSyncError, match="did not reach vLLM"):
            served.vllm.check(served.vllm.probe_logprobs(served.model))
    finally:
        served.vllm.close()


def test_the_rl_job_on_vllm_rollouts(tmp_path: Path, tiny_overrides: list[str], vllm_python: str) -> None:
    shape = ["model.hidden_size=64", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=128"]
    args = [*tiny_overrides, *shape, "rollout=vllm", f"rollout.vllm_python={vllm_python}"]

    def run(name: str, extra: list[str]) -> tuple[dict, list[dict]]:
        run = tmp_path / name
        assert main(["--run-dir", str(run), "--no-progress", *args, *extra]) == 0
        summary = json.loads((run / "summary.json").read_text())
        # The cold start's evaluation, then one sync after each of the 4 RL updates (and the evaluations).
        assert summary["vllm_weight_syncs"] >= 5 and summary["vllm_max_logprob_diff"] <= 1e-3
        metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [m["step"] for m in metrics if m["phase"] == "rl"] == [1, 2, 3, 4]
        return summary, metrics

    local, local_metrics = run("local", [])
    # vLLM in a Ray actor, the policy on two ZeRO-3 ranks: rank 0 samples, both gather the weights
    # it syncs and take part in the check's forward.
    zero3 = ["backend=ray", "train=deepspeed", "train.zero_stage=3", "train.ranks=2"]
    ranks, ranks_metrics = run("ranks", zero3)
    assert ranks["vllm_weight_syncs"] == local["vllm_weight_syncs"]
    rewards = [[m["reward"] for m in ms if m["phase"] == "rl"] for ms in (local_metrics, ranks_metrics)]
    assert rewards[0] == rewards[1]  # the same samples: the same seeds on weights within float error


def test_the_gpu_check_runs_its_smoke_mode_on_the_cpu(tmp_path: Path, vllm_python: str) -> None:
    out = tmp_path / "check.json"
    script = Path(__file__).parents[1] / "scripts" / "gpu_check.py"
    args = ["--smoke", "--rollout", "vllm", "--vllm-python", vllm_python, "--train", "deepspeed"]
    args += ["--steps", "2", "--prompts", "2", "--group", "2"]
    subprocess.run([sys.executable, str(script), *args, "--new-tokens", "8", "--out", str(out)], check=True)
    result = json.loads(out.read_text())
    assert result["rollout_tokens_per_s"] > 0 and result["training_tokens_per_s"] > 0
    assert len(result["rl_step_seconds"]) == 2 and result["vllm_max_logprob_diff"] <= 1e-3
    assert result["vllm_weight_syncs"] >= 3  # the start, then after the update and each RL step


def test_the_gpu_check_needs_neither_vllm_nor_deepspeed(tmp_path: Path) -> None:
    """A bare GPU machine has torch and transformers only: HF rollouts and the torch engine."""
    out = tmp_path / "check.json"
    script = Path(__file__).parents[1] / "scripts" / "gpu_check.py"
    args = ["--smoke", "--train", "torch", "--steps", "1", "--prompts", "2", "--group", "2"]
    subprocess.run([sys.executable, str(script), *args, "--new-tokens", "8", "--out", str(out)], check=True)
    result = json.loads(out.read_text())
    assert (result["rollout_engine"], result["train_engine"]) == ("hf", "torch")
    assert result["training_tokens_per_s"] > 0 and len(result["rl_step_seconds"]) == 1
    assert "vllm_weight_syncs" not in result
