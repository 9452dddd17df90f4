"""selfverify: train self-verifying reasoning models (generator, verifier, meta-verifier)."""

import os

# Before torch loads OpenMP: its threads then sleep instead of spinning while they wait. Alone on a
# 2-core CPU this is as fast (SmolLM2-135M: 134 vs 128 generated tokens/s); beside another process it
# generated 1.7x faster (80 vs 48 tokens/s; docs/RESULTS.md). An explicit setting is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
