"""Checkpoints: HF-format model + tokenizer directories, written atomically, plus trainer state.

A checkpoint directory is complete or absent: it is written under a temporary name and renamed into
place. ``trainer_state.pt`` beside the weights holds what a resumed run needs (optimizer, scheduler,
phase, step, metrics line count, figures measured so far).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
from transformers import PreTrainedTokenizerBase

from selfverify.runtime.models import load_pretrained
from selfverify.utils.io import write_atomically

STATE_FILE = "trainer_state.pt"


class CheckpointError(ValueError):
    """A checkpoint this run cannot use (another analysis format, another phase); the message names it."""


class Saves(Protocol):
    def save(self, path: Path) -> None: ...


def save_bundle(path: Path, models: Mapping[str, Saves], state: dict[str, Any]) -> None:
    """Several models (one HF directory each, under their names, with its own tokenizer: each worker
    writes its own) and one trainer state, written atomically together: a resumed run never sees a
    generator from one phase and a verifier from another."""

    def write(tmp: Path) -> None:
        for name, model in models.items():
            model.save(tmp / name)
        torch.save(state, tmp / STATE_FILE)

    write_atomically(path, write)


def load_bundle(
    path: Path,
) -> tuple[dict[str, torch.nn.Module], dict[str, PreTrainedTokenizerBase], dict[str, Any]]:
    """The models (float32, on the CPU), their tokenizers (by name) and the state ``save_bundle`` wrote,
    for inspecting a run; a resumed run has its workers load their own directories."""
    models, tokenizers = {}, {}
    for sub in sorted(p for p in path.iterdir() if p.is_dir()):
        models[sub.name], tokenizers[sub.name] = load_pretrained(sub)
    return models, tokenizers, torch.load(path / STATE_FILE, weights_only=False)
