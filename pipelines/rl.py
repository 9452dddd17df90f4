"""Plain RL recipe: cold-start SFT on reference solutions -> on-policy RL -> held-out evaluation.

Reads top to bottom. Every phase resumes from ``checkpoints/latest`` when the run directory already
holds a run with the same configuration.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from selfverify.checkpoint import load_checkpoint, recover, save_checkpoint
from selfverify.coldstart import demonstrations
from selfverify.config import Config
from selfverify.critic import ValueModel
from selfverify.evaluate import evaluate_generator
from selfverify.models import chat_prompter, load_model, load_pretrained
from selfverify.rewards import outcome_rewards
from selfverify.rl import Learner, rl_step, uses_critic, value_pretrain_step
from selfverify.rollout import encode_by_length
from selfverify.tasks import make_task
from selfverify.tracking import Tracker
from selfverify.trainer import make_optimizer, sft_step


def run(cfg: Config, run_dir: Path, *, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the whole recipe; returns the summary written to ``summary.json``."""
    t_start = time.time()
    ckpt = run_dir / "checkpoints"
    recover(ckpt / "latest")
    if (ckpt / "latest").exists():
        model, tok, state = load_checkpoint(ckpt / "latest", cfg.model)
    else:
        model, tok = load_model(cfg.model, cfg.seed)
        state = {"phase": "sft", "step": 0, "lines": 0, "figures": {}, "wall": 0.0}
    tracker = Tracker(run_dir, cfg, keep=state["lines"])
    task = make_task(cfg.task, chat_prompter(tok, cfg.model))
    heldout = task.heldout(cfg.task.n_heldout, cfg.seed)
    exclude = set(heldout)
    figures: dict[str, Any] = state["figures"]

    def evaluate() -> dict[str, float]:
        return evaluate_generator(
            model, tok, task, heldout, max_new_tokens=cfg.rl.max_new_tokens, batch_size=cfg.eval_batch_size
        )

    def checkpoint(
        path: Path, phase: str, step: int, opt=None, sched=None, learner: Learner | None = None
    ) -> None:
        """Save the policy (and the critic) with what a resumed run needs to continue from here."""
        if learner is not None:
            opt, sched = learner.optimizer, learner.scheduler
        extra = {"optimizer": opt.state_dict(), "scheduler": sched.state_dict()} if opt is not None else {}
        critic = learner.critic if learner is not None else None
        if critic is not None:
            extra["critic_optimizer"] = learner.critic_optimizer.state_dict()
        wall = state["wall"] + time.time() - t_start
        state_dict = {"phase": phase, "step": step, "lines": tracker.count, "figures": figures, "wall": wall}
        save_checkpoint(path, model, tok, state_dict | extra, critic=critic)

    # Phase 1: cold start (SFT on reference solutions), or a given cold-started policy.
    if state["phase"] == "sft":
        if cfg.init_from is not None:
            model, tok = load_pretrained(cfg.init_from, cfg.model)
        else:
            opt, sched = make_optimizer(
                model, cfg.sft.lr, warmup_steps=cfg.sft.warmup_steps, total_steps=cfg.sft.steps
            )
            if "optimizer" in state:
                opt.load_state_dict(state["optimizer"])
                sched.load_state_dict(state["scheduler"])
            bar = tqdm(range(state["step"], cfg.sft.steps), desc="cold start (SFT)", disable=not progress)
            for step in bar:
                batch = encode_by_length(tok, *demonstrations(cfg, task, step, exclude))
                m = sft_step(model, opt, sched, batch)
                tracker.log("sft", step + 1, m)
                bar.set_postfix(loss=f"{m['loss']:.3f}")
                if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.sft.steps:
                    checkpoint(ckpt / "latest", "sft", step + 1, opt, sched)
        cold = evaluate()
        figures["cold_start_accuracy"] = cold["accuracy"]
        tracker.log("eval", 0, cold)
        next_phase = "value_pretrain" if uses_critic(cfg.rl) and cfg.rl.value_pretrain_steps > 0 else "rl"
        checkpoint(ckpt / "cold_start", next_phase, 0)
        checkpoint(ckpt / "latest", next_phase, 0)
        state.update(phase=next_phase, step=0)
        state.pop("optimizer", None)

    # Phase 2: on-policy RL against the outcome reward (optionally after VAPO's value pretraining).
    rl = cfg.rl
    if state["phase"] in ("value_pretrain", "rl"):
        opt, sched = make_optimizer(model, rl.lr, warmup_steps=rl.warmup_steps)
        learner = Learner(model, opt, sched)
        if rl.kl_coef > 0:
            learner.ref, _ = load_pretrained(ckpt / "cold_start", cfg.model)
        if uses_critic(rl):
            critic_dir = ckpt / "latest" / "critic"
            learner.critic = (
                ValueModel.load(critic_dir)
                if critic_dir.exists()
                else ValueModel.from_spec(rl.critic_model, model, cfg.seed)
            )
            learner.critic_optimizer = torch.optim.AdamW(learner.critic.parameters(), lr=rl.critic_lr)
        if "optimizer" in state:
            opt.load_state_dict(state["optimizer"])
            sched.load_state_dict(state["scheduler"])
        if "critic_optimizer" in state:
            learner.critic_optimizer.load_state_dict(state["critic_optimizer"])

        def reward_fn(problems: list, rollout) -> tuple[torch.Tensor, torch.Tensor]:
            rewards = outcome_rewards(
                [task.check(p, t) for p, t in zip(problems, rollout.texts, strict=True)]
            )
            return rewards, rewards > 0

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
                    learner, tok, rl, source_for(f"vp-{step}"), reward_fn, cfg.seed * 1_000_003 + step
                )
                tracker.log("value_pretrain", step + 1, m)
                bar.set_postfix(value_loss=f"{m['value_loss']:.3f}")
            state.update(phase="rl", step=0)
        bar = tqdm(range(state["step"], rl.steps), desc=f"RL ({rl.advantage})", disable=not progress)
        for step in bar:
            m = rl_step(learner, tok, rl, source_for(f"rl-{step}"), reward_fn, cfg.seed * 1_000_003 + step)
            tracker.log("rl", step + 1, m)
            bar.set_postfix(reward=f"{m['reward']:.2f}")
            if (step + 1) % rl.eval_every == 0 and step + 1 < rl.steps:
                tracker.log("eval", step + 1, evaluate())
            if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < rl.steps:
                checkpoint(ckpt / "latest", "rl", step + 1, learner=learner)
        final = evaluate()
        tracker.log("eval", rl.steps, final)
        figures["final_accuracy"] = final["accuracy"]
        figures["final_valid_solution_rate"] = final["valid_solution_rate"]
        checkpoint(ckpt / "final", "done", rl.steps, learner=learner)
        checkpoint(ckpt / "latest", "done", rl.steps)
    tracker.close()
    figures["wall_seconds"] = state["wall"] + time.time() - t_start
    return figures
