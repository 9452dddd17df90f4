"""Checkpoints: HF-format model + tokenizer directories, written atomically, plus the run's state.

A checkpoint directory is complete or absent: it is written under a temporary name and renamed into
place. ``state.json`` holds the run's state (phase, round, step, metrics line count, figures, the
loop's labelled data): JSON, versioned, so renaming a class never breaks a resume and opening a run
directory never runs its code. A worker's optimizer and scheduler, the tensors of the phase in
progress, sit in its own directory's ``training_state.pt``, read with ``weights_only=True``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
from transformers import PreTrainedTokenizerBase

from selfverify.runtime.models import load_pretrained
from selfverify.utils.io import write_atomically

STATE_FILE = "state.json"
STATE_VERSION = 1  # bumped when a field changes meaning; an older state is refused by name
TRAINING_FILE = "training_state.pt"


class CheckpointError(ValueError):
    """A checkpoint this run cannot use (another analysis format, another phase); the message names it."""


class Saves(Protocol):
    def save(self, path: Path, training: bool = False) -> None: ...


def save_bundle(
    path: Path, models: Mapping[str, Saves], state: Mapping[str, Any], training: bool = False
) -> None:
    """Several models (one HF directory each, under their names, with its own tokenizer: each worker
    writes its own) and the run's state, written atomically together: a resumed run never sees a
    generator from one phase and a verifier from another. ``training``: with the optimizers of the
    phase in progress (a checkpoint inside a phase)."""

    def write(tmp: Path) -> None:
        for name, model in models.items():
            model.save(tmp / name, training=training)
        write_state(tmp, state)

    write_atomically(path, write)


def write_state(directory: Path, state: Mapping[str, Any]) -> None:
    """The run's state as ``directory/state.json`` (inside a directory being written atomically)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / STATE_FILE).write_text(json.dumps({"version": STATE_VERSION, **state}, indent=1))


def read_state(directory: Path) -> dict[str, Any]:
    """The state ``write_state`` wrote; CheckpointError naming the file when it is missing, not JSON or
    of another version."""
    path = directory / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: cannot read the run's state ({err})") from None
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        found = state.get("version") if isinstance(state, dict) else None
        raise CheckpointError(
            f"{path}: a run state of version {found}, this selfverify reads version {STATE_VERSION}; "
            "start a new run directory"
        )
    del state["version"]
    return state


def load_bundle(
    path: Path,
) -> tuple[dict[str, torch.nn.Module], dict[str, PreTrainedTokenizerBase], dict[str, Any]]:
    """The models (float32, on the CPU), their tokenizers (by name) and the state ``save_bundle`` wrote,
    for inspecting a run; a resumed run has its workers load their own directories."""
    models, tokenizers = {}, {}
    for sub in sorted(p for p in path.iterdir() if p.is_dir()):
        models[sub.name], tokenizers[sub.name] = load_pretrained(sub)
    return models, tokenizers, read_state(path)
