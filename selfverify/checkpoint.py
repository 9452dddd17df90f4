"""Checkpoints: HF-format model + tokenizer directories, written atomically, plus trainer state.

A checkpoint directory is complete or absent: it is written under a temporary name and renamed into
place. ``trainer_state.pt`` beside the weights holds what a resumed run needs (optimizer, scheduler,
phase, step, metrics line count, figures measured so far).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from selfverify.models import load_pretrained, save_pretrained

STATE_FILE = "trainer_state.pt"


def save_checkpoint(
    path: Path,
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    state: dict[str, Any] | None = None,
    critic: torch.nn.Module | None = None,
) -> None:
    """Write the checkpoint under a temporary name, then rename it into place."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_pretrained(model, tokenizer, tmp)
    if critic is not None:
        critic.save(tmp / "critic")
    if state is not None:
        torch.save(state, tmp / STATE_FILE)
    old = path.with_name(path.name + ".old")
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(path: Path) -> tuple[torch.nn.Module, PreTrainedTokenizerBase, dict[str, Any] | None]:
    model, tokenizer = load_pretrained(path)
    state_file = path / STATE_FILE
    state = torch.load(state_file, weights_only=False) if state_file.exists() else None
    return model, tokenizer, state


def recover(path: Path) -> None:
    """Finish an interrupted ``save_checkpoint``: if only ``.old`` survived a crash, restore it."""
    old = path.with_name(path.name + ".old")
    if not path.exists() and old.exists():
        os.replace(old, path)
