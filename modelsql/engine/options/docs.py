"""The option documentation, generated from the schema (:mod:`.declared`): ``docs/options.md`` (every
statement's table), README's tables between ``<!-- options: STATEMENT -->`` and ``<!-- /options -->``, and
the shell's per-statement option lists (``.help``).

``python -m modelsql.engine.documents`` rewrites ``docs/options.md`` and README's tables with the other generated
documents; ``tests/engine/test_options.py`` fails when one differs from what it is generated from.
"""

from __future__ import annotations

import re

from modelsql.engine.options.declared import STATEMENTS
from modelsql.engine.options.schema import OptionSet

__all__ = ["table", "options_md", "with_readme_tables", "statement_lines", "option_help", "by_statement"]

_BLOCK = re.compile(r"(<!-- options: (?P<name>[^>]+?) -->\n)(?P<body>.*?)(<!-- /options -->)", re.S)


def by_statement(name: str) -> OptionSet:
    """The option set the documentation heads ``name`` (``"PREDICT"``, ``"SERVE"``; case-insensitive; a word
    that begins one heading alone names it: ``"tune"``)."""
    key = " ".join(name.split()).lower()
    found = {s.statement.lower(): s for s in STATEMENTS}.get(key)
    starting = [s for s in STATEMENTS if s.statement.lower().startswith(key + " ")]
    found = found or (starting[0] if len(starting) == 1 else None)
    if found is None:
        raise KeyError(f"no options of {name!r}; statements with options: {', '.join(s.statement for s in STATEMENTS)}")
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(options: OptionSet, link_base: str = "") -> str:
    """A Markdown table of ``options``: name, type, default, values (range or choices), meaning.

    ``link_base`` goes before each README anchor link (``(#devices)``): ``"../README.md"`` from ``docs/``."""
    rows = ["| option | type | default | values | meaning |", "|---|---|---|---|---|"]
    for o in options:
        doc = o.doc.replace("](#", f"]({link_base}#") if link_base else o.doc
        values = _code(o.allowed()) + (" (one or more, each once)" if o.many else "")
        rows.append(f"| `{o.name}` | {o.type_doc()} | {_cell(_code(o.default_text()))} | {_cell(values)} "
                    f"| {_cell(doc)} |")
    return "\n".join(rows) + "\n"


def _code(text: str) -> str:
    """Quoted SQL values ('auto', (1, 8, 64), true) in code spans; words left as they are."""
    if not text or "`" in text:
        return text
    return re.sub(r"('[^']*'|\([^)]*\)|\btrue\b|\bfalse\b|^-?[0-9][0-9.,e-]*$)", r"`\1`", text)


def _algorithms() -> str:
    from modelsql.tuning.algorithms import ALGORITHMS

    rows = ["| algorithm | its options (default) |", "|---|---|"]
    for name, (defaults, _) in ALGORITHMS.items():
        own = ", ".join(f"`{k}` ({'none' if v is None else v})" for k, v in defaults.items()) or "none"
        rows.append(f"| `{name.upper()}` | {own} |")
    return "\n".join(rows) + "\n"


def options_md() -> str:
    """The text of ``docs/options.md``."""
    parts = ["# Statement options\n",
             "Every statement's `WITH (...)` options (PREDICT's named arguments), generated from their declarations "
             "in `modelsql/engine/options/declared.py` by `python -m modelsql.engine.documents`; do not edit by "
             "hand. An option given twice is `duplicate_option`, an unknown one `unknown_option` (with a \"did "
             "you mean\"), a value of the wrong type, out of range or not among the choices `invalid_option`, each "
             "naming the statement and the option. SQL NULL is no option's value; leave the option out for its "
             "default. Error codes: [errors.md](errors.md).\n"]
    for s in STATEMENTS:
        parts.append(f"## {s.statement}\n")
        if s.doc:
            parts.append(s.doc.replace("](#", "](../README.md#") + "\n")
        parts.append(table(s, "../README.md"))
        if s.statement.startswith("TUNE"):
            parts.append("Each algorithm's own options (checked by the algorithm; see README's "
                         "[Tuning](../README.md#tuning-tune-hippos-stage-trees)):\n")
            parts.append(_algorithms())
    return "\n".join(parts)


def with_readme_tables(text: str) -> str:
    """``text`` (README.md) with each ``<!-- options: S -->`` ... ``<!-- /options -->`` block holding the
    table of statement ``S``."""
    return _BLOCK.sub(lambda m: m.group(1) + table(by_statement(m.group("name"))) + m.group(4), text)


def statement_lines(width: int = 78) -> list[str]:
    """For ``.help``: one entry per statement, ``STATEMENT: option, option, ...``, wrapped to ``width``."""
    import textwrap

    return [textwrap.fill(f"{s.statement}: {', '.join(s.names)}", width, initial_indent="  ",
                          subsequent_indent="      ", break_on_hyphens=False) for s in STATEMENTS]


def option_help(name: str, width: int = 78) -> str:
    """For ``.help STATEMENT``: each option of that statement with its type, default, values and meaning, as
    plain text.

    Raises:
        KeyError: no statement of that name has options (the message lists those that do).
    """
    import textwrap

    options = by_statement(name)
    plain = lambda t: t.replace("`", "")  # noqa: E731
    lines = [f"Options of {options.statement}" + (f": {plain(options.doc)}" if options.doc else "")]
    lines = textwrap.wrap(lines[0], width)
    for o in options:
        head = f"  {o.name} ({o.type_doc()}; default {plain(o.default_text())})"
        values = o.allowed() + (", one or more, each once" if o.many else "")
        body = plain(o.doc) + (f" [{values}]" if values and o.type != "text" else "")
        lines.append(head)
        lines += textwrap.wrap(re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", body), width, initial_indent="      ",
                               subsequent_indent="      ", break_on_hyphens=False)
    return "\n".join(lines)
