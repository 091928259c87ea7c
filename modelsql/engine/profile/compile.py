"""``COMPILE MODEL m [VERSION n] FOR 'llvm' | 'cuda' [WITH (tune_trials = n, batch_size = b, threads = t)]``.

Compiles the version with Apache TVM (:func:`~modelsql.engine.artifacts.compiled.compile_version`), checks it
against ONNX Runtime, and records the artifact in ``modelsql.compiled``, ``checked`` or ``declined``
with the reason; returns that row. Without ``tune_trials`` the compile is untuned with a symbolic batch
(seconds; untuned TVM code is 50-200x slower than ONNX Runtime on a CPU); with it, MetaSchedule tunes
for ``batch_size`` rows (tuning needs fixed shapes: one artifact per batch bucket), a job of minutes
that reports progress to the shell and resumes where it stopped when run again (its database lives
beside the blob store).

``FOR 'cuda'`` (``'cuda:N'``) builds with DLight's default GPU schedules, untuned, under a wall-clock limit,
and checks against ONNX Runtime's CUDA provider (:mod:`.compiled`); ``tune_trials`` is refused there. The
result's last column, ``schedules``, says how the code was scheduled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelsql.errors import ProgrammingError
from modelsql.progress import Meter
from modelsql.sql.profile import CompileModel
from modelsql.engine.artifacts import trust
from modelsql.engine.artifacts.compiled import compile_version, library_code, schedules_of, tvm_target
from modelsql.engine.handlers import catalog_write, handles
from modelsql.engine.options import option_error, value
from modelsql.engine.options.declared import COMPILE
from modelsql.engine.result import Result

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["COMPILE_OPTIONS"]

COMPILE_OPTIONS = COMPILE
"""COMPILE's options and their defaults (:data:`modelsql.engine.options.declared.COMPILE`; threads None: every
core this process may use)."""

_COLUMNS = (("model", "VARCHAR"), ("version", "INTEGER"), ("backend", "VARCHAR"), ("target", "VARCHAR"),
            ("batch_size", "INTEGER"), ("status", "VARCHAR"), ("reason", "VARCHAR"), ("max_abs_diff", "DOUBLE"),
            ("tune_trials", "INTEGER"), ("compile_s", "DOUBLE"), ("schedules", "VARCHAR"))


def _options(stmt: CompileModel, params: list) -> dict:
    options = COMPILE_OPTIONS.parse(stmt, params, where=f"COMPILE MODEL {stmt.this.model_name}")
    if options["tune_trials"] and options["batch_size"] is None:
        raise option_error("tune_trials", "COMPILE ... WITH (tune_trials = n) needs batch_size = b: MetaSchedule "
                                          "tunes fixed shapes, one artifact per batch size")
    return options


def _meter(session: Session, mv, target, options: dict) -> Meter:
    """COMPILE's progress meter (:mod:`modelsql.progress`, kind ``compile``): MetaSchedule's trials measured of
    those given (none when the compile is untuned)."""
    return Meter(session.progress, "compile", total=options["tune_trials"], label=mv.label, target=target.kind,
                 batch_size=options["batch_size"])


@handles(CompileModel)
def _compile(stmt: CompileModel, session: Session, params: list) -> Result:
    ref = stmt.this
    mv = session.get_model(ref.model_name, ref.version_number, ref)
    options = _options(stmt, params)
    kind = value(stmt.args["target"], params)
    if not isinstance(kind, str):
        raise ProgrammingError(f"COMPILE ... FOR: the target must be a string, got {kind!r}", code="invalid_target")
    target = tvm_target(kind, options["threads"])
    session.check_writable()
    key = trust.signing_key()  # the library built here is signed with its user's key (modelsql.engine.artifacts.trust)
    session.commit()
    meter = _meter(session, mv, target, options)
    try:
        row = compile_version(session, mv, target, batch_size=options["batch_size"], trials=options["tune_trials"],
                              progress=meter.update)
    except BaseException:
        meter.finish(ok=False)
        raise
    meter.finish()
    with catalog_write(session) as catalog:
        catalog.compiled.put(row)
        if row.usable:
            trust.sign(session, library_code(row), key)
    return Result(session.duck, description=[(n, k, None, None, None, None, True) for n, k in _COLUMNS],
                  rows=[(row.model, row.version, row.backend, row.target, row.batch_size, row.status, row.reason,
                         row.max_abs_diff, row.tune_trials, row.compile_s, schedules_of(target, row.tune_trials))])
