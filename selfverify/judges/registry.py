"""Verifiers by name or checkpoint: ``load_verifier("rule")``, ``load_verifier("runs/r3/verifier")``.

Two tables, both open for registration:

- ``VERIFIER_LOADERS``: name -> ``loader(**kwargs) -> Verifier`` (built-in: ``rule``, the
  arithmetic rule verifier). Add more with :func:`register_verifier`.
- ``CHECKPOINT_LOADERS``: checkpoint kind -> ``loader(path, **kwargs) -> Verifier``. A checkpoint is
  a directory holding ``verifier.json`` with at least ``{"kind": "prm" | "generative" | ...}``; its kind
  picks the loader. Add loaders with :func:`register_checkpoint_loader`.
- ``PREFIX_LOADERS``: prefix -> ``loader(source, **kwargs) -> Verifier`` for specs ``prefix:source``
  (built-in: ``math-shepherd:`` and ``qwen-prm:``, public step-level PRMs from a local directory or a
  hub name, see ``selfverify.judges.step_prm``). Add more with :func:`register_prefix`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from selfverify.judges.arith_rule import ArithmeticRuleVerifier
from selfverify.judges.base import Verifier
from selfverify.judges.embedded_rule import EmbeddedRuleVerifier

VerifierLoader = Callable[..., Verifier]
CheckpointLoader = Callable[..., Verifier]  # (checkpoint_dir: Path, **kwargs) -> Verifier

CHECKPOINT_MANIFEST = "verifier.json"
VERIFIER_LOADERS: dict[str, VerifierLoader] = {
    "rule": ArithmeticRuleVerifier,
    "embedded-rule": EmbeddedRuleVerifier,
}
CHECKPOINT_LOADERS: dict[str, CheckpointLoader] = {}
PREFIX_LOADERS: dict[str, VerifierLoader] = {}  # prefix -> (source: str, **kwargs) -> Verifier


class VerifierSpecError(ValueError):
    """A verifier spec that names no known verifier or no loadable checkpoint."""


def register_verifier(name: str, loader: VerifierLoader, *, replace: bool = False) -> None:
    """Make ``load_verifier(name, **kwargs)`` return ``loader(**kwargs)``."""
    if name in VERIFIER_LOADERS and not replace:
        raise ValueError(f"verifier {name!r} is already registered")
    VERIFIER_LOADERS[name] = loader


def register_checkpoint_loader(kind: str, loader: CheckpointLoader, *, replace: bool = False) -> None:
    """Load checkpoints whose ``verifier.json`` says ``"kind": kind`` with ``loader(path, **kwargs)``."""
    if kind in CHECKPOINT_LOADERS and not replace:
        raise ValueError(f"checkpoint kind {kind!r} is already registered")
    CHECKPOINT_LOADERS[kind] = loader


def register_prefix(prefix: str, loader: VerifierLoader, *, replace: bool = False) -> None:
    """Make ``load_verifier(f"{prefix}:{source}", **kwargs)`` return ``loader(source, **kwargs)``."""
    if prefix in PREFIX_LOADERS and not replace:
        raise ValueError(f"verifier prefix {prefix!r} is already registered")
    PREFIX_LOADERS[prefix] = loader


def _known(names: dict[str, object]) -> str:
    return ", ".join(sorted(names)) or "none registered"


def load_verifier(spec: str, **kwargs: object) -> Verifier:
    """The verifier named by ``spec``: a registered name, ``prefix:source`` with a registered prefix, or
    a checkpoint directory (or its manifest).

    Raises :class:`VerifierSpecError` with the known names or kinds when ``spec`` matches nothing, and
    one naming ``spec`` when a prefix loader cannot load its source.
    """
    if spec in VERIFIER_LOADERS:
        return VERIFIER_LOADERS[spec](**kwargs)
    prefix, colon, source = spec.partition(":")
    if colon and prefix in PREFIX_LOADERS:
        if not source:
            raise VerifierSpecError(f"verifier {spec!r}: expected {prefix}:<directory or hub name>")
        try:
            return PREFIX_LOADERS[prefix](source, **kwargs)
        except VerifierSpecError as exc:
            raise VerifierSpecError(f"verifier {spec!r}: {exc}") from None
    path = Path(spec)
    if path.is_file() and path.name == CHECKPOINT_MANIFEST:
        path = path.parent
    if not path.is_dir():
        raise VerifierSpecError(
            f"unknown verifier {spec!r}: not a registered name ({_known(VERIFIER_LOADERS)}) "
            f"and not a checkpoint directory"
        )
    manifest = path / CHECKPOINT_MANIFEST
    try:
        meta = json.loads(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VerifierSpecError(f"{path} is not a verifier checkpoint: no {CHECKPOINT_MANIFEST}") from None
    except (OSError, ValueError) as exc:
        raise VerifierSpecError(f"{manifest}: unreadable: {exc}") from None
    kind = meta.get("kind") if isinstance(meta, dict) else None
    if not isinstance(kind, str):
        raise VerifierSpecError(f'{manifest}: expected an object with a string "kind"')
    if kind not in CHECKPOINT_LOADERS:
        raise VerifierSpecError(
            f"{manifest}: no loader for checkpoint kind {kind!r}; known kinds: {_known(CHECKPOINT_LOADERS)} "
            "(add one with selfverify.judges.registry.register_checkpoint_loader)"
        )
    return CHECKPOINT_LOADERS[kind](path, **kwargs)


def _load_prm(path: Path, **kwargs: object) -> Verifier:
    """The ``prm`` checkpoint kind, imported on first use: torch loads only for PRM checkpoints."""
    from selfverify.judges.prm import PRMVerifier

    return PRMVerifier.from_pretrained(path, **kwargs)  # type: ignore[arg-type]


register_checkpoint_loader("prm", _load_prm)


def _load_generative(path: Path, **kwargs: object) -> Verifier:
    from selfverify.judges.generative import GenerativeVerifier

    return GenerativeVerifier.from_pretrained(path, **kwargs)


register_checkpoint_loader("generative", _load_generative)


def _load_math_shepherd(source: str, **kwargs: object) -> Verifier:
    from selfverify.judges.step_prm import MathShepherdPRM

    return MathShepherdPRM.from_pretrained(source, **kwargs)  # type: ignore[arg-type]


def _load_qwen_prm(source: str, **kwargs: object) -> Verifier:
    from selfverify.judges.step_prm import QwenPRM

    return QwenPRM.from_pretrained(source, **kwargs)  # type: ignore[arg-type]


register_prefix("math-shepherd", _load_math_shepherd)
register_prefix("qwen-prm", _load_qwen_prm)
# judge:<directory or hub name>: any instruct model as a prompted judge in the prose format.
register_prefix("judge", _load_generative)
