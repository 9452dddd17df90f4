"""Text in, text out, with the tokens counted: what test-time search asks of a model, whether it is a
local worker (``selfverify.runtime.workers``) or a model served elsewhere (``runtime.endpoint``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from selfverify.runtime.workers import LMWorker


@dataclass(frozen=True)
class Completion:
    """One generated text and the tokens it cost; ``error`` says why there is no text (an endpoint
    that failed after its retries): the caller counts it as a failure, never as a silent empty answer."""

    text: str
    tokens: int
    error: str | None = None


class TextModel(Protocol):
    """Completes prompts, one completion each, in the order given."""

    def complete(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int,
        greedy: bool = False,
        temperature: float = 1.0,
        seed: int = 0,
    ) -> list[Completion]: ...


@dataclass
class LocalModel:
    """A worker's model (HF or vLLM rollouts, in this process or a Ray actor), ``batch_size`` prompts at
    a time, batch i seeded ``seed + i``; None: every prompt in one call (vLLM schedules its own batches)."""

    worker: LMWorker
    batch_size: int | None = 256

    def complete(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int,
        greedy: bool = False,
        temperature: float = 1.0,
        seed: int = 0,
    ) -> list[Completion]:
        out: list[Completion] = []
        size = self.batch_size or max(len(prompts), 1)
        for i in range(0, len(prompts), size):
            rollout = self.worker.generate(
                list(prompts[i : i + size]),
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                greedy=greedy,
                seed=seed + i,
            )
            out += [
                Completion(t, int(n)) for t, n in zip(rollout.texts, rollout.lengths.tolist(), strict=True)
            ]
        return out
