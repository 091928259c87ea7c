"""The statement registry: which handler carries out each statement node, whether it only reads, and the
write preamble of the statements that write the catalog.

A handler registers next to its code, naming its node (a class of :data:`modelsql.sql.registry.STATEMENT_NODES`,
or one of sqlglot's) and whether it leaves every cached plan valid::

    @handles(ShowModels, reads_only=True)
    def _show(stmt: ShowModels, session: Session, params: list) -> Result: ...

:func:`run_statement` dispatches on the node's class (its nearest registered base class: a DuckDB query
that contains ``PREDICT`` is claimed by no node of ours and goes to the query handler, registered for
``exp.Expression`` by :mod:`modelsql.engine.query_handler`). :func:`reads_only` tells the session whether a
statement can change what cached plans depend on. :func:`missing_handlers` names the statement nodes with no
handler of their own; the session checks it when it imports the handler modules, so a statement without a
handler fails at the first model statement, naming it, never as an ``InternalError`` when it is run.

:func:`catalog_write` is the write preamble of a statement that writes the catalog: refuse on a read-only
connection, commit the session's open transaction (a model statement commits as DDL does), run the writes
in one catalog transaction, and mark cached plans stale.
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, TypeVar, Union

from sqlglot import exp

from modelsql import sql as msql
from modelsql.errors import IntegrityError, InternalError, NotSupportedError, OperationalError
from modelsql.sql import stored_definition

if TYPE_CHECKING:
    import pyarrow as pa

    from modelsql.catalog import Catalog
    from modelsql.engine.session import Session

__all__ = ["Handler", "handles", "handler_of", "run_statement", "run_default", "reads_only", "registered",
           "missing_handlers", "catalog_write", "catalog_record", "catalog_write_retrying", "retrying", "computes",
           "explains", "computed_tables", "release_computed"]

T = TypeVar("T")

#: Error codes of a catalog write that lost to another connection's (DuckDB's optimistic concurrency): the
#: write is run again.
CONFLICTS = ("transaction_error", "constraint_violation", "version_conflict")


@dataclass(frozen=True)
class Handler:
    """One registration: ``run(stmt, session, params) -> Result`` carries out ``node``; ``reads_only`` is
    True when it never changes what a cached plan depends on (a bool, or a function of the statement)."""

    node: type
    run: Callable
    reads_only: Union[bool, Callable[[exp.Expression], bool]] = False


_REGISTRY: dict[type, Handler] = {}


def handles(*nodes: type, reads_only: Union[bool, Callable[[exp.Expression], bool]] = False) -> Callable:
    """Decorator: register the function as the handler of each of ``nodes``.

    Raises:
        ValueError: a node that already has a handler (two modules claiming one statement).
    """
    def register(run: Callable) -> Callable:
        for node in nodes:
            if node in _REGISTRY:
                raise ValueError(f"{node.__name__} already has a handler: {_REGISTRY[node].run.__module__}."
                                 f"{_REGISTRY[node].run.__qualname__}")
            _REGISTRY[node] = Handler(node, run, reads_only)
        return run
    return register


_COMPUTED: dict[type, Callable[..., "pa.Table"]] = {}
_EXPLAINED: dict[type, Callable[..., "tuple[pa.Schema, str]"]] = {}


def computes(node: type) -> Callable[[Callable[..., "pa.Table"]], Callable[..., "pa.Table"]]:
    """Decorator: register ``f(node, session, params) -> pyarrow.Table`` as what a table function of ours that
    is computed before planning gives (``EVALUATE(...)``: its family computes it; the query handler puts its rows
    where the call was, :func:`computed_tables`).

    Raises:
        ValueError: a node that already has one.
    """
    return _register_in(_COMPUTED, node, "computed")


def explains(node: type) -> Callable[[Callable[..., "tuple[pa.Schema, str]"]], Callable[..., "tuple[pa.Schema, str]"]]:
    """Decorator: register ``f(node, session, params) -> (pyarrow.Schema, text)`` as what EXPLAIN shows of a table
    function registered by :func:`computes`, without computing it: the columns its rows would have (an empty
    table of them is scanned where the call was) and the plan it would run (a note of the query's plan).

    Raises:
        ValueError: a node that already has one.
    """
    return _register_in(_EXPLAINED, node, "explained")


def _register_in(table: dict[type, Callable[..., T]], node: type, what: str) -> Callable[[Callable[..., T]],
                                                                                          Callable[..., T]]:
    """A decorator registering its function in ``table`` for ``node`` (:func:`computes`, :func:`explains`)."""
    def register(function: Callable[..., T]) -> Callable[..., T]:
        if node in table:
            raise ValueError(f"{node.__name__} is already {what} by {table[node].__module__}")
        table[node] = function
        return function
    return register


def computed_tables(stmt: exp.Expression, session: Session, params: list,
                    dry: bool = False) -> tuple[exp.Expression, list[str], list[str]]:
    """``stmt`` with every table function of ours registered by :func:`computes` replaced by a scan of its
    rows, registered on the connection under a name of its own, the names (for the result to release) and, when
    ``dry`` (EXPLAIN without ANALYZE), the notes saying what each would run: then nothing is computed, each is
    an empty table of its columns (:func:`explains`). ``stmt`` itself when it has none (it is never modified).

    Raises:
        NotSupportedError: ``predict_in_view`` for one in a stored definition (CREATE VIEW, MACRO, FUNCTION).
    """
    found = [n for n in stmt.walk() if type(n) in _COMPUTED]
    if not found:
        return stmt, [], []
    kind = stored_definition(stmt)
    if kind:
        function = found[0].args.get("function")
        name = f"{function}(...)" if function else found[0].sql(dialect=msql.DIALECT)  # (SHOW MODELS)
        raise NotSupportedError(f"{name} cannot be used in CREATE {kind}: its rows are computed when the "
                                "statement runs, and a definition would outlive them. Use CREATE TABLE ... AS "
                                f"SELECT ... FROM {name} to keep them.", code="predict_in_view")
    stmt = stmt.copy()
    names: list[str] = []
    notes: list[str] = []
    try:
        for node in [n for n in stmt.walk() if type(n) in _COMPUTED]:
            name = f"__msql_computed_{uuid.uuid4().hex[:12]}"
            if dry and type(node) in _EXPLAINED:
                schema, note = _EXPLAINED[type(node)](node, session, params)
                session.duck.register(name, schema.empty_table())
                notes.append(note)
            else:
                session.duck.register(name, _COMPUTED[type(node)](node, session, params))
            names.append(name)
            scan = exp.to_identifier(name)
            scan.meta["computed"] = (node.meta.get("source_text"), node.sql(dialect=msql.DIALECT))  # naming columns
            node.replace(scan)
    except BaseException:
        release_computed(session, names)
        raise
    return stmt, names, notes


def release_computed(session: Session, names: Iterable[str]) -> None:
    """Unregister the tables :func:`computed_tables` registered, after a failure: in a transaction DuckDB has
    aborted, unregistering fails too, and the failure that matters is the one being raised."""
    for name in names:
        try:
            session.duck.unregister(name)
        except Exception:
            pass


def handler_of(node: type) -> Handler:
    """The handler of the nearest class of ``node``'s MRO that has one.

    Raises:
        InternalError: ``internal_error`` when none has (the handler modules are not imported).
    """
    for klass in node.__mro__:
        found = _REGISTRY.get(klass)
        if found is not None:
            return found
    raise InternalError(f"no handler for {node.__name__}", code="internal_error")


def run_statement(stmt: exp.Expression, session: Session, params: list):
    """Carry out one parsed statement; returns a :class:`~modelsql.engine.result.Result`."""
    return handler_of(type(stmt)).run(stmt, session, params)


def run_default(stmt: exp.Expression, session: Session, params: list):
    """Run ``stmt`` with the handler of ``exp.Expression`` (for a handler that declines a node of its class)."""
    return handler_of(exp.Expression).run(stmt, session, params)


def reads_only(stmt: exp.Expression) -> bool:
    """Whether ``stmt`` leaves every cached plan valid (by its handler's registration)."""
    flag = handler_of(type(stmt)).reads_only
    return bool(flag(stmt)) if callable(flag) else flag


def registered() -> dict[type, Handler]:
    """A copy of the registry: node class -> :class:`Handler`."""
    return dict(_REGISTRY)


def missing_handlers(nodes: Iterable[type]) -> list[type]:
    """The nodes of ``nodes`` that have no handler of their own (only the query handler's fallback)."""
    return [n for n in nodes if handler_of(n).node is exp.Expression]


@contextlib.contextmanager
def catalog_write(session: Session) -> Iterator[Catalog]:
    """The write preamble: raise ``read_only`` on a read-only connection, commit the session's open
    transaction, yield the catalog inside one catalog transaction of its own (committed when the block
    ends, rolled back if it raises), then mark cached plans stale.

    Raises:
        OperationalError: ``read_only``.
    """
    session.check_writable()
    session.commit()
    with session.catalog.transaction(join=False):
        yield session.catalog
    session.changed()


@contextlib.contextmanager
def catalog_record(session: Session) -> Iterator[Catalog]:
    """The write of a record that belongs to the statement's transaction, as DML does (EVALUATE's evaluation):
    raise ``read_only`` on a read-only connection, open the PEP 249 implicit transaction if one is due, and
    yield the catalog inside it, so the user's COMMIT or ROLLBACK decides (in autocommit, a transaction of
    its own). Nothing the user did before is committed by it.

    Raises:
        OperationalError: ``read_only``.
    """
    session.check_writable()
    session.begin_if_needed()
    with session.catalog.transaction(join=True):
        yield session.catalog


def catalog_write_retrying(session: Session, write: Callable[[], T], attempts: int = 60) -> T:
    """The write preamble of a write that may lose to another connection's (DROP MODEL, DROP STUDY, a new
    version): as :func:`catalog_write`, but ``write()`` runs in a catalog transaction per try, again after a
    conflict (:func:`retrying`). Cached plans are marked stale whether it succeeds or not. Returns what
    ``write`` returns.

    Raises:
        OperationalError: ``read_only``; ``transaction_error`` when the conflicts do not stop.
        whatever ``write`` raises but a conflict.
    """
    session.check_writable()
    session.commit()
    try:
        return retrying(session.catalog, write, attempts)
    finally:
        session.changed()


def retrying(catalog: Catalog, write: Callable[[], T], attempts: int = 60) -> T:
    """``write()`` in a catalog transaction of its own, run again when the commit (or a write) conflicts
    with another connection's: a write-write conflict or a key another transaction took first
    (:data:`CONFLICTS`), after a short random wait. Returns what ``write`` returns.

    Raises:
        whatever ``write`` raises but a conflict; the last conflict after ``attempts`` tries.
    """
    for attempt in range(attempts):
        try:
            with catalog.transaction(join=False):  # the caller's session just committed
                return write()
        except (IntegrityError, OperationalError) as exc:
            if attempt == attempts - 1 or exc.code not in CONFLICTS:
                raise
            # The other writer may not have committed yet: wait a little (with jitter) first.
            time.sleep(random.uniform(0.002, 0.01) * min(attempt + 1, 10))
    raise AssertionError("unreachable")


@handles(exp.Transaction, exp.Commit, exp.Rollback)
def _transaction(stmt: exp.Expression, session: Session, params: list):
    """BEGIN / COMMIT / ROLLBACK among modelsql statements: as plain SQL (the session follows them)."""
    return session.passthrough(stmt.sql(dialect="duckdb"), None)


@handles(exp.Column)
def _end_or_abort(stmt: exp.Column, session: Session, params: list):
    """``END`` / ``ABORT`` parse as a bare column name: the transaction statements they are."""
    if not stmt.table and stmt.name.upper() in ("END", "ABORT"):
        return session.passthrough(stmt.sql(dialect="duckdb"), None)
    return run_default(stmt, session, params)
