"""Dynamic batching: requests that arrive close together run through the model as one call.

The first request of a key (a model and the settings its batch shares, e.g. the beam size) waits
up to `wait_seconds` for company; then, as soon as the one inference thread is free, up to
`max_batch` waiting requests of that key go to `run(items)` together. While a batch runs, new
requests queue, so under load batches fill without waiting (as Triton's and TorchServe's dynamic
batchers do). RUN returns one result per item, an exception in place of a failed item's result;
if RUN itself raises, each item is rerun alone, so one bad request never fails the others.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

Run = Callable[[Sequence[Any]], Sequence[Any]]  # items -> one result (or Exception) per item


@dataclass
class BatchStats:
    """How many batches ran and how many requests they held: mean batch size = requests / batches."""
    batches: int = 0
    requests: int = 0
    largest: int = 0
    sizes: dict[int, int] = field(default_factory=dict)  # batch size -> how many batches had it

    def add(self, size: int) -> None:
        self.batches, self.requests, self.largest = self.batches + 1, self.requests + size, max(self.largest, size)
        self.sizes[size] = self.sizes.get(size, 0) + 1


@dataclass
class _Waiting:
    item: Any
    future: asyncio.Future
    arrived: float  # time.monotonic()


class Batcher:
    """Groups concurrent `submit(key, item, run)` calls into batches run on one worker thread."""

    def __init__(self, max_batch: int = 8, wait_seconds: float = 0.005) -> None:
        if max_batch < 1 or wait_seconds < 0:
            raise ValueError(f"max_batch must be >= 1 and wait_seconds >= 0, got {max_batch}, {wait_seconds}")
        self.max_batch, self.wait_seconds = max_batch, wait_seconds
        self.stats = BatchStats()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="attnkit-inference")
        self._waiting: dict[Hashable, list[_Waiting]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._free: asyncio.Lock | None = None  # held while the worker runs a batch

    async def submit(self, key: Hashable, item: Any, run: Run) -> Any:
        """ITEM's result from RUN (called on a batch of items of KEY); raises the item's exception."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # asyncio primitives belong to one loop (a test client may start another)
            self._loop, self._free, self._waiting = loop, asyncio.Lock(), {}
        waiting = self._waiting.setdefault(key, [])
        entry = _Waiting(item, loop.create_future(), time.monotonic())
        waiting.append(entry)
        if len(waiting) == 1:  # the first of a new batch leads it
            loop.create_task(self._lead(key, run))
        return await entry.future

    async def _lead(self, key: Hashable, run: Run) -> None:
        waiting = self._waiting[key]
        deadline = waiting[0].arrived + self.wait_seconds
        while len(waiting) < self.max_batch and (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(left, 0.001))
        assert self._free is not None
        async with self._free:
            batch, waiting[:] = waiting[:self.max_batch], waiting[self.max_batch:]
            if waiting:  # the rest leads the next batch of this key
                asyncio.get_running_loop().create_task(self._lead(key, run))
            self.stats.add(len(batch))
            try:
                results = await asyncio.get_running_loop().run_in_executor(
                    self._worker, _run_each_on_failure, run, [w.item for w in batch])
            except BaseException as error:  # cancelled, or the worker shut down: no request waits forever
                results = [error] * len(batch)
        for entry, result in zip(batch, results):
            if entry.future.done():  # the client went away
                continue
            if isinstance(result, BaseException):
                entry.future.set_exception(result)
            else:
                entry.future.set_result(result)

    def close(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)


def _run_each_on_failure(run: Run, items: list[Any]) -> list[Any]:
    """RUN(items); if that raises, RUN on each item alone (an exception in place of a failed item's result)."""
    try:
        results = list(run(items))
    except Exception as error:  # noqa: BLE001 - handed to the requests it belongs to
        return [error] if len(items) == 1 else [_run_alone(run, item) for item in items]
    if len(results) != len(items):
        return [RuntimeError(f"a batch of {len(items)} gave {len(results)} results")] * len(items)
    return results


def _run_alone(run: Run, item: Any) -> Any:
    try:
        return run([item])[0]
    except Exception as error:  # noqa: BLE001 - handed to the one request it belongs to
        return error
