"""Texts that are both DuckDB's and modelsql's: ``SHOW models``, ``VACUUM models`` where a table ``models`` exists.

DuckDB reads ``SHOW x`` as ``DESCRIBE x`` and ``VACUUM x`` as vacuuming table ``x``; modelsql reads ``SHOW
MODELS`` / ``PIPELINES`` / ``STUDIES`` / ``SERVERS`` and ``VACUUM MODELS`` as its own statements
(:func:`modelsql.sql.table_words` finds them). When no table or view of that name is visible to the session,
the text is modelsql's; when one is, either answer could be the wrong one, so :func:`refuse_ambiguous` raises
an error naming the spelling of each: ``DESCRIBE models`` (``VACUUM "models"``) for the table, ``SHOW
MODELSQL MODELS`` (``VACUUM MODELSQL MODELS``) for modelsql's.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from modelsql import sql as msql
from modelsql.errors import ProgrammingError, excerpt, position_of

if TYPE_CHECKING:
    from modelsql.engine.session import Session

_MAYBE = re.compile(r"\b(?:SHOW|VACUUM)\b", re.I)
"""A text without these words has no ambiguous statement (checked before tokenizing)."""

_DUCKDB_MEANING = {
    "SHOW": ("describes it", "DESCRIBE {name}"),
    "VACUUM": ("vacuums it", 'VACUUM "{name}"'),
}
"""First word -> what DuckDB's statement does to the table, and the spelling that is only DuckDB's."""


def refuse_ambiguous(session: Session, text: str) -> None:
    """Raise when a statement of ``text`` is modelsql's and, on a table that exists, DuckDB's too.

    Raises:
        ProgrammingError: ``ambiguous_statement``, naming both readings and the spelling of each, with a
            ``LINE n:`` excerpt under the statement (``dbapi.point_into`` sets ``.line`` / ``.column``).
    """
    if _MAYBE.search(text) is None:
        return
    for found in msql.table_words(text):
        if _table_exists(session.duck, found.name):
            raise _ambiguous(text, found)


def _table_exists(duck, name: str) -> bool:
    """Whether DuckDB resolves ``name`` to a table or view (temporary ones and the search path included, in
    the open transaction). A failed lookup leaves the transaction as it was."""
    try:
        duck.table(name)
    except Exception:
        return False
    return True


def _ambiguous(text: str, found: "msql.TableWord") -> ProgrammingError:
    first, ours = found.words
    written = f"{first} {found.name}"
    does, theirs = _DUCKDB_MEANING[first]
    what = "collects the model store's blobs no catalog entry uses" if first == "VACUUM" else \
        f"lists its {ours.lower()}"
    message = (f'{found.prefix}{written} is ambiguous: a table or view named "{found.name}" exists, and DuckDB\'s '
               f"{written} {does}, while modelsql's {first} {ours} {what}. Write {found.prefix}"
               f"{theirs.format(name=found.name)} for the table, or {found.prefix}{first} MODELSQL {ours} for "
               "modelsql's.")
    line, column = position_of(text, found.offset)
    return ProgrammingError(f"{message}\n{excerpt(text, line, column, found.length)}", code="ambiguous_statement")
