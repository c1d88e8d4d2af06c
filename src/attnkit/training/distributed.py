"""Data-parallel training on PyTorch's own engine: torchrun's environment, one process group, DDP.

The same `attnkit train ...` command runs as one process, or as N under

    torchrun --nproc_per_node N -m attnkit train translation ...          # one machine
    torchrun --nnodes 2 --node_rank R --rdzv_backend c10d --rdzv_endpoint HOST:29500 \
             --nproc_per_node 8 -m attnkit train detection ...             # several machines

torchrun sets WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; `setup` joins the process
group (gloo on CPU, NCCL on CUDA, one GPU per process: LOCAL_RANK) when there is more than one
process, and does nothing otherwise. Synchronous data parallelism as in Vaswani et al. 2017,
section 5.2 (8 GPUs) and Carion et al. 2020, section 4 (16 GPUs): every process holds the whole
model, reads its own shard of each epoch's batches (`shard`), and DistributedDataParallel
(`wrap`) averages the gradients, so that N processes with per-process batch B step exactly like
one process accumulating N batches of B. Only rank 0 prints, logs, validates and writes the run
folder; the other ranks keep their stdout quiet (warnings on stderr still show).
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TypeVar

import torch
import torch.distributed as dist
from torch import nn

from attnkit.errors import ConfigError, DataError

T = TypeVar("T")
TIMEOUT = datetime.timedelta(minutes=60)  # rank 0 validates while the others wait at the next collective


def launched() -> bool:
    """Whether this process was started as one of several (torchrun's WORLD_SIZE > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def active() -> bool:
    """Whether a process group with more than one process is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def is_main() -> bool:
    """Rank 0: the process that prints, logs, validates and writes checkpoints."""
    return rank() == 0


def setup(device: torch.device) -> torch.device:
    """Join torchrun's process group if there is one; the device this process trains on.

    gloo for CPU training, NCCL for CUDA with this process's GPU (LOCAL_RANK). A single process
    (no torchrun, or --nproc_per_node 1) gets `device` back and no process group.
    """
    if not launched():
        return device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if dist.is_initialized():
        return device
    missing = [name for name in ("RANK", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        raise ConfigError(f"WORLD_SIZE is {os.environ['WORLD_SIZE']} but {', '.join(missing)} is not set; "
                          "start several processes with torchrun (see the README, 'Many processes')")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=TIMEOUT)
    atexit.register(teardown)
    if dist.get_rank() != 0:
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - for the life of the process
    return device


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def finish() -> None:
    """The end of a command: wait until rank 0 is done (validating, writing), then leave the group together."""
    barrier()
    teardown()


# ------------------------------------------------------------ data and model
def shard(batches: Sequence[T]) -> list[T]:
    """This rank's batches of one epoch: every `world_size`-th, from `rank`, the same count on every rank.

    The last `len(batches) % world_size` batches of the epoch are left out, so that every rank
    takes the same number of steps (DDP needs every rank in every gradient all-reduce).
    """
    size = world_size()
    if size == 1:
        return list(batches)
    count = len(batches) // size
    if count == 0:
        raise DataError(f"an epoch has {len(batches)} batches, fewer than the {size} processes; "
                        "use more data, smaller batches or fewer processes")
    return list(batches[rank()::size][:count])


def wrap(model: nn.Module) -> nn.Module:
    """DistributedDataParallel around `model` when several processes train, else `model` itself.

    Train through the returned module (its backward averages gradients across ranks); save and
    evaluate `model`, whose parameter names carry no "module." prefix.
    """
    if not active():
        return model
    device = next(model.parameters()).device
    return nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)


def no_sync(module: nn.Module) -> contextlib.AbstractContextManager:
    """DDP's no_sync (gradients kept local, for all but the last accumulated batch); nothing otherwise."""
    if isinstance(module, nn.parallel.DistributedDataParallel):
        return module.no_sync()
    return contextlib.nullcontext()


# ------------------------------------------------------------ collectives
def _tensor(values: Sequence[float]) -> torch.Tensor:
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    return torch.tensor(values, dtype=torch.float64, device=device)


def all_true(flag: bool) -> bool:
    """True if `flag` is true on every rank (so that all ranks skip a step, or none does)."""
    if not active():
        return flag
    value = _tensor([1.0 if flag else 0.0])
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return bool(value.item())


def average(values: Mapping[str, float], summed: Sequence[str] = ()) -> dict[str, float]:
    """The mean of each value over the ranks (the sum for the keys in `summed`); one all-reduce.

    Every rank must pass the same keys.
    """
    if not active():
        return dict(values)
    keys = sorted(values)
    total = _tensor([float(values[key]) for key in keys])
    dist.all_reduce(total)
    return {key: value if key in summed else value / world_size() for key, value in zip(keys, total.tolist())}


def from_main(value: int) -> int:
    """Rank 0's `value` on every rank (a decision such as "stop now" that must be the same everywhere)."""
    if not active():
        return value
    tensor = _tensor([float(value)])
    dist.broadcast(tensor, src=0)
    return int(tensor.item())


def barrier() -> None:
    if active():
        dist.barrier()


@contextlib.contextmanager
def main_first() -> Iterator[None]:
    """Rank 0 runs the block first (creating or repairing the run folder), then the others do."""
    if not is_main():
        barrier()
    try:
        yield
    finally:
        if is_main():
            barrier()
