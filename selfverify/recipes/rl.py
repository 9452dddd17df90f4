"""The RL-only job: cold-start SFT on reference solutions -> on-policy RL (outcome rewards, or the
task's exact step labels as process rewards) -> held-out evaluation.

Reads top to bottom. ``checkpoints/latest`` holds the policy and ``state.json`` (phase, step,
figures) every ``checkpoint_every`` steps, so rerunning the same command resumes where it stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selfverify.config.schema import Config
from selfverify.recipes.evaluate import evaluate_generator
from selfverify.recipes.generator import GeneratorRL, cold_start, problem_source
from selfverify.recipes.rewards import task_rewards
from selfverify.recipes.rl_step import lr_decay_steps, uses_critic
from selfverify.runtime.backends import Backend, make_backend
from selfverify.runtime.checkpoint import read_state, write_state
from selfverify.runtime.models import chat_prompter
from selfverify.runtime.workers import LMWorker
from selfverify.tasks import Task
from selfverify.tasks.base import TaskProblem
from selfverify.tasks.registry import make_task
from selfverify.utils.io import recover, write_atomically
from selfverify.utils.tracking import Tracker


def run(cfg: Config, run_dir: Path, *, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the whole job; returns the summary written to ``summary.json``."""
    run_dir = run_dir.resolve()  # workers in other processes (backend=ray) write checkpoints here
    recover(run_dir / "checkpoints" / "latest")
    backend = make_backend(cfg.backend, cfg.threads, cfg.train, cfg.rollout, roles=("generator",))
    try:
        job = start(cfg, run_dir, backend, time.time(), progress)
        if job.state["phase"] == "sft":
            cold_start_phase(job)
        if job.state["phase"] in ("value_pretrain", "rl"):
            rl_phase(job)
        job.tracker.close()
        job.figures["wall_seconds"] = job.state["wall"] + time.time() - job.clock
        return job.figures
    finally:
        backend.shutdown()


@dataclass
class Job:
    """The job's fixed inputs, its policy worker and ``state`` (phase, step, metrics lines, figures, wall
    seconds before this process): what ``checkpoints/latest`` saves."""

    cfg: Config
    run_dir: Path
    policy: LMWorker
    task: Task
    heldout: list[TaskProblem]
    exclude: set[TaskProblem]  # the held-out problems: never a training prompt
    tracker: Tracker
    state: dict[str, Any]
    clock: float  # when this process started: the wall time not yet in state["wall"]
    progress: bool

    @property
    def ckpt(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def figures(self) -> dict[str, Any]:
        return self.state["figures"]

    def evaluate(self) -> dict[str, float]:
        return evaluate_generator(
            self.policy,
            self.task,
            self.heldout,
            max_new_tokens=self.cfg.rl.max_new_tokens,
            batch_size=self.cfg.eval_batch_size,
        )

    def checkpoint(self, name: str, phase: str, step: int) -> None:
        """Save the policy (and the critic) to ``checkpoints/<name>`` with what a resumed run needs to
        continue from there: the phase, step and figures, and the optimizers of the phase in progress."""
        wall = self.state["wall"] + time.time() - self.clock
        saved = {
            "phase": phase,
            "step": step,
            "lines": self.tracker.count,
            "figures": self.figures,
            "wall": wall,
        }

        def write(tmp: Path) -> None:
            self.policy.save(tmp, training=True)
            write_state(tmp, saved)

        write_atomically(self.ckpt / name, write)


def start(cfg: Config, run_dir: Path, backend: Backend, clock: float, progress: bool) -> Job:
    """The job resumed from ``checkpoints/latest``, or fresh: from the model's initial weights, or from a
    given cold-started policy (``init_from``), which stands in for the cold start's SFT."""
    latest = run_dir / "checkpoints" / "latest"
    if latest.exists():
        state = read_state(latest)
        policy = backend.spawn("generator", cfg.model, cfg.seed, path=latest)
    else:
        state = {"phase": "sft", "step": 0, "lines": 0, "figures": {}, "wall": 0.0}
        policy = backend.spawn("generator", cfg.model, cfg.seed, path=cfg.init_from)
    tracker = Tracker(run_dir, cfg, keep=state["lines"])
    task = make_task(cfg.task, chat_prompter(policy.get_tokenizer(), cfg.model))
    heldout = task.heldout(cfg.task.n_heldout, cfg.seed)
    return Job(cfg, run_dir, policy, task, heldout, set(heldout), tracker, state, clock, progress)


def cold_start_phase(job: Job) -> None:
    """Phase 1: SFT on reference solutions (unless ``init_from`` gave a cold-started policy), then the
    cold start's held-out accuracy."""
    cfg, state = job.cfg, job.state
    if cfg.init_from is None:
        cold_start(
            job.policy,
            cfg,
            job.task,
            job.exclude,
            job.tracker,
            first=state["step"],
            checkpoint=lambda step: job.checkpoint("latest", "sft", step),
            progress=job.progress,
        )
    cold = job.evaluate()
    job.figures["cold_start_accuracy"] = cold["accuracy"]
    job.tracker.log("eval", 0, cold)
    next_phase = "value_pretrain" if uses_critic(cfg.rl) and cfg.rl.value_pretrain_steps > 0 else "rl"
    job.checkpoint("cold_start", next_phase, 0)
    job.checkpoint("latest", next_phase, 0)
    state.update(phase=next_phase, step=0)


def rl_phase(job: Job) -> None:
    """Phase 2: on-policy RL against the outcome or process reward (after VAPO's value pretraining,
    when its preset asks for it), then the final held-out figures."""
    cfg, rl, state, policy = job.cfg, job.cfg.rl, job.state, job.policy
    critic_dir = job.ckpt / "latest" / "critic"
    policy.start_rl(
        rl.lr,
        warmup_steps=rl.warmup_steps,
        total_steps=lr_decay_steps(rl, rl.steps),
        reference=rl.kl_coef > 0,
        reference_path=job.ckpt / "cold_start",
        critic=rl.critic_model if uses_critic(rl) else None,
        critic_path=critic_dir if critic_dir.exists() else None,
        critic_lr=rl.critic_lr,
        grad_clip=rl.grad_clip,
        seed=cfg.seed,
        resume=state["step"] > 0,
    )
    reward_fn = task_rewards(job.task, policy.get_tokenizer(), cfg.reward)
    rl_job = GeneratorRL(
        policy,
        rl,
        reward_fn,
        lambda tag: problem_source(cfg, job.task, job.exclude, tag),
        job.tracker,
        cfg.seed,
        progress=job.progress,
    )
    if state["phase"] == "value_pretrain":
        rl_job.value_pretraining(tag="vp", log_offset=0, first=state["step"], desc="value pretraining")
        state.update(phase="rl", step=0)
    rl_job.steps(
        offset=0,
        steps=rl.steps,
        first=state["step"],
        eval_every=rl.eval_every,
        evaluate=job.evaluate,
        checkpoint=lambda step: job.checkpoint("latest", "rl", step),
        checkpoint_every=cfg.checkpoint_every,
        desc=f"RL ({rl.advantage})",
    )
    final = job.evaluate()
    job.tracker.log("eval", rl.steps, final)
    job.figures["final_accuracy"] = final["accuracy"]
    job.figures["final_valid_solution_rate"] = final["valid_solution_rate"]
    job.figures.update(policy.rollout_engine_stats())  # rollout.engine=vllm: its syncs and their checks
    job.checkpoint("final", "done", rl.steps)
    policy.end_training()
    job.checkpoint("latest", "done", rl.steps)
