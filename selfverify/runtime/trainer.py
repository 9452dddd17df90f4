"""Training steps: the SFT step, the policy-gradient update and the value update of one model, over a
training engine (``selfverify.runtime.engines``: torch or DeepSpeed).

The update reads only tensors (a rollout, its old/reference logprobs and advantages) and a config;
which advantage estimator and policy loss it uses are registry names (selfverify.algos).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch.profiler import record_function

from selfverify.algos import (
    aggregate,
    entropy_from_logits,
    get_policy_loss,
    kl_penalty,
    masked_mean,
    positive_lm_loss,
    value_loss,
)
from selfverify.config.schema import RLConfig
from selfverify.runtime.engines import TrainEngine
from selfverify.runtime.rollout import (
    LENGTH_GROUPS,
    Rollout,
    logits_by_length,
    response_logprobs,
    token_logprobs,
)


def sft_step(engine: TrainEngine, batch: Rollout | Sequence[Rollout]) -> dict[str, float]:
    """One supervised step: mean NLL of the response tokens (prompt tokens carry no loss) over a batch,
    or over the groups of one batch (``rollout.encode_by_length``): gradients accumulate, each group's
    summed NLL divided by the batch's token count, so the step does not depend on the grouping (nor on
    how the engine splits rows over ranks)."""
    parts = [batch] if isinstance(batch, Rollout) else list(batch)
    n_tokens = sum(float(b.response_mask.sum()) for b in parts)
    chunks = [
        (b, rows, w)
        for b in parts
        for rows, w in engine.micro_batches(torch.arange(len(b.texts)), len(b.texts))
    ]
    loss = 0.0
    for i, (b, rows, w) in enumerate(chunks):
        mb = b.select(rows)
        part = -(response_logprobs(engine.model, mb) * mb.response_mask).sum() / n_tokens * w
        engine.backward(part, last=i == len(chunks) - 1)
        loss += part.item()
    grad_norm = engine.step()
    lr = engine.scheduler.get_last_lr()[0]  # the rate this step used, logged before the schedule moves
    engine.scheduler.step()
    return {"loss": engine.reduce({"loss": loss})["loss"], "grad_norm": grad_norm, "lr": lr}


def on_policy(cfg: RLConfig) -> bool:
    """One optimizer step per rollout batch: π_old is then the policy being updated, so its log-probs
    are that update's own forward pass, detached, and need no separate forward (as in verl)."""
    return cfg.epochs == 1 and cfg.mini_batches == 1


def _token_counts(mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """A mini-batch's global counts, which every micro-batch's loss is aggregated with."""
    return {"num_tokens": mask.sum(), "num_seqs": (mask.sum(-1) > 0).sum()}


def pass_terms(
    mb: Rollout,
    rows: torch.Tensor,
    logits: torch.Tensor,
    *,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    positive: torch.Tensor | None,
    cfg: RLConfig,
    counts: dict[str, torch.Tensor],
    pos_counts: dict[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The loss terms of one forward pass and its diagnostics: ``mb`` is the trimmed rollout of the
    batch's ``rows``, ``logits`` its response logits; ``counts`` (``pos_counts``: correct responses only)
    are its mini-batch's."""
    cols = slice(0, mb.response_mask.shape[1])  # the token tensors' columns mb keeps
    # Dr.GRPO's constant normaliser: the generation budget.
    agg = {"agg_mode": cfg.agg_mode, "norm_constant": float(cfg.max_new_tokens)}
    logprob = token_logprobs(logits, mb)
    pg_loss, stats = get_policy_loss(cfg.policy_loss)(
        logprob,
        logprob.detach() if old_logprobs is None else old_logprobs[rows, cols],
        advantages[rows, cols],
        mb.response_mask,
        clip_low=cfg.clip_low,
        clip_high=cfg.clip_high,
        dual_clip_c=cfg.dual_clip_c,
        **agg,
        **counts,
    )
    terms = {"pg_loss": pg_loss}
    entropy = entropy_from_logits(logits).cpu()
    if cfg.entropy_coef:
        terms["entropy_loss"] = -cfg.entropy_coef * aggregate(
            entropy, mb.response_mask, cfg.agg_mode, norm_constant=agg["norm_constant"], **counts
        )
    if ref_logprobs is not None:
        kl = kl_penalty(logprob, ref_logprobs[rows, cols], cfg.kl_kind)
        if not cfg.kl_in_reward:
            terms["kl_loss"] = cfg.kl_coef * aggregate(
                kl, mb.response_mask, cfg.agg_mode, norm_constant=agg["norm_constant"], **counts
            )
        stats["kl"] = masked_mean(kl.detach(), mb.response_mask)
    if pos_counts:  # no correct sample in the mini-batch: a zero LM term
        terms["pos_lm_loss"] = (
            cfg.pos_lm_coef * positive_lm_loss(logprob, mb.response_mask, positive[rows], **agg, **pos_counts)
            if pos_counts["num_tokens"] > 0
            else logprob.new_zeros(())
        )
    stats["entropy"] = masked_mean(entropy.detach(), mb.response_mask)
    return terms, stats


@dataclass
class _Tally:
    """An update's figures: losses summed over micro-batches (and ranks), diagnostics token-weighted."""

    losses: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    means: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    weight: float = 0.0
    grad_norms: list[float] = field(default_factory=list)

    def add(
        self, terms: dict[str, torch.Tensor], stats: dict[str, torch.Tensor], tokens: float, scale: float
    ) -> None:
        """One forward pass's terms (the loss parts) and stats over its ``tokens``, a micro-batch part
        weighted ``scale`` (0: a rank's stand-in)."""
        w = tokens * scale
        for k, v in terms.items():
            self.losses[k] += v.item() * scale
        for k, v in stats.items():
            self.means[k] += float(v) * w
        self.weight += w

    def figures(self, engine: TrainEngine, lr: float) -> dict[str, float]:
        """Losses per optimizer step, diagnostics as token means over the ranks."""
        steps = len(self.grad_norms)
        summed = engine.reduce(
            {**self.losses, **{f"mean/{k}": v for k, v in self.means.items()}, "weight": self.weight}
        )
        return {
            **{k: summed[k] / steps for k in self.losses},
            **{k: summed[f"mean/{k}"] / max(summed["weight"], 1.0) for k in self.means},
            "grad_norm": sum(self.grad_norms) / steps,
            "lr": lr,
        }


def policy_update(
    engine: TrainEngine,
    batch: Rollout,
    *,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    cfg: RLConfig,
    seed: int,
    positive: torch.Tensor | None = None,
) -> dict[str, float]:
    """``epochs`` passes of ``mini_batches`` optimizer steps over one rollout batch; one scheduler step.

    Each optimizer step accumulates gradients over micro-batches; every loss is aggregated with the
    mini-batch's global token/sequence counts, so the gradient does not depend on micro_batch_size.
    ``positive`` [B] marks correct responses for VAPO's positive-example LM loss (``cfg.pos_lm_coef``).
    ``old_logprobs`` None (only when :func:`on_policy`): π_old is this forward's log-probs, detached.
    Returned losses are per optimizer step (micro-batch and rank parts summed); diagnostics are token
    means.
    """
    if old_logprobs is None and not on_policy(cfg):
        # Past the first optimizer step the policy has moved: its own log-probs are no longer π_old.
        raise ValueError("old_logprobs are needed with more than one optimizer step per batch")
    n, lengths = len(batch.texts), batch.response_mask.sum(-1)
    inputs = {
        "old_logprobs": old_logprobs,
        "advantages": advantages,
        "ref_logprobs": ref_logprobs,
        "positive": positive,
    }
    gen = torch.Generator().manual_seed(seed)
    tally = _Tally()
    # In lockstep whether a rank's rows share a prompt must not change the passes it runs.
    share = cfg.share_prompts and not engine.lockstep
    for _ in range(cfg.epochs):
        order = torch.randperm(n, generator=gen) if cfg.mini_batches > 1 else torch.arange(n)
        for mini in order.chunk(cfg.mini_batches):
            # share_prompts: a group's rows side by side, so micro-batches share their prompts; else rows
            # of like length together, each micro-batch cut to its own longest (Rollout.trimmed).
            mini = mini.sort().values if share else mini[lengths[mini].argsort(stable=True)]
            mask = batch.response_mask[mini]
            counts = _token_counts(mask)
            with_pos = positive is not None and cfg.pos_lm_coef > 0
            pos_counts = _token_counts(mask * positive[mini, None].float()) if with_pos else {}
            # About LENGTH_GROUPS passes a mini-batch, split where they pad least; one backward a micro-batch.
            # In lockstep every rank runs as many passes as the others: equal chunks, one pass each.
            if engine.lockstep:
                size = min(cfg.micro_batch_size, -(-len(mini) // LENGTH_GROUPS))
                micros, parts = engine.micro_batches(mini, size), 1
            else:
                micros = engine.micro_batches(mini, cfg.micro_batch_size)
                parts = -(-LENGTH_GROUPS // len(micros))
            for i, (micro, scale) in enumerate(micros):
                with record_function("update/forward"):
                    passes = logits_by_length(
                        engine.model, batch.select(micro), cfg.temperature, share, parts
                    )
                loss = 0.0
                for group, mb, logits in passes:
                    terms, stats = pass_terms(
                        mb,
                        micro[group],
                        logits,
                        **inputs,
                        cfg=cfg,
                        counts=counts,
                        pos_counts=pos_counts,
                    )
                    loss = loss + sum(terms.values())
                    tally.add(terms, stats, mb.response_mask.sum().item(), scale)
                with record_function("update/backward"):
                    engine.backward(loss * scale, last=i == len(micros) - 1)
            with record_function("update/optimizer"):
                tally.grad_norms.append(engine.step())
    lr = engine.scheduler.get_last_lr()[0]  # the rate this step used, logged before the schedule moves
    engine.scheduler.step()
    return tally.figures(engine, lr)


def value_update(
    engine: TrainEngine,
    batch: Rollout,
    *,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    cfg: RLConfig,
) -> dict[str, float]:
    """One pass of clipped value regression on the rollout (same micro-batching rule as the policy)."""
    mask = batch.response_mask
    counts = {"num_tokens": mask.sum(), "num_seqs": (mask.sum(-1) > 0).sum()}
    total, clipfrac = 0.0, 0.0
    micros = engine.micro_batches(torch.arange(len(batch.texts)), cfg.micro_batch_size)
    for i, (micro, scale) in enumerate(micros):
        mb = batch.select(micro)
        loss, stats = value_loss(
            engine.model(mb),
            old_values[micro],
            returns[micro],
            mb.response_mask,
            clip_range=cfg.value_clip,
            agg_mode="token-mean",
            **counts,
        )
        engine.backward(loss * scale, last=i == len(micros) - 1)
        total += loss.item() * scale
        clipfrac += stats["vf_clipfrac"].item() * mb.response_mask.sum().item() * scale
    grad_norm = engine.step()
    summed = engine.reduce({"value_loss": total, "clipped": clipfrac})
    return {
        "value_loss": summed["value_loss"],
        "vf_clipfrac": summed["clipped"] / max(mask.sum().item(), 1.0),
        "value_grad_norm": grad_norm,
    }
