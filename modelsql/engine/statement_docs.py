"""The statement reference, ``docs/statements.md``, generated from the registries alone: each statement node
of :data:`modelsql.sql.registry.STATEMENT_NODES` (its words, its docstring's summary, its ``EXAMPLES``, the
family file that holds its grammar), its handler in the statement registry (:mod:`modelsql.engine.handlers`:
where it lives, whether it only reads) and its option sets (:data:`modelsql.engine.options.declared.STATEMENTS`,
by their ``node``). ``python -m modelsql.engine.documents`` writes it; ``tests/engine/test_statement_recipe.py``
fails while it differs."""

from __future__ import annotations

import inspect
import re

from sqlglot import exp

from modelsql.engine import handlers
from modelsql.engine.options.declared import STATEMENTS
from modelsql.engine.options.schema import OptionSet
from modelsql.engine.session import register_handlers
from modelsql.sql.evaluate import EvaluateModel, EvaluationTable
from modelsql.sql.predict import PredictTable
from modelsql.sql.registry import STATEMENT_NODES

__all__ = ["statements_md", "family_of", "grammar_file", "options_of", "heading", "TABLE_FUNCTIONS"]

#: The table functions of ours (parts of a DuckDB query, carried out by the query handler), documented with
#: the statements: name -> node.
TABLE_FUNCTIONS: dict[str, type[exp.Expression]] = {"PREDICT(...)": PredictTable,
                                                   "EVALUATE(...), CONFUSION_MATRIX(...), ROC_CURVE(...)": EvaluationTable}

#: A table function whose options are a statement's (plus ``target``): node -> that statement's node.
_OPTIONS_OF: dict[type[exp.Expression], type[exp.Expression]] = {EvaluationTable: EvaluateModel}


def family_of(node: type[exp.Expression]) -> str:
    """The statement family of ``node``: the last part of its module's name (``modelsql.sql.tune`` -> ``tune``)."""
    return node.__module__.rsplit(".", 1)[-1]


def grammar_file(node: type[exp.Expression]) -> str:
    """The repository path of the file holding ``node``, its parser entry and its generator method."""
    return node.__module__.replace(".", "/") + ".py"


def options_of(node: type[exp.Expression]) -> list[OptionSet]:
    """The option sets declared for ``node`` (by their ``node``), in the documentation's order."""
    return [s for s in STATEMENTS if s.node is _OPTIONS_OF.get(node, node)]


def heading(node: type[exp.Expression]) -> str:
    """The words that start ``node``, the shortest spelling (``DROP MODEL``); a table function's name."""
    names = [name for name, function in TABLE_FUNCTIONS.items() if function is node]
    if names:
        return names[0]
    words: tuple[tuple[str, ...], ...] = getattr(node, "WORDS")
    lengths = [len(seq) for seq in words]
    return " ".join(words[lengths.index(min(lengths))])


def _anchor(title: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")


def _summary(node: type[exp.Expression]) -> str:
    """The docstring's first paragraph, reStructuredText literals as Markdown code."""
    text = inspect.cleandoc(node.__doc__ or "").split("\n\n", 1)[0]
    text = re.sub(r":\w+:`~?([^`]*)`", r"`\1`", text)
    return " ".join(text.replace("``", "`").split()).replace("::", ":")


def _reads(node: type[exp.Expression]) -> str:
    flag = handlers.handler_of(node).reads_only
    return "depends on the statement" if callable(flag) else ("yes" if flag else "no (it writes)")


def _section(node: type[exp.Expression]) -> list[str]:
    run = handlers.handler_of(node).run
    options = ", ".join(f"[{s.statement}](options.md#{_anchor(s.statement)})" for s in options_of(node))
    examples: tuple[str, ...] = getattr(node, "EXAMPLES")
    return [f"### {heading(node)}\n", _summary(node) + "\n", "```sql", *examples, "```\n",
            "| grammar | handler | only reads | options |", "|---|---|---|---|",
            f"| `{grammar_file(node)}` | `{run.__module__}.{run.__qualname__}` | {_reads(node)} | {options or 'none'} |\n"]


def statements_md() -> str:
    """The text of ``docs/statements.md``."""
    register_handlers()
    parts = ["# Statements\n",
             "Every statement of modelsql's own, by family, generated from the statement registry by "
             "`python -m modelsql.engine.documents`; do not edit by hand. Plain SQL is DuckDB's. Options: "
             "[options.md](options.md); error codes: [errors.md](errors.md); how to add a statement: "
             "[architecture.md](architecture.md#adding-a-statement).\n"]
    families: dict[str, list[type[exp.Expression]]] = {}
    for node in [*TABLE_FUNCTIONS.values(), *STATEMENT_NODES]:  # each family once, in order of first mention
        families.setdefault(family_of(node), []).append(node)
    for family, nodes in families.items():
        parts.append(f"## {family}\n")
        for node in nodes:
            parts.extend(_section(node))
    return "\n".join(parts)
