"""Every random stream of a run, derived from the run's seed by one function.

A stream is named by the phase that draws it (``generator_rl``, ``judge_sft``, ``scaled_samples``,
``train_problems/rl-12``, ...), the round and the step; its seed is a hash of the four, so no two
streams share draws (the verifier's and the meta-verifier's RL, or one phase in two rounds, once did)
and a resumed run draws exactly what an uninterrupted one does.
"""

from __future__ import annotations

import hashlib


def stream_seed(seed: int, phase: str, round: int = 0, step: int = 0) -> int:
    """The seed of ``phase``'s stream at ``round`` and ``step``: 63 bits of BLAKE2b over the four, a
    valid seed for ``random.Random``, ``torch.manual_seed`` and ``torch.Generator``."""
    key = f"{seed}/{phase}/{round}/{step}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1
