"""Workers: the one way pipelines reach a model (docs/guides/architecture.md, 'Workers').

A worker holds one language model, its tokenizer and what trains it (optimizer and scheduler, a frozen
reference for the KL penalty, a critic). Pipelines talk to it in texts and tensors only: prompts in,
rollouts and texts out; a rollout with its advantages in, metrics out; a directory to save to. They
never touch the model, so a worker can live in the pipeline's process or in a Ray actor of its own
(``selfverify.runtime.backends``) and the pipeline reads the same.

The generator, the verifier and the meta-verifier are all this class: a judge is a language model
trained by the same SFT and RL steps, and what makes it a verifier is the judge format the pipeline
prompts and parses with (``selfverify.judges.generative``).
"""

from __future__ import annotations

import copy
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from selfverify.config.schema import ModelSpec, RLConfig, RolloutConfig, TrainConfig
from selfverify.runtime.checkpoint import TRAINING_FILE
from selfverify.runtime.critic import ValueModel
from selfverify.runtime.engines import (
    CRITIC_ADAM,
    DEEPSPEED_DIR,
    DeepSpeedTrainEngine,
    TrainEngine,
    broadcast_object,
    gathered,
    is_writer,
    make_engine,
)
from selfverify.runtime.models import autocast, load_model, load_pretrained, save_pretrained
from selfverify.runtime.rollout import Rollout, encode_by_length, response_logprobs, sample
from selfverify.runtime.trainer import on_policy, policy_update, sft_step, value_update
from selfverify.runtime.vllm_engine import VLLMRollout

CRITIC_DEEPSPEED_DIR = "critic-deepspeed"  # the critic's DeepSpeed checkpoint in a bundle


@dataclass
class Learner:
    """What one RL phase updates: the policy's engine, a frozen reference, the critic's engine."""

    policy: TrainEngine
    ref: torch.nn.Module | None = None  # frozen reference for the KL penalty
    critic: TrainEngine | None = None  # the value model's, for GAE estimators


def frozen_copy(policy: torch.nn.Module) -> torch.nn.Module:
    """A frozen copy of ``policy``: π_ref of the KL penalty, taken where an RL phase starts."""
    ref = copy.deepcopy(policy).eval()
    ref.requires_grad_(False)
    return ref


def build(
    spec: ModelSpec,
    seed: int,
    path: str | Path | None = None,
    train: TrainConfig | None = None,
    rollout: RolloutConfig | None = None,
) -> LMWorker:
    """The worker of ``spec``: the model at ``path`` when given (a checkpoint), else as ``spec`` names it;
    ``train`` chooses its training engine, ``rollout`` its sampler."""
    model, tokenizer = load_pretrained(path, spec) if path is not None else load_model(spec, seed)
    source = None if path is None else Path(path)
    return LMWorker(
        model, tokenizer, train, source=source, rollout=rollout, seed=seed, autocast=spec.autocast
    )


def plain_copy(engine: DeepSpeedTrainEngine) -> torch.nn.Module:
    """The engine's model with its full weights as an ordinary module, free of DeepSpeed's hooks and
    partitions: what the worker keeps between training phases."""
    module = engine.module
    with engine.gathered():
        weights = {k: v.detach().clone() for k, v in module.state_dict().items()}
    fresh = type(module)(module.config).to(device=module.device, dtype=module.dtype)
    fresh.load_state_dict(weights)
    fresh.generation_config = module.generation_config
    return fresh.train(module.training)


class LMWorker:
    """One language model behind the calls the pipelines make (see the module docstring)."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        train: TrainConfig | None = None,
        source: Path | None = None,
        rollout: RolloutConfig | None = None,
        seed: int = 0,
        autocast: str | None = None,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.autocast = autocast  # mixed precision of HF sampling and every forward pass it trains through
        self.train = train or TrainConfig()
        rollout = rollout or RolloutConfig()
        self.vllm = VLLMRollout(rollout, seed) if rollout.engine == "vllm" else None
        self.source = source  # the checkpoint it was loaded from: a resumed phase's DeepSpeed state
        self.sft: TrainEngine | None = None
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
        if self.vllm is not None:
            return self._served(prompts, max_new_tokens, temperature, greedy, seed)
        with self._precision():
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
        """One response text per prompt, ``batch_size`` prompts at a time, batch i seeded ``seed + i``
        (vLLM: all at once), for many prompts where only the texts matter."""
        if self.vllm is not None:
            served = self._served(list(prompts), max_new_tokens, temperature, greedy, seed)
            return served.texts if served is not None else []
        texts: list[str] = []
        for i in range(0, len(prompts), batch_size):
            batch = list(prompts[i : i + batch_size])
            out = self.generate(
                batch,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                greedy=greedy,
                seed=None if seed is None else seed + i,
            )
            texts.extend(out.texts)
        return texts

    def _precision(self) -> AbstractContextManager:
        """The no-grad forward passes' autocast (``ModelSpec.autocast``); training engines wrap their
        own (``make_engine``). vLLM and its sync check keep their own precision."""
        return autocast(self.autocast, self.model.device)

    def _served(
        self, prompts: list[str], max_new_tokens: int, temperature: float, greedy: bool, seed: int | None
    ) -> Rollout | None:
        """Sampled by vLLM on rank 0, after a sync when the weights changed, and checked after each
        sync. The other ranks take part in what ZeRO-3 makes collective: gathering the weights to
        sync and the trainer's forward of the check sequence."""
        vllm = self.vllm
        assert vllm is not None
        synced, first = vllm.stale, vllm.probe is None
        if synced:
            with gathered(self._policy_engine()):
                if is_writer():
                    vllm.sync(self.model)
            vllm.stale = False
        rollout = None
        if is_writer():
            rollout = vllm.generate(
                self.model,
                self.tokenizer,
                prompts,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                greedy=greedy,
                seed=seed,
            )
        if first:
            vllm.probe = broadcast_object(vllm.probe)
        if synced or first:
            trainer = vllm.probe_logprobs(self.model)
            if is_writer():
                vllm.check(trainer)
        return rollout

    def rollout_engine_stats(self) -> dict[str, float | None]:
        """The vLLM engine's weight syncs, the largest log-prob gap its checks saw and the gap they
        allow ({} for HF)."""
        return self.vllm.stats() if self.vllm is not None else {}

    def _policy_engine(self) -> TrainEngine | None:
        return self.sft or (self.learner.policy if self.learner is not None else None)

    # --- supervised fine-tuning -----------------------------------------------------------------
    def start_sft(self, lr: float, *, warmup_steps: int, total_steps: int, resume: bool = False) -> None:
        """A fresh optimizer for an SFT phase; ``resume``: the one saved with the checkpoint this worker
        was loaded from (``save(training=True)``), where there is one."""
        self.end_training()
        self.sft = make_engine(
            self.model,
            lr,
            self.train,
            warmup_steps=warmup_steps,
            total_steps=total_steps,
            autocast=self.autocast,
        )
        state = self._training_state() if resume else {}
        if "optimizer" in state:
            self.sft.load_state_dict(state, self._saved(DEEPSPEED_DIR))

    def sft_step(self, prompts: list[str], targets: list[str]) -> dict[str, float]:
        """One step of mean NLL on the targets (batched by length, ``rollout.encode_by_length``)."""
        assert self.sft is not None, "start_sft first"
        self._weights_changed()
        return sft_step(self.sft, encode_by_length(self.tokenizer, prompts, targets))

    def _weights_changed(self) -> None:
        if self.vllm is not None:
            self.vllm.stale = True

    # --- reinforcement learning -----------------------------------------------------------------
    def start_rl(
        self,
        lr: float,
        *,
        warmup_steps: int = 0,
        total_steps: int | None = None,
        reference: bool = False,
        reference_path: str | Path | None = None,
        critic: ModelSpec | None = None,
        critic_path: str | Path | None = None,
        critic_lr: float = 1e-4,
        grad_clip: float = 1.0,
        seed: int = 0,
        resume: bool = False,
    ) -> None:
        """A fresh RL phase: optimizer (its learning rate cosine-decayed over ``total_steps`` RL steps,
        constant if None); with ``reference`` a frozen π_ref (the model at ``reference_path``, or
        a copy of the policy now); with ``critic`` a value model (the one saved at ``critic_path``, or as
        ``ValueModel.from_spec`` builds it). ``resume`` restores the optimizers saved with the
        checkpoint this worker was loaded from. ``grad_clip`` bounds the policy's and the critic's
        gradient norms."""
        self.end_training()
        ref = value_model = None
        # Reference and critic are copied before an engine may partition the policy (ZeRO-3).
        if reference_path is not None and reference:  # loaded for this phase alone: frozen in place
            ref = load_pretrained(reference_path)[0].to(device=self.model.device, dtype=self.model.dtype)
            ref = ref.eval().requires_grad_(False)
        elif reference:
            ref = frozen_copy(self.model)
        if critic is not None:
            value_model = (
                ValueModel.load(Path(critic_path))
                if critic_path is not None
                else ValueModel.from_spec(critic, self.model, seed)
            )
        learner = Learner(
            make_engine(
                self.model,
                lr,
                self.train,
                grad_clip=grad_clip,
                warmup_steps=warmup_steps,
                total_steps=total_steps,
                autocast=self.autocast,
            )
        )
        learner.ref = ref
        if value_model is not None:
            learner.critic = make_engine(
                value_model,
                critic_lr,
                self.train,
                grad_clip=grad_clip,
                adam=CRITIC_ADAM,
                autocast=critic.autocast if critic.path is not None else self.autocast,
            )
        state = self._training_state() if resume else {}
        if "optimizer" in state:
            learner.policy.load_state_dict(state, self._saved(DEEPSPEED_DIR))
        if "critic_optimizer" in state and learner.critic is not None:
            learner.critic.load_state_dict(state["critic_optimizer"], self._saved(CRITIC_DEEPSPEED_DIR))
        self.learner = learner

    def _training_state(self) -> dict[str, Any]:
        """The optimizer and scheduler state saved beside the checkpoint this worker was loaded from
        (tensors and numbers only: loaded with ``weights_only=True``); {} when there is none."""
        path = self._saved(TRAINING_FILE)
        return torch.load(path, weights_only=True) if path is not None and path.is_file() else {}

    def _saved(self, name: str) -> Path | None:
        return None if self.source is None else self.source / name

    @torch.no_grad()
    def rollout_stats(
        self, rollout: Rollout, cfg: RLConfig
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """The policy's own log-probs of a rollout (π_old, recomputed here, never the sampler's), the
        reference's (when there is one) and the critic's values (when there is one). On-policy
        (``trainer.on_policy``) π_old is None: the update takes it from its own forward pass, unless a
        KL penalty in the reward needs it first."""
        lr = self._learner()
        args = (rollout, cfg.temperature, cfg.micro_batch_size, cfg.share_prompts)
        with self._precision():
            ref = None if lr.ref is None else response_logprobs(lr.ref, *args)
            old = None
            if not on_policy(cfg) or (ref is not None and cfg.kl_in_reward):
                old = response_logprobs(lr.policy.module, *args)
            values = lr.critic.module(rollout) if lr.critic is not None else None
        return old, ref, values

    @torch.no_grad()
    def values(self, rollout: Rollout) -> torch.Tensor:
        """The critic's values [B, T] of a rollout's response tokens."""
        critic = self._learner().critic
        assert critic is not None, "start_rl with a critic first"
        with self._precision():
            return critic.module(rollout)

    def update(
        self,
        rollout: Rollout,
        *,
        old_logprobs: torch.Tensor | None,
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
        self._weights_changed()
        metrics = policy_update(
            lr.policy,
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
        critic = self._learner().critic
        assert critic is not None, "start_rl with a critic first"
        return value_update(critic, rollout, old_values=old_values, returns=returns, cfg=cfg)

    def _learner(self) -> Learner:
        assert self.learner is not None, "start_rl first"
        return self.learner

    def end_training(self) -> None:
        """Drop optimizers, reference and critic: the phase is over and their memory is free. A
        DeepSpeed-trained model becomes an ordinary module again, with its full weights."""
        engine = self._policy_engine()
        if isinstance(engine, DeepSpeedTrainEngine):
            self.model = plain_copy(engine)
        self.sft, self.learner = None, None

    # --- checkpoints ----------------------------------------------------------------------------
    def training_state(self) -> dict[str, Any]:
        """Optimizer and scheduler state of the phase in progress (what a resumed phase restores)."""
        if self.learner is not None:
            out = self.learner.policy.state_dict()
            if self.learner.critic is not None:
                out["critic_optimizer"] = self.learner.critic.state_dict()
            return out
        return self.sft.state_dict() if self.sft is not None else {}

    def save(self, path: str | Path, training: bool = False) -> None:
        """The model and tokenizer as a Hugging Face directory (the critic under ``critic/``); with
        ``training`` the optimizers of the phase in progress in ``training_state.pt``. Callers make the
        write atomic. Under DeepSpeed every rank takes part (ZeRO-3 gathers the weights) and rank 0 writes
        the same directory as ever, plus the engines' own checkpoints of their optimizer partitions."""
        path = Path(path)
        policy = self._policy_engine()
        critic = self.learner.critic if self.learner is not None else None
        with gathered(policy):
            if is_writer():
                save_pretrained(self.model, self.tokenizer, path)
        if critic is not None:
            with gathered(critic):
                if is_writer():
                    critic.module.save(path / "critic")
        for engine, name in ((policy, DEEPSPEED_DIR), (critic, CRITIC_DEEPSPEED_DIR)):
            if engine is not None:
                engine.save(path / name)
        if training and is_writer():
            torch.save(self.training_state(), path / TRAINING_FILE)
