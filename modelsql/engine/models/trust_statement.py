"""``TRUST MODEL m [VERSION n]``: sign a model's code with the current user's key (:mod:`.trust`).

The code of a model is each version's stored Python program (kind ``python``), each version of a trainable
of that name (its factory and default arguments), and each checked compiled library of its versions. The
statement imports and loads none of it: it reads the catalog, signs the digests and lists what it signed, one
row each (``model``, ``version``, ``kind``, ``code``, ``digest``, ``added``: false when the key had signed it
already). A user runs it after looking at the code (``DESCRIBE MODEL m``; the rows say it again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelsql.errors import Error, ProgrammingError
from modelsql.sql.models import TrustModel
from modelsql.engine.artifacts import trust
from modelsql.engine.artifacts.compiled import library_code
from modelsql.engine.handlers import catalog_write, handles
from modelsql.engine.artifacts.python_programs import program_code, read_program
from modelsql.engine.result import Result
from modelsql.engine.models.trainables import trainable_code

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["code_of", "COLUMNS"]

COLUMNS = (("model", "VARCHAR"), ("version", "INTEGER"), ("kind", "VARCHAR"), ("code", "VARCHAR"),
           ("digest", "VARCHAR"), ("added", "BOOLEAN"))
"""The result's columns."""


def code_of(session: Session, name: str, version=None) -> list[trust.CodeArtifact]:
    """The code artifacts of model (or trainable) ``name``: every version's, or version ``version``'s.

    Raises:
        ProgrammingError: ``model_not_found`` (no model or trainable of that name and version).
    """
    catalog = session.catalog
    versions = [v for v in catalog.versions(name) if version in (None, v)]
    studies = catalog.studies
    latest = studies.trainable(name)
    trainables = [t for t in (studies.trainable(name, v) for v in range(1, latest.version + 1) if version in (None, v))
                  if t is not None] if latest is not None else []
    if not versions and not trainables:
        what = f'Model "{name}"' + (f" version {version}" if version is not None else "")
        raise ProgrammingError(f"{what} does not exist (TRUST MODEL signs the code of a model or trainable).",
                               code="model_not_found")
    out = []
    for v in versions:
        mv = catalog.get(name, v)
        if mv.kind == "python":
            out.append(program_code(read_program(session.store.get(mv.graph_digest), mv.label), mv.graph_digest,
                                    mv.name, mv.version))
    out += [library_code(row) for row in catalog.compiled.of_model(name.lower(), version) if row.usable]
    out += [trainable_code(t) for t in trainables]
    return out


@handles(TrustModel)
def _trust(stmt: TrustModel, session: Session, params: list) -> Result:
    """Sign the code of ``stmt``'s model with the user's key (see the module docstring).

    Raises:
        NotSupportedError: ``python_disabled`` (``allow_python=False``: SQL from others must not trust code).
        OperationalError: ``read_only`` (a read-only connection trusts with ``trust_code=True``), ``bad_key_file``.
        ProgrammingError: ``model_not_found``.
    """
    ref = stmt.this
    name, version = ref.model_name.lower(), ref.version_number
    if ref.alias_name is not None:
        version = session.get_model(ref.model_name, None, ref).version  # alias_not_found, pointed
    trust.require_python_allowed(session, f"TRUST MODEL {name}")
    session.check_writable()
    try:
        artifacts = code_of(session, name, version)
    except Error as err:
        raise session.pointed(err, ref) from None
    key = trust.signing_key()
    with catalog_write(session):
        added = [trust.sign(session, a, key) for a in artifacts]
    rows = [(a.model, a.version, a.kind, a.what, a.digest, new) for a, new in zip(artifacts, added)]
    return Result(session.duck, description=[(n, k, None, None, None, None, True) for n, k in COLUMNS], rows=rows)
