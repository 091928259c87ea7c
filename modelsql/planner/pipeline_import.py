"""``Connection.import_pipeline``: a fitted scikit-learn pipeline into the catalog as one model per step.

:func:`modelsql.formats.sklearn_steps.split_pipeline` converts and checks each
step; each becomes a catalog model named ``<pipeline>__<step path>`` unless a
model version with the same content digest is already in the catalog, which is
then reused (identical steps of different pipelines are one catalog model, one
stored graph and one loaded session: PRETZEL, Lee et al., OSDI 2018). The
pipeline is created with the split's own wiring.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Sequence

from .. import formats
from ..catalog.entries import PipelineVersion
from .ddl import import_model
from .pipelines import create_pipeline
from .plan import CreatePipelinePlan, StepSpec

__all__ = ["import_pipeline"]


def _model_name(pipeline: str, path: str) -> str:
    return f"{pipeline}__" + re.sub(r"\W+", "_", path.replace(".", "__")).strip("_").lower()


def _store_step(session, pipeline: str, step) -> Any:
    """The catalog model version of one split step: an identical one already there, or a new one."""
    graph, _ = formats.split_model(step.model)
    same = session.catalog.find_content(formats.content_digest(graph), features=step.features)
    if same is not None:
        return same
    name = _model_name(pipeline, step.path)
    return import_model(session, name, step.model, replace=session.catalog.exists(name), features=step.features,
                        provenance=(step.kind, step.source), checked=step.check)


def import_pipeline(session, name: str, pipeline: Any, *, example_input: Any, features: Optional[Sequence[str]] = None,
                    input_name: str = "input", replace: bool = False, if_not_exists: bool = False,
                    description: Optional[str] = None, accept_mismatch: bool = False) -> PipelineVersion:
    """Split, convert, check and catalog ``pipeline`` (see ``Connection.import_pipeline``).

    Raises:
        IntegrityError: ``"duplicate_pipeline"``. NotSupportedError, DataError, ProgrammingError:
            see :func:`~modelsql.formats.sklearn_steps.split_pipeline` and :func:`create_pipeline`.
    """
    key = name.lower()
    existing = session.catalog.pipelines.versions(key)
    if existing and if_not_exists:
        return session.catalog.pipelines.get(key)
    steps = formats.split_pipeline(pipeline, example_input, input_name=input_name,
                                   features=tuple(features) if features else None)
    rows, diff, bad = formats.check_chain(pipeline, steps, example_input, input_name, accept_mismatch=accept_mismatch)
    versions = [_store_step(session, key, st) for st in steps]
    specs = tuple(StepSpec(mv.name, mv.version, st.path) for mv, st in zip(versions, steps))
    explicit = {(i, inp): src for i, st in enumerate(steps) for inp, src in st.feeds}
    check = f"{rows} rows, max abs diff {diff:.3g}, {bad} label mismatches"
    options = (("conversion_check", check),) + ((("description", description),) if description else ())
    plan = CreatePipelinePlan(name=name, steps=specs, replace=replace, if_not_exists=if_not_exists,
                              options=tuple(sorted(options)),
                              source=f"sklearn:{type(pipeline).__name__}")
    return create_pipeline(session, plan, explicit)
