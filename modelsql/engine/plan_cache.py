"""Plans kept across executions of the same text.

Binding a PREDICT costs several DuckDB queries (catalog lookups, the input's
columns, its key constraints, the row estimate) and a parse, so a session keeps
the plan of each statement text it runs, keyed by the text, the types of its
parameters (DuckDB types a ``?`` column by its value) and, when a PREDICT
option is a parameter, their values. A plan stays valid while nothing it
depends on changes: every statement that is not a plain query (DDL, DML,
ATTACH, SET, transaction ends, model statements, ``register``) bumps the
database's generation, shared by every session of the process on that database
(DuckDB lets one process at a time write a database file), and a plan of an
older generation is planned again. A model version itself is immutable (its
sessions are keyed by digest), so nothing else needs checking.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import itertools
import os
import uuid
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Optional

_GENERATIONS: dict[str, int] = {}
_LOCK = threading.Lock()
_IDS = itertools.count()

PLAN_CACHE_SIZE = 64
"""Statement texts a session keeps plans of (least recently used dropped)."""


def database_key(database: str, duck=None) -> str:
    """What names a database process-wide: its real path (an in-memory database is its connection's own)."""
    if database == ":memory:" or not database:
        return f"memory:{id(duck)}"
    return os.path.realpath(database)


def generation(key: str) -> int:
    """The database's current generation."""
    return _GENERATIONS.get(key, 0)


def bump(key: str) -> None:
    """Something plans may depend on changed: every cached plan of the database is stale."""
    with _LOCK:
        _GENERATIONS[key] = _GENERATIONS.get(key, 0) + 1


def param_signature(value: Any) -> Any:
    """What DuckDB's type of a parameter value depends on: the Python type and, where it matters, more
    (an int's range, a Decimal's digits and scale, a datetime's time zone, a list's element types, a dict's
    keys and value types). Values of other types are keyed by their text (always correct, cached less)."""
    t = type(value)
    if value is None or t in (bool, float, str, bytes, bytearray):
        return t
    if t is int:
        return (int, -(2**31) <= value < 2**31, -(2**63) <= value < 2**63)
    if isinstance(value, decimal.Decimal):
        sign, digits, exponent = value.as_tuple()
        return (decimal.Decimal, len(digits), exponent)
    if isinstance(value, _dt.datetime):
        return (_dt.datetime, value.tzinfo is not None)
    if t in (_dt.date, _dt.time, _dt.timedelta, uuid.UUID):
        return (t, getattr(value, "tzinfo", None) is not None)
    if t in (list, tuple):
        return (t, _elements_signature(value))
    if t is dict:
        return (dict, tuple((repr(k), repr(param_signature(v))) for k, v in value.items()))
    return (t, repr(value))


_SCALARS = (type(None), bool, float, str, bytes, bytearray)
_INT32 = (int, True, True)


def _elements_signature(values) -> tuple:
    """The sorted distinct signatures of a list's elements. A list of plain scalars only (None, bool, float, text,
    bytes: an image row of 150,528 floats) or of ints in int32's range is read by its element types (and the ints'
    least and greatest), not element by element: the same signature, in about 3 ms where that took 50 ms."""
    types = set(map(type, values))
    if types and types <= set(_SCALARS):
        return tuple(sorted(repr(t) for t in types))
    if types == {int} and -(2**31) <= min(values) and max(values) < 2**31:
        return (repr(_INT32),)
    return tuple(sorted({repr(param_signature(v)) for v in values}))


@dataclass
class CachedPlan:
    """One statement text's plan.

    Attributes:
        plan: the logical plan after the rules (a :class:`~modelsql.engine.query.plan.QueryPlan`).
        choices: scan id -> the cost function's choice.
        generation: the database generation it was planned in.
        persistent: scan id -> a stream operator whose function stays registered while the
            entry lives (name, operator), reused by every execution.
        text, qmark_style: the numbered text and its placeholder style (error excerpts point into it).
        by_value, values: parameters whose values, not only types, the plan depends on (an argument of a
            table function such as ``read_parquet(?)`` decides the input's columns) and the values planned.
        sql: the DuckDB statement when every scan streams (None: built per execution).
        params: the statement's parameter numbers behind ``sql``'s ``$1..$m``.
    """

    plan: Any
    choices: dict
    generation: int
    text: str = ""
    qmark_style: bool = False
    by_value: tuple = ()
    values: tuple = ()
    id: int = field(default_factory=lambda: next(_IDS))
    persistent: dict = field(default_factory=dict)
    sql: Optional[str] = None
    params: list = field(default_factory=list)


class PlanCache:
    """A session's plans by statement text (see module docstring)."""

    def __init__(self, duck, size: int = PLAN_CACHE_SIZE) -> None:
        self.duck = duck
        self.size = size
        self._plans: "OrderedDict[tuple, CachedPlan]" = OrderedDict()
        self._plain: "OrderedDict[str, Optional[list]]" = OrderedDict()
        self._retired: list[CachedPlan] = []

    @staticmethod
    def key(text: str, params: Optional[list], optimize: bool = True) -> tuple:
        """The key of ``text`` run with ``params`` (what DuckDB types them as) and the rules on or off."""
        return (text, tuple(param_signature(v) for v in params or ()), optimize)

    def get(self, key: tuple, current: int, params: Optional[list] = None) -> Optional[CachedPlan]:
        entry = self._plans.get(key)
        if entry is None:
            return None
        stale_values = entry.by_value and tuple((params or [])[k - 1] for k in entry.by_value) != entry.values
        if entry.generation != current or stale_values:
            self._drop(key)
            return None
        self._plans.move_to_end(key)
        return entry

    def put(self, key: tuple, entry: CachedPlan) -> None:
        """Keep ``entry``; the least recently used past :attr:`size` are retired, and their functions
        removed by the next :meth:`collect` (not now: the statement just started has a pending result on
        the connection, which any query would replace)."""
        self._plans[key] = entry
        self._plans.move_to_end(key)
        while len(self._plans) > self.size:
            self._retired.append(self._plans.pop(next(iter(self._plans))))

    def collect(self) -> None:
        """Remove the functions of retired plans (call with no result pending on the connection)."""
        retired, self._retired = self._retired, []
        for entry in retired:
            self._remove_functions(entry)

    def plain_types(self, text: str):
        """The DuckDB statement types of a plain text seen before (None: not seen)."""
        return self._plain.get(text)

    def remember_plain(self, text: str, stypes: list) -> None:
        self._plain[text] = stypes
        while len(self._plain) > 4 * self.size:
            self._plain.popitem(last=False)

    def _drop(self, key: tuple) -> None:
        self._remove_functions(self._plans.pop(key))

    def _remove_functions(self, entry: CachedPlan) -> None:
        if not entry.persistent:
            return
        # DuckDB registers functions transactionally: one registered in a transaction that was rolled
        # back is gone, and removing a missing function aborts the transaction in progress.
        try:
            names = entry.persistent.keys()
            present = {r[0] for r in self.duck.execute(
                "SELECT function_name FROM duckdb_functions() WHERE function_name IN (SELECT unnest(?))",
                [list(names)]).fetchall()}
        except Exception:
            return
        for name in present:
            try:
                self.duck.remove_function(name)
            except Exception:
                pass

    def clear(self) -> None:
        """Forget every plan, for a connection that is closing: the functions its plans registered go with
        the DuckDB connection, so none is removed here (asking DuckDB which are present scans
        ``duckdb_functions()``: ~20 ms a plan)."""
        self._retired.clear()
        self._plans.clear()
        self._plain.clear()
