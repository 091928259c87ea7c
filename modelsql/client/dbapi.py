"""The PEP 249 (DB-API 2.0) client: :class:`Connection` and :class:`Cursor`.

Transactions follow PEP 249: a connection is not in autocommit mode; the first
statement opens a transaction that lasts until :meth:`Connection.commit` or
:meth:`Connection.rollback` (set ``connection.autocommit = True`` to run each
statement on its own). Model statements (``IMPORT``/``CREATE``/``DROP``/
``EXPORT MODEL``, ``VACUUM MODELS``) commit implicitly, before and after, like
DDL in MySQL and Oracle, so a model is never half in the catalog.

Several cursors share one DuckDB connection (so they see one transaction);
when a cursor runs a statement while another still streams a result, that
result is first fetched into memory, so both stay valid.
"""

from __future__ import annotations

import datetime as _dt
import functools as _functools
import re as _re
import threading as _threading
import time as _time
from typing import Any, Iterator, Mapping, Optional, Sequence

import duckdb

from modelsql import duckdb_errors as _duckdb_errors
from modelsql.engine.result import Result
from modelsql.engine.session import Session
from modelsql.progress import OnlyKinds
from modelsql.storage.files import os_error as _os_error
from modelsql.errors import excerpt as _excerpt
from modelsql.errors import EXCERPT, text_lines
from modelsql.errors import DatabaseError, DataError, Error, IntegrityError, InterfaceError, InternalError, NotSupportedError, OperationalError, ProgrammingError, Warning

apilevel = "2.0"
threadsafety = 1
paramstyle = "qmark"

# ---------------------------------------------------------------- type objects


class DBAPITypeObject:
    """PEP 249 type object: compares equal to every DuckDB type name it covers."""

    def __init__(self, name: str, *prefixes: str) -> None:
        self.name = name
        self.prefixes = tuple(p.upper() for p in prefixes)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DBAPITypeObject):
            return self is other
        text = str(other).upper()
        return any(text == p or text.startswith(p + "(") for p in self.prefixes)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"<modelsql type {self.name}>"


STRING = DBAPITypeObject("STRING", "VARCHAR", "CHAR", "TEXT", "STRING", "UUID", "ENUM", "JSON")
BINARY = DBAPITypeObject("BINARY", "BLOB", "BYTEA", "BIT")
NUMBER = DBAPITypeObject(
    "NUMBER", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
    "UINTEGER", "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL", "BOOLEAN",
)
DATETIME = DBAPITypeObject(
    "DATETIME", "DATE", "TIME", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_S", "TIMESTAMP_MS",
    "TIMESTAMP_NS", "TIME WITH TIME ZONE", "INTERVAL",
)
ROWID = DBAPITypeObject("ROWID", "ROWID")

Date = _dt.date
Time = _dt.time
Timestamp = _dt.datetime


def DateFromTicks(ticks: float) -> _dt.date:
    return Date(*_time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> _dt.time:
    return Time(*_time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> _dt.datetime:
    return Timestamp(*_time.localtime(ticks)[:6])


def Binary(value: Any) -> bytes:
    return bytes(value)


def _python_values(parameters) -> list:
    """Parameters as a list read by index ``0 .. len(parameters) - 1``, as sqlite3 reads a
    sequence: ``__iter__`` is not used, and an exception raised by ``__len__`` or
    ``__getitem__`` reaches the caller unchanged. NumPy scalars become the Python values
    DuckDB binds."""
    return [_python_value(parameters[i]) for i in range(len(parameters))]


def _python_value(value):
    """A NumPy scalar as its Python value; any other value unchanged."""
    item = getattr(value, "item", None)
    if item is not None and type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return item()
    return value


def _named_list_items(table):
    """``table`` with Arrow's conventional child name ``item`` for list and array columns.

    DuckDB exports ``T[k]`` and ``T[]`` columns with an unnamed child field
    (``fixed_size_list<: float>[k]``), which pandas, Polars and Arrow's own
    writers treat as a different type from ``list<item: float>``.
    """
    import pyarrow as pa

    def fix(t):
        if pa.types.is_fixed_size_list(t):
            return pa.list_(pa.field("item", fix(t.value_type), t.value_field.nullable), t.list_size)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            make = pa.list_ if pa.types.is_list(t) else pa.large_list
            return make(pa.field("item", fix(t.value_type), t.value_field.nullable))
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(fix(f.type)) for f in t])
        return t

    schema = pa.schema([f.with_type(fix(f.type)) for f in table.schema], metadata=table.schema.metadata)
    return table.cast(schema)


# ------------------------------------------------------------ error mapping

# The one DuckDB -> PEP 249 map lives in modelsql.duckdb_errors; the client calls it by this name.
translate_duckdb_error = _duckdb_errors.translate


def point_into(err: Error, sql: str) -> Error:
    """Make ``err`` point into the statement text the user wrote.

    DuckDB appends ``LINE n: <text>`` and a caret line to its messages, but
    keeps no position on the exception; and when the text DuckDB saw was SQL
    that modelsql generated (a PREDICT rewritten into a UDF call), the excerpt
    shows that generated SQL. Here the excerpt is located in ``sql``: when its
    text (or, failing that, the offending text under the caret, if it occurs
    exactly once) is found, ``err.line`` / ``err.column`` (1-based) are set and
    the excerpt is redrawn over the user's text; otherwise the excerpt is
    dropped, so generated SQL never reaches the user. Errors that already
    carry a position are returned unchanged.
    """
    if not isinstance(err, Error) or err.line is not None or not isinstance(sql, str):
        return err
    message = str(err)
    m = EXCERPT.search(message)
    if m is None:
        return err
    prefix = len(f"LINE {m.group(1)}: ")
    shown = m.group(2)
    caret = len(m.group(3)) - prefix
    width = len(m.group(4))
    offending = shown[caret : caret + width] if caret >= 0 else ""
    lead = 0
    if shown.startswith("..."):
        shown, lead = shown[3:], 3
    if shown.endswith("..."):
        shown = shown[:-3]
    pos = _find_shown(sql, shown, caret - lead, int(m.group(1))) if shown.strip() and caret >= lead else None
    if pos is None and shown.strip() and caret >= lead and "?" in sql:  # drawn over the text with ? numbered $k
        pos = _in_numbered(sql, shown, caret - lead, int(m.group(1)))
    lines = text_lines(sql)
    if pos is None and offending.strip() and "__m" not in offending.lower():
        hits = [(i + 1, h.start() + 1) for i, line in enumerate(lines) for h in _re.finditer(_re.escape(offending), line)]
        if len(hits) == 1:
            pos = hits[0]
    head = message[: m.start()].rstrip()
    if pos is not None:
        text = head + "\n" + _excerpt(sql, pos[0], pos[1], width)
        err.line, err.column = pos
    else:
        text = head
    err.message = text
    err.args = (text,)
    return err


def _find_shown(sql: str, shown: str, caret: int, wanted: int) -> Optional[tuple[int, int]]:
    """``(line, column)`` (1-based) of ``caret`` characters into the first place ``shown`` (an excerpt's line)
    occurs in ``sql``, line ``wanted`` tried first; None when it occurs nowhere."""
    lines = text_lines(sql)
    order = ([wanted - 1] if 0 < wanted <= len(lines) else []) + [i for i in range(len(lines)) if i != wanted - 1]
    for i in order:
        j = lines[i].find(shown)
        if j >= 0:
            return i + 1, j + caret + 1
    return None


def _in_numbered(sql: str, shown: str, caret: int, wanted: int) -> Optional[tuple[int, int]]:
    """:func:`_find_shown` in ``sql`` with its ``?`` numbered ``$1``, ``$2`` ... (the text an error of a planned
    statement is drawn over), mapped back to the position in ``sql`` itself."""
    from modelsql import sql as _msql

    try:
        numbered, _, back = _msql.numbered_offsets(sql)
    except Exception:  # (a text that does not tokenize: nothing to map)
        return None
    found = _find_shown(numbered, shown, caret, wanted)
    if found is None or numbered == sql:
        return None
    return _msql.original_position(sql, numbered, back, *found)


# ------------------------------------------------------------ connection


def connect(database: str = ":memory:", read_only: bool = False, *, config: Optional[dict] = None,
            trust_code: bool = False, allow_python: bool = True) -> "Connection":
    """Open a modelsql connection (PEP 249 ``connect``).

    Args:
        database: a DuckDB file path (created if missing; its blob store is the
            folder ``<database>.blobs`` beside it) or ``":memory:"``.
        read_only: open the file read-only (no writes to tables or catalog).
        config: extra DuckDB configuration (e.g. ``{"threads": 2}``).
        trust_code: load the database's code (Python programs, trainable factories, compiled
            libraries) without a signature of your key: only for a file whose code you trust
            (README, "What a database file may do"). Default: only signed code loads.
        allow_python: False refuses ``CREATE MODEL ... FROM PYTHON`` and ``TRUST MODEL`` (statements
            that run or trust Python named in SQL): for a server or shell taking SQL from others.

    Raises:
        OperationalError: the file cannot be opened (locked by another
            process, unreadable) or its catalog was written by an unknown schema version.
    """
    return Connection(str(database), read_only=read_only, config=config, trust_code=trust_code,
                      allow_python=allow_python)


_URI = _re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")


def resolve_database(database: str) -> str:
    """The database as it is opened: a file path made absolute once, at connect (``~`` expanded), as DuckDB
    resolves it; so the blob store beside it (``<database>.blobs``) stays that file's whatever ``os.chdir``
    runs later. ``":memory:"`` (and ``":memory:name"``) and ``scheme:...`` strings are kept as given."""
    if database in ("",) or database.startswith(":memory:") or _URI.match(database):
        return database
    import os

    return os.path.abspath(os.path.expanduser(database))


CATALOG_ALIAS = "modelsql_db"
"""DuckDB catalog name used for a database file whose name up to its first dot is ``modelsql``.

DuckDB names a database after its file, up to the file name's first dot, so ``modelsql.duckdb`` (and
``modelsql.v2.duckdb``) would be the catalog ``modelsql`` and ``modelsql.models`` (schema ``modelsql``)
would be ambiguous; such a file is attached under this name instead and made the default."""


def _open_duckdb(database: str, read_only: bool, config: dict) -> duckdb.DuckDBPyConnection:
    import os

    stem = os.path.basename(database).split(".")[0].lower() if database != ":memory:" else ""
    if stem != "modelsql":
        return duckdb.connect(database, read_only=read_only, config=config)
    duck = duckdb.connect(":memory:", config=config)
    try:
        path = database.replace("'", "''")
        duck.execute(f"ATTACH '{path}' AS {CATALOG_ALIAS}" + (" (READ_ONLY)" if read_only else ""))
        duck.execute(f"USE {CATALOG_ALIAS}")
    except BaseException:
        duck.close()
        raise
    return duck


def _one_at_a_time(method):
    """``method`` run holding its connection's lock: the calls of one connection run one at a time, whatever
    threads (cursors) make them. PEP 249's ``threadsafety = 1`` says a connection is not shared between threads;
    one shared anyway has each statement wait for the one running (the session, its DuckDB connection and the
    result streaming on it are one), where statements from two threads used to get each other's rows."""

    @_functools.wraps(method)
    def one_at_a_time(self, *args, **kwargs):
        conn = self if isinstance(self, Connection) else self.connection
        conn._refuse_from_hook()
        with conn._lock:
            return method(self, *args, **kwargs)

    return one_at_a_time


class _HookGuard:
    """A progress hook (``Connection.progress``) run with its thread marked as inside a hook of ``conn``, whose
    calls from that thread are then refused (:meth:`Connection._refuse_from_hook`): a hook runs while a statement
    of the connection runs (on its thread, or on one of DuckDB's), and a statement of the same connection from it
    could only wait for itself (a hang) or run inside the other's transaction (TUNE failed with
    ``transaction_aborted`` and left its study ``running``)."""

    def __init__(self, conn: "Connection", callback) -> None:
        self.conn, self.callback = conn, callback

    def __call__(self, message: dict) -> Any:
        me = _threading.get_ident()
        self.conn._hook_threads.add(me)
        try:
            return self.callback(message)
        finally:
            self.conn._hook_threads.discard(me)


class Connection:
    """A PEP 249 connection to a DuckDB database with a modelsql catalog."""

    Warning = Warning
    Error = Error
    InterfaceError = InterfaceError
    DatabaseError = DatabaseError
    DataError = DataError
    OperationalError = OperationalError
    IntegrityError = IntegrityError
    InternalError = InternalError
    ProgrammingError = ProgrammingError
    NotSupportedError = NotSupportedError

    def __init__(self, database: str, *, read_only: bool = False, config: Optional[dict] = None,
                 trust_code: bool = False, allow_python: bool = True) -> None:
        self.database = database
        self.read_only = read_only
        database = resolve_database(database)  # once: os.chdir afterwards changes nothing
        try:
            self._duck = _open_duckdb(database, read_only, dict(config or {}))
        except Exception as exc:
            err = translate_duckdb_error(exc)
            raise OperationalError(f'Cannot open database "{database}": {err}', code="cannot_open") from exc
        self._closed = False
        self._streaming: Optional[Cursor] = None
        self._lock = _threading.RLock()  # (see _one_at_a_time)
        self._hook_threads: set[int] = set()  # threads inside a progress hook of this connection (_HookGuard)
        try:
            self._session = Session(self._duck, database, read_only=read_only)
        except BaseException:
            self._duck.close()
            raise
        self._session.trust_code = bool(trust_code)
        self._session.allow_python = bool(allow_python)

    # -- PEP 249 ------------------------------------------------------------

    def cursor(self) -> "Cursor":
        """Return a new :class:`Cursor` on this connection."""
        self._check_open()
        return Cursor(self)

    @_one_at_a_time
    def commit(self) -> None:
        """Commit the current transaction (a no-op when none is open)."""
        self._check_open()
        self._settle()
        self._session.commit()

    @_one_at_a_time
    def rollback(self) -> None:
        """Roll back the current transaction (a no-op when none is open)."""
        self._check_open()
        self._settle()
        self._session.rollback()

    @_one_at_a_time
    def close(self) -> None:
        """Close the connection; an open transaction is rolled back (PEP 249).

        Raises:
            InterfaceError: the connection is already closed (PEP 249: any
                operation on a closed connection raises).
        """
        self._check_open()
        try:
            self._session.close()
        finally:
            self._closed = True
            self._duck.close()

    def __enter__(self) -> "Connection":
        self._check_open()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Commit on success, roll back on an exception, then close (as psycopg 3 does)."""
        if self._closed:
            return
        try:
            if exc_type is None:
                self.commit()
            else:
                self.rollback()
        finally:
            self.close()

    # -- conveniences beyond PEP 249 ------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def autocommit(self) -> bool:
        """Run each statement in its own transaction (default False, as PEP 249 asks).

        Switching it on commits the transaction in progress, as Python's
        ``sqlite3`` does, so nothing done before is silently left uncommitted."""
        return self._session.autocommit

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        self._check_open()
        value = bool(value)
        if value and not self._session.autocommit:
            self.commit()
        self._session.autocommit = value

    @property
    def trust_code(self) -> bool:
        """Whether this connection loads the database's code without a signature (``connect``'s
        ``trust_code``; fixed for the connection's life)."""
        return self._session.trust_code

    @property
    def allow_python(self) -> bool:
        """Whether this connection runs ``FROM PYTHON`` and ``TRUST MODEL`` (``connect``'s ``allow_python``;
        fixed for the connection's life)."""
        return self._session.allow_python

    @property
    def optimize(self) -> bool:
        """Whether the planner applies its rewrite rules (default True).

        Set it to False to run every PREDICT exactly as bound: the rules must
        never change a query's answer, and tests compare both ways (DuckDB's
        verification mode does the same for its optimizer)."""
        return self._session.optimize

    @optimize.setter
    def optimize(self, value: bool) -> None:
        self._session.optimize = bool(value)

    @property
    def progress(self):
        """A callable that long statements call with a dict per progress message (rows scored by a PREDICT,
        trials of TUNE and COMPILE, epochs of FINETUNE, runs of PROFILE, stages of CREATE MODEL ... FROM PYTHON;
        the keys are in :mod:`modelsql.progress`), or None (the default) for none. The shell sets it to draw
        its progress display.

        Raises:
            InterfaceError: ``invalid_argument`` when set to something neither callable nor None."""
        hook = self._session.progress
        return hook.callback if isinstance(hook, _HookGuard) else hook

    @progress.setter
    def progress(self, callback) -> None:
        if callback is not None and not callable(callback):
            raise InterfaceError("progress must be a callable or None.", code="invalid_argument")
        self._session.progress = None if callback is None else _HookGuard(self, callback)

    @property
    def tune_progress(self):
        """The older hook of TUNE's progress alone: a callable called with TUNE's messages only (see
        :attr:`progress`, whose hook it replaces); None for none."""
        hook = self._session.progress
        hook = hook.callback if isinstance(hook, OnlyKinds) else hook
        return hook.callback if isinstance(hook, _HookGuard) else hook

    @tune_progress.setter
    def tune_progress(self, callback) -> None:
        if callback is not None and not callable(callback):
            raise InterfaceError("tune_progress must be a callable or None.", code="invalid_argument")
        self._session.progress = None if callback is None else OnlyKinds(("tune",), _HookGuard(self, callback))

    @property
    def duckdb_progress_bar(self) -> bool:
        """Whether DuckDB prints its own progress bar for a query running past 2 s (its setting
        ``enable_progress_bar_print``, True by default). The shell turns it off for a statement whose progress
        it draws itself (:attr:`progress`), so two displays never share the terminal. Setting it plans nothing
        again (a ``SET`` statement would drop the cached plans).

        Raises:
            InterfaceError: ``connection_closed``."""
        self._check_open()
        return self._progress_bar_setting()

    @duckdb_progress_bar.setter
    def duckdb_progress_bar(self, on: bool) -> None:
        self._check_open()
        self._set_progress_bar(on)

    @_one_at_a_time
    def _progress_bar_setting(self) -> bool:
        self._settle()  # a result streaming on the DuckDB connection is kept (the query below would end it)
        rows = self._duck.execute("SELECT current_setting('enable_progress_bar_print')").fetchall()  # (none left open)
        return bool(rows[0][0])  # (a SELECT without FROM gives one row)

    @_one_at_a_time
    def _set_progress_bar(self, on: bool) -> None:
        self._settle()
        self._duck.execute(f"SET enable_progress_bar_print = {'true' if on else 'false'}")

    def _refuse_from_hook(self) -> None:
        """Raises InterfaceError (``used_from_hook``) when this thread is inside a progress hook of this
        connection (:class:`_HookGuard`)."""
        if _threading.get_ident() in self._hook_threads:
            raise InterfaceError("A progress hook must not use the connection it reports on (its statement is "
                                 "running): use another connection (modelsql.connect) in the hook.",
                                 code="used_from_hook")

    def execute(self, operation: str, parameters: Optional[Sequence[Any]] = None) -> "Cursor":
        """Create a cursor, execute ``operation`` on it and return it (as sqlite3 does)."""
        cur = self.cursor()
        cur.execute(operation, parameters)
        return cur

    @_one_at_a_time
    def import_model(
        self,
        name: str,
        model: Any,
        *,
        example_input: Any = None,
        features: Optional[Sequence[str]] = None,
        input_names: Optional[Sequence[str]] = None,
        output_names: Optional[Sequence[str]] = None,
        replace: bool = False,
        if_not_exists: bool = False,
        options: Optional[dict] = None,
        accept_mismatch: bool = False,
    ):
        """Import a model into the catalog and return its :class:`~modelsql.catalog.entries.ModelVersion`.

        Args:
            name: the model's name in the catalog.
            model: an ONNX file path, ONNX bytes or ``onnx.ModelProto``; a fitted
                scikit-learn estimator or ``Pipeline`` (converted with skl2onnx:
                classifiers give ``label`` and a ``probabilities`` matrix); or a
                ``torch.nn.Module`` (exported to ONNX with a dynamic batch axis).
            example_input: an example batch for a torch module (a tensor of shape
                ``[batch, ...]``), required for torch; for a scikit-learn estimator, the
                rows to check its conversion on (the training rows, say: an array
                ``[n, features]``, or a pandas DataFrame / pyarrow Table for a pipeline
                selecting columns by name; default: 256 standard-normal rows, see
                :func:`modelsql.converters.conversion_check.check_conversion`); ignored otherwise.
            features: the column names that feed a single 2-D input, in order.
            input_names: names for a torch module's inputs, one per example input
                (default ``("input",)`` for one, ``forward``'s parameter names for several).
            output_names: names for a torch module's outputs, one per returned
                tensor (e.g. ``("label", "probabilities")``); default ``("output",)``.
            replace: add a new version if the model exists (``CREATE OR REPLACE``).
            if_not_exists: do nothing if the model exists.
            options: extra options stored with the model.
            accept_mismatch: import a scikit-learn estimator even when its ONNX
                conversion predicts another label than the estimator on some sample
                rows (the count is kept in the catalog).

        Raises:
            IntegrityError: the name exists (and neither ``replace`` nor ``if_not_exists``).
            DataError: the model is not valid ONNX; code ``"conversion_mismatch"`` when a
                converted estimator's labels disagree with its own (unless ``accept_mismatch``).
            ProgrammingError: unsupported object.
            OperationalError: a file-system call failed (``disk_full``, ``io_error``); nothing was added.
        """
        from modelsql.engine.models.statements import import_model  # imported when used: plain SQL never needs the converters

        self._check_open()
        self._settle()
        try:
            return import_model(
                self._session, name, model, example_input=example_input, features=features,
                input_names=input_names, output_names=output_names, replace=replace,
                if_not_exists=if_not_exists, options=options, accept_mismatch=accept_mismatch,
            )
        except Error as err:
            better = translate_duckdb_error(err)  # the catalog's wording of an aborted transaction
            if better is err:
                raise
            raise better from None
        except OSError as exc:  # a file-system call failed (a full disk): never a raw OSError
            raise _os_error(exc, f"import model {name!r}") from exc

    @_one_at_a_time
    def import_pipeline(
        self,
        name: str,
        pipeline: Any,
        *,
        example_input: Any,
        features: Optional[Sequence[str]] = None,
        input_name: str = "input",
        replace: bool = False,
        if_not_exists: bool = False,
        description: Optional[str] = None,
        accept_mismatch: bool = False,
    ):
        """Import a fitted scikit-learn ``Pipeline`` / ``FeatureUnion`` / ``ColumnTransformer`` as a
        pipeline of one catalog model per step, and return its
        :class:`~modelsql.catalog.entries.PipelineVersion` (PRETZEL's white-box pipeline).

        Each step is converted on its own and checked against scikit-learn on ``example_input``
        pushed through the steps before it; a step identical to one already in the catalog
        (equal content digest) is reused, so pipelines sharing a fitted featurizer share one model,
        one stored graph and one loaded session. Step models are named ``<name>__<step path>``.
        ``PREDICT(PIPELINE name, ...)`` then runs it; ``EXPORT PIPELINE`` writes it as one file.

        Args:
            name: the pipeline's name in the catalog.
            pipeline: the fitted scikit-learn object (a single estimator gives a one-step pipeline).
            example_input: rows it accepts (a 2-D numeric array ``[n, features]``, or a list of
                ``n`` strings for a text pipeline); required, at least one row.
            features: column names feeding a numeric input, in order.
            input_name: the pipeline input's name: the column PREDICT feeds a text input from.
            replace: add a new version if the pipeline exists (``CREATE OR REPLACE PIPELINE``).
            if_not_exists: do nothing if the pipeline exists.
            description: free text kept with the pipeline.
            accept_mismatch: import it even when the split pipeline, run end to end in ONNX Runtime
                (float32 between steps), predicts another label than scikit-learn on some example rows
                (the count is kept: ``DESCRIBE PIPELINE``'s ``conversion_check``).

        Raises:
            IntegrityError: the name exists (neither ``replace`` nor ``if_not_exists``).
            NotSupportedError: a part that cannot be split or converted (code ``"conversion_failed"``).
            DataError: a converted step disagrees with scikit-learn (``"conversion_mismatch"``).
            ProgrammingError: no example rows, an invalid name.
        """
        from modelsql.engine.pipelines.import_pipeline import import_pipeline

        self._check_open()
        self._settle()
        try:
            return import_pipeline(self._session, name, pipeline, example_input=example_input, features=features,
                                   input_name=input_name, replace=replace, if_not_exists=if_not_exists,
                                   description=description, accept_mismatch=accept_mismatch)
        except OSError as exc:  # a file-system call failed (a full disk): never a raw OSError
            raise _os_error(exc, f"import pipeline {name!r}") from exc

    @_one_at_a_time
    def register(self, name: str, data: Any) -> None:
        """Make a Python object queryable as a view ``name`` on this connection (extension).

        ``data``: a ``pyarrow.Table`` / ``RecordBatchReader`` / dataset, a pandas or
        polars DataFrame, or a dict of equal-length NumPy arrays (made into an
        Arrow table), as DuckDB's ``register`` takes them. The view lives as long
        as the connection (or until :meth:`unregister`) and is visible to this
        connection only; ``CREATE TABLE t AS SELECT * FROM name`` stores it.

        Raises:
            ProgrammingError: the object cannot be registered.
        """
        self._check_open()
        self._settle()
        if isinstance(data, dict):
            import pyarrow as pa

            data = pa.table(data)
        try:
            self._duck.register(name, data)
            self._session.changed()
        except Exception as exc:
            raise ProgrammingError(f'Cannot register "{name}": {translate_duckdb_error(exc)}', code="register_failed") from exc

    @_one_at_a_time
    def unregister(self, name: str) -> None:
        """Remove a view made by :meth:`register`."""
        self._check_open()
        self._settle()
        try:
            self._duck.unregister(name)
            self._session.changed()
        except Exception as exc:
            raise translate_duckdb_error(exc) from exc

    # -- internals ------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise InterfaceError("Connection is closed.", code="connection_closed")

    def _settle(self, keep: Optional["Cursor"] = None) -> None:
        """Fetch any result still streaming on the shared DuckDB connection into its cursor."""
        cur = self._streaming
        if cur is not None and cur is not keep:
            cur._materialize()
        if keep is None or cur is not keep:
            self._streaming = None if cur is not keep else cur



class Cursor:
    """A PEP 249 cursor."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.arraysize = 1
        self._closed = False
        self._description: Optional[list[tuple]] = None
        self._rowcount = -1
        self._buffer: Optional[list[tuple]] = None
        self._pos = 0
        self._streaming = False
        self._lastrowid = None
        self._result: Optional[Result] = None
        self._operation: Optional[str] = None

    # -- PEP 249 attributes -----------------------------------------------------

    @property
    def description(self) -> Optional[list[tuple]]:
        """Sequence of 7-item tuples ``(name, type_code, display_size, internal_size,
        precision, scale, null_ok)``, one per result column; None when the last
        operation returned no rows. ``type_code`` is the DuckDB type name
        (``"INTEGER"``, ``"FLOAT[10]"``) and compares equal to the PEP 249 type objects."""
        return self._description

    @property
    def rowcount(self) -> int:
        """Rows changed by the last INSERT/UPDATE/DELETE, else -1 (PEP 249)."""
        return self._rowcount

    @property
    def lastrowid(self):
        return None

    # -- PEP 249 methods --------------------------------------------------------

    @_one_at_a_time
    def close(self) -> None:
        """Close the cursor; every later call, ``close()`` included, raises InterfaceError."""
        if self._closed:
            raise InterfaceError("Cursor is already closed.", code="cursor_closed")
        if not self.connection._closed:
            self._discard()
        self._buffer = None
        self._closed = True

    @_one_at_a_time
    def execute(self, operation: str, parameters: Optional[Sequence[Any]] = None) -> "Cursor":
        """Prepare and execute one or more ``;``-separated statements.

        Args:
            operation: SQL with ``?`` placeholders (paramstyle ``qmark``).
            parameters: a sequence with one value per ``?``.

        Returns:
            This cursor (so calls can be chained, as in sqlite3).

        Raises:
            ProgrammingError: syntax errors, unknown models/tables/columns, wrong
                number of parameters. DataError: bad values (NULLs fed to a model,
                corrupt blobs). InterfaceError: the cursor or connection is closed.
                An exception raised by the parameters' own ``__len__`` or
                ``__getitem__`` propagates unchanged (as in sqlite3).
        """
        self._check_open()
        if not isinstance(operation, str):
            raise ProgrammingError("operation must be a str of SQL.", code="invalid_argument")
        if isinstance(parameters, Mapping):
            # checked first: a dict has __len__, and list(dict) would silently bind its keys
            raise NotSupportedError("paramstyle is qmark: pass parameters as a sequence, not a mapping.", code="paramstyle")
        if parameters is not None and (
            isinstance(parameters, (str, bytes, bytearray, set, frozenset))
            or not hasattr(parameters, "__len__") or not hasattr(parameters, "__getitem__")
        ):
            raise ProgrammingError("parameters must be a sequence (list or tuple).", code="invalid_argument")
        values = _python_values(parameters) if parameters is not None else None
        conn = self.connection
        self._discard()  # this cursor's own unread rows are dropped, never fetched
        conn._settle()
        self._reset()
        self._operation = operation
        try:
            outcome = conn._session.execute(operation, values)
        except Error as err:
            raise point_into(translate_duckdb_error(err), operation) from err.__cause__
        self._description = outcome.description
        self._rowcount = outcome.rowcount
        if outcome.rows is not None:
            self._buffer = outcome.rows
        elif outcome.streaming:
            self._streaming = True
            conn._streaming = self
            self._result = outcome
        return self

    @_one_at_a_time
    def executemany(self, operation: str, seq_of_parameters) -> "Cursor":
        """Execute ``operation`` once per parameter sequence; rowcount is the total changed.

        A statement that returns rows (``INSERT ... RETURNING``) keeps the rows of every execution,
        in order, to fetch afterwards, with rowcount -1 as for one such statement (DuckDB's own
        client keeps only the last execution's; PEP 249 leaves it open).
        """
        self._check_open()
        total = 0
        counted = False
        returned: Optional[list] = None
        description = None
        for params in seq_of_parameters:
            self.execute(operation, params)
            if self._description is not None:
                description = self._description
                returned = (returned or []) + self.fetchall()
            elif self._rowcount >= 0:
                total += self._rowcount
                counted = True
        if returned is not None:
            self._reset()
            self._description, self._buffer, self._rowcount = description, returned, -1
            return self
        self._description = None
        self._rowcount = total if counted else -1
        return self

    @_one_at_a_time
    def fetchone(self) -> Optional[tuple]:
        """Next row as a tuple, or None when the result is exhausted."""
        self._check_result()
        if self._buffer is not None:
            if self._pos >= len(self._buffer):
                return None
            row = self._buffer[self._pos]
            self._pos += 1
            return row
        row = self._stream_call(lambda d: d.fetchone())
        if row is None:
            self._finish_stream()
        return row

    @_one_at_a_time
    def fetchmany(self, size: Optional[int] = None) -> list[tuple]:
        """Up to ``size`` (default :attr:`arraysize`) next rows."""
        self._check_result()
        n = self.arraysize if size is None else size
        if n < 0:
            raise ProgrammingError("fetchmany size must be >= 0.", code="invalid_argument")
        if self._buffer is not None:
            rows = self._buffer[self._pos : self._pos + n]
            self._pos += len(rows)
            return rows
        rows = self._stream_call(lambda d: d.fetchmany(n))
        if len(rows) < n:
            self._finish_stream()
        return rows

    @_one_at_a_time
    def fetchall(self) -> list[tuple]:
        """All remaining rows."""
        self._check_result()
        if self._buffer is not None:
            rows = self._buffer[self._pos :]
            self._pos = len(self._buffer)
            return rows
        rows = self._stream_call(lambda d: d.fetchall())
        self._finish_stream()
        return rows

    @_one_at_a_time
    def fetch_arrow(self):
        """All remaining rows as a ``pyarrow.Table`` (extension; streams without Python rows)."""
        self._check_result()
        if self._buffer is not None:
            raise NotSupportedError("fetch_arrow is available only right after execute.", code="not_supported")
        import warnings

        with warnings.catch_warnings():
            # DuckDB advises its own relation API here, which a DB-API cursor does not have.
            warnings.simplefilter("ignore", UserWarning)
            table = self._stream_call(lambda d: d.to_arrow_table())
        self._finish_stream()
        return _named_list_items(table)

    def setinputsizes(self, sizes) -> None:
        """PEP 249: accepted and ignored."""
        self._check_open()

    def setoutputsize(self, size, column=None) -> None:
        """PEP 249: accepted and ignored."""
        self._check_open()

    def __iter__(self) -> Iterator[tuple]:
        self._check_open()
        return self

    def __next__(self) -> tuple:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    def __enter__(self) -> "Cursor":
        return self

    def __exit__(self, *exc) -> None:
        if not self._closed:
            self.close()

    # -- internals ------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise InterfaceError("Cursor is closed.", code="cursor_closed")
        self.connection._check_open()

    def _check_result(self) -> None:
        self._check_open()
        if self._description is None:
            raise ProgrammingError("No result to fetch: the last statement returned no rows.", code="no_result")

    def _discard(self) -> None:
        """Drop the rest of this cursor's streaming result without reading it (DuckDB ``abort``)."""
        if self._streaming and self.connection._streaming is self:
            try:
                self.connection._duck.abort()
            except Exception:
                pass
            self.connection._streaming = None
            self._streaming = False
            self._buffer = []
            self._pos = 0
        if self._result is not None:
            self._result.release()
            self._result = None

    def _reset(self) -> None:
        if self.connection._streaming is self:
            self.connection._streaming = None
        if self._result is not None:
            self._result.release()
        self._description = None
        self._rowcount = -1
        self._buffer = None
        self._pos = 0
        self._streaming = False
        self._result = None

    def _stream_call(self, fn):
        """Run ``fn(duckdb_connection)`` on this cursor's streaming result (callers check it streams)."""
        try:
            return fn(self.connection._duck)
        except Exception as exc:
            # Translate before finishing: finishing releases the PREDICT functions,
            # whose recorded errors (NULL inputs, corrupt blobs) the translation reads.
            err = self._result.error(exc) if self._result is not None else translate_duckdb_error(exc)
            self._finish_stream(failed=True)
            raise point_into(err, self._operation) from exc

    def _finish_stream(self, failed: bool = False) -> None:
        """End the streaming result: released, or (``failed``) released as a failed statement's is (its progress
        jobs end with ``ok`` False, a transaction begun for it is rolled back)."""
        if self._streaming:
            self._streaming = False
            self._buffer = []
            self._pos = 0
            if self.connection._streaming is self:
                self.connection._streaming = None
            if self._result is not None:
                (self._result.rollback if failed else self._result.release)()

    def _materialize(self) -> None:
        if self._streaming:
            rows = self._stream_call(lambda d: d.fetchall())
            self._streaming = False
            self._buffer = rows or []
            self._pos = 0
            if self._result is not None:
                self._result.release()


