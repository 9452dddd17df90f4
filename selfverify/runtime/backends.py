"""Backends: where workers live (DESIGN §2's backend seam), chosen by ``backend.name``.

- ``local``: each worker is an object in the pipeline's process (the default).
- ``ray``: each worker is a Ray actor with its own resources, placed in one placement group (one
  bundle per worker; ``backend.placement`` packs them onto as few nodes as fit, or spreads them). A
  local Ray instance is started, with its dashboard and ports on loopback, unless ``backend.address``
  names a running cluster to join.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from selfverify.config.schema import BackendConfig, ModelSpec, RolloutConfig, TrainConfig
from selfverify.runtime.engines import configure_torch, free_port, join_group
from selfverify.runtime.workers import LMWorker, build

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

    def __init__(self, train: TrainConfig | None = None, rollout: RolloutConfig | None = None) -> None:
        self.train, self.rollout = train, rollout

    def spawn(self, name: str, spec: ModelSpec, seed: int, path: str | Path | None = None) -> LMWorker:
        return build(spec, seed, path, self.train, self.rollout)

    def shutdown(self) -> None:
        pass


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
    """Workers as Ray actors in one placement group (see the module docstring)."""

    def __init__(
        self,
        cfg: BackendConfig,
        threads: int,
        train: TrainConfig | None = None,
        rollout: RolloutConfig | None = None,
    ) -> None:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        self.cfg, self.threads = cfg, threads
        self.train, self.rollout = train or TrainConfig(), rollout or RolloutConfig()
        slots = len(WORKER_SLOTS) * self.train.ranks  # one bundle per rank of every worker
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

        local = path is not None and Path(path).exists()  # a directory here: the actor may run elsewhere
        where = None if path is None else str(Path(path).resolve()) if local else str(path)
        ranks = self.train.ranks
        actors = []
        for rank in range(ranks):
            strategy = PlacementGroupSchedulingStrategy(
                self.group, placement_group_bundle_index=WORKER_SLOTS.index(name) * ranks + rank
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
    cfg: BackendConfig, threads: int, train: TrainConfig | None = None, rollout: RolloutConfig | None = None
) -> Backend:
    if cfg.name == "ray":
        return RayBackend(cfg, threads, train, rollout)
    return LocalBackend(train, rollout)
