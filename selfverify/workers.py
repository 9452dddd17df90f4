"""Workers: the one way pipelines reach a model (DESIGN §2's worker seam).

A worker holds one language model, its tokenizer and what trains it (optimizer and scheduler, a frozen
reference for the KL penalty, a critic). Pipelines talk to it in texts and tensors only: prompts in,
rollouts and texts out; a rollout with its advantages in, metrics out; a directory to save to. They
never touch the model, so a worker can live in the pipeline's process or in a Ray actor of its own
(``selfverify.backends``) and the pipeline reads the same.

The generator, the verifier and the meta-verifier are all this class: a judge is a language model
trained by the same SFT and RL steps, and what makes it a verifier is the judge format the pipeline
prompts and parses with (``verifiers.generative``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import PreTrainedTokenizerBase

from selfverify.checkpoint import STATE_FILE
from selfverify.critic import ValueModel
from selfverify.models import ModelSpec, load_model, load_pretrained, save_pretrained
from selfverify.rollout import Rollout, encode_by_length, response_logprobs, sample, sample_texts
from selfverify.trainer import make_optimizer, policy_update, sft_step, value_update

if TYPE_CHECKING:
    from selfverify.config import RLConfig


@dataclass
class Learner:
    """The models and optimizers one RL phase updates."""

    policy: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    ref: torch.nn.Module | None = None  # frozen reference for the KL penalty
    critic: ValueModel | None = None  # value model for GAE estimators
    critic_optimizer: torch.optim.Optimizer | None = None


def frozen_copy(policy: torch.nn.Module) -> torch.nn.Module:
    """A frozen copy of ``policy``: π_ref of the KL penalty, taken where an RL phase starts."""
    ref = copy.deepcopy(policy).eval()
    ref.requires_grad_(False)
    return ref


def build(spec: ModelSpec, seed: int, path: str | Path | None = None) -> LMWorker:
    """The worker of ``spec``: the model at ``path`` when given (a checkpoint), else as ``spec`` names it."""
    model, tokenizer = load_pretrained(path, spec) if path is not None else load_model(spec, seed)
    return LMWorker(model, tokenizer)


class LMWorker:
    """One language model behind the calls the pipelines make (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.sft: tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler] | None = None
        self.learner: Learner | None = None

    def get_tokenizer(self) -> PreTrainedTokenizerBase:
        """A copy of the tokenizer, for the pipeline's prompts and step boundaries."""
        return self.tokenizer

    # --- sampling -------------------------------------------------------------------------------
    def generate(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        greedy: bool = False,
        seed: int | None = None,
    ) -> Rollout:
        """One response per prompt as a rollout (repeat a prompt G times for a group)."""
        return sample(
            self.model,
            self.tokenizer,
            prompts,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            greedy=greedy,
            seed=seed,
        )

    def generate_texts(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int,
        batch_size: int,
        greedy: bool = False,
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> list[str]:
        """One response text per prompt, ``batch_size`` prompts at a time."""
        return sample_texts(
            self.model,
            self.tokenizer,
            prompts,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            greedy=greedy,
            temperature=temperature,
            seed=seed,
        )

    # --- supervised fine-tuning -----------------------------------------------------------------
    def start_sft(
        self, lr: float, *, warmup_steps: int, total_steps: int, state: dict[str, Any] | None = None
    ) -> None:
        """A fresh optimizer for an SFT phase (or the one in ``state``, from ``training_state``)."""
        self.sft = make_optimizer(self.model, lr, warmup_steps=warmup_steps, total_steps=total_steps)
        if state is not None:
            self.sft[0].load_state_dict(state["optimizer"])
            self.sft[1].load_state_dict(state["scheduler"])

    def sft_step(self, prompts: list[str], targets: list[str]) -> dict[str, float]:
        """One step of mean NLL on the targets (batched by length, ``rollout.encode_by_length``)."""
        assert self.sft is not None, "start_sft first"
        return sft_step(self.model, *self.sft, encode_by_length(self.tokenizer, prompts, targets))

    # --- reinforcement learning -----------------------------------------------------------------
    def start_rl(
        self,
        lr: float,
        *,
        warmup_steps: int = 0,
        reference: bool = False,
        reference_path: str | Path | None = None,
        critic: ModelSpec | None = None,
        critic_path: str | Path | None = None,
        critic_lr: float = 1e-4,
        seed: int = 0,
        state: dict[str, Any] | None = None,
    ) -> None:
        """A fresh RL phase: optimizer; with ``reference`` a frozen π_ref (the model at
        ``reference_path``, or a copy of the policy now); with ``critic`` a value model (the one saved
        at ``critic_path``, or as ``ValueModel.from_spec`` builds it). ``state`` restores the optimizers
        a ``training_state`` saved."""
        opt, sched = make_optimizer(self.model, lr, warmup_steps=warmup_steps)
        learner = Learner(self.model, opt, sched)
        if reference_path is not None and reference:  # loaded for this phase alone: frozen in place
            ref = load_pretrained(reference_path)[0].to(device=self.model.device, dtype=self.model.dtype)
            learner.ref = ref.eval().requires_grad_(False)
        elif reference:
            learner.ref = frozen_copy(self.model)
        if critic is not None:
            learner.critic = (
                ValueModel.load(Path(critic_path))
                if critic_path is not None
                else ValueModel.from_spec(critic, self.model, seed)
            )
            learner.critic_optimizer = torch.optim.AdamW(learner.critic.parameters(), lr=critic_lr)
        if state is not None and "optimizer" in state:
            opt.load_state_dict(state["optimizer"])
            sched.load_state_dict(state["scheduler"])
        if state is not None and "critic_optimizer" in state and learner.critic_optimizer is not None:
            learner.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.learner = learner

    @torch.no_grad()
    def rollout_stats(
        self, rollout: Rollout, cfg: RLConfig
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The policy's own log-probs of a rollout (π_old, recomputed here, never the sampler's), the
        reference's (when there is one) and the critic's values (when there is one)."""
        lr = self._learner()
        mb = cfg.micro_batch_size
        old = response_logprobs(lr.policy, rollout, cfg.temperature, mb)
        ref = None if lr.ref is None else response_logprobs(lr.ref, rollout, cfg.temperature, mb)
        values = lr.critic(rollout) if lr.critic is not None else None
        return old, ref, values

    @torch.no_grad()
    def values(self, rollout: Rollout) -> torch.Tensor:
        """The critic's values [B, T] of a rollout's response tokens."""
        return self._learner().critic(rollout)

    def update(
        self,
        rollout: Rollout,
        *,
        old_logprobs: torch.Tensor,
        advantages: torch.Tensor,
        ref_logprobs: torch.Tensor | None,
        cfg: RLConfig,
        seed: int,
        positive: torch.Tensor | None = None,
        old_values: torch.Tensor | None = None,
        returns: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """The policy update on one rollout batch (``trainer.policy_update``), then the critic's when
        there is one and ``returns`` are given."""
        lr = self._learner()
        metrics = policy_update(
            lr.policy,
            lr.optimizer,
            lr.scheduler,
            rollout,
            old_logprobs=old_logprobs,
            advantages=advantages,
            ref_logprobs=ref_logprobs,
            cfg=cfg,
            seed=seed,
            positive=positive,
        )
        if lr.critic is not None and returns is not None:
            metrics |= self.update_critic(rollout, old_values=old_values, returns=returns, cfg=cfg)
        return metrics

    def update_critic(
        self, rollout: Rollout, *, old_values: torch.Tensor, returns: torch.Tensor, cfg: RLConfig
    ) -> dict[str, float]:
        """One clipped value-regression step of the critic (alone: VAPO's value pretraining)."""
        lr = self._learner()
        return value_update(
            lr.critic, lr.critic_optimizer, rollout, old_values=old_values, returns=returns, cfg=cfg
        )

    def _learner(self) -> Learner:
        assert self.learner is not None, "start_rl first"
        return self.learner

    def end_training(self) -> None:
        """Drop optimizers, reference and critic: the phase is over and their memory is free."""
        self.sft, self.learner = None, None

    # --- checkpoints ----------------------------------------------------------------------------
    def training_state(self) -> dict[str, Any]:
        """Optimizer and scheduler state of the phase in progress (what a resumed phase restores)."""
        if self.learner is not None:
            lr = self.learner
            out = {"optimizer": lr.optimizer.state_dict(), "scheduler": lr.scheduler.state_dict()}
            if lr.critic_optimizer is not None:
                out["critic_optimizer"] = lr.critic_optimizer.state_dict()
            return out
        if self.sft is not None:
            return {"optimizer": self.sft[0].state_dict(), "scheduler": self.sft[1].state_dict()}
        return {}

    def save(self, path: str | Path, state: dict[str, Any] | None = None) -> None:
        """The model and tokenizer as a Hugging Face directory (the critic under ``critic/``), with
        ``state`` in ``trainer_state.pt`` when given. Callers make the write atomic."""
        path = Path(path)
        save_pretrained(self.model, self.tokenizer, path)
        if self.learner is not None and self.learner.critic is not None:
            self.learner.critic.save(path / "critic")
        if state is not None:
            torch.save(state, path / STATE_FILE)
