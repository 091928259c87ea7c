"""Pipeline statements: CREATE [OR REPLACE] PIPELINE, DROP PIPELINE, SHOW PIPELINES, DESCRIBE
PIPELINE and EXPORT PIPELINE, and :func:`create_pipeline`, which ``Connection.import_pipeline``
uses too.

A pipeline is a list of catalog model versions run in order (PRETZEL's white-box
pipeline: Lee et al., OSDI 2018). Wiring (:func:`wire`), for each input of each
step, in order of preference:

1. by name: the latest earlier step output of that name;
2. by position, for a step after the first with one input: the previous step's
   first output (scikit-learn steps converted by skl2onnx all name their input
   ``input``, so names alone would feed every step the raw input);
3. otherwise (the first step, or another input of a step with several) the
   pipeline input of that name (a column of PREDICT's input), shared by every
   step that reads it.

``Connection.import_pipeline`` gives the feeds explicitly instead.

Types must agree along every edge (element type, and each fixed dimension after
the batch axis). The pipeline's outputs are its last step's.
"""

from __future__ import annotations

import dataclasses

import hashlib
import json
import re
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from modelsql.catalog.entries import ModelVersion, PipelineStep, PipelineVersion, StepFeed, TensorSpec
from modelsql.errors import IntegrityError, ProgrammingError
from modelsql.sql.pipelines import CreatePipeline, DescribePipeline, DropPipeline, ExportPipeline, ShowPipelines
from modelsql.engine.artifacts import sessions as artifacts
from modelsql.engine.models.exports import check_export_target, write_export
from modelsql.engine.handlers import catalog_write_retrying, handles
from modelsql.engine.options import value
from modelsql.engine.options.declared import CREATE_PIPELINE
from modelsql.engine.pipelines.plans import CreatePipelinePlan, DropPipelinePlan, StepSpec
from modelsql.engine.result import Result

if TYPE_CHECKING:
    from modelsql.engine.session import Session

PIPELINE_OPTIONS = CREATE_PIPELINE
"""Options of ``CREATE PIPELINE ... WITH (...)`` (:data:`modelsql.engine.options.declared.CREATE_PIPELINE`):
``description`` (free text kept in the catalog)."""

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_DESCRIBE_COLUMNS = [
    (name, type_code, None, None, None, None, True)
    for name, type_code in (("role", "VARCHAR"), ("position", "INTEGER"), ("name", "VARCHAR"),
                            ("elem_type", "VARCHAR"), ("shape", "VARCHAR"), ("detail", "VARCHAR"))
]


# ---------------------------------------------------------------- binding and wiring


def bind_create(stmt: CreatePipeline, params: list) -> CreatePipelinePlan:
    """The plan of a ``CREATE PIPELINE`` statement.

    Raises:
        ProgrammingError: contradictory clauses (``parse_error``), an option twice, unknown or of a bad value
            (``duplicate_option``, ``unknown_option``, ``invalid_option``), a step name twice.
    """
    name = stmt.this.name
    if stmt.args.get("replace") and stmt.args.get("exists"):
        raise ProgrammingError("CREATE OR REPLACE PIPELINE and IF NOT EXISTS contradict each other; use one of them.",
                               code="parse_error")
    options = {k: v for k, v in PIPELINE_OPTIONS.parse(stmt, params, where=f"CREATE PIPELINE {name}").items()
               if v is not None}
    steps = tuple(
        StepSpec(s.this.model_name, s.this.version_number, s.args["alias"].name if s.args.get("alias") else None)
        for s in stmt.expressions
    )
    return CreatePipelinePlan(name=name, steps=steps, replace=bool(stmt.args.get("replace")),
                              if_not_exists=bool(stmt.args.get("exists")),
                              options=tuple(sorted((k, str(v)) for k, v in options.items())))


def wire(pipeline: str, steps: Sequence[tuple[str, ModelVersion]],
         explicit: Optional[dict[tuple[int, str], tuple[Optional[int], str]]] = None) -> tuple[PipelineStep, ...]:
    """The :class:`PipelineStep` of each ``(step name, model version)``, fed as the module docstring says,
    or as ``explicit`` says: ``{(step position, input name): (feeding step or None, value name)}``.

    Raises:
        ProgrammingError: ``"type_mismatch"``: an edge joins values of different element types or
            fixed dimensions (naming the step, its input, the feeding value and both types).
    """
    produced: dict[str, tuple[int, TensorSpec]] = {}  # output name -> its latest producer
    inputs: dict[str, tuple[str, TensorSpec]] = {}  # pipeline input -> (first step reading it, its spec)
    out: list[PipelineStep] = []
    for i, (step_name, mv) in enumerate(steps):
        feeds = []
        for spec in mv.inputs:
            src, fed = _source(i, spec, mv, steps, produced, (explicit or {}).get((i, spec.name)))
            _check_edge(pipeline, step_name, spec, fed, None if src is None else steps[src][0])
            if src is None:
                first, seen = inputs.setdefault(fed.name, (step_name, spec))
                if not (_fits(spec, seen) and _fits(seen, spec)):
                    raise ProgrammingError(
                        f'Pipeline "{pipeline}": steps "{first}" and "{step_name}" both read pipeline input '
                        f'"{fed.name}", as {_spec_text(seen)} and as {_spec_text(spec)}.', code="type_mismatch")
            feeds.append(StepFeed(spec.name, src, fed.name))
        for o in mv.outputs:
            produced[o.name] = (i, o)
        out.append(PipelineStep(i, step_name, mv, tuple(feeds)))
    return tuple(out)


def _source(i: int, spec: TensorSpec, mv: ModelVersion, steps, produced: dict, given) -> tuple:
    """(feeding step or None, the fed value's spec) for input ``spec`` of step ``i``."""
    if given is not None:
        src, name = given
        if src is None:
            return None, TensorSpec(name, spec.elem_type, spec.shape)
        return src, next(o for o in steps[src][1].outputs if o.name == name)
    if spec.name in produced:
        return produced[spec.name]
    if len(mv.inputs) == 1 and i > 0 and steps[i - 1][1].outputs:
        return i - 1, steps[i - 1][1].outputs[0]  # checked by _check_edge: a misfit is an error, not a fallback
    return None, spec


def _fits(want: TensorSpec, got: TensorSpec) -> bool:
    """Whether ``got`` may feed ``want``: one element type, and equal fixed dimensions after the batch axis."""
    fixed = lambda s: [d if isinstance(d, int) else None for d in (s.shape or ())][1:]  # noqa: E731
    dims_clash = want.shape is not None and got.shape is not None and len(want.shape) == len(got.shape) and any(
        a is not None and b is not None and a != b for a, b in zip(fixed(want), fixed(got)))
    return want.elem_type == got.elem_type and not dims_clash


def _check_edge(pipeline: str, step: str, want: TensorSpec, got: TensorSpec, producer: Optional[str]) -> None:
    if producer is not None and not _fits(want, got):
        raise ProgrammingError(
            f'Pipeline "{pipeline}": step "{step}" input "{want.name}" takes {_spec_text(want)}, but it is fed '
            f'by step "{producer}" output "{got.name}", which is {_spec_text(got)}.',
            code="type_mismatch",
        )


def _spec_text(spec: TensorSpec) -> str:
    shape = "" if spec.shape is None else "[" + ", ".join("?" if d is None else str(d) for d in spec.shape) + "]"
    return f"{spec.elem_type}{shape}"


def pipeline_digest(steps: Sequence[PipelineStep]) -> str:
    """SHA-256 of the step graph: per step, what its model computes and what feeds each input."""
    graph = [
        [artifacts.artifact_digest(s.model), [[f.input, f.from_step, f.from_name] for f in s.feeds]] for s in steps
    ]
    return hashlib.sha256(json.dumps(graph, separators=(",", ":")).encode()).hexdigest()


# ---------------------------------------------------------------- create


def create_pipeline(session: Session, plan: CreatePipelinePlan, explicit: Optional[dict] = None,
                    add_steps: Optional[Callable[[], Sequence[StepSpec]]] = None) -> PipelineVersion:
    """Resolve, wire and catalog a pipeline version (see ``Connection.import_pipeline``).

    ``explicit``: feeds given instead of the wiring rules (see :func:`wire`). ``add_steps``: called inside
    the pipeline's transaction to catalog new step model versions first (``import_pipeline``); its step
    specs replace ``plan.steps``. Whether the name is free, the steps, the new step versions and the
    pipeline version are checked and written in one transaction (retried on a write conflict): of two
    connections creating one name at once one wins, and nothing of a failed call stays.

    Raises:
        ProgrammingError: an invalid name, a missing model or version (``model_not_found`` /
            ``version_not_found``), a step name twice (``duplicate_step``), a type mismatch.
        IntegrityError: ``"duplicate_pipeline"`` (exists, neither OR REPLACE nor IF NOT EXISTS).
    """
    session.check_writable()
    if not _NAME_RE.match(plan.name):
        raise ProgrammingError(
            f'Invalid pipeline name "{plan.name}": use letters, digits and underscores, not starting with a digit.',
            code="invalid_name",
        )
    key = plan.name.lower()
    pipelines = session.catalog.pipelines
    if _pipeline_taken(pipelines, key, plan):
        return pipelines.get(key)
    if add_steps is None:
        wire(key, _named_steps(session, key, plan.steps), explicit)  # errors before anything commits

    def write() -> Optional[int]:
        if _pipeline_taken(pipelines, key, plan):
            return None
        specs = plan.steps if add_steps is None else add_steps()
        steps = wire(key, _named_steps(session, key, specs), explicit)
        version = pipelines.next_version(key)
        pipelines.add(PipelineVersion(name=key, version=version, steps=steps, digest=pipeline_digest(steps),
                                      source=plan.source, options=plan.options))
        return version

    version = catalog_write_retrying(session, write)
    return pipelines.get(key, version)


def _pipeline_taken(pipelines, key: str, plan: CreatePipelinePlan) -> bool:
    """True when pipeline ``key`` exists and IF NOT EXISTS leaves it; False when a version may be added.

    Raises:
        IntegrityError: ``duplicate_pipeline`` (exists, neither OR REPLACE nor IF NOT EXISTS).
    """
    if not pipelines.versions(key) or plan.replace:
        return False
    if plan.if_not_exists:
        return True
    raise IntegrityError(
        f'Pipeline "{key}" already exists (versions {", ".join(map(str, pipelines.versions(key)))}). '
        "Use CREATE OR REPLACE PIPELINE to add a version, or CREATE PIPELINE IF NOT EXISTS.",
        code="duplicate_pipeline",
    )


def _named_steps(session: Session, key: str, specs: Sequence[StepSpec]) -> list[tuple[str, ModelVersion]]:
    """``(step name, model version)`` of each spec, in order.

    Raises:
        ProgrammingError: a missing model or version; ``duplicate_step``.
    """
    named: list[tuple[str, ModelVersion]] = []
    for spec in specs:
        mv = session.get_model(spec.model, spec.version)
        step = (spec.name or mv.name).lower()
        if any(step == n for n, _ in named):
            raise ProgrammingError(
                f'Pipeline "{key}": two steps are named "{step}"; name one with AS, e.g. ({spec.model} AS {step}_2).',
                code="duplicate_step",
            )
        named.append((step, mv))
    return named


# ---------------------------------------------------------------- handlers


@handles(CreatePipeline)
def _create(stmt: CreatePipeline, session: Session, params: list) -> Result:
    plan = bind_create(stmt, params)
    for s in stmt.expressions:  # a missing model, version or alias: an error pointing at the step as written
        session.get_model(s.this.model_name, s.this.version_number, s.this)
    steps = tuple(dataclasses.replace(spec, version=session.get_model(s.this.model_name, None, s.this).version)
                  if s.this.alias_name is not None else spec for spec, s in zip(plan.steps, stmt.expressions))
    create_pipeline(session, dataclasses.replace(plan, steps=steps))  # a step's alias pins the version it names
    return Result(session.duck, rowcount=1)


@handles(DropPipeline)
def _drop(stmt: DropPipeline, session: Session, params: list) -> Result:
    session.check_writable()
    ref = stmt.this
    plan = DropPipelinePlan(ref.model_name.lower(), ref.version_number, bool(stmt.args.get("exists")))
    pipelines = session.catalog.pipelines
    if plan.if_exists and (not pipelines.versions(plan.name) or (
            plan.version is not None and plan.version not in pipelines.versions(plan.name))):
        return Result(session.duck, rowcount=0)
    session.get_model(ref.model_name, plan.version, ref, pipeline=True)  # not found: an error naming it as written
    removed = catalog_write_retrying(session, lambda: pipelines.drop(plan.name, plan.version,
                                                                     missing_ok=plan.if_exists))
    return Result(session.duck, rowcount=removed)


@handles(ShowPipelines, reads_only=True)
def _show(stmt: ShowPipelines, session: Session, params: list) -> Result:
    session.begin_if_needed()
    session.run(session.catalog.pipelines.show_sql(), None)
    return session.duckdb_result("SELECT")


@handles(DescribePipeline, reads_only=True)
def _describe(stmt: DescribePipeline, session: Session, params: list) -> Result:
    ref = stmt.this
    pv = session.get_model(ref.model_name, ref.version_number, ref, pipeline=True)
    return Result(session.duck, description=list(_DESCRIBE_COLUMNS), rows=session.catalog.pipelines.describe_rows(pv))


@handles(ExportPipeline, reads_only=True)
def _export(stmt: ExportPipeline, session: Session, params: list) -> Result:
    from modelsql.onnxformat.compose import merge_pipeline
    from modelsql.engine.models.statements import write_catalog_metadata

    ref = stmt.this
    pv = session.get_model(ref.model_name, ref.version_number, ref, pipeline=True)
    target = str(value(stmt.args["target"], params))
    check_export_target(session, target, "EXPORT PIPELINE")
    steps = [(s.name, artifacts.load_model_proto(session.store, s.model),
              [(f.input, f.from_step, f.from_name) for f in s.feeds]) for s in pv.steps]
    merged = merge_pipeline(steps, pv.name)
    write_catalog_metadata(merged, pv)
    write_export(session, target, merged, "EXPORT PIPELINE")  # atomic: a failure leaves the old file
    return Result(session.duck, rowcount=1)
