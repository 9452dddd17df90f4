"""Every random stream of a run, derived from ``cfg.seed`` by one function.

Each stream (the RL step's sampling, the judge's labelled pool, the scaled-verification samples, ...)
has a name and an index (a step or a round); its seed depends only on the run's seed, the name and
the index, so a resumed run draws exactly what an uninterrupted one does.
"""

from __future__ import annotations

RL_STEP_STRIDE = 1_000_003  # a prime: RL step seeds of different run seeds never meet
SAMPLE_STRIDE = 7
# Offsets of the loop's sampling streams (the index, a round, is added): far enough apart that rounds
# of one stream never reach the next.
SAMPLE_STREAMS = {
    "judge_pool": 1,  # the cold-started generator's samples the judge's seed pool is made of
    "meta_items": 3,  # the verifier's sampled analyses the meta-verifier's RL items are made of
    "scaled_samples": 100,  # fresh generator samples to auto-label
    "scaled_verification": 200,  # the analyses and meta-verifications that auto-label them
    "judge_val": 500,  # the generator samples the judge's cold start is checked on
    "judge_eval": 999,  # held-out generator samples the judges are evaluated on
}


def derive_seed(seed: int, stream: str, index: int = 0) -> int:
    """The seed of ``stream`` at ``index``: ``rl_step`` (any model's RL or value-pretraining step
    ``index``) or one of :data:`SAMPLE_STREAMS` (round ``index``)."""
    if stream == "rl_step":
        return seed * RL_STEP_STRIDE + index
    return seed * SAMPLE_STRIDE + SAMPLE_STREAMS[stream] + index
