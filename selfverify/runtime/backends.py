"""Backends: where workers live (docs/guides/architecture.md, 'Seams'), chosen by ``backend.name``.

- ``local``: each worker is an object in the pipeline's process (the default).
- ``ray``: each worker is a Ray actor with its own resources, placed in one placement group (one
  bundle per worker the pipeline spawns, its ``roles``; ``backend.placement`` packs them onto as few
  nodes as fit, or spreads them). A local Ray instance is started, with its dashboard and ports on
  loopback, unless ``backend.address`` names a running cluster to join.

A pipeline names the workers it will spawn when it makes its backend (``make_backend(..., roles=)``):
the RL-only job one (the generator; its critic lives in the same worker), the loop the generator and
the judge, and the meta-verifier when it is a model of its own. Ray reserves exactly those; spawning a
role not named is an error on either backend, so a pipeline cannot outgrow its reservation unnoticed.

The pipeline calls a Ray worker exactly as a local one (:class:`RemoteWorker`): arguments and results
are texts, tensors and dictionaries. With ``train.ranks`` > 1 (DeepSpeed data parallelism) a worker is
that many actors, one per rank, joined in one ``torch.distributed`` group: every call goes to every
rank with the same arguments (each rank trains on its share of the rows, see ``selfverify.runtime.engines``)
and rank 0's result comes back. The pipeline's phases call one worker at a time, so workers that
share a node take turns on its cores; a local instance therefore declares at least one CPU per worker.
A worker that dies raises :class:`WorkerDied`; the run's checkpoints are intact and the same command
resumes it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from selfverify.config.schema import BackendConfig, ModelSpec, RolloutConfig, TrainConfig
from selfverify.runtime.engines import configure_torch, free_port, join_group
from selfverify.runtime.workers import LMWorker, build

WORKER_SLOTS = ("generator", "judge", "meta")  # the roles a worker can have


class BackendError(RuntimeError):
    """The backend cannot place or keep the workers; the message says what to do."""


class WorkerDied(BackendError):
    """A worker's process ended (killed, out of memory, a lost node); the message names the worker."""


def checked_roles(roles: Sequence[str]) -> tuple[str, ...]:
    """``roles`` as a tuple, once each and all of them WORKER_SLOTS; ValueError otherwise."""
    roles = tuple(roles)
    unknown = [r for r in roles if r not in WORKER_SLOTS]
    if not roles or unknown or len(set(roles)) != len(roles):
        raise ValueError(f"roles must be distinct names from {WORKER_SLOTS}, not {roles}")
    return roles


def require_role(name: str, roles: tuple[str, ...]) -> None:
    """BackendError unless the backend was made with a place for the worker ``name``."""
    if name not in roles:
        raise BackendError(
            f"the {name} worker has no place: the backend was made for {', '.join(roles)}; "
            "pass every role the pipeline spawns to make_backend(roles=...)"
        )


class Backend(Protocol):
    def spawn(self, name: str, spec: ModelSpec, seed: int, path: str | Path | None = None) -> LMWorker:
        """The worker ``name`` (one of the backend's roles) with the model ``spec`` names, or the one at
        ``path``."""
        ...

    def shutdown(self) -> None: ...


class LocalBackend:
    """Workers as objects in this process."""

    def __init__(
        self,
        train: TrainConfig | None = None,
        rollout: RolloutConfig | None = None,
        roles: Sequence[str] = WORKER_SLOTS,
    ) -> None:
        self.train, self.rollout, self.roles = train, rollout, checked_roles(roles)
        self.workers: list[LMWorker] = []

    def spawn(self, name: str, spec: ModelSpec, seed: int, path: str | Path | None = None) -> LMWorker:
        require_role(name, self.roles)
        self.workers.append(build(spec, seed, path, self.train, self.rollout))
        return self.workers[-1]

    def shutdown(self) -> None:
        """Stop the vLLM servers the workers started (a long-lived caller would keep them otherwise)."""
        for worker in self.workers:
            if worker.vllm is not None:
                worker.vllm.close()


class WorkerActor(LMWorker):
    """A worker built in its actor's own process, with the run's thread count and determinism: the
    worker ``build`` makes of the same arguments, ``model.autocast`` included."""

    def __init__(
        self,
        spec: ModelSpec,
        seed: int,
        path: str | Path | None,
        threads: int,
        train: TrainConfig,
        rollout: RolloutConfig,
    ) -> None:
        configure_torch(threads)
        built = build(spec, seed, path, train, rollout)
        super().__init__(
            built.model, built.tokenizer, train, built.source, rollout, seed, autocast=built.autocast
        )

    def address(self) -> tuple[str, int]:
        """Where this actor, as rank 0, listens for the other ranks: its node's address, a free port."""
        import ray

        return ray.util.get_node_ip_address(), free_port()

    def join(self, rank: int, world: int, address: str, port: int) -> None:
        join_group(rank, world, address, port, self.model.device)


class RemoteWorker:
    """The methods of a worker's Ray actors (one per rank), called on every rank and waited for as a
    local worker's; rank 0's result is the worker's."""

    def __init__(self, actors: list[Any], name: str) -> None:
        self._actors, self._name = actors, name

    def __getattr__(self, method: str) -> Callable[..., Any]:
        import ray

        remotes = [getattr(actor, method) for actor in self._actors]

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return ray.get([remote.remote(*args, **kwargs) for remote in remotes])[0]
            except ray.exceptions.RayActorError as err:
                raise WorkerDied(
                    f"the {self._name} worker died ({type(err).__name__}); the checkpoints are intact: "
                    "rerun the same command with the same --run-dir to resume"
                ) from None

        return call


class RayBackend:
    """Workers as Ray actors in one placement group with a bundle per rank of each of ``roles`` (see
    the module docstring)."""

    def __init__(
        self,
        cfg: BackendConfig,
        threads: int,
        train: TrainConfig | None = None,
        rollout: RolloutConfig | None = None,
        roles: Sequence[str] = WORKER_SLOTS,
    ) -> None:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        self.cfg, self.threads, self.roles = cfg, threads, checked_roles(roles)
        self.train, self.rollout = train or TrainConfig(), rollout or RolloutConfig()
        slots = len(self.roles) * self.train.ranks  # one bundle per rank of every worker
        self.owns_ray = not ray.is_initialized()  # else a caller's Ray session: left running
        if self.owns_ray:
            if cfg.address is None:  # a local instance, reachable from this machine only
                cpus = max(os.cpu_count() or 1, cfg.cpus_per_worker * slots)
                ray.init(
                    num_cpus=cpus,
                    num_gpus=cfg.gpus_per_worker * slots if cfg.gpus_per_worker else None,
                    include_dashboard=cfg.dashboard,
                    dashboard_host="127.0.0.1",
                    _node_ip_address="127.0.0.1",
                    log_to_driver=True,
                    configure_logging=False,
                    # Ray runs workers at niceness 15 by default, below its own control plane; here
                    # the workers are the computation, and a niced actor stalls whenever a Ray
                    # process or the driver wakes on the same cores.
                    _system_config={"worker_niceness": 0},
                )
            else:
                ray.init(address=cfg.address, configure_logging=False)
        bundle = {"CPU": cfg.cpus_per_worker} | ({"GPU": cfg.gpus_per_worker} if cfg.gpus_per_worker else {})
        self.group = placement_group([bundle] * slots, strategy=cfg.placement.upper())
        try:
            ray.get(self.group.ready(), timeout=cfg.start_timeout)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(self.group)
            raise BackendError(
                f"Ray could not reserve {slots} × {bundle} for the workers within "
                f"{cfg.start_timeout:g} s (the cluster has {ray.available_resources()} free): lower "
                "backend.cpus_per_worker / backend.gpus_per_worker or add nodes"
            ) from None
        self.actors: list[Any] = []

    def spawn(self, name: str, spec: ModelSpec, seed: int, path: str | Path | None = None) -> LMWorker:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        require_role(name, self.roles)
        local = path is not None and Path(path).exists()  # a directory here: the actor may run elsewhere
        where = None if path is None else str(Path(path).resolve()) if local else str(path)
        ranks = self.train.ranks
        actors = []
        for rank in range(ranks):
            strategy = PlacementGroupSchedulingStrategy(
                self.group, placement_group_bundle_index=self.roles.index(name) * ranks + rank
            )
            actor_cls = ray.remote(WorkerActor).options(
                num_cpus=self.cfg.cpus_per_worker,
                num_gpus=self.cfg.gpus_per_worker,
                scheduling_strategy=strategy,
                max_restarts=0,
            )
            actors.append(actor_cls.remote(spec, seed, where, self.threads, self.train, self.rollout))
        self.actors += actors
        worker = RemoteWorker(actors, name)
        if ranks > 1:
            address, port = ray.get(actors[0].address.remote())
            try:
                ray.get([a.join.remote(rank, ranks, address, port) for rank, a in enumerate(actors)])
            except ray.exceptions.RayActorError as err:
                raise WorkerDied(f"a rank of the {name} worker died while joining its group: {err}") from None
        return worker  # type: ignore[return-value]

    def shutdown(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for actor in self.actors:
            ray.kill(actor)
        remove_placement_group(self.group)
        if self.owns_ray:
            ray.shutdown()


def make_backend(
    cfg: BackendConfig,
    threads: int,
    train: TrainConfig | None = None,
    rollout: RolloutConfig | None = None,
    *,
    roles: Sequence[str],
) -> Backend:
    """The backend ``cfg.name`` names, with a place for each of ``roles``: the workers the pipeline
    will spawn, and no others (Ray reserves resources for each)."""
    if cfg.name == "ray":
        return RayBackend(cfg, threads, train, rollout, roles)
    return LocalBackend(train, rollout, roles)
