"""Displaying results: values as short text, tables that fit the terminal, lines, CSV and JSON lines; and the
progress of long statements (:class:`ProgressDisplay`, the shell's hook of :mod:`modelsql.progress`).

Used by the shell (:mod:`modelsql.client.cli`) and the quickstart (:mod:`modelsql.client.quickstart`).
"""

from __future__ import annotations

import csv
import datetime as _dt
import decimal
import json
import math
import sys
import threading
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, TextIO, TypeGuard

from rich.cells import cell_len
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from modelsql.progress import KINDS

if TYPE_CHECKING:
    from rich.progress import Progress

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

_NUMERIC_TYPES = (
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
    "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL", "REAL",
)


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
                 out: Optional[TextIO] = None, before_output: Optional[Callable[[], Any]] = None) -> None:
    """Print the rows of an executed cursor (nothing when it returned no rows).

    Args:
        fmt: ``"table"`` (rich, at most ``max_rows`` rows), ``"line"`` (every row,
            one ``column = value`` line per column, as sqlite3's ``.mode line``),
            ``"csv"`` (header + every row) or ``"json"`` (one JSON object per row).
        out: the stream for line/csv/json (default ``sys.stdout``).
        before_output: called before anything is written (a table: once its rows are fetched), e.g. to
            clear a progress display from the terminal.
    """
    description = cursor.description
    if description is None:
        return
    if fmt == "table":
        head, tail, total = _fetch_for_display(cursor, max_rows)
        if before_output is not None:
            before_output()
        console.print(render_table(description, head, tail, total, console.width))
        return
    if before_output is not None:
        before_output()
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


# --------------------------------------------------------------------------- progress

SHOW_AFTER_S = 1.0
"""A job's progress is shown once it has run this many seconds (shorter statements show nothing)."""


def progress_line(message: Any) -> str:
    """One line of text for a progress message (:mod:`modelsql.progress`): what runs, units done of the
    total, the rate, time elapsed and left, and the kind's own detail (TUNE's best trial and epochs saved,
    FINETUNE's loss, COMPILE's target, CREATE MODEL's stage). A message of an unknown kind, or missing keys,
    is shown with what it has; nothing raises."""
    if not isinstance(message, Mapping):
        return f"progress: {message!r}"[:200]
    parts = [p for p in (_counts(message), _rate(message), _times(message), _detail(message)) if p]
    head = _head(message)
    if not parts:
        parts = [", ".join(f"{k}={v!r}" for k, v in message.items() if k not in ("kind", "label", "id"))[:160]]
    return f"{head}: " + " · ".join(parts)


def _head(message: Mapping) -> str:
    kind = message.get("kind")
    title = KINDS[kind].title if kind in KINDS else str(kind or "progress")
    label = message.get("label")
    return f"{title} {label}" if label else title


def _is_number(v: Any) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _counts(message: Mapping) -> str:
    done, total, unit = message.get("done"), message.get("total"), message.get("unit") or "done"
    if not _is_number(done):
        return ""
    if message.get("kind") == "create_model" and _is_number(total):
        return f"stage {min(int(done) + 1, int(total))}/{int(total)}" if not message.get("final") else f"{int(done)} {unit}"
    return f"{done:,}/{total:,} {unit}" if _is_number(total) else f"{done:,} {unit}"


def _rate(message: Mapping) -> str:
    rate, unit = message.get("rate"), message.get("unit") or "units"
    if not _is_number(rate) or message.get("kind") == "create_model":
        return ""
    text = f"{rate:,.0f}" if rate >= 100 else f"{rate:.1f}" if rate >= 1 else f"{rate:.2g}"
    return f"{text} {unit}/s"


def _times(message: Mapping) -> str:
    elapsed, eta = message.get("elapsed_s"), message.get("eta_s")
    if not _is_number(elapsed):
        return ""
    if message.get("final"):
        return ("done in " if message.get("ok", True) else "stopped after ") + _clock(elapsed)
    if _is_number(eta) and message.get("kind") != "create_model":  # its stages take unequal times
        return f"{_clock(elapsed)} elapsed, {_clock(eta)} left"
    return f"{_clock(elapsed)} elapsed"


def _clock(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour)."""
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _tune_detail(m: Mapping) -> str:
    best = m.get("best_metric")
    text = "best -" if not _is_number(best) else f"best {best:.4g} (trial {m.get('best_trial')})"
    trained, requested = m.get("epochs_trained"), m.get("epochs_requested")
    if _is_number(trained) and _is_number(requested):
        saved = f"{requested / trained:.2f}x" if trained else "-"
        text += f" · {trained} epochs trained, {requested} trial-based ({saved})"
    return text


def _compile_detail(m: Mapping) -> str:
    target, batch = m.get("target"), m.get("batch_size")
    return " ".join(p for p in (f"for {target}" if target else "", f"batch {batch}" if batch else "") if p)


_DETAILS = {
    "tune": _tune_detail,
    "finetune": lambda m: f"loss {m['loss']:.4g}" if _is_number(m.get("loss")) else "",
    "compile": _compile_detail,
    "create_model": lambda m: "" if m.get("final") else str(m.get("stage") or ""),
}
"""Each kind's own part of :func:`progress_line` (kinds without one show the common keys only)."""


def _detail(message: Mapping) -> str:
    kind = message.get("kind")
    render = _DETAILS.get(kind) if isinstance(kind, str) else None
    try:
        return render(message) if render is not None else ""
    except (KeyError, TypeError, ValueError):  # a message of the right kind but the wrong shape
        return ""


class ProgressDisplay:
    """The shell's progress hook (``con.progress = ProgressDisplay(stderr_console)``).

    On a terminal each job that has run :data:`SHOW_AFTER_S` seconds gets a line with a bar, updated as
    its messages come and cleared when it ends; on anything else (a pipe, a file) a job that ran that long
    prints its last line once, when it ends. Messages may come from DuckDB's worker threads.

    Args:
        console: where to draw (the shell's stderr console).
        show_after_s: seconds a job runs before it is shown.
    """

    def __init__(self, console: Console, show_after_s: float = SHOW_AFTER_S) -> None:
        self.console, self.show_after_s = console, show_after_s
        self._lock = threading.Lock()
        self._bars: Optional[Progress] = None
        self._tasks: dict = {}

    def __call__(self, message: Any) -> None:
        if not isinstance(message, Mapping):
            message = {"kind": "progress", "label": progress_line(message)}
        with self._lock:
            job = message.get("id")
            elapsed = message.get("elapsed_s")
            long_enough = _is_number(elapsed) and elapsed >= self.show_after_s
            if message.get("final"):
                self._end(job, message, long_enough)
            elif job in self._tasks or long_enough:
                self._show(job, message)

    def stop(self) -> None:
        """Clear every line shown (the statement ended)."""
        with self._lock:
            self._close()

    def _show(self, job, message: Mapping) -> None:
        if not self.console.is_terminal:
            self._tasks[job] = None
            return
        if self._bars is None:
            self._bars = _bars(self.console)
            self._bars.start()
        line = progress_line(message)
        head, _, text = line.partition(": ")
        total, done = message.get("total"), message.get("done")
        fields: dict[str, Any] = dict(description=head, text=text,
                                      total=total if _is_number(total) and total > 0 else None,
                                      completed=done if _is_number(done) else 0)
        if job not in self._tasks:
            self._tasks[job] = self._bars.add_task(**fields)
        else:
            self._bars.update(self._tasks[job], **fields)

    def _end(self, job, message: Mapping, long_enough: bool) -> None:
        shown = job in self._tasks
        task = self._tasks.pop(job, None)
        if self._bars is not None and task is not None:
            self._bars.remove_task(task)
        if not self.console.is_terminal and (shown or long_enough):
            self.console.print(progress_line(message), highlight=False, markup=False, soft_wrap=True)
        if not self._tasks:
            self._close()

    def _close(self) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None
        self._tasks = {}


def _bars(console: Console) -> Progress:
    """A rich Progress on ``console`` that leaves nothing behind and leaves stdout alone."""
    from rich.progress import BarColumn, Progress, TextColumn

    return Progress(TextColumn("{task.description}"), BarColumn(bar_width=24), TextColumn("{task.fields[text]}"),
                    console=console, transient=True, redirect_stdout=False, redirect_stderr=False)
