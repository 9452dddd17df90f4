"""Training engines: DeepSpeed (ZeRO stages 1–3) trains as the torch engine does, in one process and
over two gloo ranks in Ray actors; it resumes its optimizer from a checkpoint, and its checkpoints
are the same Hugging Face directories."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from selfverify.config.schema import BackendConfig, ModelSpec, RLConfig, TrainConfig
from selfverify.loop import main
from selfverify.runtime.backends import RayBackend
from selfverify.runtime.workers import LMWorker, build

TINY_SPEC = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
PROMPTS = ["Q:1+2\n", "Q:5-3-1\n", "Q:7+1\n", "Q:2-9\n", "Q:4+4-3\n"]
TARGETS = ["1+2=3\nA:3", "5-3=2\n2-1=1\nA:1", "7+1=8\nA:8", "2-9=-7\nA:-7", "4+4=8\n8-3=5\nA:5"]
# Five rows over two ranks in micro-batches of two: rank 0 gets [2, 1] rows, rank 1 [1, 1].
RL = RLConfig(micro_batch_size=2, max_new_tokens=8, kl_coef=0.1, epochs=2)  # two passes: π_old is recomputed


def deepspeed(stage: int, ranks: int = 1, offload: bool = False) -> TrainConfig:
    return TrainConfig(engine="deepspeed", zero_stage=stage, ranks=ranks, offload=offload)


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-4 * max(1.0, abs(a), abs(b))


def train_both(a: LMWorker, b: LMWorker) -> None:
    """Two SFT steps and one RL update with a KL penalty on the same data; every figure must agree."""
    for w in (a, b):
        w.start_sft(1e-2, warmup_steps=1, total_steps=4)
    for _ in range(2):
        ma, mb = a.sft_step(PROMPTS, TARGETS), b.sft_step(PROMPTS, TARGETS)
        assert ma.keys() == mb.keys() and all(close(ma[k], mb[k]) for k in ma), (ma, mb)
    rollout = a.generate(PROMPTS, max_new_tokens=RL.max_new_tokens, seed=1)
    assert b.generate(PROMPTS, max_new_tokens=RL.max_new_tokens, seed=1).texts == rollout.texts
    for w in (a, b):
        w.start_rl(1e-3, reference=True)
    (old_a, ref_a, _), (old_b, ref_b, _) = a.rollout_stats(rollout, RL), b.rollout_stats(rollout, RL)
    assert torch.allclose(old_a, old_b, atol=1e-5) and torch.allclose(ref_a, ref_b, atol=1e-5)
    advantages = torch.randn(rollout.response_mask.shape, generator=torch.Generator().manual_seed(0))
    args = {"advantages": advantages, "cfg": RL, "seed": 0}
    ma = a.update(rollout, old_logprobs=old_a, ref_logprobs=ref_a, **args)
    mb = b.update(rollout, old_logprobs=old_a, ref_logprobs=ref_a, **args)
    assert ma.keys() == mb.keys() and all(close(ma[k], mb[k]) for k in ma), (ma, mb)


def same_weights(a: Path, b: Path) -> None:
    wa = AutoModelForCausalLM.from_pretrained(a).state_dict()
    wb = AutoModelForCausalLM.from_pretrained(b).state_dict()
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-5), k


@pytest.mark.parametrize(("stage", "offload"), [(1, False), (2, False), (3, False), (2, True)])
def test_deepspeed_trains_as_torch_in_one_process(tmp_path: Path, stage: int, offload: bool) -> None:
    local, ds = build(TINY_SPEC, seed=0), build(TINY_SPEC, seed=0, train=deepspeed(stage, offload=offload))
    train_both(local, ds)
    local.save(tmp_path / "torch")
    ds.save(tmp_path / "deepspeed")  # inside the phase: ZeRO-3 gathers the partitioned weights
    same_weights(tmp_path / "torch", tmp_path / "deepspeed")
    ds.end_training()  # an ordinary module again, sampling as the torch-trained one does
    local.end_training()
    assert (
        ds.generate(PROMPTS, max_new_tokens=8, seed=2).texts
        == local.generate(PROMPTS, max_new_tokens=8, seed=2).texts
    )


def test_deepspeed_zero3_trains_on_shared_prompts_as_torch_on_the_plain_forward(tmp_path: Path) -> None:
    """rl.share_prompts: the prompt's forward pass serves its group's samples under ZeRO-3's gathered
    weights too; the update equals the torch engine's over the whole sequences."""
    local, ds = build(TINY_SPEC, seed=0), build(TINY_SPEC, seed=0, train=deepspeed(3))
    prompts = [p for p in PROMPTS[:3] for _ in range(3)]
    rollout = local.generate(prompts, max_new_tokens=8, seed=1)
    advantages = torch.randn(rollout.response_mask.shape, generator=torch.Generator().manual_seed(0))
    cfg = dataclasses.replace(RL, micro_batch_size=6, kl_coef=0.0, epochs=1)
    metrics = []
    for w, share in ((local, False), (ds, True)):
        w.start_rl(1e-3)
        args = {"old_logprobs": None, "advantages": advantages, "ref_logprobs": None, "seed": 0}
        metrics.append(w.update(rollout, cfg=dataclasses.replace(cfg, share_prompts=share), **args))
        w.save(tmp_path / ("shared" if share else "plain"))
    plain, shared = metrics
    assert plain["grad_norm"] > 0 and all(close(plain[k], shared[k]) for k in plain), metrics
    same_weights(tmp_path / "plain", tmp_path / "shared")


def test_deepspeed_resumes_its_optimizer_from_a_checkpoint(tmp_path: Path) -> None:
    ds = build(TINY_SPEC, seed=0, train=deepspeed(2))
    ds.start_sft(1e-2, warmup_steps=1, total_steps=4)
    ds.sft_step(PROMPTS, TARGETS)
    ds.save(tmp_path / "ckpt", training=True)
    assert (tmp_path / "ckpt" / "deepspeed").is_dir()
    resumed = build(TINY_SPEC, seed=0, path=tmp_path / "ckpt", train=deepspeed(2))
    resumed.start_sft(1e-2, warmup_steps=1, total_steps=4, resume=True)
    # Adam's moments and the schedule came back: the next step is the uninterrupted run's.
    assert resumed.sft_step(PROMPTS, TARGETS) == pytest.approx(ds.sft_step(PROMPTS, TARGETS), rel=1e-5)


@pytest.mark.parametrize("stage", [1, 3])
def test_two_gloo_ranks_train_as_one_process(tmp_path: Path, stage: int) -> None:
    backend = RayBackend(BackendConfig(name="ray"), threads=1, train=deepspeed(stage, ranks=2))
    try:
        ranks = backend.spawn("generator", TINY_SPEC, seed=0)
        assert len(ranks._actors) == 2
        local = build(TINY_SPEC, seed=0)
        train_both(local, ranks)
        local.save(tmp_path / "torch")
        ranks.save(tmp_path / "ranks")  # rank 0 writes the gathered weights
        same_weights(tmp_path / "torch", tmp_path / "ranks")
    finally:
        backend.shutdown()


def test_the_rl_job_on_two_deepspeed_ranks(tmp_path: Path, tiny_overrides: list[str]) -> None:
    def run(name: str, extra: list[str]) -> list[dict]:
        assert main(["--run-dir", str(tmp_path / name), "--no-progress", *tiny_overrides, *extra]) == 0
        return [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]

    local = run("torch", [])
    ranks = run("ranks", ["backend=ray", "train=deepspeed", "train.zero_stage=2", "train.ranks=2"])
    # The demonstrations do not depend on the model: the cold start's losses agree step by step.
    sft = [(a["loss"], b["loss"]) for a, b in zip(local, ranks, strict=True) if a["phase"] == "sft"]
    assert len(sft) == 6 and all(close(a, b) for a, b in sft)
    assert [m["phase"] for m in ranks] == [m["phase"] for m in local]
    same_weights(
        tmp_path / "torch" / "checkpoints" / "cold_start", tmp_path / "ranks" / "checkpoints" / "cold_start"
    )
