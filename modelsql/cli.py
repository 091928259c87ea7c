"""The ``modelsql`` command: an interactive SQL shell, one-shot statements, scripts, a quickstart.

Usage::

    modelsql [--database PATH]                  # interactive shell (default database: ./modelsql.duckdb)
    modelsql [--database PATH] -c "SQL"         # run the statement(s), print results, exit 1 on error
    modelsql [--database PATH] run FILE.sql     # run every statement of FILE in order ("-" reads stdin)
    modelsql [--database PATH] quickstart       # load datasets, train, import and query three models
    modelsql --version

Every form opens one PEP 249 connection (:func:`modelsql.connect`) in
autocommit mode, so each statement commits on its own, as in the ``duckdb``
and ``sqlite3`` shells. Results are printed as :mod:`rich` tables (at most
:data:`MAX_ROWS` rows: the first and last halves, with a "N rows" footer;
arrays shortened to ``[0.01, 0.98, … (10)]``; fitted to the terminal by cutting
long values, never wrapping them, and hiding the widest columns, which the
footer names), or, with ``--format`` (``.mode`` in the shell), as ``column = value``
lines, CSV or JSON lines.

Errors never print a Python traceback (set ``MODELSQL_TRACEBACK=1`` to get one
for a bug report): they print the error's kind and code, its message and the
``LINE n:`` excerpt with a caret, the way PostgreSQL and DuckDB do. For
``run FILE`` the line numbers are those of the file.

Statements are split on ``;`` with the dialect's tokenizer (sqlglot), so a
``;`` inside a string, a quoted identifier, a ``$$`` string or a comment does
not end a statement; each statement is sent to the engine as its original text.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import decimal
import json
import math
import os
import re
import sys
import textwrap
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Optional, Sequence, TextIO

from rich.cells import cell_len
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .errors import position_of

DEFAULT_DATABASE = "modelsql.duckdb"
"""Database file used when ``--database`` is not given (relative to the working directory)."""

MAX_ROWS = 50
"""At most this many rows of a result are printed as a table (first and last halves)."""

CUT_WIDTH = 30
"""A table column needs at most this many characters: longer values are cut with ``…``
when the terminal has no room for them (``.mode line`` shows them whole)."""

MIN_CUT_WIDTH = 12
"""A column whose values are wider is shown cut to this many characters, rather than hidden,
when that much room is left."""

FORMATS = ("table", "line", "csv", "json")
"""How results are printed (``--format``, ``.mode``)."""

HISTORY_FILE = "~/.modelsql_history"
"""Interactive shell history (readline), overridable with ``$MODELSQL_HISTORY``."""

PROMPT = "modelsql> "
CONTINUATION_PROMPT = "     ...> "

_NUMERIC_TYPES = (
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
    "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL", "REAL",
)

# --------------------------------------------------------------------------- splitting


@dataclass(frozen=True)
class Statement:
    """One statement of a script: its original text and where it starts (0-based offset,
    1-based line and column in the whole script)."""

    text: str
    offset: int
    line: int
    column: int


class IncompleteInput(Exception):
    """The text ends inside a quoted string or a comment (the tokenizer could not finish)."""


def _tokenize(text: str):
    from sqlglot.errors import TokenError

    from .sql import ModelSQL, ModelSQLTokenizer

    try:
        return ModelSQLTokenizer(dialect=ModelSQL()).tokenize(text)
    except (TokenError, IndexError) as exc:
        raise IncompleteInput(str(exc)) from exc


def split_statements(text: str) -> list[Statement]:
    """Split ``text`` into statements on top-level ``;`` tokens, keeping the original slices.

    Empty statements (only whitespace, comments or ``;``) are dropped. A final
    statement without ``;`` is kept.

    Raises:
        IncompleteInput: the text does not tokenize (unterminated string or comment).
    """
    from sqlglot.tokens import TokenType

    tokens = _tokenize(text)
    out: list[Statement] = []
    start = 0
    has_tokens = False
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            if has_tokens:
                out.append(_statement(text, start, tok.start + 1))
            start = tok.end + 1
            has_tokens = False
        else:
            has_tokens = True
    if has_tokens:
        out.append(_statement(text, start, len(text)))
    return out


def _statement(text: str, start: int, end: int) -> Statement:
    chunk = text[start:end]
    lead = len(chunk) - len(chunk.lstrip())
    begin = start + lead
    line, column = position_of(text, begin)
    return Statement(text[begin:end].rstrip(), begin, line, column)


def is_complete(buffer: str) -> bool:
    """True when ``buffer`` ends with a ``;`` outside strings and comments (shell input is done)."""
    from sqlglot.tokens import TokenType

    if not buffer.strip():
        return False
    try:
        tokens = _tokenize(buffer)
    except IncompleteInput:
        return False
    return bool(tokens) and tokens[-1].token_type == TokenType.SEMICOLON


# --------------------------------------------------------------------------- errors

_LINE_RE = re.compile(r"^LINE (\d+): ")


def _error_position(message: str) -> Optional[tuple[int, int]]:
    """(line, column) from a ``LINE n: ...`` excerpt and the caret line under it."""
    lines = message.splitlines()
    for i, text in enumerate(lines):
        m = _LINE_RE.match(text)
        if m and i + 1 < len(lines) and "^" in lines[i + 1]:
            return int(m.group(1)), lines[i + 1].index("^") - len(m.group(0)) + 1
    return None


def _shift_excerpt(message: str, first_line: int, first_column: int) -> str:
    """Renumber ``LINE n:`` excerpts of a statement that starts at ``first_line`` of a file,
    moving the caret line with the prefix so it stays under the same character."""
    if first_line == 1:
        return message
    lines = message.splitlines()
    for i, text in enumerate(lines):
        m = _LINE_RE.match(text)
        if not m:
            continue
        new_prefix = f"LINE {int(m.group(1)) + first_line - 1}: "
        lines[i] = new_prefix + text[len(m.group(0)):]
        delta = len(new_prefix) - len(m.group(0))
        if i + 1 < len(lines) and lines[i + 1].strip() and set(lines[i + 1].strip()) == {"^"}:
            caret = lines[i + 1]
            lines[i + 1] = " " * delta + caret if delta >= 0 else caret[-delta:]
    return "\n".join(lines)


def format_error(exc: BaseException, sql: Optional[str] = None) -> str:
    """Render an error for humans: ``Kind (code): message`` plus its ``LINE n:`` excerpt.

    Blank lines inside DuckDB's messages are dropped. When the error has a
    position but its message no excerpt, the excerpt is built from ``sql``.
    Non-modelsql exceptions (bugs) render as ``InternalError`` with the
    Python exception's type.
    """
    from .errors import Error, excerpt

    if isinstance(exc, Error):
        kind = type(exc).__name__
        code = getattr(exc, "code", None)
        message = str(exc).strip() or kind
        line, column = getattr(exc, "line", None), getattr(exc, "column", None)
        if sql and line and "LINE " not in message:
            message += "\n" + excerpt(sql, line, column or 1)
    else:
        kind, code = "InternalError", "internal_error"
        message = f"{type(exc).__name__}: {exc}".strip()
        message += "\n(this is a bug in modelsql; rerun with MODELSQL_TRACEBACK=1 to see where)"
    message = "\n".join(line for line in message.splitlines() if line.strip())
    head = f"{kind} ({code})" if code else kind
    return f"{head}: {message}"


def _debug() -> bool:
    return os.environ.get("MODELSQL_TRACEBACK", "").strip() not in ("", "0")


# --------------------------------------------------------------------------- rendering


def _is_numeric(type_code: Any) -> bool:
    text = str(type_code).upper()
    return any(text == t or text.startswith(t + "(") for t in _NUMERIC_TYPES)


def _fmt_float(v: float, digits: int = 6) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    s = f"{v:.{digits}g}"
    if "e" not in s and "." not in s:
        s += ".0"
    return s


def _fmt_short(v: Any) -> str:
    """A value inside an array or struct: short floats, quoted strings."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, str):
        return repr(v) if len(v) <= 20 else repr(v[:17] + "…")
    if isinstance(v, (list, tuple)):
        return _fmt_array(v)
    if isinstance(v, dict):
        return _fmt_struct(v)
    return format_value(v)


def _fmt_array(v: Sequence[Any], shown: int = 3) -> str:
    n = len(v)
    if n <= shown + 1:
        return "[" + ", ".join(_fmt_short(x) for x in v) + "]"
    return "[" + ", ".join([_fmt_short(x) for x in v[:shown]] + [f"… ({n})"]) + "]"


def _fit_array(v: Any, text: str, width: int) -> str:
    """``text`` of value ``v`` in ``width`` cells: an array shows fewer elements (down to
    none: ``[… (10)]``) rather than being cut inside one; anything else unchanged."""
    shown = 2
    while isinstance(v, (list, tuple)) and cell_len(text) > width and shown >= 0:
        text = _fmt_array(v, shown)
        shown -= 1
    return text


def _fmt_struct(v: dict) -> str:
    items = list(v.items())
    body = ", ".join(f"{k}: {_fmt_short(x)}" for k, x in items[:6])
    if len(items) > 6:
        body += f", … ({len(items)})"
    return "{" + body + "}"


def format_value(v: Any) -> str:
    """One result value as table text: NULL, short floats, arrays shortened to ``[a, b, c, … (n)]``."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return _fmt_float(v)
    if isinstance(v, (list, tuple)):
        return _fmt_array(v)
    if isinstance(v, dict):
        return _fmt_struct(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        return "\\x" + b[:16].hex() + (f"… ({len(b)} bytes)" if len(b) > 16 else "")
    if isinstance(v, str):
        return _fmt_text(v)
    if isinstance(v, _dt.datetime):
        return v.isoformat(sep=" ", timespec="milliseconds" if v.microsecond else "seconds")
    return str(v)


def _fmt_text(v: str) -> str:
    """Text cut at 200 characters; text of several lines (a plan from EXPLAIN) at 200 lines."""
    if "\n" not in v:
        return v if len(v) <= 200 else v[:199] + "…"
    lines = v.split("\n")
    return v if len(lines) <= 200 else "\n".join(lines[:199] + ["…"])


def _text_width(text: str) -> int:
    """Terminal cells of the longest line of ``text``."""
    return max(cell_len(line) for line in text.split("\n"))


def _fetch_for_display(cursor, limit: int) -> tuple[list[tuple], list[tuple], int]:
    """(head, tail, total): all rows when there are at most ``limit``; otherwise the
    first ``limit // 2`` and the last ``limit - limit // 2`` rows, counting the rest."""
    rows = cursor.fetchmany(limit + 1)
    if len(rows) <= limit:
        return rows, [], len(rows)
    head_n = limit // 2
    head = rows[:head_n]
    tail: deque = deque(rows[head_n:], maxlen=limit - head_n)
    total = len(rows)
    while True:
        more = cursor.fetchmany(10_000)
        if not more:
            break
        total += len(more)
        tail.extend(more)
    return head, list(tail), total


def _fit_columns(widths: list[int], available: int) -> dict[int, int]:
    """The width of each column shown in ``available`` characters, by index in order.

    A column takes its natural width (``widths``) up to :data:`CUT_WIDTH`, plus 3 for
    padding and border. While they do not fit, the column that takes most is hidden
    (the rightmost of equals; never the first). Room left over goes to hidden columns
    that fit cut to :data:`MIN_CUT_WIDTH`, in order, then to the cut columns, left to
    right, up to their natural widths.
    """
    fitted = {j: min(w, CUT_WIDTH) for j, w in enumerate(widths)}

    def room() -> int:
        return available - 1 - sum(w + 3 for w in fitted.values())

    while len(fitted) > 1 and room() < 0:
        del fitted[max(list(fitted)[1:], key=lambda j: (fitted[j], j))]
    for j, w in enumerate(widths):
        if j not in fitted and room() >= min(w, MIN_CUT_WIDTH) + 3:
            fitted[j] = min(w, MIN_CUT_WIDTH)
    for j in sorted(fitted):
        fitted[j] += max(0, min(widths[j] - fitted[j], room()))
    return dict(sorted(fitted.items()))


def render_table(description: Sequence[tuple], head: list[tuple], tail: list[tuple], total: int,
                 width: int, note: str = "") -> Group:
    """A rich Table of a result in ``width`` characters: ``head`` rows, a ``…`` row and
    ``tail`` rows when rows were left out. Values are not wrapped: lines wider than
    their column are cut with ``…``, and columns are hidden when they do not fit (see
    :func:`_fit_columns`). Under it a footer says how many rows there are, which
    columns were hidden or cut and how to see them, then ``note``."""
    names = [str(d[0]) for d in description]
    types = [str(d[1]).lower().strip('"') for d in description]
    cells = [[format_value(v) for v in row] for row in head + tail]
    widths = [
        max([cell_len(names[j]), min(cell_len(types[j]), 12)] + [_text_width(r[j]) for r in cells])
        for j in range(len(names))
    ]
    fitted = _fit_columns(widths, width)
    shown = list(fitted)
    table = Table(show_lines=False, header_style="bold")
    for j in shown:
        header = Text(names[j])
        header.append("\n" + types[j], style="dim")
        table.add_column(header, justify="right" if _is_numeric(description[j][1]) else "left",
                         width=fitted[j], no_wrap=True, overflow="ellipsis")
    for i, row in enumerate(head + tail):
        if tail and i == len(head):
            table.add_row(*[Text("…", style="dim") for _ in shown])
        table.add_row(*[
            Text("NULL", style="dim") if row[j] is None else Text(_fit_array(row[j], cells[i][j], fitted[j]))
            for j in shown
        ])
    return Group(table, Text(_caption(names, widths, fitted, len(head) + len(tail), total, note), style="dim"))


def _caption(names: list[str], widths: list[int], fitted: dict[int, int], shown_rows: int, total: int,
             note: str) -> str:
    """The footer of :func:`render_table`: rows, hidden and cut columns, ``note``."""
    caption = f"{total:,} row" + ("" if total == 1 else "s")
    if shown_rows < total:
        caption += f" ({shown_rows} shown)"
    hidden = [names[j] for j in range(len(names)) if j not in fitted]
    cut = [names[j] for j in fitted if widths[j] > fitted[j]]
    if hidden:
        caption += f", {len(names)} columns ({len(fitted)} shown; hidden: {', '.join(hidden)})"
    if cut:
        caption += f"; long values cut in {', '.join(cut)}"
    if hidden or cut:
        caption += "; .mode line (--format line) shows every column in full"
    if note:
        caption += f" · {note}"
    return caption


def print_result(console: Console, cursor, *, fmt: str = "table", max_rows: int = MAX_ROWS,
                 out: Optional[TextIO] = None) -> None:
    """Print the rows of an executed cursor (nothing when it returned no rows).

    Args:
        fmt: ``"table"`` (rich, at most ``max_rows`` rows), ``"line"`` (every row,
            one ``column = value`` line per column, as sqlite3's ``.mode line``),
            ``"csv"`` (header + every row) or ``"json"`` (one JSON object per row).
        out: the stream for line/csv/json (default ``sys.stdout``).
    """
    description = cursor.description
    if description is None:
        return
    if fmt == "table":
        head, tail, total = _fetch_for_display(cursor, max_rows)
        console.print(render_table(description, head, tail, total, console.width))
        return
    out = out or sys.stdout
    names = [d[0] for d in description]
    if fmt == "line":
        _print_lines(out, names, _rows(cursor))
    elif fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([_csv_value(v) for v in row] for row in _rows(cursor))
    else:
        for row in _rows(cursor):
            out.write(json.dumps(dict(zip(names, map(_json_safe, row))), default=_json_default, allow_nan=False) + "\n")
    out.flush()


def _rows(cursor):
    """Every remaining row of ``cursor``, fetched 10,000 at a time."""
    while True:
        rows = cursor.fetchmany(10_000)
        if not rows:
            return
        yield from rows


def _print_lines(out: TextIO, names: Sequence[str], rows) -> None:
    """``.mode line``: each row as ``column = value`` lines, names right-aligned, rows
    separated by a blank line; text is whole, other values as in a table."""
    pad = max(cell_len(n) for n in names)
    for i, row in enumerate(rows):
        if i:
            out.write("\n")
        for name, v in zip(names, row):
            text = v if isinstance(v, str) else _whole_value(v)
            text = text.replace("\n", "\n" + " " * (pad + 3))  # continuation lines under the value
            out.write(" " * (pad - cell_len(name)) + f"{name} = {text}\n")


def _whole_value(v: Any) -> str:
    """A value whole, for ``.mode line``: arrays with every element (a table shortens them)."""
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_whole_value(x) for x in v) + "]"
    return format_value(v)


def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v, default=_json_default)
    return v


def _json_safe(v: Any) -> Any:
    """Values JSON can hold: NaN and infinities become null (JSON has no such numbers),
    intervals ISO 8601 durations; lists and tuples element by element."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, _dt.timedelta):
        return f"P{v.days}DT{v.seconds + v.microseconds / 1e6:g}S"
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    return v


def _json_default(v: Any) -> Any:
    if isinstance(v, (_dt.date, _dt.time, _dt.datetime, uuid.UUID)):
        return v.isoformat() if hasattr(v, "isoformat") else str(v)
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, tuple):
        return list(v)
    return str(v)


# --------------------------------------------------------------------------- running


class Runner:
    """Runs statement texts on one autocommit connection and prints their results.

    Args:
        con: an open :class:`modelsql.Connection`.
        console: stdout console (tables); err: stderr console (errors).
        fmt: ``table``, ``csv`` or ``json``.
    """

    def __init__(self, con, console: Console, err: Console, fmt: str = "table") -> None:
        self.con = con
        self.console = console
        self.err = err
        self.fmt = fmt

    def execute_one(self, sql: str, *, show_rowcount: bool = False) -> None:
        """Execute one statement text and print its rows; raises modelsql errors."""
        cur = self.con.cursor()
        try:
            cur.execute(sql)
            if cur.description is not None:
                print_result(self.console, cur, fmt=self.fmt)
            elif show_rowcount and cur.rowcount >= 0:
                n = cur.rowcount
                self.console.print(f"{n} row{'' if n == 1 else 's'} changed", style="dim")
        finally:
            cur.close()

    def run_script(self, text: str, *, source: Optional[str] = None, show_rowcount: bool = False) -> bool:
        """Run each statement of ``text`` in order; stop at the first error, print it
        (positioned in ``text``; prefixed by ``source:line:column:`` when ``source`` is given)
        and return False. True when every statement succeeded."""
        try:
            statements = split_statements(text)
        except IncompleteInput:
            # Let the engine report the unterminated string/comment with its position.
            statements = [Statement(text, 0, 1, 1)] if text.strip() else []
        for stmt in statements:
            try:
                self.execute_one(stmt.text, show_rowcount=show_rowcount)
            except (KeyboardInterrupt, BrokenPipeError):
                raise
            except Exception as exc:
                if _debug():
                    raise
                if str(exc).rstrip().endswith("Query interrupted"):
                    raise KeyboardInterrupt from exc  # Ctrl-C inside DuckDB
                self.report(exc, stmt, source=source)
                return False
        return True

    def report(self, exc: BaseException, stmt: Optional[Statement] = None, *, source: Optional[str] = None) -> None:
        """Print an error (no traceback) to stderr, renumbered to the script's lines."""
        message = format_error(exc, stmt.text if stmt else None)
        prefix = ""
        if stmt is not None and (stmt.line > 1 or source):
            pos = _error_position(message)
            if pos is not None:
                line, column = pos
                abs_line = stmt.line + line - 1
                abs_col = stmt.column + column - 1 if line == 1 else column
                message = _shift_excerpt(message, stmt.line, stmt.column)
                prefix = f"{source}:{abs_line}:{abs_col}: " if source else ""
            elif source:
                prefix = f"{source}:{stmt.line}:{stmt.column}: "
        self.err.print(escape(prefix + message), highlight=False, soft_wrap=True)


# --------------------------------------------------------------------------- shell

HELP = """\
Enter SQL statements terminated by ";" (they may span several lines).
Besides DuckDB SQL:
  IMPORT MODEL m FROM 'f.onnx' [WITH (features = (a, b), description = '...')]
  CREATE OR REPLACE MODEL m FROM 'f.onnx'    a new version; older ones stay
  DROP MODEL m [VERSION n]    SHOW MODELS    DESCRIBE MODEL m [VERSION n]
  EXPORT MODEL m TO 'f.onnx'  VACUUM MODELS (delete blobs no model uses)
  EXPLAIN [ANALYZE] SELECT ...    how each PREDICT is bound and run (model,
                                  columns, options), then DuckDB's plan

SELECT ... FROM PREDICT(MODEL m [VERSION n], TABLE t | (SELECT ...)
                        [, option = value ...]) [AS alias]
Options are named arguments after the input (=, := or =>), among them:
  on_null = 'error' | 'skip' | 'null'   a NULL fed to the model: an error
                                        (default), leave the row out, or
                                        NULL outputs
  features = (col_a, col_b, ...)        the columns that feed the model's
                                        input, in order
  batch_size = 1000                     at most this many rows per model run
  backend = 'onnxruntime'               the runtime (the only one for now)
  execution = 'auto' | 'stream' | 'batch'
                                        stream chunks through the model, or
                                        run it over the whole input first;
                                        'auto' (the default) picks one
  on_error = 'error' | 'null' | 'skip'  rows the model fails on: an error
                                        naming column and value (default),
                                        NULL outputs, or leave them out
  isolate_rows = true | false           run a batch-dependent model one row
                                        at a time (default true)
{known}

.help             this text
.mode [MODE]      show or set how results print: table (default), line (one
                  "column = value" line each: what a table hides), csv, json
.tables           list tables
.models           list models (SHOW MODELS)
.schema TABLE     columns of a table (DESCRIBE TABLE)
.quit, .exit      leave the shell (Ctrl-D works too)
Ctrl-C clears the statement being typed."""


def help_text() -> str:
    """:data:`HELP` with the PREDICT options this version knows (more may come; the README
    describes each)."""
    from .planner.bind import KNOWN_OPTIONS

    known = f"All the options this version knows: {', '.join(KNOWN_OPTIONS)}; the README describes each."
    return HELP.format(known=textwrap.fill(known, 78, initial_indent="  ", subsequent_indent="  "))


class Shell:
    """The interactive shell: reads statements (``;``-terminated, multi-line) and dot-commands.

    With a terminal on stdin it shows a banner and prompts and keeps readline history in
    :data:`HISTORY_FILE`; with piped stdin it reads silently (like ``sqlite3``) and its
    exit status is 1 if any statement failed.
    """

    def __init__(self, runner: Runner, database: str, stdin: TextIO = sys.stdin) -> None:
        self.runner = runner
        self.database = database
        self.stdin = stdin
        self.interactive = stdin.isatty()
        self.failed = False
        self._readline = None

    # -- input ---------------------------------------------------------------

    def _setup_history(self) -> None:
        if not self.interactive:
            return
        try:
            import readline  # noqa: F401 - enables line editing for input()
        except ImportError:
            return
        self._readline = readline
        path = os.path.expanduser(os.environ.get("MODELSQL_HISTORY", HISTORY_FILE))
        self._history_path = path
        try:
            readline.set_history_length(2000)
            if os.path.exists(path):
                readline.read_history_file(path)
        except Exception:
            pass

    def _save_history(self) -> None:
        if self._readline is None:
            return
        try:
            self._readline.write_history_file(self._history_path)
        except Exception:
            pass

    def _read_line(self, prompt: str) -> Optional[str]:
        """One line without its newline, or None at end of input."""
        if self.interactive:
            try:
                return input(prompt)
            except EOFError:
                return None
        line = self.stdin.readline()
        if not line:
            return None
        return line.rstrip("\n").rstrip("\r")

    # -- loop ----------------------------------------------------------------

    def run(self) -> int:
        from . import __version__

        self._setup_history()
        if self.interactive:
            self.runner.console.print(
                f"modelsql {__version__} — database [bold]{escape(self.database)}[/bold]\n"
                'Enter ".help" for usage hints; end statements with ";".',
                highlight=False,
            )
        buffer: list[str] = []
        try:
            while True:
                try:
                    line = self._read_line(CONTINUATION_PROMPT if buffer else PROMPT)
                except KeyboardInterrupt:
                    self.runner.console.print()
                    buffer = []
                    continue
                if line is None:
                    if self.interactive:
                        self.runner.console.print()  # end the prompt's line after Ctrl-D
                    if buffer and "".join(buffer).strip():
                        self._execute("\n".join(buffer))  # a last statement without ";"
                    break
                if not buffer and line.strip().startswith("."):
                    if self._dot(line.strip()) is False:
                        break
                    continue
                buffer.append(line)
                text = "\n".join(buffer)
                if not text.strip():
                    buffer = []
                    continue
                if is_complete(text):
                    buffer = []
                    self._execute(text)
        finally:
            self._save_history()
        return 1 if (self.failed and not self.interactive) else 0

    def _execute(self, text: str) -> None:
        try:
            if not self.runner.run_script(text, show_rowcount=self.interactive):
                self.failed = True
        except KeyboardInterrupt:
            self.runner.err.print("Interrupted.", highlight=False)
            self.failed = True

    def _dot(self, command: str) -> Optional[bool]:
        """Run a dot-command; False means leave the shell."""
        word, _, rest = command.partition(" ")
        word = word.lower().rstrip(";")
        rest = rest.strip().rstrip(";").strip()
        if word in (".quit", ".exit", ".q"):
            return False
        if word == ".help":
            self.runner.console.print(help_text(), highlight=False, markup=False)
        elif word == ".mode":
            self._mode(rest)
        elif word == ".tables":
            self._execute("SHOW TABLES;")
        elif word == ".models":
            self._execute("SHOW MODELS;")
        elif word == ".schema":
            if not rest:
                self._execute(
                    "SELECT table_name, string_agg(column_name || ' ' || data_type, ', ' ORDER BY ordinal_position) "
                    "AS columns FROM information_schema.columns WHERE table_schema = current_schema() "
                    "GROUP BY table_name ORDER BY table_name;"
                )
            else:
                self._execute(f"DESCRIBE {rest};")
        else:
            self.runner.err.print(
                f'Unknown command "{escape(word)}". Enter ".help" for the list.', highlight=False
            )
            self.failed = True
        return None

    def _mode(self, mode: str) -> None:
        """``.mode`` prints the display mode, ``.mode MODE`` sets it (one of :data:`FORMATS`)."""
        if not mode:
            self.runner.console.print(f"current mode: {self.runner.fmt}", highlight=False)
        elif mode.lower() in FORMATS:
            self.runner.fmt = mode.lower()
        else:
            self.runner.err.print(
                f'Unknown mode "{escape(mode)}": one of {", ".join(FORMATS)}.', highlight=False
            )
            self.failed = True


# --------------------------------------------------------------------------- main


def _version_text() -> str:
    from . import __version__

    try:
        import duckdb

        return f"modelsql {__version__} (duckdb {duckdb.__version__})"
    except Exception:  # pragma: no cover
        return f"modelsql {__version__}"


class _VersionAction(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(_version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (``--database`` is accepted before and after a subcommand)."""
    parser = argparse.ArgumentParser(
        prog="modelsql",
        description="SQL over models kept in a DuckDB catalog: shell, one-shot statements, scripts.",
        epilog="Without -c or a command, starts the interactive shell.",
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")

    def options(p: argparse.ArgumentParser, top: bool) -> None:
        default = None if top else argparse.SUPPRESS
        p.add_argument(
            "-d", "--database", metavar="PATH", default=default,
            help=f'database file (created if missing; ":memory:" for none); default: ./{DEFAULT_DATABASE}',
        )
        p.add_argument("--read-only", action="store_true", default=False if top else argparse.SUPPRESS,
                       help="open the database read-only")
        p.add_argument("-f", "--format", choices=FORMATS, default=default,
                       help="how results are printed: table (default), line (one column = value "
                            "line each, as sqlite3's .mode line), csv, json")

    options(parser, True)
    parser.add_argument("-c", "--command", metavar="SQL", help="run the statement(s) in SQL, print results, exit")
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND")
    p_run = sub.add_parser("run", help="run every statement of a SQL file in order, stop at the first error")
    p_run.add_argument("file", help='the SQL file ("-" for stdin)')
    options(p_run, False)
    options(sub.add_parser("shell", help="the interactive shell (the default)"), False)
    options(sub.add_parser(
        "quickstart",
        help="load digits / breast cancer / iris, train and import three models, query them in SQL",
    ), False)
    return parser


def _consoles() -> tuple[Console, Console]:
    def width(stream) -> Optional[int]:
        if stream.isatty() or os.environ.get("COLUMNS"):
            return None
        return 120

    return (
        Console(highlight=False, width=width(sys.stdout)),
        Console(stderr=True, highlight=False, width=width(sys.stderr)),
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``modelsql`` command; returns the exit status.

    0: success; 1: a statement failed (or the database could not be opened);
    2: bad arguments; 130: interrupted.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is not None and args.subcommand is not None:
        parser.error("-c cannot be combined with a command")
    console, err = _consoles()
    database = args.database or DEFAULT_DATABASE
    fmt = getattr(args, "format", None) or "table"
    try:
        if args.subcommand == "quickstart":
            from . import quickstart

            quickstart.run(database, console)
            return 0
        return _run(args, database, fmt, console, err)
    except BrokenPipeError:
        # the reader went away (| head): stop quietly, as cat and sqlite3 do
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit fails too
        except (OSError, ValueError):
            pass
        return 0
    except KeyboardInterrupt:
        err.print("Interrupted.", highlight=False)
        return 130
    except Exception as exc:
        if _debug():
            raise
        err.print(escape(format_error(exc)), highlight=False, soft_wrap=True)
        return 1


def _run(args: argparse.Namespace, database: str, fmt: str, console: Console, err: Console) -> int:
    import modelsql

    script = None
    source = None
    if args.subcommand == "run":
        source = args.file
        if args.file == "-":
            script = sys.stdin.read()
            source = "<stdin>"
        else:
            try:
                with open(args.file, encoding="utf-8") as fh:
                    script = fh.read()
            except OSError as exc:
                err.print(escape(f"Cannot read {args.file}: {exc.strerror or exc}"), highlight=False)
                return 1
            except UnicodeDecodeError:
                err.print(escape(f"Cannot read {args.file}: not a UTF-8 text file of SQL statements."), highlight=False)
                return 1
    con = modelsql.connect(database, read_only=bool(getattr(args, "read_only", False)))
    try:
        con.autocommit = True
        runner = Runner(con, console, err, fmt)
        if args.command is not None:
            return 0 if runner.run_script(args.command) else 1
        if script is not None:
            return 0 if runner.run_script(script, source=source) else 1
        return Shell(runner, database).run()
    finally:
        try:
            con.close()
        except Exception:
            pass


if __name__ == "__main__":  # pragma: no cover - `python -m modelsql.cli`
    sys.exit(main())
