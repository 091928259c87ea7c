"""The studies this process runs now, and a study row's owner fields while one runs.

Every kind of TUNE (a trainable's stage trees, a scikit-learn model type's or a Python objective's trials in the
statement's own process) claims its study's name here and in its catalog row (owner and heartbeat, read by
:meth:`modelsql.catalog.studies.Studies.mark_interrupted`) for as long as it runs: another run of the name is
``study_running``, DROP STUDY of it is refused, and a row left ``running`` by a process that died is found dead.
"""

from __future__ import annotations

import datetime as _dt
import threading

from modelsql.catalog.owners import this_process

__all__ = ["RUNNING", "STARTING", "owner_fields"]

STARTING = threading.Lock()
"""Held while a TUNE checks and claims its study name (two connections of one process may start at once)."""

RUNNING: set[str] = set()
"""Names of the studies this process is running now (others found ``running`` in the catalog are dead)."""


def owner_fields(running: bool) -> dict:
    """The owner fields of a study's row: this process (and a heartbeat now) while it runs, none after."""
    if not running:
        return dict(owner_pid=None, owner_host=None, owner_start=None, heartbeat_at=None)
    me = this_process()
    return dict(owner_pid=me.pid, owner_host=me.host, owner_start=me.start,
                heartbeat_at=_dt.datetime.now(_dt.timezone.utc))
