"""Plain RL recipe: cold-start SFT on reference solutions -> on-policy RL (outcome rewards, or the
task's exact step labels as process rewards) -> held-out evaluation.

Reads top to bottom. Every phase resumes from ``checkpoints/latest`` when the run directory already
holds a run with the same configuration.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from selfverify.config.schema import Config, RewardConfig
from selfverify.judges.rewards import mix_step_rewards, outcome_rewards
from selfverify.recipes.coldstart import demonstrations
from selfverify.recipes.evaluate import evaluate_generator
from selfverify.recipes.rl_step import (
    RewardFn,
    Scored,
    lr_decay_steps,
    rl_step,
    step_scored,
    uses_critic,
    value_pretrain_step,
)
from selfverify.runtime.backends import make_backend
from selfverify.runtime.checkpoint import STATE_FILE
from selfverify.runtime.models import chat_prompter
from selfverify.runtime.rollout import Rollout
from selfverify.tasks import Task, make_task
from selfverify.utils.io import recover, write_atomically
from selfverify.utils.seeds import derive_seed
from selfverify.utils.tracking import Tracker


def task_rewards(task: Task, tok: PreTrainedTokenizerBase, reward: RewardConfig) -> RewardFn:
    """The rl pipeline's reward: the outcome (1 for a right final answer), or with ``reward.mode``
    process/mix the task's exact step labels as step rewards (1 for a right step, 0 for a wrong one)."""

    def reward_fn(problems: list, rollout: Rollout) -> Scored:
        checks = [task.check(p, t) for p, t in zip(problems, rollout.texts, strict=True)]
        outcome = outcome_rewards(checks)
        if reward.mode == "outcome":
            return Scored(outcome, outcome > 0)
        step_scores = [[float(ok) for ok in c.step_correct] for c in checks]
        if reward.mode == "mix":
            step_scores = mix_step_rewards(
                step_scores, outcome.tolist(), reward.process_weight, reward.outcome_weight
            )
        return step_scored(tok, rollout, step_scores, outcome > 0)

    return reward_fn


def run(cfg: Config, run_dir: Path, *, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the whole recipe; returns the summary written to ``summary.json``."""
    run_dir = run_dir.resolve()  # workers in other processes (backend=ray) write checkpoints here
    t_start = time.time()
    ckpt = run_dir / "checkpoints"
    recover(ckpt / "latest")
    backend = make_backend(cfg.backend, cfg.threads, cfg.train, cfg.rollout, roles=("generator",))
    try:
        return _run(cfg, run_dir, backend, ckpt, t_start, progress)
    finally:
        backend.shutdown()


def _run(cfg: Config, run_dir: Path, backend, ckpt: Path, t_start: float, progress: bool) -> dict[str, Any]:
    if (ckpt / "latest").exists():
        state = torch.load(ckpt / "latest" / STATE_FILE, weights_only=False)
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
        write_atomically(path, lambda tmp: policy.save(tmp, saved | policy.training_state()))

    # Phase 1: cold start (SFT on reference solutions), or a given cold-started policy (init_from).
    if state["phase"] == "sft":
        if cfg.init_from is None:
            sft = cfg.sft
            resumed = state if "optimizer" in state else None
            policy.start_sft(sft.lr, warmup_steps=sft.warmup_steps, total_steps=sft.steps, state=resumed)
            bar = tqdm(range(state["step"], sft.steps), desc="cold start (SFT)", disable=not progress)
            for step in bar:
                m = policy.sft_step(*demonstrations(cfg, task, step, exclude))
                tracker.log("sft", step + 1, m)
                bar.set_postfix(loss=f"{m['loss']:.3f}")
                if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < sft.steps:
                    checkpoint(ckpt / "latest", "sft", step + 1)
            policy.end_training()
        cold = evaluate()
        figures["cold_start_accuracy"] = cold["accuracy"]
        tracker.log("eval", 0, cold)
        next_phase = "value_pretrain" if uses_critic(cfg.rl) and cfg.rl.value_pretrain_steps > 0 else "rl"
        checkpoint(ckpt / "cold_start", next_phase, 0)
        checkpoint(ckpt / "latest", next_phase, 0)
        state = {k: v for k, v in state.items() if k not in ("optimizer", "scheduler")}
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
            state=state,
        )
        pad_id = tok.pad_token_id

        reward_fn = task_rewards(task, tok, cfg.reward)

        def source_for(tag: str):
            return lambda r: task.train_problems(
                rl.prompts_per_step,
                seed=cfg.seed,
                tag=tag if r == 0 else f"{tag}-r{r}",
                exclude=exclude,
            )

        if state["phase"] == "value_pretrain":
            bar = tqdm(
                range(state["step"], rl.value_pretrain_steps), desc="value pretraining", disable=not progress
            )
            for step in bar:
                m = value_pretrain_step(
                    policy,
                    pad_id,
                    rl,
                    source_for(f"vp-{step}"),
                    reward_fn,
                    derive_seed(cfg.seed, "rl_step", step),
                )
                tracker.log("value_pretrain", step + 1, m)
                bar.set_postfix(value_loss=f"{m['value_loss']:.3f}")
            state.update(phase="rl", step=0)
        bar = tqdm(range(state["step"], rl.steps), desc=f"RL ({rl.advantage})", disable=not progress)
        for step in bar:
            m = rl_step(
                policy,
                pad_id,
                rl,
                source_for(f"rl-{step}"),
                reward_fn,
                derive_seed(cfg.seed, "rl_step", step),
            )
            tracker.log("rl", step + 1, m)
            bar.set_postfix(reward=f"{m['reward']:.2f}")
            if (step + 1) % rl.eval_every == 0 and step + 1 < rl.steps:
                tracker.log("eval", step + 1, evaluate())
            if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < rl.steps:
                checkpoint(ckpt / "latest", "rl", step + 1)
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
