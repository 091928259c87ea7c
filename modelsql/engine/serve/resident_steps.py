"""The server's resident steps: one loaded session per distinct step, under a memory budget.

A served pipeline's steps are :class:`ResidentStep` proxies: the session of a
step loads when first needed, stays while anything served uses it, and, when a
memory budget is set, the least recently used steps that no request is running
are unloaded until the resident set fits (their next request loads them again:
a cold start, never a refused request). Memory per step is the process's
anonymous resident memory measured around its load (``RssAnon``; at least its
graph's size), so what a step costs is what it really added (the shared weights themselves are
file-backed memory maps and cost nothing here).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

__all__ = ["ResidentSteps", "ResidentStep", "memory_rss_anon"]


def memory_rss_anon() -> int:
    """This process's anonymous resident memory in bytes (``RssAnon`` of ``/proc/self/status``; 0 elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class ResidentSteps:
    """Loaded step (or stage) sessions by key, with use counts, last use and the measured memory of each.

    Args:
        budget_bytes: the most the loaded sessions may take (None: no limit).
    """

    def __init__(self, budget_bytes: Optional[int] = None) -> None:
        self.budget_bytes = budget_bytes
        self._lock = threading.RLock()
        self._sessions: dict[str, object] = {}
        self._bytes: dict[str, int] = {}
        self._last: dict[str, float] = {}
        self._running: dict[str, int] = {}
        self._loaders: dict[str, tuple[Callable[[], object], int]] = {}  # key -> (load, floor bytes)
        self.loads = 0
        """Sessions loaded so far (first loads and reloads after eviction)."""
        self.evictions = 0
        """Sessions unloaded to keep within the budget."""

    def proxy(self, key: str, name: str, load: Callable[[], object], floor: int = 0) -> "ResidentStep":
        """The session ``key`` (made by ``load()``; it takes at least ``floor`` bytes) as a backend model
        that loads on demand."""
        with self._lock:
            self._loaders[key] = (load, floor)
        return ResidentStep(self, key, name)

    def loaded_keys(self) -> list[str]:
        """Keys of the sessions loaded now."""
        with self._lock:
            return list(self._sessions)

    def loaded(self, key: str) -> bool:
        with self._lock:
            return key in self._sessions

    def bytes_of(self, key: str) -> int:
        """Memory measured when ``key`` last loaded (0 when never loaded)."""
        with self._lock:
            return self._bytes.get(key, 0)

    def total_bytes(self) -> int:
        """Memory of the loaded steps."""
        with self._lock:
            return sum(self._bytes.get(k, 0) for k in self._sessions)

    def acquire(self, key: str):
        """The loaded session of ``key`` (loading it, then keeping within the budget), marked in use."""
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                before = memory_rss_anon()
                load, floor = self._loaders[key]
                session = load()
                # at least the graph itself, which the session parsed into memory
                self._bytes[key] = max(memory_rss_anon() - before, floor)
                self._sessions[key] = session
                self.loads += 1
            self._running[key] = self._running.get(key, 0) + 1
            self._last[key] = time.monotonic()
            self._fit(keep=key)
            return session

    def describe(self, key: str) -> Optional[str]:
        """What the loaded session of ``key`` says of itself (a CUDA session: what it captured as CUDA graphs;
        :meth:`~modelsql.operators.backends.cuda.CudaModel.explain`), or None."""
        with self._lock:
            session = self._sessions.get(key)
        describe = getattr(session, "explain", None)
        return describe() if callable(describe) else None

    def release(self, key: str) -> None:
        """``key``'s run ended."""
        with self._lock:
            self._running[key] -= 1

    def _fit(self, keep: str) -> None:
        """Unload least recently used idle steps until the loaded ones fit the budget."""
        if self.budget_bytes is None:
            return
        idle = sorted((self._last.get(k, 0.0), k) for k in self._sessions if k != keep and not self._running.get(k))
        while self.total_bytes() > self.budget_bytes and idle:
            _, k = idle.pop(0)
            del self._sessions[k]
            self.evictions += 1

    def retain(self, keys) -> None:
        """Forget every step not in ``keys`` (nothing served uses it any more)."""
        keys = set(keys)
        with self._lock:
            for table in (self._sessions, self._bytes, self._last, self._loaders):
                for k in [k for k in table if k not in keys]:
                    del table[k]

    def clear(self) -> None:
        with self._lock:
            self._sessions.clear()


class ResidentStep:
    """A step of a served pipeline: a :class:`~modelsql.operators.backends.BackendModel` whose session
    :class:`ResidentSteps` loads on demand and may unload between runs."""

    fixed_batch = None
    intra_op_threads = 1

    def __init__(self, pool: ResidentSteps, key: str, name: str) -> None:
        self.pool, self.key, self.name = pool, key, name

    def load(self) -> None:
        """Load the session now (SERVE loads every step before it answers)."""
        self.pool.acquire(self.key)
        self.pool.release(self.key)

    def run(self, feeds, outputs=None):
        session = self.pool.acquire(self.key)
        try:
            return session.run(feeds, outputs)
        finally:
            self.pool.release(self.key)
