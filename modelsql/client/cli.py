"""The ``modelsql`` command: an interactive SQL shell, one-shot statements, scripts, a quickstart.

Usage::

    modelsql [--database PATH]                  # interactive shell (default database: ./modelsql.duckdb)
    modelsql [--database PATH] -c "SQL" [-c "SQL" ...]   # run each in order, print results, exit 1 on error
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
not end a statement; each statement is sent to the session as its original text.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import textwrap
from dataclasses import dataclass
from types import ModuleType
from typing import Optional, Sequence, TextIO

from rich.console import Console
from rich.markup import escape

from modelsql.client.display import FORMATS, SHOW_AFTER_S, ProgressDisplay, print_result
from modelsql.errors import position_of

DEFAULT_DATABASE = "modelsql.duckdb"
"""Database file used when ``--database`` is not given (relative to the working directory)."""

HISTORY_FILE = "~/.modelsql_history"
"""Interactive shell history (readline), overridable with ``$MODELSQL_HISTORY``."""

HISTORY_NEWLINE = "\x01"
"""Stands for a line break of a multi-line statement in the history file, one entry a line (psql's choice)."""

PROMPT = "modelsql> "
CONTINUATION_PROMPT = "     ...> "

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

    from modelsql.sql import ModelSQL, ModelSQLTokenizer

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
    from modelsql.errors import Error, excerpt

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


def _progress_after() -> float:
    """Seconds a statement runs before the shell shows its progress: ``$MODELSQL_PROGRESS_AFTER``, else
    :data:`~modelsql.client.display.SHOW_AFTER_S` (one); a value that is no number, or is negative, is the default."""
    try:
        seconds = float(os.environ.get("MODELSQL_PROGRESS_AFTER", SHOW_AFTER_S))
    except ValueError:
        return SHOW_AFTER_S
    return seconds if seconds >= 0 else SHOW_AFTER_S



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
        self.progress = ProgressDisplay(err, _progress_after())
        """Draws the progress of long statements on stderr (:mod:`modelsql.progress`)."""
        con.progress = self.progress
        self._duckdb_bar = True

    def _draw_progress_for(self, sql: str) -> None:
        """On a terminal, DuckDB's own progress bar is off for a statement naming models (this display draws
        its progress) and on for plain SQL (DuckDB's bar is all there is)."""
        from modelsql.sql import mentions_models

        bar = not (self.err.is_terminal and mentions_models(sql))
        if bar != self._duckdb_bar:
            self.con.duckdb_progress_bar = self._duckdb_bar = bar

    def execute_one(self, sql: str, *, show_rowcount: bool = False) -> None:
        """Execute one statement text and print its rows; raises modelsql errors."""
        self._draw_progress_for(sql)
        cur = self.con.cursor()
        try:
            cur.execute(sql)
            if cur.description is not None:
                # rows of a streaming PREDICT are made as they are fetched: the display stays until then
                print_result(self.console, cur, fmt=self.fmt,
                             before_output=self.progress.stop if self.console.is_terminal else None)
            elif show_rowcount and cur.rowcount >= 0:
                n = cur.rowcount
                self.console.print(f"{n} row{'' if n == 1 else 's'} changed", style="dim")
        finally:
            self.progress.stop()
            cur.close()

    def run_script(self, text: str, *, source: Optional[str] = None, show_rowcount: bool = False) -> bool:
        """Run each statement of ``text`` in order; stop at the first error, print it
        (positioned in ``text``; prefixed by ``source:line:column:`` when ``source`` is given)
        and return False. True when every statement succeeded."""
        try:
            statements = split_statements(text)
        except IncompleteInput:
            # Let the session report the unterminated string/comment with its position.
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
Besides DuckDB SQL, these statements (the README describes each):
{statements}
  (source: 'f.onnx', PYTHON 'package.module:function' or STUDY s [TRIAL n])
  EXPLAIN [ANALYZE] SELECT ...    how each PREDICT is bound and run (model,
                                  columns, options), then DuckDB's plan
  EXPORT DATABASE 'dir' / IMPORT DATABASE 'dir'   with the models' catalog
A database's code (Python programs, compiled libraries) runs only when you
trust it (TRUST MODEL, or your own key signed it).

SELECT ... FROM PREDICT(MODEL m [VERSION n], TABLE t | (SELECT ...)
                        [, option = value ...]) [AS alias]
PREDICT(PIPELINE p ...) runs a pipeline the same way.
Options are named arguments after the input (=, := or =>), among them:
  on_null = 'error' | 'skip' | 'null'   a NULL fed to the model: an error
                                        (default), leave the row out, or
                                        NULL outputs
  features = (col_a, col_b, ...)        the columns that feed the model's
                                        input, in order
  batch_size = 1000                     at most this many rows per model run
  backend = 'onnxruntime' | 'tvm'       the runtime (tvm: a COMPILEd artifact)
  execution = 'auto' | 'stream' | 'batch'
                                        stream chunks through the model, or
                                        run it over the whole input first;
                                        'auto' (the default) picks one
  on_error = 'error' | 'null' | 'skip'  rows the model fails on: an error
                                        naming column and value (default),
                                        NULL outputs, or leave them out
  isolate_rows = true | false           run a batch-dependent model one row
                                        at a time (default true)
Every statement's options (docs/options.md describes each):
{known}

{dot_commands}
Ctrl-C clears the statement being typed (or stops the one running);
a multi-line statement is one history entry."""

DOT_COMMANDS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    ((".help",), "[STATEMENT]", "this text; with a statement (PREDICT, SERVE, TUNE MODEL ...), its options"),
    ((".mode",), "[MODE]", 'show or set how results print: table (default), line (one "column = value" line '
                           "each: what a table hides), csv, json"),
    ((".tables",), "", "list tables"),
    ((".models",), "", "list models (SHOW MODELSQL MODELS)"),
    ((".schema",), "[TABLE]", "columns of a table (DESCRIBE TABLE); of every table without one"),
    ((".quit", ".exit", ".q"), "", "leave the shell (Ctrl-D works too)"),
)
"""The shell's dot commands: (names, arguments, what it does); :meth:`Shell._dot` runs exactly these, and
``.help`` lists them from here."""


def says_words(text: str, words: Sequence[str]) -> bool:
    """Whether one line of ``text`` has ``words`` in order (``CREATE [OR REPLACE] MODEL`` says
    ``CREATE MODEL`` and ``CREATE OR REPLACE MODEL``)."""
    pattern = re.compile(r"\b" + r"\b.*?\b".join(map(re.escape, words)) + r"\b")
    return any(pattern.search(line) for line in text.splitlines())


def statement_forms() -> list[str]:
    """How each statement of the registry (:data:`modelsql.sql.registry.STATEMENT_NODES`) is written: the
    ````...```` forms that open its node's docstring (one line per node when they fit), and the words of a
    sequence none of them says, so a new statement is in ``.help`` the day it is registered."""
    import inspect

    from modelsql.sql.registry import STATEMENT_NODES

    forms: list[str] = []
    for node in STATEMENT_NODES:
        first = inspect.cleandoc(node.__doc__ or "").split("\n\n")[0]
        written = [" ".join(f.split()) for f in re.findall(r"``(.+?)``", first, re.S)]
        words: tuple[tuple[str, ...], ...] = getattr(node, "WORDS")  # declared by every registered node
        own = [f for f in written if any(says_words(f, seq) and f.startswith(seq[0]) for seq in words)]
        own += [" ".join(seq) for seq in words if not any(says_words(f, seq) for f in own)]
        joined = "  /  ".join(own)
        forms.extend([joined] if len(joined) <= 76 else own)
    return forms


def help_text() -> str:
    """:data:`HELP` with the statements of the registry (:func:`statement_forms`), each statement's options from
    their declarations (:mod:`modelsql.engine.options.declared`) and the dot commands (:data:`DOT_COMMANDS`)."""
    from modelsql.engine.options.docs import statement_lines

    statements = "\n".join(textwrap.fill(form, 78, initial_indent="  ", subsequent_indent="      ",
                                         break_on_hyphens=False) for form in statement_forms())
    dots = []
    for names, args, what in DOT_COMMANDS:
        head = ", ".join(names) + (f" {args}" if args else "")
        dots.append(textwrap.fill(what, 78, initial_indent=f"{head:<18}", subsequent_indent=" " * 18))
    return HELP.format(statements=statements, dot_commands="\n".join(dots), known="\n".join(statement_lines()))


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
        self._readline: Optional[ModuleType] = None
        self._history_added = 0  # lines readline's input() added to the history for the statement being typed

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
                self._recode_history(HISTORY_NEWLINE, "\n")
        except Exception:
            pass

    def _recode_history(self, old: str, new: str) -> None:
        readline = self._readline
        assert readline is not None  # called once readline is set up
        for i in range(readline.get_current_history_length()):
            item = readline.get_history_item(i + 1)  # 1-based, where replace_history_item is 0-based
            if item and old in item:
                readline.replace_history_item(i, item.replace(old, new))

    def _save_history(self) -> None:
        if self._readline is None:
            return
        try:
            # the file keeps one entry a line: a statement's line breaks are saved as HISTORY_NEWLINE (as psql does)
            self._recode_history("\n", HISTORY_NEWLINE)
            self._readline.write_history_file(self._history_path)
        except Exception:
            pass

    def _history_as_one(self, lines: list[str]) -> None:
        """Replace the history entries the lines of a multi-line statement left (one per line) by the
        statement, so the up arrow recalls it whole."""
        readline, added = self._readline, self._history_added
        self._history_added = 0
        if readline is None or added < 2:
            return
        try:
            end = readline.get_current_history_length()
            if end < added or readline.get_history_item(end) != lines[-1]:
                return  # not the entries input() added (the history was changed meanwhile)
            for _ in range(added):
                readline.remove_history_item(readline.get_current_history_length() - 1)
            readline.add_history("\n".join(lines))
        except Exception:
            pass

    def _read_line(self, prompt: str) -> Optional[str]:
        """One line without its newline, or None at end of input."""
        if self.interactive:
            try:
                line = input(prompt)
            except EOFError:
                return None
            if line and self._readline is not None:
                self._history_added += 1  # readline's input() adds every non-empty line
            return line
        line = self.stdin.readline()
        if not line:
            return None
        return line.rstrip("\n").rstrip("\r")

    # -- loop ----------------------------------------------------------------

    def run(self) -> int:
        from modelsql import __version__

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
                    if not buffer:
                        self._history_added = 0
                    line = self._read_line(CONTINUATION_PROMPT if buffer else PROMPT)
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
                        lines, buffer = buffer, []
                        self._history_as_one([ln for ln in lines if ln])
                        self._execute(text)
                except KeyboardInterrupt:  # at the prompt (as python's and psql's): drop the line, prompt again
                    if not self.interactive:
                        raise
                    self.runner.console.print()
                    buffer = []
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
        word = next((names[0] for names, _, _ in DOT_COMMANDS if word in names), word)
        if word == ".quit":
            return False
        if word == ".help":
            self._help(rest)
        elif word == ".mode":
            self._mode(rest)
        elif word == ".tables":
            self._execute("SHOW TABLES;")
        elif word == ".models":
            self._execute("SHOW MODELSQL MODELS;")
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

    def _help(self, statement: str) -> None:
        """``.help``: :func:`help_text`; ``.help STATEMENT``: that statement's options."""
        if not statement:
            self.runner.console.print(help_text(), highlight=False, markup=False)
            return
        from modelsql.engine.options.docs import option_help

        try:
            self.runner.console.print(option_help(statement), highlight=False, markup=False)
        except KeyError as exc:
            self.runner.err.print(escape(exc.args[0]), highlight=False)
            self.failed = True

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
    from modelsql import __version__

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
        p.add_argument("--no-python", action="store_true", default=False if top else argparse.SUPPRESS,
                       help="refuse CREATE MODEL ... FROM PYTHON and TRUST MODEL (Python named in SQL runs with "
                            "this process's rights): for a shell that runs SQL from others")
        p.add_argument("-f", "--format", choices=FORMATS, default=default,
                       help="how results are printed: table (default), line (one column = value "
                            "line each, as sqlite3's .mode line), csv, json")

    options(parser, True)
    parser.add_argument("-c", "--command", metavar="SQL", action="append",
                        help="run the statement(s) in SQL, print results, exit; repeated, each in order (stopping "
                             "at the first error). A SERVE among them serves until Ctrl-C or SIGTERM")
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND")
    p_run = sub.add_parser("run", help="run every statement of a SQL file in order, stop at the first error")
    p_run.add_argument("file", help='the SQL file ("-" for stdin)')
    options(p_run, False)
    options(sub.add_parser("shell", help="the interactive shell (the default)"), False)
    from modelsql.client import cli_serve

    options(cli_serve.add_parser(sub), False)
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
        if args.subcommand == "serve":
            from modelsql.client import cli_serve

            return cli_serve.run(args, database, console, err)
        if args.subcommand == "quickstart":
            from modelsql.client import quickstart

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
    allow_python = not getattr(args, "no_python", False)
    if allow_python:
        _import_from_working_directory()
    con = modelsql.connect(database, read_only=bool(getattr(args, "read_only", False)), allow_python=allow_python)
    try:
        con.autocommit = True
        runner = Runner(con, console, err, fmt)
        if args.command is not None or script is not None:
            texts = ([(text, None) for text in args.command] if args.command is not None
                     else [(script, source)] if script is not None else [])
            if not all(runner.run_script(text, source=where) for text, where in texts):
                return 1
            _serve_until_stopped(con, err)
            return 0
        return Shell(runner, database).run()
    finally:
        try:
            con.close()
        except Exception:
            pass


def _import_from_working_directory() -> None:
    """Put the working directory first on ``sys.path``, as ``python -c`` does, so ``FROM PYTHON
    'mynets.nets:Net'`` finds ``./mynets`` (not with ``--no-python``: SQL from others could write a module
    there that a later import would run)."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def _serve_until_stopped(con, err: Console) -> None:
    """When the statements of ``-c`` or ``run FILE`` left servers running (SERVE), keep serving until SIGINT
    (Ctrl-C) or SIGTERM, as ``modelsql serve`` does; closing the connection then stops them, draining."""
    import signal
    import threading

    if "modelsql.engine.serve.statements" not in sys.modules:
        return  # no SERVE ran (it imports the module): asking would import every statement's handler
    cur = con.cursor()
    try:
        cur.execute("SHOW MODELSQL SERVERS")
        urls = sorted({row[0] for row in cur.fetchall()})
    finally:
        cur.close()
    if not urls:
        return
    done = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: done.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        err.print(f"serving at {', '.join(urls)} until Ctrl-C (SIGINT) or SIGTERM", highlight=False)
        sys.stdout.flush()
        sys.stderr.flush()
        done.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":  # pragma: no cover - `python -m modelsql.client.cli`
    sys.exit(main())
