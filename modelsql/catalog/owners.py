"""Who owns a running study: this process's identity, and whether a recorded owner is still alive.

A study that ``TUNE`` runs records its owner (process id, host name, and the process's start identity, so
a reused pid is not taken for it) and a heartbeat. A reader decides from them, as Optuna's heartbeat does,
whether a study marked ``running`` is: alive; dead (``interrupted``: its process is gone from this host, or
is another process now); or lost (``failed``: its owner cannot be checked from here, being on another host,
and sent no heartbeat for :data:`GRACE_SECONDS`).
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
from dataclasses import dataclass
from typing import Optional

__all__ = ["Owner", "this_process", "owner_state", "HEARTBEAT_SECONDS", "GRACE_SECONDS"]

HEARTBEAT_SECONDS = 5.0
"""How often (seconds) a running TUNE records its heartbeat (``modelsql.studies.heartbeat_at``)."""

GRACE_SECONDS = float(os.environ.get("MODELSQL_STUDY_GRACE_S", "600"))
"""How long (seconds) without a heartbeat a running study whose owner cannot be checked (another host) is
taken for alive; after it, the study is ``failed``. ``MODELSQL_STUDY_GRACE_S`` sets it."""


@dataclass(frozen=True)
class Owner:
    """A process: its pid, host name and start identity (``"<boot id>:<start ticks>"`` on Linux; ``""``
    where the system does not say, and then the pid alone is checked)."""

    pid: int
    host: str
    start: str


def _start_of(pid: int) -> Optional[str]:
    """The start identity of process ``pid`` on this host, ``""`` when unknown, None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except FileNotFoundError:
        return None if os.path.isdir("/proc/self") else _exists(pid)
    except OSError:
        return ""
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    return f"{boot}:{fields[19]}" if len(fields) > 19 else ""


def _exists(pid: int) -> Optional[str]:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return ""
    return ""


def this_process() -> Owner:
    """The calling process as an owner."""
    return Owner(os.getpid(), socket.gethostname(), _start_of(os.getpid()) or "")


def owner_state(pid: Optional[int], host: Optional[str], start: Optional[str],
                heartbeat: Optional[_dt.datetime], now: Optional[_dt.datetime] = None) -> str:
    """``"alive"``, ``"dead"`` or ``"lost"`` for a study recorded ``running`` with this owner.

    ``dead``: on this host, no process has the pid, or one with another start identity does; a row with no
    owner at all (written before owners were recorded) is dead too (DuckDB lets one process write a
    database, so such a row outlived its process). ``lost``: on another host and no heartbeat for
    :data:`GRACE_SECONDS`. Otherwise ``alive``.
    """
    if pid is None:
        return "dead"
    if host is None or host == socket.gethostname():
        found = _start_of(int(pid))
        if found is None or (start and found and found != start):
            return "dead"
        return "alive"
    now = now or _dt.datetime.now(_dt.timezone.utc)
    if heartbeat is None or (now - heartbeat).total_seconds() > GRACE_SECONDS:
        return "lost"
    return "alive"
