"""Files a user names in a statement: atomic writes (EXPORT), bounded reads of regular files (IMPORT),
and file identity (refusing to overwrite a database).

* :func:`write_atomically` writes to a temporary file in the target's own folder, ``fsync``-s it,
  renames it onto the target with :func:`os.replace` and ``fsync``-s the folder: the target is
  either the old file or the whole new one, whatever fails (disk full, a kill), and no partial
  file is left behind (the way SQLite, git and the blob store write).
* :func:`read_regular_file` reads only a regular file (not ``/dev/zero``, a FIFO, a socket or a
  terminal: the check is made without opening the path, then again on the open descriptor) and at
  most :data:`MAX_READ_BYTES` of it.
* :func:`file_identity` / :func:`guarded_by` compare files by device and inode (``os.stat``), so a
  hard link, a symbolic link or another spelling of a path is the same file, as DuckDB's
  ``COPY ... TO`` compares them.

This module knows nothing of sessions or catalogs; :mod:`modelsql.storage.blobstore` keeps the blob
files themselves.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from typing import Iterable, Optional, Union

from modelsql.errors import DataError, OperationalError, ProgrammingError

__all__ = [
    "MAX_READ_BYTES",
    "file_identity",
    "guarded_by",
    "os_error",
    "read_regular_file",
    "require_regular_file",
    "write_atomically",
]

MAX_READ_BYTES = 2**31 - 1
"""The most bytes :func:`read_regular_file` reads from one file (2 GiB - 1: protobuf's own limit on one
message, so no larger ``.onnx`` file can be one ONNX model; larger weights go in external data files)."""

_TEMP_SUFFIX = ".modelsql-tmp"
_CHUNK = 1 << 20

PathLike = Union[str, "os.PathLike[str]"]


def os_error(exc: OSError, action: str) -> OperationalError:
    """The PEP 249 error of a failed file-system call: ``OperationalError`` with code ``disk_full``
    (no space, or over quota) or ``io_error`` (anything else), naming ``action`` (``'write "x.onnx"'``)
    and the system's reason."""
    reason = exc.strerror or str(exc)
    if isinstance(exc.filename, str) and exc.filename not in action:
        reason += f' ("{exc.filename}")'
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return OperationalError(f"Cannot {action}: {reason}: the disk is full. Free some space and run it again.",
                                code="disk_full")
    return OperationalError(f"Cannot {action}: {reason}.", code="io_error")


def file_identity(path: PathLike) -> Optional[tuple[int, int]]:
    """``(st_dev, st_ino)`` of the file ``path`` names (symbolic links followed), or None when it does
    not exist (or cannot be looked at)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def guarded_by(target: PathLike, files: Iterable[PathLike], folders: Iterable[PathLike]) -> Optional[str]:
    """Which of ``files`` the path ``target`` is, or which of ``folders`` it lies in, or None.

    Compared by identity (device and inode) where both exist, so hard links, symbolic links and other
    spellings are caught, and by resolved path where one does not exist yet (a WAL not yet written).
    """
    real = os.path.realpath(target)
    here = file_identity(real)
    for f in files:
        if os.path.realpath(f) == real or (here is not None and file_identity(f) == here):
            return os.fspath(f)
    for d in folders:
        top = os.path.realpath(d).rstrip(os.sep)
        if real == top or real.startswith(top + os.sep):
            return os.fspath(d)
        mark = file_identity(top)
        if mark is None:
            continue
        folder = os.path.dirname(real)
        while True:
            if file_identity(folder) == mark:
                return os.fspath(d)
            up = os.path.dirname(folder)
            if up == folder:
                break
            folder = up
    return None


def require_regular_file(path: PathLike, what: str) -> os.stat_result:
    """The ``os.stat`` of ``path`` (symbolic links followed) when it is a regular file.

    Args:
        path: the file.
        what: how messages name it (``'ONNX model file "m.onnx"'``).

    Raises:
        ProgrammingError: ``file_not_found`` (absent, or a directory); ``not_a_regular_file`` (a
            device such as ``/dev/zero``, a FIFO, a socket).
        OperationalError: ``io_error`` (no permission to look, and the like).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ProgrammingError(f"{what} not found.", code="file_not_found") from None
    except NotADirectoryError:
        raise ProgrammingError(f"{what} not found (a part of its path is not a folder).", code="file_not_found") from None
    except OSError as exc:
        raise os_error(exc, f"read {what}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ProgrammingError(f"{what} is a directory, not a file.", code="file_not_found")
    if not stat.S_ISREG(st.st_mode):
        raise ProgrammingError(f"{what} is not a regular file ({_kind(st.st_mode)}); modelsql reads models only "
                               "from regular files.", code="not_a_regular_file")
    return st


def read_regular_file(path: PathLike, what: str, *, limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    The path is checked before it is opened (a FIFO is never opened, so nothing blocks), opened
    non-blocking, and checked again on the descriptor (a path swapped meanwhile is caught).

    Raises:
        ProgrammingError: as :func:`require_regular_file`.
        DataError: ``file_too_large``: more than ``limit`` bytes (read stops there).
        OperationalError: ``io_error``.
    """
    require_regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise os_error(exc, f"read {what}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ProgrammingError(f"{what} is not a regular file ({_kind(st.st_mode)}); modelsql reads models only "
                                   "from regular files.", code="not_a_regular_file")
        if st.st_size > limit:
            raise _too_large(what, limit)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # a file that grows while read, or a size the file system does not tell
                raise _too_large(what, limit)
        return b"".join(chunks)
    except OSError as exc:
        raise os_error(exc, f"read {what}") from None
    finally:
        os.close(fd)


def write_atomically(path: PathLike, data: Union[bytes, bytearray, memoryview], what: str) -> None:
    """Replace the file ``path`` with ``data`` atomically: the old file stays whole if anything fails.

    A symbolic link is followed (its target file is replaced). An existing target keeps its
    permission bits; a new one gets ``0o666`` less the umask, as ``open`` would give it.

    Args:
        path: the file to write.
        data: its new bytes.
        what: how messages name it (``'"model.onnx"'``).

    Raises:
        OperationalError: ``export_target_not_a_file``: the path names a device, a FIFO or a socket
            (never opened); ``io_error`` for a directory; ``disk_full`` or ``io_error`` (see
            :func:`os_error`) when the write fails, leaving no partial file.
    """
    target = os.path.realpath(path)
    mode = None
    try:
        st = os.stat(target)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise os_error(exc, f"write {what}") from None
    else:
        if stat.S_ISDIR(st.st_mode):
            raise OperationalError(f"Cannot write {what}: it is a directory.", code="io_error")
        if not stat.S_ISREG(st.st_mode):
            raise OperationalError(f"Cannot write {what}: it is {_kind(st.st_mode)}, not a regular file, and is "
                                   "left alone; export to a file path.", code="export_target_not_a_file")
        mode = stat.S_IMODE(st.st_mode)
    folder, name = os.path.split(target)
    tmp = os.path.join(folder, f".{name}.{secrets.token_hex(6)}{_TEMP_SUFFIX}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as exc:
        raise os_error(exc, f"write {what}") from None
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(data).cast("B")
            while view:
                view = view[os.write(fd, view[:_CHUNK]):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise os_error(exc, f"write {what}") from None
        raise
    _fsync_folder(folder)


def _fsync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable (where the platform lets a folder be opened)."""
    try:
        fd = os.open(folder or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _too_large(what: str, limit: int) -> DataError:
    return DataError(f"{what} is larger than {limit} bytes, the most modelsql reads from one file "
                     "(modelsql.storage.files.MAX_READ_BYTES; protobuf's own limit on one ONNX model): keep large "
                     "weights in ONNX external data files.", code="file_too_large")


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, words in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO, a named pipe"),
                        (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return words
    return "not a regular file"
