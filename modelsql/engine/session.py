"""The session: runs a connection's statement loop and owns its transaction.

:class:`Session` is what a :class:`modelsql.client.dbapi.Connection` talks to. For a
text it decides, with the tokenizer alone, whether modelsql's parser is needed
(:func:`modelsql.sql.mentions_models`, whose words come from the registered
statement nodes); plain DuckDB SQL goes to DuckDB untouched. Otherwise each
parsed statement is handed to its handler (:mod:`modelsql.engine.handlers`),
which returns a :class:`~modelsql.engine.result.Result`.

Transactions follow PEP 249: outside autocommit mode the first statement opens
a transaction that lasts until :meth:`Session.commit` or
:meth:`Session.rollback`. ``BEGIN`` / ``COMMIT`` / ``ROLLBACK`` anywhere in any
text (parameterised or not, among other statements) run one at a time, so the
session follows them exactly as DuckDB honours them: ``COMMIT`` or ``ROLLBACK``
with no transaction open raises, and so does ``BEGIN`` inside a ``BEGIN``.
Model statements that write commit, before and after; a transaction open before
one of them goes on after it (the next statement begins it again), so the
user's closing ``COMMIT`` still has a transaction to end.
"""

from __future__ import annotations

import importlib
import re
import sys
from typing import Any, Callable, Optional, Sequence

import duckdb
from sqlglot import exp

from modelsql import sql as msql
from modelsql.catalog import Catalog
from modelsql.catalog.entries import RoutedModels
from modelsql.duckdb_errors import translate
from modelsql.errors import (EXCERPT, Error, InternalError, OperationalError, ProgrammingError, excerpt, position_of,
                             text_lines, without_excerpt)
from modelsql.sql.registry import STATEMENT_NODES
from modelsql.storage import BlobStore
from modelsql.storage.files import os_error
from modelsql.engine.models import database_dump
from modelsql.engine import open_databases
from modelsql.engine.ambiguity import refuse_ambiguous
from modelsql.engine import handlers
from modelsql.engine.handlers import run_statement
from modelsql.engine.plan_cache import PlanCache, bump, database_key, generation
from modelsql.engine.result import Result
from modelsql.engine.query import catalog_entries

_NO_RESULT_TYPES = {
    "CREATE", "DROP", "ALTER", "TRANSACTION", "SET", "VARIABLE_SET", "ATTACH", "DETACH", "LOAD",
    "VACUUM", "ANALYZE", "PREPARE", "CREATE_FUNC", "EXTENSION", "COPY_DATABASE", "EXPORT",
}
_READ_ONLY_TYPES = {"SELECT", "EXPLAIN"}
"""DuckDB statement types after which cached plans stay valid (every other type bumps the generation)."""
_LEADING_COMMENTS = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.S)


class Session:
    """Executes statements on one DuckDB connection and owns its transaction.

    Args:
        duck: the DuckDB connection.
        database: the database path or ``":memory:"`` (locates the blob store).
        read_only: refuse every write.
    """

    def __init__(self, duck: duckdb.DuckDBPyConnection, database: str, *, read_only: bool = False) -> None:
        self.duck = duck
        self.database = database
        self.read_only = read_only
        self.catalog = Catalog(duck, read_only=read_only)
        self.store = BlobStore.for_database(database)
        open_databases.register(database)
        self.registered = True
        self.trust_code = False
        """Load every code artifact of this database without a signature (``connect(..., trust_code=True)``;
        see :mod:`modelsql.engine.artifacts.trust`)."""
        self.allow_python = True
        """Run statements that name Python code (``FROM PYTHON``, ``TRUST MODEL``); False for SQL from others."""
        self.optimize = True
        """Apply the planner's rewrite rules (:data:`modelsql.engine.query.rules.RULES`); False runs
        every PREDICT as bound, which tests use to check that rules never change an answer."""
        self.autocommit = False
        self.in_transaction = False
        """A transaction this session began (outside autocommit mode, or by a ``BEGIN``) is open."""
        self.explicit = False
        """The open (or resuming) transaction was opened or adopted by the user's ``BEGIN``."""
        self.resuming = False
        """A model statement committed the transaction that was open; the next statement begins it again."""
        self.text = ""
        """The statement text being run, with ``?`` numbered (error excerpts point into it)."""
        self.qmark_style = False
        """The text numbered its parameters ``?`` (DuckDB then names a ``?`` column by its place)."""
        self.plans = PlanCache(duck)
        """Plans of the statement texts run before (see :mod:`modelsql.engine.plan_cache`)."""
        self.progress: Optional[Callable[[dict], Any]] = None
        """The progress hook (``Connection.progress``): called with a dict per message of a long statement
        (:mod:`modelsql.progress`), or None."""
        self.cache_key: Optional[tuple] = None
        """The plan-cache key of the statement being run, when it may be cached."""
        self.database_key: str = database_key(database, duck)
        """What names the session's database process-wide (see :func:`~modelsql.engine.plan_cache.database_key`)."""

    def generation(self) -> int:
        """The database's generation: what cached plans were planned in (see :mod:`~modelsql.engine.plan_cache`)."""
        return generation(self.database_key)

    def changed(self) -> None:
        """Something cached plans may depend on changed (a table, a setting, a model, a registered object)."""
        bump(self.database_key)

    # ------------------------------------------------------------ transactions

    def begin_if_needed(self) -> None:
        """Open the PEP 249 implicit transaction (not in autocommit or read-only mode), or the one a
        model statement's implicit commit interrupted."""
        if self.resuming:
            self.resume()
        elif not self.autocommit and not self.in_transaction and not self.read_only:
            self.duck.execute("BEGIN TRANSACTION")
            self.in_transaction = True

    def resume(self) -> None:
        """Begin again the transaction that a model statement's implicit commit ended (a no-op when
        there is none)."""
        if self.resuming and not self.in_transaction:
            self.resuming = False
            self.run("BEGIN TRANSACTION", None)
            self.in_transaction = True
        self.resuming = False

    def commit(self) -> None:
        """Commit this session's transaction (a no-op when none is open: PEP 249's ``commit()``)."""
        self.changed()  # plans made in the old snapshot may not see what others committed meanwhile
        self.explicit = self.resuming = False
        if self.in_transaction:
            self.in_transaction = False
            try:
                self.duck.execute("COMMIT")
            except Exception as exc:
                raise translate(exc) from exc

    def rollback(self) -> None:
        """Roll back this session's transaction (a no-op when none is open: PEP 249's ``rollback()``)."""
        self.changed()  # it may undo a CREATE TABLE that a cached plan reads
        self.explicit = self.resuming = False
        if self.in_transaction:
            self.in_transaction = False
            try:
                self.duck.execute("ROLLBACK")
            except Exception as exc:
                raise translate(exc) from exc

    def transaction_statement(self, text: str) -> Result:
        """Run one ``BEGIN`` / ``START TRANSACTION`` / ``COMMIT`` / ``END`` / ``ROLLBACK`` / ``ABORT``
        as DuckDB honours it, keeping this session's state in step.

        ``BEGIN`` adopts the PEP 249 implicit transaction when one is open.

        Raises:
            OperationalError: ``transaction_error``: ``COMMIT`` or ``ROLLBACK`` with no transaction
                open, or ``BEGIN`` inside a transaction the user began (DuckDB's own message).
        """
        self.resume()
        word = first_word(text)
        if word in ("BEGIN", "START"):
            if not self.in_transaction:
                self.run(text, None)
                self.in_transaction = True
            elif self.explicit:
                self.run(text, None)  # DuckDB raises: a transaction within a transaction
            self.explicit = True
        elif not self.in_transaction:
            self.run(text, None)  # DuckDB raises: no transaction is active
        elif word in ("COMMIT", "END"):
            self.commit()
        elif word in ("ROLLBACK", "ABORT"):
            self.rollback()
        else:
            self.run(text, None)
        return Result(self.duck)

    def close(self) -> None:
        """Stop the servers this session started, roll back an open transaction and drop cached plans;
        model sessions live in the process-wide cache."""
        serve = sys.modules.get("modelsql.engine.serve.statements")  # no server runs before SERVE imported it
        if serve is not None:
            serve.stop_all(owner=self)
        if self.registered:
            open_databases.release(self.database)
            self.registered = False
        self.plans.clear()
        self.resuming = False
        try:
            self.rollback()
        except Error:
            pass

    def check_writable(self) -> None:
        """Raises OperationalError (``read_only``) on a read-only connection."""
        if self.read_only:
            raise OperationalError("The connection is read-only; model statements that write are refused.", code="read_only")

    # ------------------------------------------------------------ statements

    def execute(self, text: str, params: Optional[list]) -> Result:
        """Run ``text`` (one or more statements) with qmark ``params``; the last statement's result."""
        self.plans.collect()  # nothing is pending on the connection yet
        stypes = self.plans.plain_types(text)
        if stypes is not None:
            return self.passthrough(text, params, stypes)
        key = PlanCache.key(text, params, self.optimize)
        entry = self.plans.get(key, self.generation(), params)
        if entry is not None:
            from modelsql.engine.query_handler import run_cached

            self.text, self.qmark_style = entry.text, entry.qmark_style
            return run_cached(entry, self, params or [])
        if not msql.mentions_models(text):
            return self.passthrough(text, params)
        register_handlers()
        refuse_ambiguous(self, text)  # SHOW models with a table "models": DuckDB's text and ours
        numbered, count, back = msql.numbered_offsets(text)
        self.qmark_style = count > 0
        given = len(params) if params is not None else 0
        pieces = msql.statement_texts(text) if count > 0 or not given else []
        if len(pieces) > 1:
            wanted = sum(_values_taken(piece) for piece in pieces)
            if given != wanted:
                raise ProgrammingError(
                    f"The statements have {wanted} parameter placeholder(s) but {given} value(s) were given"
                    + (" (a PREPARE's are its own, given when it is executed)." if wanted != count else "."),
                    code="parameter_count",
                )
            return self._one_by_one(pieces, params or [], text)
        statements = msql.parse_numbered(text, numbered, back)
        if count == 0:
            # DuckDB's own numbered style ($1, $2 ...) written by the user.
            count = max((n for st in statements for n in _numbered_placeholders(st)), default=0)
        if given != count and not _PREPARE.match(text):  # (a PREPARE's ? are its own; the query handler refuses it)
            raise ProgrammingError(
                f"The statement has {count} parameter placeholder(s) but {given} value(s) were given.",
                code="parameter_count",
            )
        self.text = numbered
        result = Result(self.duck)
        for i, stmt in enumerate(statements):
            result.release()
            self.cache_key = key if len(statements) == 1 and isinstance(stmt, exp.Select) else None
            was_open, explicit = self.in_transaction or self.resuming, self.explicit
            try:
                result = run_statement(stmt, self, params or [])
            except OSError as exc:  # a file-system call failed (a full disk): never a raw OSError
                raise os_error(exc, "complete the statement") from exc
            finally:
                self.cache_key = None
                if not handlers.reads_only(stmt):
                    self.changed()  # DDL, DML, a model statement that writes: cached plans may be stale
                if was_open and not self.in_transaction and not _controls_transactions(stmt):
                    # a model statement committed before and after: the transaction goes on
                    self.resuming, self.explicit = True, explicit
            if i < len(statements) - 1:
                self.drain(result)
        return result

    def _one_by_one(self, pieces: list[str], params: list, whole: str) -> Result:
        """Several statements of the text ``whole``: each runs as written (a plain one goes to DuckDB untouched, not
        through sqlglot), with its own ``?`` values; the last one's result."""
        result = Result(self.duck)
        used, at = 0, 0
        for i, piece in enumerate(pieces):
            count = _values_taken(piece)
            result.release()
            at = max(whole.find(piece, at), 0)
            try:
                result = self.execute(piece, params[used:used + count])
            except Error as err:
                raise _placed(err, piece, whole, at) from None
            used += count
            if i < len(pieces) - 1:
                self.drain(result)
        return result

    def drain(self, result: Result) -> None:
        """Read and drop a result that is not the last statement's."""
        if result.streaming:
            try:
                self.duck.fetchall()
            except Exception as exc:
                err = result.error(exc)
                result.release()
                raise err from exc

    def passthrough(self, text: str, params: Optional[list], stypes: Optional[list] = None) -> Result:
        """Plain DuckDB SQL, run as it is (transaction statements update this session's state).

        ``stypes``: DuckDB's statement types of the text, when known from an earlier run.
        """
        statements = None
        if stypes is None:
            try:
                statements = list(duckdb.extract_statements(text))
            except Exception:
                statements = []
            stypes = [statement_type(st) for st in statements]
            if len(statements) <= 1:
                self.plans.remember_plain(text, stypes)
        if any(t not in _READ_ONLY_TYPES for t in stypes) or ("EXPLAIN" in stypes and "ANALYZE" in text.upper()):
            self.changed()  # (EXPLAIN ANALYZE runs its statement, which may write)
        if len(stypes) > 1 and {"TRANSACTION", "EXPORT", "PRAGMA"} & set(stypes):
            # BEGIN/COMMIT/ROLLBACK (or EXPORT/IMPORT DATABASE) among several statements: one at a time, so
            # the session follows them (commit() and rollback() keep working, and a later statement opens
            # a new transaction)
            return self._plain_one_by_one(statements or list(duckdb.extract_statements(text)), params)
        if len(stypes) == 1 and database_dump.is_dump(stypes[0], text):
            if params:
                raise ProgrammingError(f"EXPORT DATABASE and IMPORT DATABASE take no parameters; {len(params)} "
                                       "value(s) were given.", code="parameter_count")
            self.resume()
            return database_dump.run_dump(self, text)
        if len(stypes) == 1 and stypes[0] == "TRANSACTION":
            if params:
                raise ProgrammingError(f"The statement has 0 parameter placeholder(s) but {len(params)} value(s) "
                                       "were given.", code="parameter_count")
            return self.transaction_statement(text)
        self.begin_if_needed()
        self.run(text, params)
        return self.duckdb_result(stypes[-1] if stypes else "SELECT")

    def _plain_one_by_one(self, statements: list, params: Optional[list]) -> Result:
        """Plain statements run one at a time, each with its own placeholders' values in order (when
        the counts do not add up, all values go to the last statement, as DuckDB gives them)."""
        counts = [len(st.named_parameters) for st in statements]
        values = list(params or [])
        if sum(counts) != len(values):
            counts = [0] * (len(statements) - 1) + [len(values)]
        result = Result(self.duck)
        used = 0
        for i, st in enumerate(statements):
            result.release()
            result = self.passthrough(st.query, values[used:used + counts[i]] or None)
            used += counts[i]
            if i < len(statements) - 1:
                self.drain(result)
        return result

    def run(self, text: str, params: Optional[Sequence], on_error=None) -> None:
        """Execute on DuckDB; a failure becomes ``on_error(exc)`` (default: the PEP 249 mapping)."""
        try:
            if params:
                self.duck.execute(text, params)
            else:
                self.duck.execute(text)
        except Exception as exc:
            raise (on_error or translate)(exc) from exc

    def run_arrow(self, text: str, params: Optional[Sequence], on_error=None,
                  row_hash: bool = False) -> tuple[Any, list[tuple]]:
        """Run the query ``text`` on DuckDB: its rows as a ``pyarrow.Table``, written by DuckDB's Arrow result
        collector (half the time of fetching a DB-API result as Arrow: no second copy of the rows), and its PEP 249
        ``description`` (each column's name and DuckDB type); a failure becomes ``on_error(exc)`` (default: the
        PEP 249 mapping). With ``row_hash`` the table has one more column, last: each row's ``hash()`` over every
        column (UBIGINT; DuckDB's own, named whole, whatever macro a user named ``hash``), computed by DuckDB as it
        reads the rows, in their own types (the fingerprint EVALUATE records of rows,
        :func:`~modelsql.engine.evaluate.recording.hashes_fingerprint`), and the columns are named as the query
        names them, two that differ only in case too (DuckDB's ``DESCRIBE``: a relation of a query holding
        ``nextval`` is run at once, its second ``A`` beside ``a`` renamed ``A_1``, which statements that train
        refuse to take for another column)."""
        values = list(params) if params else None
        try:
            if not row_hash:
                relation = self.duck.sql(text, params=values)
                return relation.to_arrow_table(), [(str(c), str(t), None, None, None, None, True)
                                                   for c, t in zip(relation.columns, relation.types)]
            described = self.duck.execute(f"DESCRIBE {text}", values).fetchall()  # (binds; runs nothing)
            description = [(str(r[0]), str(r[1]), None, None, None, None, True) for r in described]
            names = [str(r[0]) for r in described]
            relation = self.duck.sql(text, params=values)
            taken = {n.lower() for n in names}
            name = next(f"__msql_row_hash{k or ''}" for k in range(len(taken) + 2)
                        if f"__msql_row_hash{k or ''}" not in taken)
            # (DuckDB's own hash named whole, as evaluate.queries.ROW_HASH: not imported, which would load pyarrow
            # at start-up)
            hashed = relation.project(f'*, system.main.hash(*COLUMNS(*)) AS "{name}"').to_arrow_table()
            return hashed.rename_columns([*names, name]), description  # (names a projection made unique restored)
        except Exception as exc:
            raise (on_error or translate)(exc) from exc

    def duckdb_result(self, stype: str) -> Result:
        """The :class:`Result` of the statement DuckDB just ran, of statement type ``stype``."""
        out = Result(self.duck)
        desc = self.duck.description
        changed = self.duck.rowcount
        if changed >= 0:
            # DuckDB's count of the rows a statement changed (INSERT, UPDATE, DELETE, MERGE, CREATE TABLE AS,
            # COPY, EXECUTE of one of them), read from the statement's kind of result, never from its rows;
            # -1 for rows (a query, ... RETURNING), whatever the columns are called. PEP 249: no result set.
            try:
                self.duck.fetchall()
            except Exception as exc:
                raise translate(exc) from exc
            out.rowcount = changed
            return out
        if stype in _NO_RESULT_TYPES or not desc:
            try:
                self.duck.fetchall()
            except Exception:
                pass
            return out
        out.description = [(d[0], str(d[1]), None, None, None, None, True) for d in desc]
        out.streaming = True
        return out

    # ------------------------------------------------------------ errors

    def pointed(self, err: Error, ref: Optional[exp.Expression]) -> Error:
        """``err`` with a ``LINE n:`` excerpt under the name ``ref`` holds (:func:`catalog_entries.pointed`)."""
        return catalog_entries.pointed(self.text, err, ref)

    def pointed_at_option(self, err: Error, option: Optional[exp.Expression]) -> Error:
        """``err`` pointed at ``option`` (the ``name = value`` it is about, written in the statement; None: ``err``
        as it is), in place of any excerpt it had (one drawn over SQL the statement generated, a PREDICT's)."""
        if option is None:
            return err
        return self.pointed(err.retold(without_excerpt(str(err))), option)

    def get_model(self, name: str, version: Optional[int], ref: Optional[exp.Expression] = None, *,
                  pipeline: bool = False, models: Optional[dict] = None):
        """The catalog entry (a model version, or with ``pipeline`` a pipeline version); a lookup error points
        at the name in the statement text (:func:`catalog_entries.entry_of`)."""
        return catalog_entries.entry_of(self, name, version, ref, pipeline=pipeline, models=models)

    def get_model_set(self, node) -> "RoutedModels":
        """The members of a routed ``MODELS (...) ROUTE BY c`` (:func:`catalog_entries.model_set_of`)."""
        return catalog_entries.model_set_of(self, node)


_PREPARE = re.compile(r"\s*(?:EXPLAIN\s+(?:ANALYZE\s+)?)?PREPARE\b", re.I)
"""A statement text that prepares one (``PREPARE p AS ...``, also under EXPLAIN): its ``?`` are DuckDB's to bind when
it is executed, never values this call must give (the query handler refuses a PREPARE of a PREDICT)."""


def _values_taken(piece: str) -> int:
    """How many of a statement's ``?`` the caller gives values for: all, but a PREPARE's (DuckDB binds them when the
    prepared statement is executed)."""
    return 0 if _PREPARE.match(piece) else msql.number_placeholders(piece)[1]


HANDLER_MODULES = (
    "modelsql.engine.query_handler", "modelsql.engine.explain", "modelsql.engine.models.statements",
    "modelsql.engine.models.trainables", "modelsql.engine.models.train_statement", "modelsql.engine.models.alter",
    "modelsql.engine.models.trust_statement",
    "modelsql.engine.pipelines.statements", "modelsql.engine.serve.statements", "modelsql.engine.tune.statements",
    "modelsql.engine.profile.statements", "modelsql.engine.profile.compile", "modelsql.engine.finetune.statement",
    "modelsql.engine.evaluate.statement", "modelsql.engine.evaluate.table_functions", "modelsql.engine.statement_tables",
)
"""The modules that register statement handlers (:mod:`modelsql.engine.handlers`) when imported."""


def register_handlers() -> None:
    """Import :data:`HANDLER_MODULES`: on the first text that mentions models, so plain SQL never imports the
    converters, ONNX, TVM or the server; then refuse to go on while a statement node has no handler.

    Raises:
        InternalError: ``internal_error`` naming the statement nodes without a handler.
    """
    for module in HANDLER_MODULES:
        importlib.import_module(module)
    missing = handlers.missing_handlers(STATEMENT_NODES)
    if missing:
        raise InternalError("statements without a handler: " + ", ".join(n.__name__ for n in missing),
                            code="internal_error")


def _numbered_placeholders(stmt: exp.Expression) -> list[int]:
    """The ``$n`` numbers of a statement (of the statement inside an ``EXPLAIN``, which sqlglot keeps as text)."""
    from modelsql.engine.explain import explain_parts

    parts = explain_parts(stmt)
    if parts is not None:
        return [n for st in msql.parse(parts[1]) for n in _numbered_placeholders(st)]
    return [int(p.this) for p in stmt.find_all(exp.Placeholder) if str(p.this).isdigit()]


def _controls_transactions(stmt: exp.Expression) -> bool:
    """Whether a parsed statement is BEGIN / COMMIT / ROLLBACK (``END`` and ``ABORT`` parse as columns)."""
    if isinstance(stmt, (exp.Transaction, exp.Commit, exp.Rollback)):
        return True
    return isinstance(stmt, exp.Column) and not stmt.table and stmt.name.upper() in ("END", "ABORT")


def statement_type(statement) -> str:
    """DuckDB's statement type of an extracted statement, by name; ``"UNKNOWN"`` for a type DuckDB's Python
    client has no name for (``UPDATE EXTENSIONS``, ``CONNECT`` ...): such a statement still goes to DuckDB."""
    try:
        return statement.type.name
    except ValueError:
        return "UNKNOWN"


def first_word(text: str) -> str:
    """The first keyword of a statement, after any comments, upper case."""
    rest = _LEADING_COMMENTS.sub("", text, count=1)
    return rest.split()[0].upper().rstrip(";") if rest.split() else ""


_EXCERPT_LINE = re.compile(r"\nLINE (\d+): ")


def _placed(err: Error, piece: str, whole: str, at: int) -> Error:
    """``err`` of the statement ``piece``, which starts at offset ``at`` of the text run, ``whole``: an excerpt drawn
    over the piece (its ``?`` numbered) is drawn again over ``whole``, with the position there; any other excerpt's
    line is counted in ``whole`` (:func:`_lines_moved`), where the client looks for it."""
    m = EXCERPT.search(str(err)) if err.line is None else None
    if m is None:
        return _lines_moved(err, whole.count("\n", 0, at))
    numbered, _, back = msql.numbered_offsets(piece)
    lines, line = text_lines(numbered), int(m.group(1))
    shown, column = m.group(2), len(m.group(3)) - len(f"LINE {line}: ") + 1
    if not 0 < line <= len(lines) or not shown or not lines[line - 1].startswith(shown):
        return _lines_moved(err, whole.count("\n", 0, at))
    line, column = position_of(whole, at + msql.original_offset(numbered, back, line, column))
    head = str(err)[: m.start()].rstrip()
    return err.retold(f"{head}\n{excerpt(whole, line, column, len(m.group(4)))}", line=line, column=column)


def _lines_moved(err: Error, lines: int) -> Error:
    """``err`` of a statement that starts ``lines`` lines into the text run, its excerpt's line number counted in
    the whole text (where the client looks for the excerpt first: a line written the same in an earlier statement
    is then not taken for it)."""
    if not lines or err.line is not None or _EXCERPT_LINE.search(str(err)) is None:
        return err
    return err.retold(_EXCERPT_LINE.sub(lambda m: f"\nLINE {int(m.group(1)) + lines}: ", str(err), count=1))
