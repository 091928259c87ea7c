"""Option values of model statements and PREDICT: from sqlglot nodes to Python values."""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from modelsql.errors import ProgrammingError, did_you_mean


def value(node: exp.Expression, params: list) -> Any:
    """Python value of an option / source expression (literals, tuples, names, ``$k`` parameters)."""
    if node is None or isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Placeholder):
        return params[int(node.this) - 1]
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Neg):
        return -value(node.this, params)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        try:
            return int(text)
        except ValueError:
            return float(text)
    if isinstance(node, exp.Tuple):
        return tuple(value(e, params) for e in node.expressions)
    if isinstance(node, (exp.Identifier, exp.Column)):
        return node.name
    return node.sql()


def no_repeats(options, where: str) -> None:
    """Refuse an option written twice (the second would silently win).

    Raises:
        ProgrammingError: code ``"duplicate_option"``.
    """
    seen: set[str] = set()
    for o in options or []:
        key = o.this.name.lower()
        if key in seen:
            raise ProgrammingError(f'{where}: option "{key}" is given twice.', code="duplicate_option")
        seen.add(key)


def given_options(stmt: exp.Expression, params: list, allowed, where: str) -> dict[str, Any]:
    """A statement's ``WITH (...)`` options as ``{lower-cased name: Python value}``, each written once and known.

    Raises:
        ProgrammingError: ``"duplicate_option"`` (:func:`no_repeats`); ``"unknown_option"`` naming the option,
            with a "did you mean" and the options there are.
    """
    no_repeats(stmt.args.get("options"), where)
    given = {k.lower(): value(v, params) for k, v in stmt.option_values.items()}
    unknown = [k for k in given if k not in allowed]
    if unknown:
        raise ProgrammingError(f'{where}: unknown option "{unknown[0]}".{did_you_mean(unknown[0], list(allowed))} '
                               f"Options are: {', '.join(allowed)}.", code="unknown_option")
    return given


def uses_parameters(options) -> bool:
    """Whether any option value is a ``$k`` parameter (a plan over it depends on the values)."""
    return any(o.find(exp.Placeholder) is not None for o in options or [])
