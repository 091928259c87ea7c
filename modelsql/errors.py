"""The PEP 249 exception tree, with a stable ``.code`` on every error.

Hierarchy (PEP 249, "Exceptions")::

    Warning
    Error
      InterfaceError
      DatabaseError
        DataError
        OperationalError
        IntegrityError
        InternalError
        ProgrammingError
        NotSupportedError

Every exception carries ``code``: a short stable string that tests and callers
can match on (``"model_not_found"``, ``"parse_error"`` ...), independent of the
human message. Errors that point into a statement also carry ``line`` and
``column`` (1-based) and render a ``LINE n:`` excerpt with a caret under the
offending text, the way PostgreSQL and DuckDB print them.
"""

from __future__ import annotations

import difflib
from typing import Iterable, Optional


class Warning(Exception):  # noqa: A001 - PEP 249 requires this name
    """PEP 249 ``Warning``: important warnings such as data truncation."""

    code = "warning"


class Error(Exception):
    """PEP 249 ``Error``: base class of every error modelsql raises.

    Attributes:
        code: stable machine-readable identifier of the error kind.
        line, column: 1-based position in the statement text, when known.
    """

    code = "error"

    def __init__(
        self,
        message: str = "",
        *,
        code: Optional[str] = None,
        line: Optional[int] = None,
        column: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.line = line
        self.column = column

    def __str__(self) -> str:
        return self.message


class InterfaceError(Error):
    """PEP 249: errors of the database interface itself (e.g. using a closed cursor)."""

    code = "interface_error"


class DatabaseError(Error):
    """PEP 249: errors related to the database."""

    code = "database_error"


class DataError(DatabaseError):
    """PEP 249: problems with the processed data (NULLs, bad values, corrupt blobs)."""

    code = "data_error"


class OperationalError(DatabaseError):
    """PEP 249: errors of the database's operation (I/O, locks, killed work)."""

    code = "operational_error"


class IntegrityError(DatabaseError):
    """PEP 249: relational integrity is affected (duplicate names, dangling references)."""

    code = "integrity_error"


class InternalError(DatabaseError):
    """PEP 249: the database hit an internal error (a bug: please report it)."""

    code = "internal_error"


class ProgrammingError(DatabaseError):
    """PEP 249: programming errors (syntax, missing model/table/column, wrong arguments)."""

    code = "programming_error"


class NotSupportedError(DatabaseError):
    """PEP 249: a method or database API was used that is not supported."""

    code = "not_supported"


ALL_ERRORS = (
    Warning,
    Error,
    InterfaceError,
    DatabaseError,
    DataError,
    OperationalError,
    IntegrityError,
    InternalError,
    ProgrammingError,
    NotSupportedError,
)


def excerpt(sql: str, line: int, column: int, length: int = 1) -> str:
    """Return ``LINE n: <text>`` plus a caret line under ``column`` (both 1-based)."""
    lines = sql.splitlines() or [""]
    line = max(1, min(line, len(lines)))
    text = lines[line - 1]
    prefix = f"LINE {line}: "
    caret = " " * (len(prefix) + max(column - 1, 0)) + "^" * max(1, length)
    return f"{prefix}{text}\n{caret}"


def position_of(sql: str, offset: int) -> tuple[int, int]:
    """Convert a 0-based character offset into 1-based (line, column)."""
    offset = max(0, min(offset, len(sql)))
    before = sql[:offset]
    line = before.count("\n") + 1
    column = offset - (before.rfind("\n") + 1) + 1
    return line, column


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """Return ``' Did you mean "x"?'`` for the closest candidate, or ``''``."""
    matches = difflib.get_close_matches(name.lower(), [c.lower() for c in candidates], n=1, cutoff=0.6)
    if not matches:
        return ""
    original = {c.lower(): c for c in candidates}[matches[0]]
    return f' Did you mean "{original}"?'
