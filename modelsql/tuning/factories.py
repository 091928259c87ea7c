"""Python references a study trains from (``"package.module:function"``): importing them, the source file that
defines them and its digest (a trainable's version), and whether the code this process has imported is still
what that file says (so a stage may train in this process instead of a fresh worker interpreter).

A module this process imported before its file was edited keeps running the old code. :func:`loaded_is_current`
tells: for a module this module imported, the file's size and modification time must be what they were at the
import; for one imported elsewhere (by the user), the file must be older than this process (read from
``/proc``; where that is not available, or the file is newer, the answer is False, and the study uses worker
processes, which import the file anew); a factory of ``__main__`` (the running script) is current.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import os
import sys
import threading
from typing import Any, Callable, Optional

from modelsql.errors import ProgrammingError

__all__ = ["resolve_reference", "resolve_factory", "source_file", "factory_digest", "loaded_is_current"]

_STATS: dict[str, tuple[int, int]] = {}
"""(modification time in ns, size in bytes) of each source file of a module :func:`resolve_reference` imported,
when it imported it."""
_STATS_LOCK = threading.Lock()
_START_SLACK_S = 2.0
"""The process start read from ``/proc`` is exact to a second at best: a file changed this close to it counts as
changed."""


def resolve_reference(ref: str) -> Any:
    """The object named by ``"package.module:name"`` (the name may be dotted, ``"pkg.mod:Class.attr"``).

    Raises:
        ProgrammingError(code="factory_not_found"): ``ref`` is not ``module:name``, the module cannot be
            imported, or the attribute is missing.
    """
    module_name, attr = _split_ref(ref)
    before = None if module_name in sys.modules else set(sys.modules)  # imported here: note its files
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise _not_found(ref, f"module {module_name!r} cannot be imported ({exc})") from exc
    if before is not None:
        _record_imported(set(sys.modules) - before)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise _not_found(ref, f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def resolve_factory(ref: str) -> Callable[..., Any]:
    """Import the callable named by ``"package.module:function"`` (the function part may be
    dotted, e.g. ``"pkg.mod:Class.build"``).

    Raises:
        ProgrammingError(code="factory_not_found"): ``ref`` is not ``module:function``, the
            module cannot be imported, or the attribute is missing or not callable.
    """
    obj = resolve_reference(ref)
    if not callable(obj):
        module_name, attr = _split_ref(ref)
        raise _not_found(ref, f"{attr!r} in module {module_name!r} is not callable")
    return obj


def source_file(ref: str) -> Optional[str]:
    """The path of the source file defining ``ref`` (None for a built-in or a module without a file)."""
    return _source_file(resolve_reference(ref), _split_ref(ref)[0])


def factory_digest(ref: str) -> str:
    """SHA-256 (hex) of the bytes of the source file that defines the factory ``ref`` (the
    file on disk now, so an edited factory gets a new digest even before it is re-imported).

    Raises:
        ProgrammingError(code="factory_not_found"): as ``resolve_factory``.
    """
    path = _source_file(resolve_factory(ref), _split_ref(ref)[0])
    if path is None:
        return hashlib.sha256(f"no source file: {ref}".encode()).hexdigest()
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _split_ref(ref: Any) -> tuple[str, str]:
    parts = ref.split(":") if isinstance(ref, str) else []
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise _not_found(ref, 'a factory is named "package.module:function"')
    return parts[0].strip(), parts[1].strip()


def _not_found(ref: Any, why: str) -> ProgrammingError:
    return ProgrammingError(f"factory {ref!r} not found: {why}", code="factory_not_found")


def _source_file(fn: Any, module_name: str) -> Optional[str]:
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        path = None
    return path or getattr(sys.modules.get(module_name), "__file__", None)


def loaded_is_current(ref: str) -> bool:
    """Whether the code this process runs for the factory ``ref`` (already resolved) is what its source file
    holds now (see the module docstring). A factory without a source file is current."""
    module_name = _split_ref(ref)[0]
    if module_name == "__main__":
        return True  # the running script: a worker cannot import it anew, and what runs is the script's own code
    path = _source_file(resolve_reference(ref), module_name)
    if path is None:
        return True
    try:
        stat = os.stat(path)
    except OSError:
        return False
    with _STATS_LOCK:
        recorded = _STATS.get(path)
    if recorded is not None:
        return recorded == (stat.st_mtime_ns, stat.st_size)
    started = _process_start()
    return started is not None and stat.st_mtime < started - _START_SLACK_S


def _record_imported(names: set[str]) -> None:
    """Note the size and modification time of the source files of the modules ``names`` (just imported)."""
    for name in names:
        path = getattr(sys.modules.get(name), "__file__", None)
        if not isinstance(path, str):
            continue
        try:
            stat = os.stat(path)
        except OSError:
            continue
        with _STATS_LOCK:
            _STATS.setdefault(path, (stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=1)
def _process_start() -> Optional[float]:
    """When this process started (seconds since the epoch), from Linux's ``/proc``; None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None
