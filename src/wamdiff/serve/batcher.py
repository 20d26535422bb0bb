"""Dynamic batching: requests arriving from many connections are decoded together.

One decoder thread takes the oldest waiting request and, with it, every request that arrives until either
`max_batch` are waiting or the oldest has waited `max_wait_ms`; requests that queued while the decoder was busy
have waited already and go at once. A request that comes alone after a lone batch (one client at a time) goes at
once too: waiting for company that has not shown up for a whole batch only adds latency. The batch is one
`run_batch(items)` call. A request cancelled before its batch starts (its client left) is dropped, never decoded.
If that call raises, each request of the batch is run again alone, so a request the model
fails on gets its own error and the others their results.

Why no continuous batching (a finished sample leaving at a block boundary, a waiting request joining): `decoding`
decodes a batch as one call, and in the fixed-width answer formats of the shipped checkpoints every answer has the
same length, so every sample of a batch ends in the same block and none would leave early (measured by
`wamdiff serve-bench`: "blocks per answer"); joining would only shorten the queue wait, which the bench reports.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class BatchingConfig:
    max_batch: int = 8  # requests decoded together
    max_wait_ms: float = 5.0  # how long the oldest request waits for others to join its batch

    def __post_init__(self) -> None:
        if int(self.max_batch) < 1:
            raise ValueError(f"--max-batch {self.max_batch}: must be at least 1")
        if not 0.0 <= float(self.max_wait_ms) <= 10_000.0:
            raise ValueError(f"--max-wait-ms {self.max_wait_ms}: must lie in [0, 10000]")


@dataclass
class BatchTiming:
    queue_s: float  # from submit to the start of its batch
    decode_s: float  # the batch's run_batch call
    batch_size: int


@dataclass
class _Item:
    value: object
    future: Future
    arrived: float


@dataclass
class BatcherStats:
    requests: int = 0
    batches: int = 0
    failed: int = 0  # requests whose run raised
    isolated: int = 0  # batches that raised and were run again request by request
    abandoned: int = 0  # requests cancelled before their batch (the client left): not decoded
    sizes: dict = field(default_factory=dict)  # batch size -> count

    def as_dict(self) -> dict:
        return {"requests": self.requests, "batches": self.batches, "failed": self.failed, "isolated_batches": self.isolated,
                "abandoned": self.abandoned,
                "mean_batch": self.requests / self.batches if self.batches else None,
                "batch_sizes": {str(k): v for k, v in sorted(self.sizes.items())}}


class DynamicBatcher:
    """`submit(value) -> Future` of `(result, BatchTiming)`; `run_batch(values) -> results` runs on one thread."""

    def __init__(self, run_batch: Callable[[list], list], config: BatchingConfig = BatchingConfig(), *, start: bool = True,
                 on_batch: Callable[[int, float], None] | None = None, clock: Callable[[], float] = time.perf_counter):
        """`on_batch(size, decode_s)`: called after each batch is decoded (the server's metrics). `clock`: seconds,
        for the wait bound and the timings (tests pass a fake one)."""
        self.run_batch, self.config, self.on_batch, self.clock = run_batch, config, on_batch, clock
        self.stats = BatcherStats()
        self._queue: queue.Queue[_Item] = queue.Queue()
        self._stop = threading.Event()
        self._alone = True  # the last batch had one request and none arrived while it ran
        self._thread = threading.Thread(target=self._loop, name="wamdiff-batcher", daemon=True)
        if start:
            self.start()

    def start(self) -> None:
        if not self._thread.is_alive():
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the batch in progress, fail what still waits, end the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item.future.set_running_or_notify_cancel():
                item.future.set_exception(RuntimeError("the server is shutting down"))

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    def submit(self, value) -> Future:
        if self._stop.is_set():
            raise RuntimeError("the batcher is stopped")
        item = _Item(value, Future(), self.clock())
        self._queue.put(item)
        return item.future

    def _claim(self, item: _Item) -> bool:
        """Mark the request as running (it can no longer be cancelled); False when it was cancelled already."""
        if item.future.set_running_or_notify_cancel():
            return True
        self.stats.abandoned += 1
        return False

    def _collect(self, first: _Item) -> list[_Item]:
        batch = [first]
        if self._alone and self._queue.empty():
            return batch
        deadline = first.arrived + self.config.max_wait_ms / 1e3
        while len(batch) < self.config.max_batch:
            left = deadline - self.clock()
            try:
                item = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                if left > 0:
                    continue  # the deadline is the clock's: look again (the same time, unless a test's fake clock)
                break
            if self._claim(item):
                batch.append(item)
        return batch

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                first = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if not self._claim(first):
                continue
            self._run(self._collect(first))

    def _run(self, batch: list[_Item]) -> None:
        start = self.clock()
        self.stats.batches += 1
        self.stats.requests += len(batch)
        self.stats.sizes[len(batch)] = self.stats.sizes.get(len(batch), 0) + 1
        try:
            results, failure = self._call([it.value for it in batch]), None
        except Exception as err:  # noqa: BLE001 - never lost: the batch is retried alone, or the error is the request's
            results, failure = [], err
        # decided before any reply goes out: a request sent on a reply did not arrive while this batch ran
        self._alone = len(batch) == 1 and self._queue.empty()
        if failure is not None:
            if len(batch) == 1:
                self.stats.failed += 1
                batch[0].future.set_exception(failure)
                return
            self.stats.isolated += 1
            for it in batch:
                t0 = self.clock()
                try:
                    (result,) = self._call([it.value])
                except Exception as one_err:  # noqa: BLE001 - this request's own failure
                    self.stats.failed += 1
                    it.future.set_exception(one_err)
                else:
                    it.future.set_result((result, BatchTiming(t0 - it.arrived, self.clock() - t0, 1)))
            return
        decode = self.clock() - start
        if self.on_batch is not None:
            self.on_batch(len(batch), decode)
        for it, result in zip(batch, results):
            it.future.set_result((result, BatchTiming(start - it.arrived, decode, len(batch))))

    def _call(self, values: list) -> list:
        results = list(self.run_batch(values))
        if len(results) != len(values):
            raise RuntimeError(f"run_batch returned {len(results)} results for {len(values)} requests")
        return results
