"""Binding ``CREATE MODEL m TRANSFORM (item, ...) WITH (...) AS query`` (BigQuery ML's ``TRANSFORM`` clause) to
:class:`~modelsql.estimators.Transform` items, checked against the query's columns before anything is fitted.

An item is a column (``c``, ``c AS name``: the automatic preprocessing of its kind) or one of the ``ML.``
functions of :mod:`modelsql.estimators.transforms` applied to a column, with an empty ``OVER ()`` (it may be
left out) and its constant arguments (``ML.QUANTILE_BUCKETIZE(age, 4) OVER () AS age_bucket``). The model's
features are the columns the items read, each an input of the model; the output names only name the model's
parts. The TARGET may be listed (BigQuery ML passes the label through its TRANSFORM) and is not a feature.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, cast

from sqlglot import exp

from modelsql.errors import Error, NotSupportedError, ProgrammingError, excerpt, position_of
from modelsql.estimators import IMPUTE_STRATEGIES, MAX_BUCKETS, TRANSFORM_FUNCTIONS, Transform
from modelsql.engine.models.training_rows import find_column

__all__ = ["bind_transform", "check_transform", "transform_text", "with_parameters"]

_BIGQUERY_ONLY = ("BUCKETIZE", "NORMALIZER", "POLYNOMIAL_EXPAND", "FEATURE_CROSS", "HASH_BUCKETIZE",
                  "NGRAMS", "BAG_OF_WORDS", "TF_IDF", "MULTI_HOT_ENCODER")
"""BigQuery ML preprocessing functions a TRANSFORM here does not take (named as such in the error)."""


def bind_transform(items: Sequence[exp.Expression], columns: Sequence[str], kinds: dict[str, Optional[str]],
                   target: Optional[str], where: str, text: str = "", tree_based: bool = False
                   ) -> tuple[Transform, ...]:
    """The clause's items, in order, the TARGET's left out.

    Args:
        columns: the query's column names; ``kinds``: each one's ``"numeric"``, ``"categorical"`` or None
            (:func:`modelsql.estimators.column_kind`).
        text: the statement as written, for an excerpt under the item at fault.
        tree_based: the estimator is a tree or an ensemble of trees (:func:`check_transform`).

    Raises:
        ProgrammingError: ``column_not_found`` (an item reads a column the query lacks), ``invalid_transform``
            (an unknown ML function, one of the wrong column kind or arguments, over a window that is not empty,
            applied to the TARGET, or no feature left), ``duplicate_column`` (two items of one output name).
        NotSupportedError: ``not_supported`` (an expression that is not a column or an ML function, or a BigQuery
            ML function not supported here).
    """
    out: list[Transform] = []
    for item in items:
        try:
            transform = _item(item, columns, kinds, where)
            check_transform(transform, kinds.get(transform.column), tree_based, where)
        except Error as err:
            raise _pointed(err, item, text) from None
        if target is not None and transform.column.lower() == target.lower():
            if transform.function:
                raise _pointed(ProgrammingError(f"{where}: TRANSFORM item {_shown(item)} transforms the TARGET "
                                                f"{target}: the label is passed through as it is (list it as a "
                                                "column).", code="invalid_transform"), item, text)
            continue
        if any(t.name.lower() == transform.name.lower() for t in out):
            raise _pointed(ProgrammingError(f"{where}: TRANSFORM names two items {transform.name}: give each its own "
                                            "name with AS.", code="duplicate_column"), item, text)
        out.append(transform)
    if not out:
        raise ProgrammingError(f"{where}: TRANSFORM lists no feature (only the TARGET): list the columns the model "
                               "reads.", code="invalid_transform")
    return tuple(out)


def check_transform(transform: Transform, kind: Optional[str], tree_based: bool, where: str) -> None:
    """An ML function fits its column's ``kind`` (``"numeric"``, ``"categorical"``), and is no rescaling of a tree's
    input: a tree splits between training values, which a rescaling keeps in order, so it changes nothing but
    the float32 rounding of the model's ONNX graph, which moves values across the split thresholds (predictions
    then differ from scikit-learn's). Checked when the clause is bound and again on the rows TUNE reads.

    Raises:
        ProgrammingError: ``invalid_transform``.
    """
    if not transform.function:
        return
    function = TRANSFORM_FUNCTIONS[transform.function]
    shown = f"ML.{transform.function}({transform.column})"
    needs = IMPUTE_STRATEGIES[transform.args[0]] if transform.function == "IMPUTER" else function.kind
    if kind not in ("numeric", "categorical") or (needs is not None and kind != needs):
        want = {None: "a number or text", "numeric": "a number", "categorical": "text"}[needs]
        if transform.function == "IMPUTER" and needs is not None:
            want += f" with strategy {transform.args[0]!r}"
        have = "text" if kind == "categorical" else "a number" if kind == "numeric" else "neither"
        raise ProgrammingError(f"{where}: TRANSFORM item {shown}: ML.{transform.function} takes {want}; column "
                               f"{transform.column} is {have}.", code="invalid_transform")
    if function.scaler and tree_based:
        raise ProgrammingError(f"{where}: TRANSFORM item {shown}: a tree splits on the order of the values, which "
                               f"ML.{transform.function} keeps, so it changes nothing but the float32 rounding that "
                               f"moves values across the tree's thresholds: list {transform.column} as a column.",
                               code="invalid_transform")


def with_parameters(items: Sequence[exp.Expression], params: Sequence[Any]) -> tuple[exp.Expression, ...]:
    """Copies of the clause's items with each statement parameter (``?``, ``$n``) replaced by its value, a
    constant as written (a number or text; anything else stays, and is refused as not a constant)."""
    def bound(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Placeholder) and str(node.this).isdigit() and 0 < int(node.this) <= len(params):
            value = params[int(node.this) - 1]
            if isinstance(value, (int, float, str)) and not isinstance(value, bool):
                return exp.Literal.number(value) if not isinstance(value, str) else exp.Literal.string(value)
        return node
    return tuple(cast(exp.Expression, item.copy().transform(bound)) for item in items)


def transform_text(items: Sequence[exp.Expression]) -> str:
    """The clause as the catalog keeps it (``DESCRIBE MODEL``'s ``transform`` option)."""
    return ", ".join(item.sql(dialect="duckdb") for item in items)


def _item(item: exp.Expression, columns: Sequence[str], kinds: dict[str, Optional[str]], where: str) -> Transform:
    alias = item.alias if isinstance(item, exp.Alias) else None
    if alias == "":
        raise ProgrammingError(f"{where}: TRANSFORM item {_shown(item)} has an empty name.", code="invalid_transform")
    node = item.this if isinstance(item, exp.Alias) else item
    if isinstance(node, exp.Column) and not node.table:
        column = find_column(columns, node.name, where, "TRANSFORM")
        return Transform(alias or column, "", column)
    call = node
    if isinstance(node, exp.Window):
        if any(node.args.get(k) for k in ("partition_by", "order", "spec", "alias")):
            raise ProgrammingError(f"{where}: TRANSFORM item {_shown(item)}: an ML function's window is the whole "
                                   "training rows, written OVER ().", code="invalid_transform")
        call = node.this
    name, arguments = _ml_call(call)
    if name is None:
        raise NotSupportedError(f"{where}: TRANSFORM item {_shown(item)} is not supported: an item is a column or "
                                f"ML.<function>(column) OVER () with one of {', '.join(TRANSFORM_FUNCTIONS)}; compute "
                                "other expressions in the query after AS (PREDICT's input must then hold them too).",
                                code="not_supported")
    if name in _BIGQUERY_ONLY:
        raise NotSupportedError(f"{where}: TRANSFORM item {_shown(item)}: ML.{name} is a BigQuery ML function not "
                                f"supported here; the functions are {', '.join(TRANSFORM_FUNCTIONS)}.",
                                code="not_supported")
    if name not in TRANSFORM_FUNCTIONS:
        raise ProgrammingError(f"{where}: TRANSFORM item {_shown(item)}: ML.{name} is not an ML function; the "
                               f"functions are {', '.join(TRANSFORM_FUNCTIONS)}.", code="invalid_transform")
    return _function_item(item, name, arguments, alias, columns, kinds, where)


def _function_item(item: exp.Expression, name: str, arguments: list, alias: Optional[str], columns: Sequence[str],
                   kinds: dict[str, Optional[str]], where: str) -> Transform:
    function = TRANSFORM_FUNCTIONS[name]
    if not arguments or not (isinstance(arguments[0], exp.Column) and not arguments[0].table):
        raise ProgrammingError(f"{where}: TRANSFORM item {_shown(item)}: ML.{name} applies to a column, named first.",
                               code="invalid_transform")
    column = find_column(columns, arguments[0].name, where, "TRANSFORM")
    args = tuple(_constant(a, item, where) for a in arguments[1:])
    least, most = function.arity
    if not least <= len(args) <= most:
        raise ProgrammingError(f"{where}: TRANSFORM item {_shown(item)}: ML.{name} takes the column"
                               + (f" and {least} more argument(s)" if most else " alone") + ".",
                               code="invalid_transform")
    if name == "QUANTILE_BUCKETIZE" and not (isinstance(args[0], int) and not isinstance(args[0], bool)
                                             and 2 <= args[0] <= MAX_BUCKETS):
        raise ProgrammingError(f"{where}: TRANSFORM item {_shown(item)}: the number of buckets is an integer from 2 "
                               f"to {MAX_BUCKETS:,}, not {args[0]!r}.", code="invalid_transform")
    if name == "IMPUTER" and not (isinstance(args[0], str) and args[0].lower() in IMPUTE_STRATEGIES):
        raise ProgrammingError(f"{where}: TRANSFORM item {_shown(item)}: the strategy is one of "
                               f"{', '.join(map(repr, IMPUTE_STRATEGIES))}, not {args[0]!r}.", code="invalid_transform")
    if name == "IMPUTER":
        args = (args[0].lower(),)
    return Transform(alias or column, name, column, args)


def _shown(item: exp.Expression) -> str:
    return item.sql(dialect="duckdb")


def _ml_call(node: exp.Expression) -> tuple[Optional[str], list]:
    """(function name upper case, arguments) of ``ML.name(...)``, or (None, []) for anything else."""
    if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier) and node.this.name.upper() == "ML" \
            and isinstance(node.expression, exp.Anonymous):
        return str(node.expression.this).upper(), list(node.expression.expressions)
    return None, []


def _constant(node: exp.Expression, item: exp.Expression, where: str) -> Any:
    negative = isinstance(node, exp.Neg)
    literal = node.this if negative else node
    if isinstance(literal, exp.Literal) and not literal.is_string:
        value = float(literal.this) if any(ch in literal.this for ch in ".eE") else int(literal.this)
        return -value if negative else value
    if isinstance(literal, exp.Literal) and not negative:
        return literal.this
    raise ProgrammingError(f"{where}: TRANSFORM item {_shown(item)}: {_shown(node)} is not a constant (an ML "
                           "function's arguments after the column are numbers or text).", code="invalid_transform")


def _pointed(err: Error, item: exp.Expression, text: str) -> Error:
    """``err`` with a ``LINE n:`` excerpt under ``item``'s first name in ``text``."""
    start = min((n.meta for n in item.walk() if isinstance(n, exp.Identifier) and "start" in n.meta),
                key=lambda meta: meta["start"], default=None)
    if not text or start is None or err.line is not None or "\nLINE " in str(err):
        return err
    line, column = position_of(text, start["start"])
    return type(err)(f"{err}\n{excerpt(text, line, column, start['end'] - start['start'] + 1)}", code=err.code)
