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


class CheckpointError(ValueError):
    """A checkpoint this run cannot use (another analysis format, another phase); the message names it."""


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
    _swap_in(tmp, path)


def _swap_in(tmp: Path, path: Path) -> None:
    """Replace ``path`` by the finished ``tmp`` (``recover`` completes a swap a crash interrupted)."""
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


def save_bundle(
    path: Path,
    models: dict[str, torch.nn.Module],
    tokenizer: PreTrainedTokenizerBase,
    state: dict[str, Any],
) -> None:
    """Several models (one HF directory each, under their names) and one trainer state, written
    atomically together: a resumed run never sees a generator from one phase and a verifier from
    another."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for name, model in models.items():
        save_pretrained(model, tokenizer, tmp / name)
    torch.save(state, tmp / STATE_FILE)
    _swap_in(tmp, path)


def load_bundle(
    path: Path,
) -> tuple[dict[str, torch.nn.Module], PreTrainedTokenizerBase, dict[str, Any]]:
    models, tokenizer = {}, None
    for sub in sorted(p for p in path.iterdir() if p.is_dir()):
        models[sub.name], tokenizer = load_pretrained(sub)
    return models, tokenizer, torch.load(path / STATE_FILE, weights_only=False)
