"""Processes and devices for the stages that run outside the accelerate training loop (rl, evaluate).

Under ``torchrun`` / ``accelerate launch`` (``WORLD_SIZE`` > 1 in the environment) :func:`setup` joins the process
group torch's launcher describes (gloo on CPU, NCCL on CUDA) and gives each rank its device; in a plain process it is
world 1 and every collective below is the identity. The supervised stages average gradients through
accelerate's ``DistributedDataParallel``; the RL trainer calls :func:`average_gradients` after its backward (its
forwards are several per backward). The rest moves the small things a data-parallel RL step and a sharded
evaluation exchange: Python objects (texts, per-row scores) and scalars. :func:`launch` starts the local workers
when params ask for ``common.processes`` > 1 (:func:`dsmath.runtime.stage.run_stage`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class World:
    """This process's place: rank in 0..size-1 and the device its tensors live on."""

    rank: int = 0
    size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def shard(self, n: int) -> range:
        """This rank's contiguous share of n items (sizes differ by at most 1; rank order = item order)."""
        base, extra = divmod(n, self.size)
        start = self.rank * base + min(self.rank, extra)
        return range(start, start + base + (self.rank < extra))


def launch(processes: int, threads: int, argv: list[str]) -> int:
    """Run this program again over `processes` local workers under ``torch.distributed.run`` (``--standalone``: a
    rendezvous on this machine) with the same arguments, each worker at `threads` intra-op threads (0: torch's
    default); returns the launcher's exit code (non-zero when any worker failed; the others are stopped then).

    On GPUs it is one worker per device. On a 2-core CPU two one-thread workers against one two-thread process
    measured 1.16x for evaluation, 1.03x for RL and 0.92x for pretraining (benchmarks/HISTORY.md, "Processes")."""
    import subprocess
    import sys

    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    target = ["-m", spec.name] if spec is not None else [main.__file__]
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)  # else the launcher sets 1 and warns about it
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
           *target, *argv]
    return subprocess.call(cmd, env=env)


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """params `common.device` -> a torch device: auto picks CUDA (this rank's GPU), else MPS, else the CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("common.device is cuda but torch sees no CUDA device")
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device(name)


def setup(device: str = "auto") -> World:
    """Join the launcher's process group if there is one (idempotent) and return this process's :class:`World`."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local_rank)
    if size == 1:
        return World(0, 1, dev)
    import torch.distributed as dist

    if not dist.is_initialized():
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return World(dist.get_rank(), dist.get_world_size(), dev)


def gather_objects(world: World, obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank ([obj] in one process)."""
    if not world.distributed:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def gather_lists(world: World, items: list) -> list:
    """The concatenation, in rank order, of every rank's list (with :meth:`World.shard` this restores item order)."""
    return [x for part in gather_objects(world, items) for x in part]


def all_sum(world: World, values: list[float]) -> list[float]:
    """Element-wise sum over ranks of a list of floats (float64 on the wire)."""
    if not world.distributed:
        return list(values)
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=_wire_device(world))
    dist.all_reduce(t)
    return t.tolist()


def any_rank(world: World, flag: bool) -> bool:
    """True when `flag` is True on at least one rank."""
    return all_sum(world, [float(flag)])[0] > 0


def average_gradients(world: World, parameters) -> None:
    """Replace each gradient by its mean over ranks, in one all-reduce of all of them (a missing gradient counts as
    zeros): what ``DistributedDataParallel`` does inside backward, but after any number of forwards, so the RL
    trainer's bucketed and shared-prompt forwards (several per backward) run in every world. A no-op in one process."""
    if not world.distributed:
        return
    import torch.distributed as dist

    params = [p for p in parameters if p.requires_grad]
    grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world.size
    offset = 0
    for p in params:
        p.grad = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()


def barrier(world: World) -> None:
    if world.distributed:
        import torch.distributed as dist

        dist.barrier()


def _wire_device(world: World) -> torch.device:
    return world.device if world.device.type == "cuda" else torch.device("cpu")
