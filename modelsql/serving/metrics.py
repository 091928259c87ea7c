"""Prometheus metrics of one inference server (``GET /metrics``, the Prometheus text exposition format).

Each :class:`ServerMetrics` has its own ``CollectorRegistry``, so several
servers in one process never collide on metric names.

Metrics (times in seconds, sizes in rows):

* ``modelsql_inference_requests_total{model,version,status}`` (counter): infer
  requests by HTTP status (``"200"``, ``"400"``, ...; ``"499"``: the client went
  away before the answer). A request naming no served model is counted under
  ``model=""``, so clients cannot grow the label set without bound.
* ``modelsql_inference_batch_size{group}`` (histogram): rows per dispatched batch.
* ``modelsql_inference_queue_seconds{model}`` (histogram): time from a
  request's arrival in the batcher to its batch's dispatch.
* ``modelsql_inference_request_seconds{model}`` (histogram): time from the
  request's routing to its response being built (body read, parse, queue, run, encode).
* ``modelsql_step_seconds{step}`` (histogram) and ``modelsql_step_rows_total{step}``
  (counter): shared pipeline steps, reported by the repository through
  :meth:`ServerMetrics.observe_step` (PRETZEL's shared sub-plans).

The same measurements, per model version, also feed Triton's statistics
extension (:attr:`ServerMetrics.statistics`, :mod:`.statistics`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from modelsql.serving.statistics import Statistics

if TYPE_CHECKING:
    from modelsql.serving.repository import Servable

__all__ = ["ServerMetrics", "CONTENT_TYPE"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The content type of :meth:`ServerMetrics.exposition` (prometheus_client's ``CONTENT_TYPE_LATEST``, the text format)."""

_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
_SECONDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServerMetrics:
    """The metrics of one server, in a registry of their own (thread-safe; prometheus_client locks).

    Attributes:
        registry: the ``prometheus_client.CollectorRegistry`` that ``/metrics`` exposes.
        statistics: the per-version counts and times of ``/v2/models/.../stats``
            (:class:`~modelsql.serving.statistics.Statistics`; recorded on the server's event loop only).
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("modelsql_inference_requests", "Inference requests by model, version and HTTP status.",
                                ("model", "version", "status"), registry=r)
        self.batch_size = Histogram("modelsql_inference_batch_size", "Rows per dispatched batch.",
                                    ("group",), buckets=_ROWS, registry=r)
        self.queue_seconds = Histogram("modelsql_inference_queue_seconds",
                                       "Seconds a request waited in the batcher before its batch was dispatched.",
                                       ("model",), buckets=_SECONDS, registry=r)
        self.request_seconds = Histogram("modelsql_inference_request_seconds",
                                         "Seconds from routing an infer request to building its response.",
                                         ("model",), buckets=_SECONDS, registry=r)
        self.step_seconds = Histogram("modelsql_step_seconds", "Seconds per run of a shared pipeline step.",
                                      ("step",), buckets=_SECONDS, registry=r)
        self.step_rows = Counter("modelsql_step_rows", "Rows computed by a shared pipeline step.",
                                 ("step",), registry=r)
        self.statistics = Statistics()

    def observe_request(self, model: str, version: str, status: int, seconds: float) -> None:
        """Count one infer request answered with HTTP ``status`` after ``seconds``."""
        self.requests.labels(model, version, str(status)).inc()
        if model:
            self.request_seconds.labels(model).observe(seconds)

    def observe_batch(self, group: object, rows: int) -> None:
        """Record one dispatched batch of ``rows`` rows for ``group`` (labelled ``str(group)``)."""
        self.batch_size.labels(str(group)).observe(rows)

    def observe_queue(self, model: str, seconds: float) -> None:
        """Record that a request for ``model`` waited ``seconds`` before its batch was dispatched."""
        self.queue_seconds.labels(model).observe(seconds)

    def observe_execution(self, requests: Sequence[tuple[Servable, int, object]], ns: int) -> None:
        """Record one batch run of ``ns`` nanoseconds in the statistics' execution counts and batch
        sizes: ``requests`` are its (servable, rows, result); the rows of requests with outputs (not an
        exception) count. (A request's own compute time is recorded with its other phases when it is
        answered: :meth:`Statistics.request`.)"""
        rows: dict[tuple[str, str], int] = {}
        for servable, n, result in requests:
            if isinstance(result, BaseException):
                continue
            key = (servable.name, servable.version)
            rows[key] = rows.get(key, 0) + n
        self.statistics.execution(rows, ns)

    def observe_step(self, step: str, rows: int, seconds: float) -> None:
        """Record one run of shared step ``step`` over ``rows`` rows taking ``seconds`` (called by repositories)."""
        self.step_seconds.labels(step).observe(seconds)
        self.step_rows.labels(step).inc(rows)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (serve it with :data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)
