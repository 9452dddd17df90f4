"""Backends: where workers live (DESIGN §2's backend seam), chosen by ``backend.name``.

- ``local``: each worker is an object in the pipeline's process (the default).
- ``ray``: each worker is a Ray actor with its own resources, placed in one placement group (one
  bundle per worker; ``backend.placement`` packs them onto as few nodes as fit, or spreads them). A
  local Ray instance is started, with its dashboard and ports on loopback, unless ``backend.address``
  names a running cluster to join.

The pipeline calls a Ray worker exactly as a local one (:class:`RemoteWorker`): arguments and results
are texts, tensors and dictionaries. The pipeline's phases call one worker at a time, so workers that
share a node take turns on its cores; a local instance therefore declares at least one CPU per worker.
A worker that dies raises :class:`WorkerDied`; the run's checkpoints are intact and the same command
resumes it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch

from selfverify.config import BackendConfig
from selfverify.models import ModelSpec
from selfverify.workers import LMWorker, build

WORKER_SLOTS = ("generator", "judge", "meta")  # the most workers a pipeline places


class BackendError(RuntimeError):
    """The backend cannot place or keep the workers; the message says what to do."""


class WorkerDied(BackendError):
    """A worker's process ended (killed, out of memory, a lost node); the message names the worker."""


class Backend(Protocol):
    def spawn(self, name: str, spec: ModelSpec, seed: int, path: str | Path | None = None) -> LMWorker:
        """The worker ``name`` (one of WORKER_SLOTS) with the model ``spec`` names, or the one at ``path``."""
        ...

    def shutdown(self) -> None: ...


class LocalBackend:
    """Workers as objects in this process."""

    def spawn(self, name: str, spec: ModelSpec, seed: int, path: str | Path | None = None) -> LMWorker:
        return build(spec, seed, path)

    def shutdown(self) -> None:
        pass


class WorkerActor(LMWorker):
    """A worker built in its actor's own process, with the run's thread count and determinism."""

    def __init__(self, spec: ModelSpec, seed: int, path: str | Path | None, threads: int) -> None:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(True)
        built = build(spec, seed, path)
        super().__init__(built.model, built.tokenizer)


class RemoteWorker:
    """A Ray actor's methods, called and waited for as a local worker's."""

    def __init__(self, actor: Any, name: str) -> None:
        self._actor, self._name = actor, name

    def __getattr__(self, method: str) -> Callable[..., Any]:
        import ray

        remote = getattr(self._actor, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return ray.get(remote.remote(*args, **kwargs))
            except ray.exceptions.RayActorError as err:
                raise WorkerDied(
                    f"the {self._name} worker died ({type(err).__name__}); the checkpoints are intact: "
                    "rerun the same command with the same --run-dir to resume"
                ) from None

        return call


class RayBackend:
    """Workers as Ray actors in one placement group (see the module docstring)."""

    def __init__(self, cfg: BackendConfig, threads: int) -> None:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        self.cfg, self.threads = cfg, threads
        self.owns_ray = not ray.is_initialized()  # else a caller's Ray session: left running
        if self.owns_ray:
            if cfg.address is None:  # a local instance, reachable from this machine only
                cpus = max(os.cpu_count() or 1, cfg.cpus_per_worker * len(WORKER_SLOTS))
                ray.init(
                    num_cpus=cpus,
                    num_gpus=cfg.gpus_per_worker * len(WORKER_SLOTS) if cfg.gpus_per_worker else None,
                    include_dashboard=cfg.dashboard,
                    dashboard_host="127.0.0.1",
                    _node_ip_address="127.0.0.1",
                    log_to_driver=True,
                    configure_logging=False,
                )
            else:
                ray.init(address=cfg.address, configure_logging=False)
        bundle = {"CPU": cfg.cpus_per_worker} | ({"GPU": cfg.gpus_per_worker} if cfg.gpus_per_worker else {})
        self.group = placement_group([bundle] * len(WORKER_SLOTS), strategy=cfg.placement.upper())
        try:
            ray.get(self.group.ready(), timeout=cfg.start_timeout)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(self.group)
            raise BackendError(
                f"Ray could not reserve {len(WORKER_SLOTS)} × {bundle} for the workers within "
                f"{cfg.start_timeout:g} s (the cluster has {ray.available_resources()} free): lower "
                "backend.cpus_per_worker / backend.gpus_per_worker or add nodes"
            ) from None
        self.actors: list[Any] = []

    def spawn(self, name: str, spec: ModelSpec, seed: int, path: str | Path | None = None) -> LMWorker:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(
            self.group, placement_group_bundle_index=WORKER_SLOTS.index(name)
        )
        actor_cls = ray.remote(WorkerActor).options(
            name=None,
            num_cpus=self.cfg.cpus_per_worker,
            num_gpus=self.cfg.gpus_per_worker,
            scheduling_strategy=strategy,
            max_restarts=0,
        )
        local = path is not None and Path(path).exists()  # a directory here: the actor may run elsewhere
        where = str(Path(path).resolve()) if local else path
        actor = actor_cls.remote(spec, seed, None if where is None else str(where), self.threads)
        self.actors.append(actor)
        return RemoteWorker(actor, name)  # type: ignore[return-value]

    def shutdown(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for actor in self.actors:
            ray.kill(actor)
        remove_placement_group(self.group)
        if self.owns_ray:
            ray.shutdown()


def make_backend(cfg: BackendConfig, threads: int) -> Backend:
    if cfg.name == "ray":
        return RayBackend(cfg, threads)
    return LocalBackend()
