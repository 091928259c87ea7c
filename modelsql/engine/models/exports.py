"""Where EXPORT MODEL / EXPORT PIPELINE write: never a database, and never half a file.

:func:`check_export_target` refuses a target that is a file of any database attached to the
connection (its own included: the database file, its write-ahead log, its blob store), compared by
device and inode, so a hard link or another spelling of the path is refused too, as DuckDB's
``COPY ... TO`` refuses. :func:`write_export` writes through
:func:`modelsql.storage.files.write_atomically`: a failed export leaves the file it would have
replaced as it was.
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import TYPE_CHECKING, Iterator, Optional

from modelsql.errors import ProgrammingError
from modelsql.storage.files import file_identity, guarded_by, write_atomically
from modelsql.engine import open_databases

if TYPE_CHECKING:
    from modelsql.engine.session import Session

_STORE_SUFFIX = ".blobs"
"""The blob store of database ``x.duckdb`` is the folder ``x.duckdb.blobs`` (see ``BlobStore.for_database``)."""


def _database_files(session: Session) -> Iterator[tuple[str, str]]:
    """``(path, what)`` of every file of every database attached to the session's connection."""
    rows = session.duck.execute(
        "SELECT database_name, path FROM duckdb_databases() WHERE path IS NOT NULL AND NOT internal").fetchall()
    paths = {os.path.realpath(session.database): "main"} if session.database != ":memory:" else {}
    for name, path in rows:
        if path and not path.startswith(":memory:"):
            paths.setdefault(os.path.realpath(path), name)
    for path in open_databases.paths():
        paths.setdefault(path, "open in another connection")
    for path, name in paths.items():
        yield path, f'database "{name}" ({path})'
        yield path + ".wal", f'the write-ahead log of database "{name}"'


def check_export_target(session: Session, target: str, statement: str) -> None:
    """Refuse to write ``target`` when it is a file of a database attached to the connection (the
    database file or its ``.wal``), or lies in a blob store (this connection's, or an attached
    database's ``.blobs`` folder). Files are compared by identity (``st_dev``, ``st_ino``).

    A hard link of a blob (a file with more than one link whose bytes name a blob that is that very
    file) is refused too. Any other existing regular file is replaced, as DuckDB's ``COPY ... TO``
    replaces it.

    Raises:
        ProgrammingError: ``export_target_in_use``, naming the database or store the target belongs to.
    """
    files = dict(_database_files(session))
    stores = {str(session.store.root): "this connection's blob store"}
    for path, what in list(files.items()):
        if not path.endswith(".wal"):
            stores.setdefault(path + _STORE_SUFFIX, f"the blob store of {what}")
    hit = guarded_by(target, files, stores) or _linked_blob(session, target)
    if hit is not None:
        what = files.get(hit) or stores.get(hit) or f"a blob of this connection's store ({hit})"
        raise ProgrammingError(
            f'{statement}: "{target}" is {what}; exporting there would destroy it. Export to another path.',
            code="export_target_in_use",
        )


def _linked_blob(session: Session, target: str) -> Optional[str]:
    """The store's blob file that ``target`` is a hard link of, or None (a file with one link is none)."""
    try:
        st = os.stat(target)
    except OSError:
        return None
    if st.st_nlink < 2 or not stat.S_ISREG(st.st_mode):
        return None
    h = hashlib.sha256()
    try:
        with open(target, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    blob = session.store.path(h.hexdigest())
    return str(blob) if file_identity(blob) == (st.st_dev, st.st_ino) else None


def write_export(session: Session, target: str, proto, statement: str) -> None:
    """Check ``target`` (:func:`check_export_target`) and write the ONNX model ``proto`` there atomically.

    Raises:
        ProgrammingError: ``export_target_in_use``.
        OperationalError: ``export_target_not_a_file`` (a device, a FIFO, a socket); ``disk_full`` or
            ``io_error`` (a directory, no permission ...); the file that was there is unchanged.
    """
    check_export_target(session, target, statement)
    write_atomically(target, proto.SerializeToString(), f'"{target}"')
