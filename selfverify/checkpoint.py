"""Checkpoints: HF-format model + tokenizer directories, written atomically, plus trainer state.

A checkpoint directory is complete or absent: it is written under a temporary name and renamed into
place. ``trainer_state.pt`` beside the weights holds what a resumed run needs (optimizer, scheduler,
phase, step, metrics line count, figures measured so far).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors import SafetensorError
from transformers import PreTrainedTokenizerBase

from selfverify.models import load_pretrained

STATE_FILE = "trainer_state.pt"


class CheckpointError(ValueError):
    """A checkpoint this run cannot use (another analysis format, another phase); the message names it."""


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (disk full, read-only); the previous one is left as it was."""


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Run ``write(tmp)`` into a fresh sibling directory, then swap it in for ``path``.

    A failed write (a full disk, a read-only directory) removes the partial copy, so it holds no space,
    and leaves ``path`` untouched. torch.save reports a failed write as RuntimeError and safetensors as
    its own error, hence the three kinds caught.
    """
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write(tmp)
    except (OSError, RuntimeError, SafetensorError) as err:
        shutil.rmtree(tmp, ignore_errors=True)
        detail = " ".join(str(err).split())[:300]
        raise CheckpointWriteError(
            f"could not write the checkpoint {path} ({detail}); the previous checkpoint is intact: "
            "make room (or make the run directory writable) and rerun the same command to resume"
        ) from err
    _swap_in(tmp, path)


def _swap_in(tmp: Path, path: Path) -> None:
    """Replace ``path`` by the finished ``tmp`` (``recover`` completes a swap a crash interrupted)."""
    old = path.with_name(path.name + ".old")
    shutil.rmtree(old, ignore_errors=True)  # a kill during the last swap's clean-up can leave one
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def recover(path: Path) -> None:
    """Finish an interrupted ``write_atomically``: if only ``.old`` survived a crash, restore it."""
    old = path.with_name(path.name + ".old")
    if not path.exists() and old.exists():
        os.replace(old, path)
    shutil.rmtree(old, ignore_errors=True)


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
