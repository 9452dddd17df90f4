"""Plain RL recipe: cold-start SFT on reference solutions -> on-policy RL -> held-out evaluation.

Reads top to bottom. Every phase resumes from ``checkpoints/latest`` when the run directory already
holds a run with the same configuration.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from selfverify.algos import get_advantage_estimator, kl_penalty, masked_sum, zero_variance_fraction
from selfverify.checkpoint import load_checkpoint, recover, save_checkpoint
from selfverify.config import Config
from selfverify.evaluate import evaluate_generator
from selfverify.models import build_char_tokenizer, build_model, load_pretrained
from selfverify.rewards import outcome_rewards
from selfverify.rollout import encode_pairs, response_logprobs, sample
from selfverify.tasks import check_solution, heldout_split, train_problems
from selfverify.tracking import Tracker
from selfverify.trainer import make_optimizer, policy_update, sft_step


def run(cfg: Config, run_dir: Path, *, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the whole recipe; returns the summary written to ``summary.json``."""
    t_start = time.time()
    ckpt = run_dir / "checkpoints"
    recover(ckpt / "latest")
    if (ckpt / "latest").exists():
        model, tok, state = load_checkpoint(ckpt / "latest")
    else:
        tok = build_char_tokenizer()
        model = build_model(cfg.model, tok, cfg.seed)
        state = {"phase": "sft", "step": 0, "lines": 0, "figures": {}, "wall": 0.0}
    tracker = Tracker(run_dir, cfg, keep=state["lines"])
    heldout = heldout_split(cfg.task, cfg.task.n_heldout, cfg.seed)
    exclude = set(heldout)
    figures: dict[str, Any] = state["figures"]

    def evaluate() -> dict[str, float]:
        return evaluate_generator(
            model, tok, heldout, max_new_tokens=cfg.rl.max_new_tokens, batch_size=cfg.eval_batch_size
        )

    def checkpoint(path: Path, phase: str, step: int, opt=None, sched=None) -> None:
        extra = {"optimizer": opt.state_dict(), "scheduler": sched.state_dict()} if opt is not None else {}
        wall = state["wall"] + time.time() - t_start
        save_checkpoint(
            path,
            model,
            tok,
            {"phase": phase, "step": step, "lines": tracker.count, "figures": figures, "wall": wall, **extra},
        )

    # Phase 1: cold start (SFT on reference solutions).
    if state["phase"] == "sft":
        opt, sched = make_optimizer(
            model, cfg.sft.lr, warmup_steps=cfg.sft.warmup_steps, total_steps=cfg.sft.steps
        )
        if "optimizer" in state:
            opt.load_state_dict(state["optimizer"])
            sched.load_state_dict(state["scheduler"])
        bar = tqdm(range(state["step"], cfg.sft.steps), desc="cold start (SFT)", disable=not progress)
        for step in bar:
            problems = train_problems(
                cfg.task, cfg.sft.batch_size, seed=cfg.seed, tag=f"sft-{step}", exclude=exclude
            )
            style = random.Random(f"{cfg.seed}-sft-style-{step}")
            demos = [
                p.direct_solution()
                if style.random() < cfg.sft.direct_answer_fraction
                else p.reference_solution()
                for p in problems
            ]
            batch = encode_pairs(tok, [p.prompt for p in problems], demos)
            m = sft_step(model, opt, sched, batch)
            tracker.log("sft", step + 1, m)
            bar.set_postfix(loss=f"{m['loss']:.3f}")
            if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.sft.steps:
                checkpoint(ckpt / "latest", "sft", step + 1, opt, sched)
        cold = evaluate()
        figures["cold_start_accuracy"] = cold["accuracy"]
        tracker.log("eval", 0, cold)
        checkpoint(ckpt / "cold_start", "rl", 0)
        checkpoint(ckpt / "latest", "rl", 0)
        state.update(phase="rl", step=0)
        state.pop("optimizer", None)

    # Phase 2: on-policy RL against the outcome reward.
    rl = cfg.rl
    if state["phase"] == "rl":
        opt, sched = make_optimizer(model, rl.lr, warmup_steps=rl.warmup_steps)
        if "optimizer" in state:
            opt.load_state_dict(state["optimizer"])
            sched.load_state_dict(state["scheduler"])
        ref = None
        if rl.kl_coef > 0:
            ref, _ = load_pretrained(ckpt / "cold_start")
            ref.eval()
        estimator = get_advantage_estimator(rl.advantage)
        group_ids = torch.arange(rl.prompts_per_step).repeat_interleave(rl.group_size)
        bar = tqdm(range(state["step"], rl.steps), desc="RL (" + rl.advantage + ")", disable=not progress)
        for step in bar:
            step_seed = cfg.seed * 1_000_003 + step
            problems = train_problems(
                cfg.task, rl.prompts_per_step, seed=cfg.seed, tag=f"rl-{step}", exclude=exclude
            )
            expanded = [p for p in problems for _ in range(rl.group_size)]
            rollout = sample(
                model,
                tok,
                [p.prompt for p in expanded],
                max_new_tokens=rl.max_new_tokens,
                temperature=rl.temperature,
                seed=step_seed,
            )
            checks = [check_solution(p, t) for p, t in zip(expanded, rollout.texts, strict=True)]
            rewards = outcome_rewards(checks)
            with torch.no_grad():
                old_lp = response_logprobs(model, rollout, rl.temperature)
                ref_lp = response_logprobs(ref, rollout, rl.temperature) if ref is not None else None
            scores = rewards
            if ref_lp is not None and rl.kl_in_reward:
                scores = rewards - rl.kl_coef * masked_sum(
                    kl_penalty(old_lp, ref_lp, rl.kl_kind), rollout.response_mask, dim=-1
                )
            advantages, _ = estimator(scores=scores, response_mask=rollout.response_mask, group_ids=group_ids)
            m = policy_update(
                model,
                opt,
                sched,
                rollout,
                old_logprobs=old_lp,
                advantages=advantages,
                ref_logprobs=ref_lp,
                cfg=rl,
                seed=step_seed,
            )
            m |= {
                "reward": rewards.mean().item(),
                "step_valid_rate": sum(c.all_steps_valid for c in checks) / len(checks),
                "zero_variance_groups": zero_variance_fraction(scores, group_ids),
                "response_length": rollout.lengths.mean().item(),
                "truncation_rate": rollout.truncated.float().mean().item(),
            }
            tracker.log("rl", step + 1, m)
            bar.set_postfix(reward=f"{m['reward']:.2f}")
            if (step + 1) % rl.eval_every == 0 and step + 1 < rl.steps:
                tracker.log("eval", step + 1, evaluate())
            if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < rl.steps:
                checkpoint(ckpt / "latest", "rl", step + 1, opt, sched)
        final = evaluate()
        tracker.log("eval", rl.steps, final)
        figures["final_accuracy"] = final["accuracy"]
        figures["final_valid_solution_rate"] = final["valid_solution_rate"]
        checkpoint(ckpt / "final", "done", rl.steps)
        checkpoint(ckpt / "latest", "done", rl.steps)
    tracker.close()
    figures["wall_seconds"] = state["wall"] + time.time() - t_start
    return figures
