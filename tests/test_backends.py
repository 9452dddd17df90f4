"""Workers on the Ray backend: real actors in a local Ray cluster run the loop and the RL job to the
same metrics as the local backend; a worker that dies stops the run with a clear message, and the same
command resumes it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import ray
import torch

from selfverify.config.schema import BackendConfig, ModelSpec
from selfverify.loop import main
from selfverify.runtime.backends import BackendError, RayBackend, RemoteWorker, WorkerDied, make_backend
from selfverify.runtime.workers import build

TINY_SPEC = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)


@pytest.fixture
def ray_backend() -> RayBackend:
    backend = RayBackend(BackendConfig(name="ray"), threads=1)
    yield backend
    backend.shutdown()


def test_a_ray_worker_answers_as_the_local_one(ray_backend: RayBackend) -> None:
    remote = ray_backend.spawn("generator", TINY_SPEC, seed=0)
    assert isinstance(remote, RemoteWorker)
    local = build(TINY_SPEC, seed=0)
    prompts = ["Q:1+2\n", "Q:5-3-1\n"]
    a = remote.generate(prompts, max_new_tokens=8, seed=3)
    b = local.generate(prompts, max_new_tokens=8, seed=3)
    assert a.texts == b.texts and torch.equal(a.input_ids, b.input_ids)
    remote.start_sft(1e-2, warmup_steps=0, total_steps=2)
    local.start_sft(1e-2, warmup_steps=0, total_steps=2)
    assert remote.sft_step(prompts, ["A:3", "A:1"]) == local.sft_step(prompts, ["A:3", "A:1"])
    assert remote.get_tokenizer()("Q:1")["input_ids"] == local.tokenizer("Q:1")["input_ids"]
    ctx = ray.get_runtime_context()
    assert ctx.get_node_id()  # a real cluster: this driver is attached to a node


def test_a_ray_worker_keeps_the_model_autocast(ray_backend: RayBackend) -> None:
    """``model.autocast`` reaches the actor's worker: its training step runs in bfloat16 as a local
    worker's does (and unlike one without autocast), so the losses match the local one's exactly."""
    spec = dataclasses.replace(TINY_SPEC, autocast="bfloat16")
    remote = ray_backend.spawn("generator", spec, seed=0)
    local, plain = build(spec, seed=0), build(TINY_SPEC, seed=0)
    prompts, targets = ["Q:1+2\n", "Q:5-3-1\n"], ["A:3", "A:1"]
    for worker in (remote, local, plain):
        worker.start_sft(1e-2, warmup_steps=0, total_steps=2)
    losses = [[w.sft_step(prompts, targets)["loss"] for _ in range(2)] for w in (remote, local, plain)]
    assert losses[0] == losses[1], "the actor's worker trains as the local one with autocast does"
    assert losses[0] != losses[2]  # bfloat16 is measurable: without autocast the losses differ


def test_a_dead_worker_names_itself(ray_backend: RayBackend) -> None:
    remote = ray_backend.spawn("judge", TINY_SPEC, seed=0)
    ray.kill(remote._actors[0])
    with pytest.raises(WorkerDied, match="the judge worker died.*same --run-dir"):
        remote.generate(["Q:1\n"], max_new_tokens=2)


def test_a_backend_spawns_only_the_roles_it_was_made_for() -> None:
    backend = make_backend(BackendConfig(), threads=1, roles=("generator",))
    assert backend.spawn("generator", TINY_SPEC, seed=0).generate(["Q:1\n"], max_new_tokens=2).texts
    with pytest.raises(BackendError, match="the judge worker has no place.*made for generator"):
        backend.spawn("judge", TINY_SPEC, seed=0)
    for roles in ((), ("generator", "generator"), ("critic",)):
        with pytest.raises(ValueError, match="roles must be distinct names"):
            make_backend(BackendConfig(), threads=1, roles=roles)


def _run(name: str, overrides: list[str]) -> list[dict]:
    assert main(["--run-dir", name, "--no-progress", *overrides]) == 0
    return [json.loads(line) for line in (Path(name) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    ("pipeline", "workers"),
    [("rl", ["generator"]), ("selfverify", ["generator", "judge"])],  # the critic lives in the generator
)
def test_ray_runs_a_job_to_the_same_metrics_as_local(
    tmp_path: Path, tiny_overrides: list[str], tiny_loop: list[str], pipeline: str, workers: list, monkeypatch
) -> None:
    """Under Ray the job writes the local backend's metrics, and its placement group holds one bundle
    per worker the job spawns: one for the RL-only job, not one for every role a pipeline may have."""
    monkeypatch.chdir(tmp_path)  # a relative --run-dir: the actors write where the driver reads
    overrides = tiny_overrides + (tiny_loop if pipeline == "selfverify" else [])
    local = _run("local", overrides)
    # A Ray session of the test's own (the backend leaves a caller's running), with room for more
    # bundles than the job needs, so that the table below still lists the job's removed group.
    ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1", configure_logging=False)
    try:
        remote = _run("ray", [*overrides, "backend=ray"])
        groups = list(ray.util.placement_group_table().values())
    finally:
        ray.shutdown()
    assert remote == local and any(m["phase"] == "rl" for m in local)
    assert len(groups) == 1 and groups[0]["state"] == "REMOVED"  # removed at the job's end
    assert list(groups[0]["bundles"].values()) == [{"CPU": 1.0}] * len(workers)
