"""Training engines: what turns a loss into an optimizer step (docs/guides/architecture.md, 'Seams').

- ``torch``: AdamW in this process, gradient clipping by ``torch.nn.utils`` (the default).
- ``deepspeed``: a DeepSpeed engine, ZeRO stage 1–3 (optionally offloading the optimizer state to the
  CPU), over ``train.ranks`` data-parallel ranks (one process each: ``backend=ray`` places them).

The trainer (``selfverify.runtime.trainer``) writes one loop for both: it asks the engine for this rank's
micro-batches of a batch's rows, divides every loss by the batch's *global* token or sequence count
(the trainer sees the whole batch on every rank), calls ``backward`` and ``step``, and sums its metrics
over ranks with ``reduce``. DeepSpeed averages gradients over ranks, so its ``backward`` multiplies
the loss by the world size: the sum of the ranks' gradients is then the single-process gradient, and
an update does not depend on the number of ranks. Every rank runs the same number of forward and
backward passes (ZeRO's collectives need it); a rank with fewer rows pads with a zero-weight stand-in.
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Protocol

import torch

from selfverify.config.schema import TrainConfig
from selfverify.runtime.models import Autocast

DEEPSPEED_DIR = "deepspeed"  # a DeepSpeed engine's own checkpoint (optimizer partitions) in a bundle
_TAG = "state"


# The policy's AdamW; a critic keeps torch's defaults (CRITIC_ADAM).
POLICY_ADAM = {"betas": (0.9, 0.95), "weight_decay": 0.0}
CRITIC_ADAM = {"betas": (0.9, 0.999), "weight_decay": 0.01}


def make_optimizer(
    model: torch.nn.Module,
    lr: float,
    *,
    warmup_steps: int = 0,
    total_steps: int | None = None,
    adam: dict[str, Any] = POLICY_ADAM,
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW with linear warm-up, then cosine decay to 10% over ``total_steps`` (constant if None)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, **adam)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if total_steps is None:
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


class TrainEngine(Protocol):
    module: torch.nn.Module  # the model itself: its config, weights, generation
    model: Any  # what the trainer calls for a forward pass it will differentiate
    scheduler: torch.optim.lr_scheduler.LRScheduler
    # Every rank must call the model alike, whatever rows it holds: ZeRO-3 over several ranks gathers each
    # layer's weights from all of them.
    lockstep: bool

    def micro_batches(self, rows: torch.Tensor, size: int) -> list[tuple[torch.Tensor, float]]:
        """This rank's chunks of ``rows`` (at most ``size`` each) with their loss weights (0 for a
        stand-in that keeps the ranks' pass counts equal)."""
        ...

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        """Accumulate the gradient of ``loss``; ``last``: the step's final micro-batch."""
        ...

    def step(self) -> float:
        """Clip, step the optimizer, zero the gradients; returns the gradient norm before clipping."""
        ...

    def reduce(self, values: dict[str, float]) -> dict[str, float]:
        """``values`` summed over the data-parallel ranks."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], checkpoint: Path | None) -> None: ...

    def save(self, path: Path) -> None:
        """Write what ``state_dict`` does not hold (DeepSpeed's optimizer partitions) under ``path``."""
        ...


class TorchEngine:
    """AdamW and a learning-rate schedule in this process."""

    def __init__(self, module: torch.nn.Module, lr: float, grad_clip: float, **schedule: Any) -> None:
        self.module = self.model = module
        self.grad_clip = grad_clip
        self.lockstep = False
        self.optimizer, self.scheduler = make_optimizer(module, lr, **schedule)

    def micro_batches(self, rows: torch.Tensor, size: int) -> list[tuple[torch.Tensor, float]]:
        return [(chunk, 1.0) for chunk in rows.split(size)]

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        loss.backward()

    def step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.grad_clip).item()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def reduce(self, values: dict[str, float]) -> dict[str, float]:
        return values

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any], checkpoint: Path | None) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def save(self, path: Path) -> None:
        pass


def deepspeed_config(train: TrainConfig, grad_clip: float, bf16: bool) -> dict[str, Any]:
    """The DeepSpeed configuration of one engine. Micro-batching and accumulation are the trainer's
    (``set_gradient_accumulation_boundary``), so DeepSpeed's own batch sizes are one per rank."""
    zero: dict[str, Any] = {"stage": train.zero_stage}
    if train.offload:
        zero["offload_optimizer"] = {"device": "cpu"}
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": grad_clip,
        "zero_optimization": zero,
        "bf16": {"enabled": bf16},
        "zero_allow_untested_optimizer": True,  # our AdamW and its schedule, not DeepSpeed's
        "zero_force_ds_cpu_optimizer": False,  # offload with torch's AdamW: no op to compile
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


class DeepSpeedTrainEngine:
    """A DeepSpeed engine over the data-parallel ranks of ``torch.distributed``."""

    def __init__(
        self, module: torch.nn.Module, lr: float, grad_clip: float, train: TrainConfig, **schedule: Any
    ) -> None:
        import deepspeed

        init_distributed(module.device)
        self.rank, self.world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        # The schedule drives the base optimizer's learning rate; DeepSpeed's wrapper reads it from there.
        optimizer, self.scheduler = make_optimizer(module, lr, **schedule)
        config = deepspeed_config(train, grad_clip, bf16=next(module.parameters()).dtype == torch.bfloat16)
        self.engine, *_ = deepspeed.initialize(model=module, optimizer=optimizer, config=config)
        self.module = self.engine.module
        # Through the engine: its forward keeps ZeRO-3's accumulation count (micro-batches add up).
        self.model = self.engine
        self.stage = train.zero_stage
        self.lockstep = self.stage == 3 and self.world > 1

    def micro_batches(self, rows: torch.Tensor, size: int) -> list[tuple[torch.Tensor, float]]:
        shard = rows.tensor_split(self.world)[self.rank]
        count = math.ceil(math.ceil(len(rows) / self.world) / size)  # the same on every rank
        return [(c, 1.0) if len(c) else (rows[:1], 0.0) for c in shard.tensor_split(count)]

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss * self.world, scale_wrt_gas=False)

    def step(self) -> float:
        self.engine.step()
        return float(self.engine.get_global_grad_norm())

    def reduce(self, values: dict[str, float]) -> dict[str, float]:
        keys = sorted(values)
        # On the module's device: NCCL reduces only CUDA tensors (gloo takes either).
        total = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=self.module.device)
        torch.distributed.all_reduce(total)
        return dict(zip(keys, total.tolist(), strict=True))

    @contextmanager
    def gathered(self) -> Iterator[None]:
        """The module's full parameters on every rank (ZeRO-3 partitions them; stages 1–2 do not)."""
        import deepspeed

        params = list(self.module.parameters())
        with deepspeed.zero.GatheredParameters(params) if self.stage == 3 else nullcontext():
            yield

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": {"engine": "deepspeed"}, "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any], checkpoint: Path | None) -> None:
        if checkpoint is None or not (checkpoint / _TAG).is_dir():
            raise FileNotFoundError(f"no DeepSpeed checkpoint to resume from at {checkpoint}")
        self.engine.load_checkpoint(
            str(checkpoint), tag=_TAG, load_optimizer_states=True, load_lr_scheduler_states=False
        )
        self.scheduler.load_state_dict(state["scheduler"])

    def save(self, path: Path) -> None:
        self.engine.save_checkpoint(str(path), tag=_TAG, save_latest=False)


def make_engine(
    module: torch.nn.Module,
    lr: float,
    train: TrainConfig,
    *,
    grad_clip: float = 1.0,
    warmup_steps: int = 0,
    total_steps: int | None = None,
    adam: dict[str, Any] = POLICY_ADAM,
    autocast: str | None = None,
) -> TorchEngine | DeepSpeedTrainEngine:
    """The engine ``train.engine`` names, training ``module`` with AdamW at ``lr`` (make_optimizer);
    ``autocast``: its forward passes in that precision (``ModelSpec.autocast``)."""
    schedule = {"warmup_steps": warmup_steps, "total_steps": total_steps, "adam": adam}
    engine: TorchEngine | DeepSpeedTrainEngine
    if train.engine == "deepspeed":
        engine = DeepSpeedTrainEngine(module, lr, grad_clip, train, **schedule)
    else:
        engine = TorchEngine(module, lr, grad_clip, **schedule)
    if autocast is not None:
        engine.model = Autocast(engine.model, autocast)
    return engine


def gathered(engine: TrainEngine | None):
    """A context holding ``engine``'s full parameters (a no-op for the torch engine or no engine)."""
    return engine.gathered() if isinstance(engine, DeepSpeedTrainEngine) else nullcontext()


def configure_torch(threads: int) -> None:
    """A run's process (the driver, or a worker's actor): its thread count and deterministic kernels.
    Uninitialised memory is not filled: DeepSpeed allocates its gradient buckets with ``torch.empty``
    (hundreds of MB each), and filling them, the deterministic default, cost seconds per step."""
    torch.set_num_threads(threads)
    # cuBLAS is deterministic only with a fixed workspace, set before its first use; on a GPU a kernel
    # with no deterministic form warns rather than stops the run.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=torch.cuda.is_available())
    torch.utils.deterministic.fill_uninitialized_memory = False


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank of the group (``obj`` itself in a process of its own)."""
    if not torch.distributed.is_initialized():
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def is_writer() -> bool:
    """Whether this process writes checkpoints: rank 0, or the only process."""
    return not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0


def free_port() -> int:
    """A TCP port free on every interface of this node (rank 0's rendezvous listens on all of them)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def join_group(rank: int, world: int, address: str, port: int, device: torch.device) -> None:
    """Join the data-parallel group of ``world`` ranks whose rank 0 listens at ``address:port``."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0")
    os.environ.update(MASTER_ADDR=address, MASTER_PORT=str(port))
    init_distributed(device)


def init_distributed(device: torch.device) -> None:
    """torch.distributed for DeepSpeed: gloo on the CPU, NCCL on GPUs. Without ranks set up by
    ``join_group``, a group of one that meets through a file, not a port (nothing to collide with)."""
    if torch.distributed.is_initialized():
        return
    import deepspeed

    backend = "nccl" if device.type == "cuda" else "gloo"
    if "MASTER_PORT" in os.environ:
        deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False, verbose=False)
        return
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    store_dir = tempfile.mkdtemp(prefix="selfverify-dist-")
    atexit.register(shutil.rmtree, store_dir, True)
    store = Path(store_dir) / "store"
    deepspeed.init_distributed(
        dist_backend=backend,
        auto_mpi_discovery=False,
        init_method=f"file://{store}",
        rank=0,
        world_size=1,
        verbose=False,
    )
