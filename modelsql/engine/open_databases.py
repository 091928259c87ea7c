"""The database files this process's modelsql connections have open (so no statement of another connection
writes over one: EXPORT checks them, as DuckDB's ``COPY ... TO`` checks the databases of its instance)."""

from __future__ import annotations

import os
import threading
from collections import Counter

__all__ = ["register", "release", "paths"]

_OPEN: Counter = Counter()
_LOCK = threading.Lock()


def register(database: str) -> None:
    """Count one more connection open on ``database`` (a file path; ``":memory:"`` is ignored)."""
    if database != ":memory:":
        with _LOCK:
            _OPEN[os.path.realpath(database)] += 1


def release(database: str) -> None:
    """Count one connection on ``database`` fewer."""
    if database != ":memory:":
        with _LOCK:
            key = os.path.realpath(database)
            _OPEN[key] -= 1
            if _OPEN[key] <= 0:
                del _OPEN[key]


def paths() -> list[str]:
    """The real paths of the database files open now."""
    with _LOCK:
        return list(_OPEN)
