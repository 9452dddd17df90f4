"""The RL-only job: cold-start SFT on reference solutions -> on-policy RL (outcome rewards, or the
task's exact step labels as process rewards) -> held-out evaluation.

Reads top to bottom. ``checkpoints/latest`` holds the policy and ``state.json`` (phase, step,
figures) every ``checkpoint_every`` steps, so rerunning the same command resumes where it stopped.
"""

from __future__ import annotations

import time
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
from selfverify.tasks.registry import make_task
from selfverify.utils.io import recover, write_atomically
from selfverify.utils.tracking import Tracker


def run(cfg: Config, run_dir: Path, *, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the whole job; returns the summary written to ``summary.json``."""
    run_dir = run_dir.resolve()  # workers in other processes (backend=ray) write checkpoints here
    recover(run_dir / "checkpoints" / "latest")
    backend = make_backend(cfg.backend, cfg.threads, cfg.train, cfg.rollout, roles=("generator",))
    try:
        return _run(cfg, run_dir, backend, time.time(), progress)
    finally:
        backend.shutdown()


def _run(cfg: Config, run_dir: Path, backend: Backend, t_start: float, progress: bool) -> dict[str, Any]:
    ckpt = run_dir / "checkpoints"
    if (ckpt / "latest").exists():
        state = read_state(ckpt / "latest")
        policy = backend.spawn("generator", cfg.model, cfg.seed, path=ckpt / "latest")
    else:  # a given cold-started policy (init_from) stands in for the cold start's SFT
        state = {"phase": "sft", "step": 0, "lines": 0, "figures": {}, "wall": 0.0}
        policy = backend.spawn("generator", cfg.model, cfg.seed, path=cfg.init_from)
    tok = policy.get_tokenizer()
    tracker = Tracker(run_dir, cfg, keep=state["lines"])
    task = make_task(cfg.task, chat_prompter(tok, cfg.model))
    heldout = task.heldout(cfg.task.n_heldout, cfg.seed)
    exclude = set(heldout)
    figures: dict[str, Any] = state["figures"]

    def evaluate() -> dict[str, float]:
        return evaluate_generator(
            policy, task, heldout, max_new_tokens=cfg.rl.max_new_tokens, batch_size=cfg.eval_batch_size
        )

    def checkpoint(path: Path, phase: str, step: int) -> None:
        """Save the policy (and the critic) with what a resumed run needs to continue from here: the
        phase, step and figures, and the optimizers of the phase in progress."""
        wall = state["wall"] + time.time() - t_start
        saved = {"phase": phase, "step": step, "lines": tracker.count, "figures": figures, "wall": wall}

        def write(tmp: Path) -> None:
            policy.save(tmp, training=True)
            write_state(tmp, saved)

        write_atomically(path, write)

    # Phase 1: cold start (SFT on reference solutions), or a given cold-started policy (init_from).
    if state["phase"] == "sft":
        if cfg.init_from is None:
            cold_start(
                policy,
                cfg,
                task,
                exclude,
                tracker,
                first=state["step"],
                checkpoint=lambda step: checkpoint(ckpt / "latest", "sft", step),
                progress=progress,
            )
        cold = evaluate()
        figures["cold_start_accuracy"] = cold["accuracy"]
        tracker.log("eval", 0, cold)
        next_phase = "value_pretrain" if uses_critic(cfg.rl) and cfg.rl.value_pretrain_steps > 0 else "rl"
        checkpoint(ckpt / "cold_start", next_phase, 0)
        checkpoint(ckpt / "latest", next_phase, 0)
        state.update(phase=next_phase, step=0)

    # Phase 2: on-policy RL against the outcome or process reward (optionally after VAPO's value
    # pretraining).
    rl = cfg.rl
    if state["phase"] in ("value_pretrain", "rl"):
        critic_dir = ckpt / "latest" / "critic"
        policy.start_rl(
            rl.lr,
            warmup_steps=rl.warmup_steps,
            total_steps=lr_decay_steps(rl, rl.steps),
            reference=rl.kl_coef > 0,
            reference_path=ckpt / "cold_start",
            critic=rl.critic_model if uses_critic(rl) else None,
            critic_path=critic_dir if critic_dir.exists() else None,
            critic_lr=rl.critic_lr,
            grad_clip=rl.grad_clip,
            seed=cfg.seed,
            resume=state["step"] > 0,
        )
        reward_fn = task_rewards(task, tok, cfg.reward)

        def source_for(tag: str):
            return problem_source(cfg, task, exclude, tag)

        job = GeneratorRL(policy, rl, reward_fn, source_for, tracker, cfg.seed, progress=progress)
        if state["phase"] == "value_pretrain":
            job.value_pretraining(tag="vp", log_offset=0, first=state["step"], desc="value pretraining")
            state.update(phase="rl", step=0)
        job.steps(
            offset=0,
            steps=rl.steps,
            first=state["step"],
            eval_every=rl.eval_every,
            evaluate=evaluate,
            checkpoint=lambda step: checkpoint(ckpt / "latest", "rl", step),
            checkpoint_every=cfg.checkpoint_every,
            desc=f"RL ({rl.advantage})",
        )
        final = evaluate()
        tracker.log("eval", rl.steps, final)
        figures["final_accuracy"] = final["accuracy"]
        figures["final_valid_solution_rate"] = final["valid_solution_rate"]
        figures |= policy.rollout_engine_stats()  # rollout.engine=vllm: its syncs and their checks
        checkpoint(ckpt / "final", "done", rl.steps)
        policy.end_training()
        checkpoint(ckpt / "latest", "done", rl.steps)
    tracker.close()
    figures["wall_seconds"] = state["wall"] + time.time() - t_start
    return figures
