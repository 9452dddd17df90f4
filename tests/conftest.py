import os

import pytest
import torch

# Tests share two cores; keep torch from oversubscribing them.
torch.set_num_threads(1)
os.environ.setdefault("WANDB_SILENT", "true")

# A tiny but complete job: every phase runs, in seconds.
TINY = [
    "model.hidden_size=32",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "task.n_heldout=16",
    "sft.steps=6",
    "sft.batch_size=8",
    "rl.steps=4",
    "rl.prompts_per_step=2",
    "rl.group_size=4",
    "rl.max_new_tokens=16",
    "rl.eval_every=2",
    "checkpoint_every=2",
    "threads=1",
]


@pytest.fixture
def tiny_overrides() -> list[str]:
    return list(TINY)
