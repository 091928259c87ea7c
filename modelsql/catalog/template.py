"""An empty catalog kept as a DuckDB file, copied into each new database instead of running the DDL.

Creating the catalog from :data:`modelsql.catalog.schema.DDL` runs about 190 statements (24 tables, 6 views,
153 comments): 0.14-0.2 s on a 2-core machine, most of a new database's ``connect``. DuckDB's ``COPY FROM
DATABASE`` copies the same schema, tables, views, comments, sequence and meta row from an attached file in
about 0.02 s. The file is kept under ``$XDG_CACHE_HOME/modelsql`` (by default ``~/.cache/modelsql``) and
named by a digest of the DDL, the schema version and DuckDB's version, so a changed schema or another DuckDB
release makes (and uses) a file of its own.

The copy takes everything in the file, so a file is used only once this process has seen that it holds
exactly what the DDL makes (:func:`describe`: every schema, table, column, comment, view, constraint,
sequence, macro, index and type, and the meta row): the first catalog a process creates is made by the DDL
and learnt as the reference (:func:`learn`); later ones are copied from a file whose description equals it,
checked once per file. A file that differs (damaged, or written by anything else) is replaced.

It is a cache: where the file cannot be made or read (no writable cache folder, DuckDB's
``enable_external_access`` off), :func:`copy_into` says so and the caller runs the DDL. The copy runs in a
transaction of its own, so a failure leaves the database as it was.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import secrets
import tempfile
import threading
import time
from typing import Optional

import duckdb

from modelsql.catalog import schema
from modelsql.xdg import cache_home

__all__ = ["CACHE_FOLDER", "template_name", "template_path", "describe", "learn", "copy_into"]

CACHE_FOLDER = "modelsql"
"""Folder under ``$XDG_CACHE_HOME`` (by default ``~/.cache``) that holds the template files."""

_PREFIX = "catalog-template-"
_BUILDING = ".building-"
_STALE_BUILD_S = 3600.0  # a file being built this long ago belongs to a process that died building it
_STALE_TEMPLATE_S = 7 * 86400.0  # another template built this long ago: another install that shares the folder
# (another DuckDB release) would build it again within a week of use, so both keep theirs meanwhile

_DESCRIBE = (
    ("schemas", "SELECT schema_name, comment FROM duckdb_schemas() WHERE database_name = $db AND NOT internal"),
    ("tables", "SELECT schema_name, table_name, comment, has_primary_key, column_count, sql FROM duckdb_tables() "
               "WHERE database_name = $db"),
    ("columns", "SELECT schema_name, table_name, column_name, column_index, comment, column_default, is_nullable, "
                "data_type FROM duckdb_columns() WHERE database_name = $db"),
    ("views", "SELECT schema_name, view_name, comment, sql FROM duckdb_views() WHERE database_name = $db "
              "AND NOT internal"),
    ("constraints", "SELECT schema_name, table_name, constraint_type, constraint_text, expression "
                    "FROM duckdb_constraints() WHERE database_name = $db"),
    ("sequences", "SELECT schema_name, sequence_name, comment, start_value, increment_by, last_value "
                  "FROM duckdb_sequences() WHERE database_name = $db"),
    ("functions", "SELECT schema_name, function_name, function_type, macro_definition FROM duckdb_functions() "
                  "WHERE database_name = $db AND NOT internal"),
    ("indexes", "SELECT schema_name, index_name, sql FROM duckdb_indexes() WHERE database_name = $db"),
    ("types", "SELECT schema_name, type_name FROM duckdb_types() WHERE database_name = $db AND NOT internal"),
)

_lock = threading.Lock()
_reference: Optional[tuple] = None  # describe()'s catalog part for a catalog the DDL made in this process
_empty: Optional[tuple] = None  # describe()'s other part for a new, empty DuckDB database
_checked: set[tuple] = set()  # identities (path, inode, size, mtime) of files whose description is the reference


def template_name(version: int = schema.SCHEMA_VERSION) -> str:
    """The template's file name: the schema version and a digest of the DDL and DuckDB's version."""
    digest = hashlib.sha256(f"{version}\n{duckdb.__version__}\n{schema.DDL}".encode()).hexdigest()[:16]
    return f"{_PREFIX}{version}-{digest}.duckdb"


def _cache_folder() -> str:
    return os.path.join(cache_home(), CACHE_FOLDER)


def describe(con: duckdb.DuckDBPyConnection, database: str) -> tuple[tuple, tuple]:
    """Everything in DuckDB database ``database`` but DuckDB's own objects, in two parts: the catalog (schema
    ``modelsql``: its tables, columns, views, constraints, sequences, macros, indexes and types with their
    comments and SQL, and the meta row) and the rest (every other schema and what is in it). Each is sorted
    tuples of text: two databases made alike describe alike whatever their names."""
    catalog, rest = [], []
    for _, sql in _DESCRIBE:
        rows = [tuple(str(v) for v in row) for row in con.execute(sql.replace("$db", "?"), [database]).fetchall()]
        catalog.append(tuple(sorted(r for r in rows if r[0] == schema.SCHEMA)))
        rest.append(tuple(sorted(r for r in rows if r[0] != schema.SCHEMA)))
    target = schema.quote_ident(database)
    with contextlib.suppress(duckdb.Error):
        catalog.append(tuple(sorted(con.execute(f"SELECT key, value FROM {target}.{schema.SCHEMA}.meta").fetchall())))
    return tuple(catalog), tuple(rest)


def learn(con: duckdb.DuckDBPyConnection, database: str, version: int = schema.SCHEMA_VERSION) -> None:
    """Take the catalog the DDL has just made in ``database`` (committed) as this process's reference: what a
    template must hold to be copied. Only for :data:`~modelsql.catalog.schema.SCHEMA_VERSION`."""
    global _reference
    if version != schema.SCHEMA_VERSION or _reference is not None:
        return
    catalog = describe(con, database)[0]
    with _lock:
        _reference = _reference or catalog


def _empty_rest() -> tuple:
    """What :func:`describe` finds outside the catalog in a new DuckDB database (its empty ``main``)."""
    global _empty
    if _empty is None:
        con = duckdb.connect()
        try:
            _empty = describe(con, "memory")[1]
        finally:
            con.close()
    return _empty


def _identity(path: str) -> Optional[tuple]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (path, st.st_ino, st.st_size, st.st_mtime_ns)


def _build(path: str, version: int) -> None:
    """Write the empty catalog to a fresh file beside ``path`` and move it into place (atomic: a reader
    sees the whole file or none); other templates in the folder (older schemas, other DuckDB releases) built a
    week ago or more and files a process died building are removed."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_BUILDING, suffix=".duckdb", dir=folder)
    os.close(fd)
    os.unlink(tmp)  # DuckDB makes the file itself; an empty file is not a database
    try:
        con = duckdb.connect(tmp)
        try:
            con.execute("BEGIN TRANSACTION")
            schema.create(con, schema.SCHEMA, version)
            con.execute("COMMIT")
        finally:
            con.close()
        with contextlib.suppress(OSError):
            os.unlink(path + ".wal")  # (a file's WAL is replayed when it is attached)
        os.replace(tmp, path)
    finally:
        for leftover in (tmp, tmp + ".wal"):
            with contextlib.suppress(OSError):
                os.unlink(leftover)
    for pattern, age in ((_PREFIX + "*.duckdb", _STALE_TEMPLATE_S), (_BUILDING + "*", _STALE_BUILD_S)):
        for p in glob.glob(os.path.join(folder, pattern)):
            with contextlib.suppress(OSError):
                if p != path and time.time() - os.stat(p).st_mtime > age:
                    os.unlink(p)


def template_path(version: int = schema.SCHEMA_VERSION) -> Optional[str]:
    """The template file for ``version``, made if absent; None where it cannot be made."""
    path = os.path.join(_cache_folder(), template_name(version))
    if os.path.isfile(path):
        return path
    try:
        _build(path, version)
    except (OSError, duckdb.Error):
        return None
    return path if os.path.isfile(path) else None


def _external_access(con: duckdb.DuckDBPyConnection) -> bool:
    try:
        return bool(con.execute("SELECT current_setting('enable_external_access')").fetchall()[0][0])
    except duckdb.Error:
        return False


def copy_into(con: duckdb.DuckDBPyConnection, database: str, version: int = schema.SCHEMA_VERSION) -> bool:
    """Create the catalog in ``database`` by copying the template, in a transaction of its own.

    Args:
        con: a DuckDB connection outside any transaction, with ``database`` attached and writable and no
            ``modelsql`` schema in it.
        database: the DuckDB database (catalog) name to create the catalog in.
        version: the schema version wanted; only :data:`~modelsql.catalog.schema.SCHEMA_VERSION` has a
            template.

    Returns:
        True when the catalog was created; False when no template could be used (this process has no
        reference yet, the file cannot be made or read, or it holds anything but the reference), with
        ``database`` unchanged: the caller then runs :func:`modelsql.catalog.schema.create` (and :func:`learn`).
    """
    if version != schema.SCHEMA_VERSION or _reference is None or not _external_access(con):
        return False
    path = template_path(version)
    if path is None:
        return False
    alias = f"modelsql_template_{secrets.token_hex(6)}"
    quoted_path = path.replace("'", "''")
    target = schema.quote_ident(database)
    identity = _identity(path)
    attached = False
    try:  # (BEGIN inside: a KeyboardInterrupt just after it still rolls back)
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(f"ATTACH '{quoted_path}' AS {alias} (READ_ONLY)")
        except duckdb.Error:  # not a DuckDB file (damaged, or another's): the next new database builds it again
            _remove(path, identity)
            raise
        attached = True
        if not _holds_the_reference(con, alias, path, identity):
            raise duckdb.Error(f"the template at {path} holds other objects than the catalog's")
        con.execute(f"COPY FROM DATABASE {alias} TO {target}")
        con.execute("COMMIT")
    except BaseException as exc:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        if not isinstance(exc, duckdb.Error):
            raise
        return False
    finally:
        if attached:
            with contextlib.suppress(duckdb.Error):
                con.execute(f"DETACH {alias}")
    return True


def _holds_the_reference(con: duckdb.DuckDBPyConnection, alias: str, path: str, identity: Optional[tuple]) -> bool:
    """Whether the file attached as ``alias`` (``identity`` when it was attached) holds the reference catalog and
    nothing else; checked once per file. One that does not is removed (with any WAL beside it), so the next new
    database builds it again."""
    if identity is not None and identity in _checked:
        return True
    catalog, rest = describe(con, alias)
    if catalog != _reference or rest != _empty_rest():
        _remove(path, identity)
        return False
    if identity is not None and _identity(path) == identity:  # (not replaced since it was attached)
        with _lock:
            _checked.add(identity)
    return True


def _remove(path: str, identity: Optional[tuple]) -> None:
    """Remove a template file that cannot be used (and any WAL beside it), unless it was replaced meanwhile."""
    if _identity(path) != identity:
        return
    for p in (path, path + ".wal"):
        with contextlib.suppress(OSError):
            os.unlink(p)
