"""DuckDB exceptions as modelsql's PEP 249 errors: the one map every part of modelsql uses.

PEP 249 (DB-API 2.0, "Exceptions") is the spec: a driver raises its own
``Error`` tree (:mod:`modelsql.errors`), never the engine's exceptions. DuckDB's
Python exceptions already subclass PEP 249-named bases (``duckdb.ProgrammingError``
...); :func:`translate` turns each into modelsql's class of the same meaning and
gives it a stable ``code`` (``err.code``) for callers and tests to match on. The
message is DuckDB's own text, less DuckDB's own system views among the tables a
"Did you mean" suggests for a missing one (``nosuch`` -> ``"pg_sequences"``): noise,
never what the user meant; a suggestion of the user's own table stays.

By DuckDB class (first match wins, so subclasses come before their bases):

==================================  ==========================  ==========================
duckdb exception                    modelsql (PEP 249) class    ``code``
==================================  ==========================  ==========================
``ParserException``                 ``ProgrammingError``        ``parse_error``
``CatalogException``                ``ProgrammingError``        ``catalog_error`` [1]_
``BinderException``                 ``ProgrammingError``        ``binder_error`` [1]_
``ConversionException``             ``DataError``               ``conversion_error``
``OutOfRangeException``             ``DataError``               ``out_of_range``
``ConstraintException``             ``IntegrityError``          ``constraint_violation``
``TransactionException``            ``OperationalError``        ``transaction_error``
``IOException`` (``HTTPException``) ``OperationalError``        ``io_error``
``OutOfMemoryException``            ``OperationalError``        ``out_of_memory``
``NotImplementedException``         ``NotSupportedError``       ``not_supported``
``InvalidInputException``           ``ProgrammingError``        ``invalid_input``
``PermissionException``             ``DatabaseError``           ``permission_denied``
``InterruptException``              ``OperationalError``        ``interrupted``
``IntegrityError`` (other)          ``IntegrityError``          ``integrity_error``
``DataError`` (other)               ``DataError``               ``data_error``
``ProgrammingError`` (other)        ``ProgrammingError``        ``programming_error``
``NotSupportedError`` (other)       ``NotSupportedError``       ``not_supported``
``OperationalError`` (other)        ``OperationalError``        ``operational_error``
``InternalError`` (other)           ``InternalError``           ``internal_error``
any other ``duckdb.Error``          ``DatabaseError``           ``database_error``
==================================  ==========================  ==========================

By message, before the class (DuckDB's class says less than its text):

* ``Invalid Input Error: Division by zero ...`` -> ``DataError``, ``division_by_zero``;
* ``Invalid Input Error: Cannot execute statement ... attached in read-only mode``
  -> ``OperationalError``, ``read_only``;
* ``TransactionContext Error: Current transaction is aborted`` (also with the
  catalog's ``Catalog error:`` prefix) -> ``OperationalError``,
  ``transaction_aborted``, with a message that says to roll back.

Not a duckdb exception:

* a modelsql :class:`~modelsql.errors.Error` comes back unchanged, unless its text
  matches a message rule above with another code (then that error);
* a DuckDB error that reached Python as text through another library (an Arrow
  stream raises ``OSError("Invalid Input Error: ...")``) is read by its
  ``<Kind> Error:`` prefix and mapped as that duckdb class;
* ``KeyboardInterrupt`` (or a ``RuntimeError`` saying "interrupted") ->
  ``OperationalError``, ``interrupted``;
* anything else -> ``InternalError``, ``internal_error`` (a modelsql bug).

.. [1] With ``catalog=True`` (errors of the catalog's own SQL, see
   :func:`translate_catalog`) the message is prefixed ``Catalog error:`` and these two
   codes are ``catalog_object_missing`` and ``catalog_binder_error``: a missing
   catalog table means a damaged catalog, not a typo in the user's SQL.

This module imports only :mod:`duckdb` and :mod:`modelsql.errors`.
"""

from __future__ import annotations

import functools
import re
from typing import Optional

import duckdb

from modelsql.errors import DatabaseError, DataError, Error, IntegrityError, InternalError, NotSupportedError, OperationalError, ProgrammingError

__all__ = ["translate", "translate_catalog"]

_BY_CLASS_NAMES: tuple[tuple[str, type[Error], str], ...] = (
    ("ParserException", ProgrammingError, "parse_error"),
    ("CatalogException", ProgrammingError, "catalog_error"),
    ("BinderException", ProgrammingError, "binder_error"),
    ("ConversionException", DataError, "conversion_error"),
    ("OutOfRangeException", DataError, "out_of_range"),
    ("ConstraintException", IntegrityError, "constraint_violation"),
    ("TransactionException", OperationalError, "transaction_error"),
    ("IOException", OperationalError, "io_error"),
    ("OutOfMemoryException", OperationalError, "out_of_memory"),
    ("NotImplementedException", NotSupportedError, "not_supported"),
    ("InvalidInputException", ProgrammingError, "invalid_input"),
    ("PermissionException", DatabaseError, "permission_denied"),
    ("InterruptException", OperationalError, "interrupted"),
    # DuckDB's PEP 249-named bases, for every other subclass
    ("IntegrityError", IntegrityError, "integrity_error"),
    ("DataError", DataError, "data_error"),
    ("ProgrammingError", ProgrammingError, "programming_error"),
    ("NotSupportedError", NotSupportedError, "not_supported"),
    ("OperationalError", OperationalError, "operational_error"),
    ("InternalError", InternalError, "internal_error"),
)

_BY_CLASS: tuple[tuple[type, type[Error], str], ...] = tuple(
    (getattr(duckdb, name), ours, code)
    for name, ours, code in _BY_CLASS_NAMES
    if isinstance(getattr(duckdb, name, None), type)  # a class this duckdb version lacks is skipped
)
"""(duckdb class, modelsql class, code), first match wins."""

_CATALOG_CODES = {"catalog_error": "catalog_object_missing", "binder_error": "catalog_binder_error"}
"""Codes that differ for errors of the catalog's own SQL."""

_CATALOG_PREFIX = "Catalog error: "

_ABORTED = (
    "The transaction is aborted: a statement in it failed, and DuckDB refuses every later statement "
    "until it ends. Call rollback() (or run ROLLBACK), then run the statements again."
)

_BY_MESSAGE: tuple[tuple[re.Pattern, type[Error], str, Optional[str]], ...] = (
    # DuckDB files these under "Invalid Input"; PEP 249 names them: a data problem, and a database mode
    (re.compile(r"\AInvalid Input Error: Division by zero in expression"), DataError, "division_by_zero", None),
    (re.compile(r"\AInvalid Input Error: Cannot execute statement of type \"[A-Z_ ]+\" on database \"[^\"]*\" "
                r"which is attached in read-only mode"), OperationalError, "read_only", None),
    # also as the catalog words it ("Catalog error: TransactionContext Error: ...")
    (re.compile(r"\A(?:Catalog error: )?TransactionContext Error: Current transaction is aborted"),
     OperationalError, "transaction_aborted", _ABORTED),
    (re.compile(r'\A(?:Catalog error: )?TransactionContext Error: Attempting to write to database "[^"]*" in a '
                r'transaction that has already modified database'), OperationalError, "cross_database_write",
     None),
)
"""Messages that say more than DuckDB's exception class: (pattern, modelsql class, code, message), the
message None to keep DuckDB's. Matched on duckdb exceptions and on modelsql errors carrying DuckDB's text."""

_DUCK_KIND = re.compile(r"^(?:\w+Error: )?([A-Z][A-Za-z ]*?) Error: ")


def _by_message(exc: BaseException, prefix: str) -> Optional[Error]:
    """The error :data:`_BY_MESSAGE` makes of ``exc``, or None (``prefix`` goes before DuckDB's text)."""
    text = str(exc)
    for pattern, ours, code, message in _BY_MESSAGE:
        if pattern.match(text):
            catalog = bool(prefix) or text.startswith(_CATALOG_PREFIX)
            return ours(message or prefix + text + (_CATALOG_NOTES.get(code, "") if catalog else ""), code=code)
    return None


_CATALOG_NOTES = {
    "cross_database_write": " modelsql's catalog (where EVALUATE records, in the transaction) lives in the database "
                            "the connection opened: commit the transaction's other writes first (or write them after).",
}
"""What an error of the catalog's own SQL adds, by code: the catalog wrote, not the user's statement."""


def _from_message(exc: BaseException) -> Optional[duckdb.Error]:
    """A DuckDB error that reached Python as text through another library (an Arrow stream raises ``OSError``
    with DuckDB's message): the duckdb exception its ``<Kind> Error:`` prefix names, or None."""
    if isinstance(exc, duckdb.Error):
        return None
    m = _DUCK_KIND.match(str(exc))
    if m is None:
        return None
    cls = getattr(duckdb, m.group(1).replace(" ", "") + "Exception", None)
    if not (isinstance(cls, type) and issubclass(cls, duckdb.Error)):
        return None
    return cls(str(exc)[m.start(1):])


_SUGGESTION = re.compile(r'\nDid you mean "([^"\n]*)"\?')
"""DuckDB's suggestion of tables for a missing one: ``Did you mean "customers or pg_tables"?``."""


@functools.lru_cache(maxsize=1)
def _system_views() -> frozenset[str]:
    """The names of DuckDB's own views (``pg_tables``, ``sqlite_master``, ``duckdb_tables``, ``columns`` ...)."""
    with duckdb.connect() as con:
        return frozenset(r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE internal").fetchall())


def _without_system_suggestions(message: str) -> str:
    """``message`` without DuckDB's system views among the tables it suggests for a missing one (and without the
    suggestion when only those were suggested)."""
    if "Table with name" not in message:
        return message

    def kept(m: re.Match) -> str:
        names = [n for n in m.group(1).split(" or ") if n.split(".")[-1] not in _system_views()]
        return f'\nDid you mean "{" or ".join(names)}"?' if names else ""
    return _SUGGESTION.sub(kept, message)


def translate(exc: BaseException, *, catalog: bool = False) -> Error:
    """The modelsql (PEP 249) error for ``exc``: see the module docstring for the map.

    ``catalog=True`` is for errors of the catalog's own SQL (:func:`translate_catalog`): DuckDB's
    text is prefixed ``Catalog error:`` and a missing object / binder error get the catalog's codes.
    The result is returned, not raised; callers ``raise translate(exc) from ...``.
    """
    prefix = _CATALOG_PREFIX if catalog else ""
    better = _by_message(exc, prefix) if isinstance(exc, (Error, duckdb.Error)) else None
    if isinstance(exc, Error):
        return better if better is not None and better.code != exc.code else exc
    if better is not None:
        return better
    if isinstance(exc, duckdb.Error):
        for duck_cls, ours, code in _BY_CLASS:
            if isinstance(exc, duck_cls):
                return ours(prefix + _without_system_suggestions(str(exc)),
                            code=_CATALOG_CODES.get(code, code) if catalog else code)
        return DatabaseError(prefix + str(exc), code="database_error")
    rebuilt = _from_message(exc)
    if rebuilt is not None:
        return translate(rebuilt, catalog=catalog)
    if isinstance(exc, KeyboardInterrupt) or (isinstance(exc, RuntimeError) and "interrupted" in str(exc).lower()):
        return OperationalError("The statement was interrupted.", code="interrupted")
    return InternalError(f"{type(exc).__name__}: {exc}", code="internal_error")


def translate_catalog(exc: BaseException) -> Error:
    """:func:`translate` for an error raised by the catalog's own SQL (``translate(exc, catalog=True)``)."""
    return translate(exc, catalog=True)
