"""``Connection.import_pipeline``: a fitted scikit-learn pipeline into the catalog as one model per step.

:func:`modelsql.converters.sklearn_steps.split_pipeline` converts and checks each
step; each becomes a catalog model named ``<pipeline>__<step path>`` unless a
model version with the same content digest is already in the catalog, which is
then reused (identical steps of different pipelines are one catalog model, one
stored graph and one loaded session: PRETZEL, Lee et al., OSDI 2018). The
pipeline is created with the split's own wiring.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Optional, Sequence

from modelsql.catalog.entries import ModelVersion, PipelineVersion
from modelsql.catalog.lineage import Origin
from modelsql.converters import check_chain, split_pipeline
from modelsql.errors import IntegrityError
from modelsql.onnxformat.identity import content_digest
from modelsql.onnxformat.split import split_model
from modelsql.engine.models.statements import prepare_model
from modelsql.engine.pipelines.statements import create_pipeline
from modelsql.engine.pipelines.plans import CreatePipelinePlan, StepSpec

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["import_pipeline"]


def _model_name(pipeline: str, path: str) -> str:
    return f"{pipeline}__" + re.sub(r"\W+", "_", path.replace(".", "__")).strip("_").lower()


def _prepare_step(session: Session, pipeline: str, step, prepared: dict) -> tuple:
    """One split step: ``("reuse", model version)`` of an identical one already in the catalog or earlier in
    this pipeline, or ``("new", name, fields, kinds)`` with its blobs stored (under the caller's lease)."""
    graph, _ = split_model(step.model)
    content = (content_digest(graph), tuple(step.features) if step.features else None)
    if content in prepared:
        return ("same", prepared[content])
    same = session.catalog.find_content(content[0], features=step.features)
    if same is not None:
        return ("reuse", same)
    name = _model_name(pipeline, step.path)
    fields, kinds = prepare_model(session, name, step.model, features=step.features,
                                  provenance=(step.kind, step.source), checked=step.check)
    prepared[content] = name
    return ("new", name, fields, kinds)


def _add_steps(catalog, steps, prepared: list) -> tuple[StepSpec, ...]:
    """Catalog the new step versions (in the pipeline's transaction); the step specs, in order."""
    specs: list[StepSpec] = []
    added: dict[str, int] = {}
    for st, entry in zip(steps, prepared):
        if entry[0] == "reuse":
            specs.append(StepSpec(entry[1].name, entry[1].version, st.path))
            continue
        if entry[0] == "same":
            specs.append(StepSpec(entry[1], added[entry[1]], st.path))
            continue
        _, name, fields, kinds = entry
        version = catalog.next_version(name)
        catalog.add_version(ModelVersion(version=version, **fields), kinds)
        catalog.lineage.add(name, version, Origin("object", f"{fields['source']} (step {st.path} of an imported "
                                                            "pipeline)"))
        added[name] = version
        specs.append(StepSpec(name, version, st.path))
    return tuple(specs)


def import_pipeline(session: Session, name: str, pipeline: Any, *, example_input: Any,
                    features: Optional[Sequence[str]] = None, input_name: str = "input", replace: bool = False,
                    if_not_exists: bool = False, description: Optional[str] = None,
                    accept_mismatch: bool = False) -> PipelineVersion:
    """Split, convert, check and catalog ``pipeline`` (see ``Connection.import_pipeline``).

    Atomic: the new step model versions and the pipeline version are written in one catalog transaction,
    after the name is checked in it, so a failed call (``duplicate_pipeline``, a conversion error, a
    kill -9) leaves the catalog as it was; the step blobs are stored first under a write lease of the
    store (no VACUUM deletes them meanwhile; a killed call's are collected by the next VACUUM).

    Raises:
        IntegrityError: ``"duplicate_pipeline"``. NotSupportedError, DataError, ProgrammingError:
            see :func:`~modelsql.converters.sklearn_steps.split_pipeline` and :func:`create_pipeline`.
    """
    session.check_writable()
    key = name.lower()
    existing = session.catalog.pipelines.versions(key)
    if existing and if_not_exists:
        return session.catalog.pipelines.get(key)
    if existing and not replace:
        raise IntegrityError(
            f'Pipeline "{key}" already exists (versions {", ".join(map(str, existing))}). Pass replace=True to add '
            "a version, or if_not_exists=True.", code="duplicate_pipeline")
    steps = split_pipeline(pipeline, example_input, input_name=input_name,
                                   features=tuple(features) if features else None)
    rows, diff, bad = check_chain(pipeline, steps, example_input, input_name, accept_mismatch=accept_mismatch)
    check = f"{rows} rows, max abs diff {diff:.3g}, {bad} label mismatches"
    options = (("conversion_check", check),) + ((("description", description),) if description else ())
    explicit = {(i, inp): src for i, st in enumerate(steps) for inp, src in st.feeds}
    with session.store.writing():
        seen: dict = {}
        prepared = [_prepare_step(session, key, st, seen) for st in steps]
        plan = CreatePipelinePlan(name=name, steps=(), replace=replace, if_not_exists=if_not_exists,
                                  options=tuple(sorted(options)), source=f"sklearn:{type(pipeline).__name__}")
        return create_pipeline(session, plan, explicit, add_steps=lambda: _add_steps(session.catalog, steps, prepared))
