"""The catalog entries a statement names, looked up for binding: a model or pipeline version, the members of a
routed ``MODELS (...) ROUTE BY`` set; a lookup error points at the name in the statement's text.

The session's ``get_model``, ``get_model_set`` and ``pointed`` are these functions (every statement family uses
them through it); the query package calls them directly, so binding never calls back into the session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Union

from sqlglot import exp

from modelsql.catalog.entries import ModelVersion, PipelineVersion, RoutedModels
from modelsql.errors import Error, ProgrammingError, excerpt, position_of
from modelsql.sql.grammar import ModelRef

if TYPE_CHECKING:
    from modelsql.engine.query.context import PlanningContext

__all__ = ["pointed", "entry_of", "model_set_of", "routed_models"]


def pointed(text: str, err: Error, ref: Optional[exp.Expression]) -> Error:
    """``err`` with a ``LINE n:`` excerpt of ``text`` under the name ``ref`` holds (``ref.this``), unless it has a
    position already; ``dbapi.point_into`` then sets ``.line`` / ``.column`` in the user's own text."""
    start = ref.this.meta.get("start") if ref is not None and ref.this is not None else None
    if err.line is not None or start is None or not text or "\nLINE " in str(err):
        return err
    assert ref is not None  # start is None without it
    line, column = position_of(text, start)
    end = ref.this.meta.get("end")
    width = end - start + 1 if isinstance(end, int) and end >= start else len(ref.this.name)  # a quoted name's quotes
    return err.retold(f"{err}\n{excerpt(text, line, column, width)}")


def entry_of(ctx: PlanningContext, name: str, version: Optional[int], ref: Optional[exp.Expression] = None, *,
             pipeline: bool = False, models: Optional[dict[Any, Any]] = None
             ) -> Union[ModelVersion, PipelineVersion]:
    """The catalog entry (a model version, or with ``pipeline`` a pipeline version); a model ``ref`` with an
    alias (``MODEL m ALIAS champion``) is the version the alias names now. ``models``: step model versions
    already read by this statement (see :meth:`~modelsql.catalog.pipelines.Pipelines.get`).

    Raises:
        ProgrammingError: ``model_not_found``, ``version_not_found``, ``alias_not_found`` (pointed at ``ref``).
    """
    try:
        if pipeline:
            return ctx.catalog.pipelines.get(name, version, models=models)
        if isinstance(ref, ModelRef) and ref.alias_name is not None:
            if not ctx.catalog.exists(name):
                return ctx.catalog.get(name, None)  # model_not_found, with its "did you mean" and pipeline hint
            version = ctx.catalog.aliases.resolve(name.lower(), ref.alias_name)
        return ctx.catalog.get(name, version)
    except Error as err:
        raise pointed(ctx.text, err, ref) from None


def model_set_of(ctx: PlanningContext, node: exp.Expression) -> RoutedModels:
    """The :class:`~modelsql.catalog.entries.RoutedModels` of a ``MODELS (...) ROUTE BY c`` /
    ``MODELS FAMILY f ROUTE BY c`` node; errors point at the node in the statement text.

    Raises:
        ProgrammingError: a member does not exist (``model_not_found``), the family does not
            (``family_not_found``), a model is listed twice (``duplicate_model``), or the members
            differ in inputs, outputs or features (``model_set_mismatch``, naming the member).
    """
    try:
        family = node.args.get("family")
        if family is not None:
            members = tuple(ctx.catalog.get(n) for n in ctx.catalog.families.members(family.name))
        else:
            members = tuple(ctx.catalog.get(r.model_name, r.version_number) for r in node.expressions)
        return routed_models(members, node.args["route"].name, family.name if family is not None else None)
    except Error as err:
        raise pointed(ctx.text, err, node) from None


def routed_models(members: tuple[ModelVersion, ...], route: str, family: Optional[str]) -> RoutedModels:
    """Check that ``members`` can share one binding (see :func:`model_set_of`)."""
    seen = set()
    for m in members:
        if m.name in seen:
            raise ProgrammingError(f'Model "{m.name}" is listed twice in MODELS (...): each row names its model '
                                   "by name, so each model may appear once.", code="duplicate_model")
        seen.add(m.name)
    first = members[0]
    for m in members[1:]:
        for what, a, b in (("inputs", first.inputs, m.inputs), ("outputs", first.outputs, m.outputs),
                           ("features", first.features, m.features)):
            if a != b:
                raise ProgrammingError(
                    f'MODELS (...): model "{m.name}" has other {what} than model "{first.name}" '
                    f"({_specs_text(b)} against {_specs_text(a)}); routed models must share one signature.",
                    code="model_set_mismatch")
    return RoutedModels(members, route, family)


def _specs_text(specs: Any) -> str:
    if specs is None:
        return "none"
    return ", ".join(getattr(s, "name", str(s)) + (f": {s.elem_type}{list(s.shape or [])}" if hasattr(s, "elem_type")
                                                   else "") for s in specs)
