"""``EXPORT DATABASE 'dir'`` and ``IMPORT DATABASE 'dir'`` that carry the models.

DuckDB's own statements know nothing of the blob store, and DuckDB's dump of the ``modelsql``
schema does not load back (its views come out in name order, before the views they read). So on a
modelsql connection:

* ``EXPORT DATABASE`` runs DuckDB's export (the user's tables, in the format the user asked for),
  takes the ``modelsql`` schema out of its ``schema.sql`` / ``load.sql``, and writes the catalog
  itself under ``dir/modelsql/``: one Parquet file per catalog table (type-exact), every blob the
  catalog references (``dir/modelsql/blobs/``, a blob store of its own, each blob verified on the
  way), and last ``dir/modelsql/manifest.json`` (its presence marks a whole export). All of it is
  read in one snapshot.
* ``IMPORT DATABASE`` of such a folder into a database whose catalog is empty (a new one) puts the
  blobs in this database's store (verified), then, in one transaction, runs DuckDB's import of the
  user's part and loads the catalog tables. A folder DuckDB exported with the catalog but without
  the blobs (plain DuckDB, or modelsql before this) is refused with the statement that works.

Layout of an export: DuckDB's own files, plus::

    dir/modelsql/manifest.json     {"format": 1, "schema_version": n, "tables": [...], "blobs": n}
    dir/modelsql/<table>.parquet   one per catalog table
    dir/modelsql/blobs/            the referenced blobs (same layout as a database's store)
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Optional

import duckdb

from modelsql.catalog import schema
from modelsql.errors import DataError, NotSupportedError, OperationalError, ProgrammingError
from modelsql.storage import BlobStore
from modelsql.storage.files import read_regular_file, write_atomically
from modelsql.engine.result import Result

if TYPE_CHECKING:
    from modelsql.engine.session import Session

FOLDER = "modelsql"
"""The sub-folder of an export that holds the catalog and its blobs."""

MANIFEST = "manifest.json"
_FORMAT = 1
_S = schema.SCHEMA
_STRING = r"'((?:[^']|'')*)'"
_EXPORT_RE = re.compile(r"^\s*EXPORT\s+DATABASE\s+(?:(\"(?:[^\"]|\"\")+\"|[A-Za-z_][\w$]*)\s+TO\s+)?" + _STRING, re.I)
_IMPORT_RE = re.compile(r"^\s*IMPORT\s+DATABASE\s+" + _STRING, re.I)
_OURS_RE = re.compile(r"^\s*(?:CREATE\s+(?:OR\s+REPLACE\s+)?(?:SCHEMA|TABLE|VIEW|SEQUENCE|MACRO|FUNCTION|TYPE|"
                      r"(?:UNIQUE\s+)?INDEX\s+\S+\s+ON)\s+(?:IF\s+NOT\s+EXISTS\s+)?|COPY\s+|COMMENT\s+ON\s+\w+\s+)"
                      rf"\"?{_S}\"?\s*(?:[.;(]|$)", re.I)
_COPY_FILE_RE = re.compile(r"\bFROM\s+" + _STRING, re.I)
_LEADING = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.S)


def is_dump(stype: str, text: str) -> bool:
    """Whether a plain statement of DuckDB type ``stype`` is ``EXPORT DATABASE`` or ``IMPORT DATABASE``."""
    body = _LEADING.sub("", text, count=1)
    return (stype == "EXPORT" and _EXPORT_RE.match(body) is not None) or \
        (stype == "PRAGMA" and _IMPORT_RE.match(body) is not None)


def run_dump(session: Session, text: str) -> Result:
    """Carry out ``EXPORT DATABASE`` / ``IMPORT DATABASE`` (see the module's docstring).

    Raises:
        ProgrammingError: ``import_target_not_empty`` (the catalog has entries); ``export_database_other``
            (``EXPORT DATABASE name TO`` of another attached database with a catalog).
        NotSupportedError: ``export_without_store`` (a folder with the catalog but not its blobs).
        OperationalError: ``catalog_version_mismatch``, ``read_only``, ``disk_full``, ``io_error``; DuckDB's own.
        DataError: ``blob_missing`` / ``blob_corrupt`` (a blob the catalog names is gone or damaged).
    """
    body = _LEADING.sub("", text, count=1)
    m = _EXPORT_RE.match(body)
    if m is not None:
        return _export(session, text, m.group(1), _unquote(m.group(2)))
    m = _IMPORT_RE.match(body)
    assert m is not None  # is_dump read the text as EXPORT or IMPORT DATABASE
    return _import(session, text, _unquote(m.group(1)))


# ---------------------------------------------------------------- EXPORT DATABASE


def _export(session: Session, text: str, name: Optional[str], folder: str) -> Result:
    if name is not None and _ident(name) != session.catalog.database:
        if _has_catalog(session, _ident(name)):
            raise ProgrammingError(
                f'EXPORT DATABASE {name} TO ...: database "{_ident(name)}" has a modelsql catalog whose blobs are '
                "not this connection's; connect to it and run EXPORT DATABASE there.", code="export_database_other")
        session.begin_if_needed()
        session.run(text, None)
        return Result(session.duck)
    own = not session.in_transaction
    if own:
        session.run("BEGIN TRANSACTION", None)  # one snapshot for the tables, the catalog and its blobs
    try:
        session.run(text, None)
        _strip_catalog(folder)
        _write_catalog(session, os.path.join(folder, FOLDER))
    except BaseException:
        if own:
            _rollback(session)
        raise
    if own:
        session.run("COMMIT", None)
    return Result(session.duck)


def _strip_catalog(folder: str) -> None:
    """Take the modelsql schema out of DuckDB's ``schema.sql`` and ``load.sql`` (and its data files)."""
    for script in ("schema.sql", "load.sql"):
        path = os.path.join(folder, script)
        kept = []
        for st in duckdb.extract_statements(read_regular_file(path, f'"{path}"').decode()):
            if _OURS_RE.match(st.query) is None:
                kept.append(st.query.strip().rstrip(";") + ";\n")
                continue
            data = _COPY_FILE_RE.search(st.query)
            if data is not None:
                target = os.path.join(folder, os.path.basename(_unquote(data.group(1))))
                if os.path.isfile(target):
                    os.unlink(target)
        write_atomically(path, "".join(kept).encode(), f'"{path}"')


def _write_catalog(session: Session, folder: str) -> None:
    """The catalog tables as Parquet, the referenced blobs, then the manifest."""
    os.makedirs(folder, exist_ok=True)
    tables = _catalog_tables(session)
    for table in tables:
        target = os.path.join(folder, f"{table}.parquet")
        session.run(f"COPY (SELECT * FROM {session.catalog.qualified_schema}.{table}) TO "
                    f"'{_quote(target)}' (FORMAT parquet)", None)
    out = BlobStore(os.path.join(folder, "blobs"))
    digests = sorted(session.catalog.referenced_digests())
    for d in digests:
        out.put(session.store.get(d))  # get verifies the digest
    manifest = {"format": _FORMAT, "schema_version": _schema_version(session), "tables": tables,
                "blobs": len(digests)}
    path = os.path.join(folder, MANIFEST)
    write_atomically(path, json.dumps(manifest, indent=1).encode(), f'"{path}"')


# ---------------------------------------------------------------- IMPORT DATABASE


def _import(session: Session, text: str, folder: str) -> Result:
    path = os.path.join(folder, FOLDER, MANIFEST)
    if not os.path.exists(path):
        if os.path.isdir(os.path.join(folder, FOLDER)):
            raise OperationalError(f'IMPORT DATABASE: "{folder}" holds a modelsql folder without its {MANIFEST}: the '
                                   "export was cut short or damaged; export the source again.", code="bad_export")
        _refuse_catalog_without_blobs(folder)
        session.begin_if_needed()
        session.run(text, None)  # a dump without a modelsql catalog: DuckDB's own import
        return Result(session.duck)
    session.check_writable()
    manifest = _manifest(path)
    _check_importable(session, manifest, folder)
    src = BlobStore(os.path.join(folder, FOLDER, "blobs"))
    session.commit()  # like every model statement that writes (not catalog_write: DuckDB's IMPORT joins its writes)
    with session.store.writing():
        for d in src.digests():
            session.store.put(src.get(d))  # get verifies the digest
        session.run("BEGIN TRANSACTION", None)
        try:
            session.run(text, None)
            _load_catalog(session, os.path.join(folder, FOLDER), manifest["tables"])
            _check_blobs(session, folder)
            session.run("COMMIT", None)
        except BaseException:
            _rollback(session)
            raise
    session.changed()
    return Result(session.duck)


def _check_blobs(session: Session, folder: str) -> None:
    """Every blob the imported catalog references is in this database's store (else nothing is imported).

    Raises:
        DataError: ``blob_missing``, naming how many and the first.
    """
    missing = sorted(d for d in session.catalog.referenced_digests() if not session.store.has(d))
    if missing:
        raise DataError(f'IMPORT DATABASE: "{folder}" lacks {len(missing)} of the blobs its catalog references (the '
                        f"first: {missing[0]}); nothing was imported. Export the source again.", code="blob_missing")


def _refuse_catalog_without_blobs(folder: str) -> None:
    schema_sql = os.path.join(folder, "schema.sql")
    if not os.path.isfile(schema_sql):
        return  # DuckDB says what is wrong with the folder
    text = read_regular_file(schema_sql, f'"{schema_sql}"').decode(errors="replace")
    if re.search(rf"^\s*CREATE\s+SCHEMA\s+\"?{_S}\"?\s*;", text, re.I | re.M):
        raise NotSupportedError(
            f'IMPORT DATABASE: "{folder}" holds a modelsql catalog but not its models\' blobs (it was written by '
            "DuckDB's EXPORT DATABASE, not modelsql's): export the source database again with EXPORT DATABASE on "
            "a modelsql connection, or copy the database file with its .blobs folder.", code="export_without_store")


def _manifest(path: str) -> dict:
    try:
        manifest = json.loads(read_regular_file(path, f'"{path}"'))
        if not isinstance(manifest, dict):
            raise ValueError(f"a JSON {type(manifest).__name__}, not an object")
        if manifest.get("format") != _FORMAT or not isinstance(manifest.get("tables"), list):
            raise ValueError(f"format {manifest.get('format')!r}")
    except ValueError as exc:
        raise OperationalError(f'IMPORT DATABASE: "{path}" is not a modelsql export manifest ({exc}).',
                               code="io_error") from None
    return manifest


def _check_importable(session: Session, manifest: dict, folder: str) -> None:
    ours = _schema_version(session)
    if manifest.get("schema_version") != ours:
        raise OperationalError(
            f'IMPORT DATABASE: "{folder}" holds a catalog of schema version {manifest.get("schema_version")}, this '
            f"database's is {ours}: import it with the modelsql that exported it, then open that database with "
            "this one (it migrates) and export again.", code="catalog_version_mismatch")
    tables = manifest["tables"]
    if sorted(map(str, tables)) != sorted(_catalog_tables(session)):
        raise OperationalError(f'IMPORT DATABASE: "{folder}"\'s manifest lists the catalog tables {tables!r}, not '
                               f"those of schema version {ours}: the export is damaged.", code="bad_export")
    full = [t for t in _catalog_tables(session) if t != "meta" and
            session.duck.execute(f"SELECT count(*) FROM {session.catalog.qualified_schema}.{t}").fetchall()[0][0]]
    if full:
        raise ProgrammingError(
            f"IMPORT DATABASE: this database's modelsql catalog is not empty ({', '.join(full)}); import into a new "
            "database.", code="import_target_not_empty")


def _load_catalog(session: Session, folder: str, tables: list) -> None:
    s = session.catalog.qualified_schema
    for table in tables:
        if table not in _catalog_tables(session):
            continue
        source = os.path.join(folder, f"{table}.parquet")
        if table == "meta":
            session.run(f"DELETE FROM {s}.meta", None)
        session.run(f"INSERT INTO {s}.{table} BY NAME SELECT * FROM read_parquet('{_quote(source)}')", None)
    session.catalog.evaluations.number_after_rows()  # a sequence is not a table: it starts again at 1


# ---------------------------------------------------------------- helpers


def _catalog_tables(session: Session) -> list:
    rows = session.duck.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = ? ORDER BY table_name",
        [session.catalog.database, _S]).fetchall()
    return [r[0] for r in rows]


def _schema_version(session: Session) -> Optional[int]:
    rows = session.duck.execute(f"SELECT value FROM {session.catalog.qualified_schema}.meta "
                                "WHERE key = 'schema_version'").fetchall()
    return int(rows[0][0]) if rows else None


def _has_catalog(session: Session, database: str) -> bool:
    return bool(session.duck.execute("SELECT count(*) FROM duckdb_schemas() WHERE database_name = ? AND "
                                     "schema_name = ?", [database, _S]).fetchall()[0][0])


def _rollback(session: Session) -> None:
    try:
        session.duck.execute("ROLLBACK")
    except duckdb.Error:
        pass


def _unquote(literal: str) -> str:
    return literal.replace("''", "'")


def _quote(path: str) -> str:
    return path.replace("'", "''")


def _ident(name: str) -> str:
    return name[1:-1].replace('""', '"') if name.startswith('"') else name
