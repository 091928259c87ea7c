"""Binding ``PREDICT(MODELS (m1, m2, ...) ROUTE BY c, <input> [, options])``.

The members share one signature (the session checks it when it builds them:
:meth:`~modelsql.engine.query.context.PlanningContext.get_model_set`),
so the input binds exactly as it binds to the first member (:func:`~modelsql.engine.query.bind_predict.bind_predict`);
the ROUTE BY column is fed beside the model inputs, as text, under :data:`ROUTE_INPUT`, and passes
through like every other input column. Each row's outputs come from the member its column names
(case-insensitive, as model names are).
"""

from __future__ import annotations

from dataclasses import replace

from modelsql.catalog.entries import RoutedModels
from modelsql.errors import ProgrammingError, did_you_mean
from modelsql.operators.predict import InputArg
from modelsql.operators.scan import quote
from modelsql.engine.query.bind_predict import Binding, Column, PredictOptions, bind_predict

__all__ = ["bind_routed", "ROUTE_INPUT"]

ROUTE_INPUT = "__modelsql_route__"
"""The feed name of a routed PREDICT's ROUTE BY column (never an ONNX input: the routing operator reads it)."""


def bind_routed(models: RoutedModels, columns: list[Column], options: PredictOptions,
                key_columns: list[str]) -> Binding:
    """The :class:`~modelsql.engine.query.bind_predict.Binding` of a routed PREDICT: the first member's, plus the
    route column as the last argument.

    Raises:
        ProgrammingError: the ROUTE BY column is not a column of the input (``column_not_found``),
            or it is one the models are fed (``route_column_fed``); whatever binding the first
            member raises.
    """
    by_name = {c.name.lower(): c for c in columns}
    col = by_name.get(models.route.lower())
    if col is None:
        raise ProgrammingError(
            f'PREDICT({models.ref_sql}): the input has no column "{models.route}" to route by.'
            + did_you_mean(models.route, [c.name for c in columns]), code="column_not_found")
    binding = bind_predict(models, columns, options, list(key_columns) + [col.name])  # errors name the PREDICT
    if col.name in binding.fed_columns:
        raise ProgrammingError(
            f'PREDICT({models.ref_sql}): column "{col.name}" is fed to the models; the column naming each '
            "row's model must be another one.", code="route_column_fed")
    arg = InputArg(input_name=ROUTE_INPUT, kind="column", shape=(), elem_type="STRING", columns=(col.name,))
    null_test = f"{quote(col.name)} IS NOT NULL"
    return replace(
        binding,
        args=binding.args + (arg,),
        arg_sql=binding.arg_sql + (f"CAST({quote(col.name)} AS VARCHAR)",),
        arg_types=binding.arg_types + ("VARCHAR",),
        null_filter=f"{binding.null_filter} AND {null_test}" if binding.null_filter else null_test,
    )
