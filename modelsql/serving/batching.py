"""Dynamic batching: requests for servables of one group are queued together and run as one batch.

Triton's dynamic batcher (triton-inference-server/server,
``docs/user_guide/model_configuration.md``, "Dynamic Batcher") and PRETZEL's
(OSDI 2018) batching of requests to shared stages: one queue per
``Servable.group``, in arrival order. Two policies:

* **adaptive** (the default, ``max_queue_delay_ms=None``): work-conserving, as
  Triton's dynamic batcher with its default delay of 0 and one model instance
  per thread. A request that finds fewer batches of its group dispatched than
  the executor has threads, plus :data:`AHEAD` (one batch waiting for a thread,
  so that a thread never idles while the event loop forms the next), is
  dispatched at once, with whatever arrived in the same turn of the event loop:
  a lone request waits no more than with a delay of 0. Requests that arrive
  while that many batches are out are queued, and go as one batch when one of
  those finishes (before its answers are sent): under load the batches grow
  with the arrival rate, at no cost to a request that comes alone.
* **fixed delay** (``max_queue_delay_ms=d``): a pending batch is dispatched
  ``d`` ms after its first request arrived (the policy before issue 22).

Under both, a pending batch also goes

* as soon as its rows (the sum of the requests' first dimensions) reach
  ``max_batch_size``, and
* when a request arrives that would push it past ``max_batch_size`` (the
  pending batch goes first, the newcomer starts the next one).

A request of more than ``max_batch_size`` rows runs alone. A dispatched batch
runs as ``repository.run_group(group, items)`` in ``repository.executor(group)``
through ``loop.run_in_executor``, so the event loop never waits on a model; each
request gets its own result or exception. Queue and compute times go to the
server's metrics and its Triton statistics (:mod:`.statistics`).

The queue is a deque plus one timer per group rather than an ``asyncio.Queue``
and a consumer task: the same order and deadlines, with no task to keep alive
or cancel.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Hashable, Optional

import numpy as np

from modelsql.serving.metrics import ServerMetrics
from modelsql.serving.repository import Repository, Servable

__all__ = ["Batcher", "AHEAD"]

AHEAD = 1
"""Under the adaptive policy, how many batches of a group may wait in its executor beyond one per thread:
a thread that finishes a batch takes the next at once, without a round trip through the event loop
(which, with every thread busy, is what a free thread waited for; measured in
``benchmarks/serving_latency.py``: at concurrency 16 over 200 pipelines, 0 gave 0.94x the throughput of
the best fixed delay, 1 gave 0.99x)."""


@dataclass
class _Item:
    servable: Servable
    inputs: dict[str, np.ndarray]
    rows: int
    future: asyncio.Future
    arrived: float
    timings: Optional[dict] = None  # the caller's: "queue" and "compute_infer" ns are written into it


@dataclass
class _Queue:
    items: deque = field(default_factory=deque)
    rows: int = 0
    timer: Optional[asyncio.Handle] = None
    running: int = 0  # batches of the group dispatched and not finished


class Batcher:
    """Per-group dynamic batching on one event loop (create and use it on that loop).

    Args:
        repository: runs the batches (``run_group``) in its executors (``executor``).
        metrics: receives the batch sizes (rows), queue and compute times.
        max_batch_size: rows at which a batch is dispatched at once (>= 1).
        max_queue_delay_ms: None (the default) for the adaptive policy; otherwise the fixed delay, the
            most a batch waits for more requests after its first one, in ms (>= 0).

    Raises:
        ValueError: ``max_batch_size < 1`` or ``max_queue_delay_ms < 0``.
    """

    def __init__(self, repository: Repository, metrics: ServerMetrics, *, max_batch_size: int = 32,
                 max_queue_delay_ms: Optional[float] = None) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1 row; got {max_batch_size}")
        if max_queue_delay_ms is not None and max_queue_delay_ms < 0:
            raise ValueError(f"max_queue_delay_ms must be >= 0 ms; got {max_queue_delay_ms}")
        self.repository = repository
        self.metrics = metrics
        self.max_batch_size = max_batch_size
        self.max_queue_delay_ms = max_queue_delay_ms
        """The fixed delay in ms, or None: the adaptive policy."""
        self.adaptive = max_queue_delay_ms is None
        self._queues: dict[Hashable, _Queue] = {}
        self._closed = False

    async def submit(self, servable: Servable, inputs: dict[str, np.ndarray], rows: int,
                     timings: Optional[dict] = None) -> dict[str, np.ndarray]:
        """Queue one request of ``rows`` rows and wait for its outputs.

        Args:
            servable: what the inputs are for; its ``group`` picks the queue.
            inputs: validated input name -> array, ``rows`` on axis 0.
            timings: if given, receives this request's ``"queue"`` (arrival to dispatch) and
                ``"compute_infer"`` (its batch's run) times in ns, for Triton's statistics, which
                record a request's phases together once it is answered.

        Returns:
            The request's outputs (name -> array, its rows on axis 0), as ``run_group`` returned them.

        Raises:
            Whatever ``run_group`` raised or returned for this request; ``RuntimeError`` once closed.
        """
        if self._closed:
            raise RuntimeError(f'model "{servable.name}": the server is shutting down')
        loop = asyncio.get_running_loop()
        item = _Item(servable, inputs, rows, loop.create_future(), loop.time(), timings)
        self._enqueue(item)
        return await item.future

    def close(self) -> None:
        """Stop taking requests; requests still queued fail with ``RuntimeError``."""
        self._closed = True
        for queue in self._queues.values():
            if queue.timer is not None:
                queue.timer.cancel()
            for item in queue.items:
                if not item.future.done():
                    item.future.set_exception(RuntimeError(f'model "{item.servable.name}": the server shut down'))
        self._queues.clear()

    def _enqueue(self, item: _Item) -> None:
        queue = self._queues.setdefault(item.servable.group, _Queue())
        if queue.items and queue.rows + item.rows > self.max_batch_size:
            self._flush(queue)
        queue.items.append(item)
        queue.rows += item.rows
        if queue.rows >= self.max_batch_size:
            self._flush(queue)
        elif queue.timer is None:
            queue.timer = self._schedule(queue, item.servable.group)

    def _schedule(self, queue: _Queue, group: Hashable) -> Optional[asyncio.Handle]:
        """The flush of ``queue``'s pending batch: after the fixed delay; under the adaptive policy at the end
        of this loop turn while fewer than threads + :data:`AHEAD` batches of the group are dispatched, else
        none (a running batch's end flushes it)."""
        loop = asyncio.get_running_loop()
        if not self.adaptive:
            assert self.max_queue_delay_ms is not None  # the fixed-delay policy (adaptive: no delay given)
            return loop.call_later(self.max_queue_delay_ms / 1000.0, self._flush, queue)
        if queue.running < _threads(self.repository.executor(group)) + AHEAD:
            return loop.call_soon(self._flush, queue)
        return None

    def _flush(self, queue: _Queue) -> None:
        if queue.timer is not None:
            queue.timer.cancel()
            queue.timer = None
        items = [i for i in queue.items if not i.future.done()]  # a cancelled request (client gone) is dropped
        queue.items.clear()
        queue.rows = 0
        if items and not self._closed:
            self._dispatch(queue, items)

    def _dispatch(self, queue: _Queue, items: list[_Item]) -> None:
        loop = asyncio.get_running_loop()
        group = items[0].servable.group
        now = loop.time()
        self.metrics.observe_batch(group, sum(i.rows for i in items))
        for item in items:
            self.metrics.observe_queue(item.servable.name, now - item.arrived)
            if item.timings is not None:
                item.timings["queue"] = int((now - item.arrived) * 1e9)
        batch = [(i.servable, i.inputs) for i in items]
        try:
            running = loop.run_in_executor(self.repository.executor(group), _timed, self.repository.run_group,
                                           group, batch)
        except Exception as exc:  # e.g. the executor was shut down
            _deliver(items, exc)
            return
        queue.running += 1
        running.add_done_callback(lambda fut: self._finished(queue, items, fut))

    def _finished(self, queue: _Queue, items: list[_Item], fut: asyncio.Future) -> None:
        queue.running -= 1
        if self.adaptive and queue.items and not self._closed:
            self._flush(queue)  # what arrived while the batch ran goes now, before these answers are sent
        outcome = _outcome(fut, len(items))
        results: list | BaseException
        if isinstance(outcome, BaseException):
            results = outcome
        else:
            results, ns = outcome
            self.metrics.observe_execution([(i.servable, i.rows, r) for i, r in zip(items, results)], ns)
            for item in items:
                if item.timings is not None:
                    item.timings["compute_infer"] = ns
        _deliver(items, results)


def _threads(executor) -> int:
    """How many batches ``executor`` runs at once: a ``ThreadPoolExecutor``'s ``max_workers`` (CPython keeps it
    as ``_max_workers``, with no public accessor); 1 for an executor that does not say."""
    return getattr(executor, "_max_workers", None) or 1


def _timed(run: Callable, group: Hashable, batch: list) -> tuple[list, int]:
    """``run(group, batch)`` and the nanoseconds it took (in the executor's thread)."""
    start = time.perf_counter_ns()
    results = run(group, batch)
    return results, time.perf_counter_ns() - start


def _outcome(fut: asyncio.Future, n: int) -> tuple[list, int] | BaseException:
    if fut.cancelled():
        return RuntimeError("the batch was cancelled")
    exc = fut.exception()
    if exc is not None:
        return exc
    results, ns = fut.result()
    if not isinstance(results, list) or len(results) != n:
        got = len(results) if isinstance(results, list) else type(results).__name__
        return RuntimeError(f"run_group returned {got} results for a batch of {n} requests")
    return results, ns


def _deliver(items: list[_Item], outcome: list | BaseException) -> None:
    for k, item in enumerate(items):
        if item.future.done():
            continue
        result = outcome if isinstance(outcome, BaseException) else outcome[k]
        if isinstance(result, BaseException):
            item.future.set_exception(result)
        else:
            item.future.set_result(result)
