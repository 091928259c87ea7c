"""Triton's statistics extension: per model version counts and cumulative times.

``GET /v2/models[/{name}[/versions/{v}]]/stats`` (triton-inference-server/server,
``docs/protocol/extension_statistics.md``) answers ``{"model_stats": [...]}``,
one ``$model_stat`` per model version, in Triton's JSON shape: ``name``,
``version``, ``last_inference`` (ms since the epoch), ``inference_count``
(rows of successful requests), ``execution_count`` (batches the version took
part in), ``inference_stats`` and ``batch_stats``, each duration a
``{"count", "ns"}`` pair. What modelsql measures for each:

* ``success`` / ``fail``: requests answered 200 / otherwise, and their time from routing to the
  response being built (the ``modelsql_inference_request_seconds`` of ``/metrics``);
* ``queue``: the time from arriving in the batcher to the batch's dispatch (``modelsql_inference_queue_seconds``);
* ``compute_input``: parsing the request's tensors; ``compute_output``: encoding the response;
* ``compute_infer``: the run of the request's batch (each request of a batch counts the whole run, as in Triton);
* ``cache_hit`` / ``cache_miss``: always zero (there is no response cache);
* ``batch_stats``: per batch size (this version's rows in the batch), the executions and their run time;
  parsing and encoding happen per request, outside the batch, so there ``compute_input`` and
  ``compute_output`` count the executions with 0 ns.

A request's phases are recorded together when it is answered (:meth:`Statistics.request`), as Triton
does: a snapshot taken while requests are in flight has equal ``success``, ``queue`` and ``compute_*``
counts, which ``perf_analyzer`` checks ("Server side statistics compute counts must be the same").
Used on the server's event loop only (no lock): the batcher records executions on its completion
callbacks, the endpoints requests when they answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["Statistics", "VersionStats", "Duration"]


@dataclass
class Duration:
    """Triton's ``$duration_stat``: how many times, and the nanoseconds they took together."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += max(0, int(ns))

    def to_json(self) -> dict:
        return {"count": self.count, "ns": self.ns}


_PHASES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")


@dataclass
class VersionStats:
    """The statistics of one model version."""

    last_inference: int = 0
    inference_count: int = 0
    execution_count: int = 0
    phases: dict = field(default_factory=lambda: {p: Duration() for p in _PHASES})
    batches: dict = field(default_factory=dict)  # batch size -> Duration of compute_infer

    def to_json(self, name: str, version: str) -> dict:
        """Triton's ``$model_stat`` object."""
        return {"name": name, "version": version, "last_inference": self.last_inference,
                "inference_count": self.inference_count, "execution_count": self.execution_count,
                "inference_stats": {p: d.to_json() for p, d in self.phases.items()},
                "batch_stats": [_batch_json(size, d) for size, d in sorted(self.batches.items())]}


def _batch_json(size: int, infer: Duration) -> dict:
    untimed = {"count": infer.count, "ns": 0}
    return {"batch_size": size, "compute_input": dict(untimed), "compute_infer": infer.to_json(),
            "compute_output": dict(untimed)}


class Statistics:
    """Every served version's :class:`VersionStats`, made on first use."""

    def __init__(self) -> None:
        self._versions: dict[tuple[str, str], VersionStats] = {}

    def of(self, name: str, version: str) -> VersionStats:
        """The statistics of ``name`` at ``version`` (zeros until something is recorded)."""
        return self._versions.setdefault((name, version), VersionStats())

    def request(self, name: str, version: str, ok: bool, ns: int, rows: int, phases: dict | None = None) -> None:
        """One request answered after ``ns``: a success of ``rows`` inferences, with its ``phases``
        (``"queue"``, ``"compute_input"``, ``"compute_infer"``, ``"compute_output"`` -> ns, each counted
        once; a phase it did not reach counts 0 ns), or a failure (its phases are not counted, as in Triton)."""
        stats = self.of(name, version)
        stats.phases["success" if ok else "fail"].add(ns)
        if ok:
            for phase in ("queue", "compute_input", "compute_infer", "compute_output"):
                stats.phases[phase].add((phases or {}).get(phase, 0))
            stats.inference_count += rows
            stats.last_inference = time.time_ns() // 1_000_000

    def execution(self, rows: dict[tuple[str, str], int], ns: int) -> None:
        """One batch run of ``ns`` nanoseconds that held ``rows[(name, version)]`` rows of each version."""
        for (name, version), n in rows.items():
            stats = self.of(name, version)
            stats.execution_count += 1
            stats.batches.setdefault(n, Duration()).add(ns)
