"""Local training engine: the SFT step and the policy-gradient update of one model.

The update reads only tensors (a rollout, its old/reference logprobs and advantages) and a config;
which advantage estimator and policy loss it uses are registry names (selfverify.algos).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import torch

from selfverify.algos import (
    aggregate,
    entropy_from_logits,
    get_policy_loss,
    kl_penalty,
    logprobs_from_logits,
    masked_mean,
    positive_lm_loss,
    value_loss,
)
from selfverify.config import RLConfig
from selfverify.rollout import Rollout, response_logits, response_logprobs


def make_optimizer(
    model: torch.nn.Module, lr: float, *, warmup_steps: int = 0, total_steps: int | None = None
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW with linear warm-up, then cosine decay to 10% over ``total_steps`` (constant if None)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if total_steps is None:
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def sft_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: Rollout | Sequence[Rollout],
    grad_clip: float = 1.0,
) -> dict[str, float]:
    """One supervised step: mean NLL of the response tokens (prompt tokens carry no loss) over a batch,
    or over the groups of one batch (``rollout.encode_by_length``): gradients accumulate, each group's
    summed NLL divided by the batch's token count, so the step does not depend on the grouping."""
    parts = [batch] if isinstance(batch, Rollout) else list(batch)
    n_tokens = sum(float(b.response_mask.sum()) for b in parts)
    optimizer.zero_grad(set_to_none=True)
    loss = 0.0
    for b in parts:
        part = -(response_logprobs(model, b) * b.response_mask).sum() / n_tokens
        part.backward()
        loss += part.item()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()
    return {"loss": loss, "grad_norm": grad_norm.item(), "lr": scheduler.get_last_lr()[0]}


def policy_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: Rollout,
    *,
    old_logprobs: torch.Tensor,
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
    Returned losses are per optimizer step (micro-batch parts summed); diagnostics are token means.
    """
    loss_fn = get_policy_loss(cfg.policy_loss)
    # Dr.GRPO's constant normaliser: the generation budget.
    agg = {"agg_mode": cfg.agg_mode, "norm_constant": float(cfg.max_new_tokens)}
    n = len(batch.texts)
    gen = torch.Generator().manual_seed(seed)
    losses: dict[str, float] = defaultdict(float)  # summed over micro-batches, averaged over steps
    means: dict[str, float] = defaultdict(float)  # token-weighted means
    weight, grad_norms = 0.0, []
    for _ in range(cfg.epochs):
        order = torch.randperm(n, generator=gen) if cfg.mini_batches > 1 else torch.arange(n)
        for mini in order.chunk(cfg.mini_batches):
            mask = batch.response_mask[mini]
            counts = {"num_tokens": mask.sum(), "num_seqs": (mask.sum(-1) > 0).sum()}
            pos_counts = {}
            if positive is not None and cfg.pos_lm_coef > 0:
                pos_mask = mask * positive[mini, None].float()
                pos_counts = {"num_tokens": pos_mask.sum(), "num_seqs": (pos_mask.sum(-1) > 0).sum()}
            use_pos = bool(pos_counts) and pos_counts["num_tokens"] > 0  # no correct sample: no LM term
            optimizer.zero_grad(set_to_none=True)
            for micro in mini.split(cfg.micro_batch_size):
                mb = batch.select(micro)
                logits = response_logits(model, mb, cfg.temperature)
                logprob = logprobs_from_logits(logits, mb.responses)
                pg_loss, stats = loss_fn(
                    logprob,
                    old_logprobs[micro],
                    advantages[micro],
                    mb.response_mask,
                    clip_low=cfg.clip_low,
                    clip_high=cfg.clip_high,
                    dual_clip_c=cfg.dual_clip_c,
                    **agg,
                    **counts,
                )
                terms = {"pg_loss": pg_loss}
                entropy = entropy_from_logits(logits)
                if cfg.entropy_coef:
                    terms["entropy_loss"] = -cfg.entropy_coef * aggregate(
                        entropy, mb.response_mask, cfg.agg_mode, norm_constant=agg["norm_constant"], **counts
                    )
                if ref_logprobs is not None:
                    kl = kl_penalty(logprob, ref_logprobs[micro], cfg.kl_kind)
                    if not cfg.kl_in_reward:
                        terms["kl_loss"] = cfg.kl_coef * aggregate(
                            kl, mb.response_mask, cfg.agg_mode, norm_constant=agg["norm_constant"], **counts
                        )
                    stats["kl"] = masked_mean(kl.detach(), mb.response_mask)
                if pos_counts:
                    terms["pos_lm_loss"] = (
                        cfg.pos_lm_coef
                        * positive_lm_loss(
                            logprob, mb.response_mask, positive[micro], **agg, **pos_counts
                        )
                        if use_pos
                        else logprob.new_zeros(())
                    )
                sum(terms.values()).backward()
                for k, v in terms.items():
                    losses[k] += v.item()
                w = mb.response_mask.sum().item()
                stats["entropy"] = masked_mean(entropy.detach(), mb.response_mask)
                for k, v in stats.items():
                    means[k] += float(v) * w
                weight += w
            grad_norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip).item())
            optimizer.step()
    scheduler.step()
    steps = len(grad_norms)
    return {
        **{k: v / steps for k, v in losses.items()},
        **{k: v / max(weight, 1.0) for k, v in means.items()},
        "grad_norm": sum(grad_norms) / steps,
        "lr": scheduler.get_last_lr()[0],
    }


def value_update(
    critic: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Rollout,
    *,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    cfg: RLConfig,
) -> dict[str, float]:
    """One pass of clipped value regression on the rollout (same micro-batching rule as the policy)."""
    mask = batch.response_mask
    counts = {"num_tokens": mask.sum(), "num_seqs": (mask.sum(-1) > 0).sum()}
    optimizer.zero_grad(set_to_none=True)
    total, clipfrac = 0.0, 0.0
    for micro in torch.arange(len(batch.texts)).split(cfg.micro_batch_size):
        mb = batch.select(micro)
        loss, stats = value_loss(
            critic(mb),
            old_values[micro],
            returns[micro],
            mb.response_mask,
            clip_range=cfg.value_clip,
            agg_mode="token-mean",
            **counts,
        )
        loss.backward()
        total += loss.item()
        clipfrac += stats["vf_clipfrac"].item() * mb.response_mask.sum().item()
    grad_norm = torch.nn.utils.clip_grad_norm_(critic.parameters(), cfg.grad_clip).item()
    optimizer.step()
    return {
        "value_loss": total,
        "vf_clipfrac": clipfrac / max(mask.sum().item(), 1.0),
        "value_grad_norm": grad_norm,
    }
