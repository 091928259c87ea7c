"""What code a session may run: the trust model of code kept in a database.

A database file is what people share, and opening one must not run its code. Three things in a catalog are
code: a Python program's stored reference (kind ``python``: imported and called by PREDICT), a trainable's
factory (called by TUNE and ``CREATE MODEL ... FROM STUDY``) and a compiled TVM library (``dlopen``'ed by
``backend = 'tvm'``). Each is a :class:`CodeArtifact`, named by the SHA-256 of what decides the code that runs.
It may load only when

* the connection trusts code (``modelsql.connect(path, trust_code=True)``), or
* a row of ``modelsql.code_signatures`` holds a signature of it that verifies with the key of the user
  running modelsql (:mod:`modelsql.signing`; the key is never in a database, so no file made elsewhere
  can carry one). Statements that make code sign it with their user's key (so a user's own models need no
  step), and ``TRUST MODEL m [VERSION n]`` signs a model's code after its user has looked at it.

:func:`require` is called before anything is imported or loaded; an untrusted artifact is refused with
``NotSupportedError`` ``untrusted_code`` naming the model and how to trust it. ONNX models and weights are
data: they need no trust. The loaders check :func:`require_checked` too, so no path reaches an import or a
``dlopen`` of an artifact :func:`require` has not passed in this process.

A connection with ``allow_python=False`` (a server or shell taking SQL from others) refuses every statement
that names Python to run (``CREATE MODEL ... FROM PYTHON``) or trusts code (``TRUST MODEL``):
:func:`require_python_allowed`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from modelsql.catalog.trust import CodeSignatures
from modelsql.errors import NotSupportedError
from modelsql.signing import Key, load_key, signature_of, verifies

if TYPE_CHECKING:
    from modelsql.engine.artifacts.context import ArtifactContext, PythonPolicy

__all__ = ["CodeArtifact", "trainable_digest", "trusted", "require", "require_checked", "sign", "signing_key",
           "require_python_allowed"]

_CHECKED: set = set()
_LOCK = threading.Lock()


@dataclass(frozen=True)
class CodeArtifact:
    """One code artifact of a catalog.

    Attributes:
        kind: ``"python"``, ``"trainable"`` or ``"compiled"``.
        digest: SHA-256 (hex) of what decides the code: the program blob, :func:`trainable_digest`, the library blob.
        model: the model (or trainable) name; version: its version.
        what: the code, for people (``"the Python program pkg.mod:obj"``).
        remedy: an extra way to make it trusted (``"rebuild it here with COMPILE MODEL m ..."``), or ``""``.
    """

    kind: str
    digest: str
    model: str
    version: Optional[int]
    what: str
    remedy: str = ""

    @property
    def subject(self) -> str:
        """``model "m" version n: <what>`` (no version while it is being created)."""
        version = f" version {self.version}" if self.version is not None else ""
        return f'model "{self.model}"{version}: {self.what}'


def trainable_digest(factory: str, options) -> str:
    """SHA-256 over a trainable's factory reference and its default arguments (``options``: (key, JSON) pairs);
    a new version made because the factory's source changed keeps it."""
    text = json.dumps({"factory": factory, "options": sorted([list(o) for o in options])}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def trusted(session: ArtifactContext, artifact: CodeArtifact) -> bool:
    """Whether ``session`` may load ``artifact`` (the connection trusts code, or a signature verifies with the
    user's key).

    Raises:
        OperationalError: ``bad_key_file`` (see :func:`modelsql.signing.load_key`).
    """
    if session.trust_code:
        return True
    key = load_key()
    if key is None:
        return False
    return any(kid == key.key_id and verifies(key, artifact.kind, artifact.digest, sig)
               for kid, sig in CodeSignatures(session.catalog).of(artifact.kind, artifact.digest))


def require(session: ArtifactContext, artifact: CodeArtifact) -> None:
    """Refuse ``artifact`` unless :func:`trusted`; called before anything of it is imported or loaded.

    Raises:
        NotSupportedError: ``untrusted_code`` naming the model, its code and how to trust it.
        OperationalError: ``bad_key_file``.
    """
    if not trusted(session, artifact):
        how = ("connect with modelsql.connect(..., trust_code=True) (this connection is read-only, so TRUST MODEL "
               "cannot record a signature)" if session.read_only else
               f"run TRUST MODEL {artifact.model} VERSION {artifact.version}, or connect with "
               "modelsql.connect(..., trust_code=True)")
        raise NotSupportedError(
            f"{artifact.subject} is code stored in the database, and your key has not signed it: a database file "
            f"from elsewhere could run anything this way, so it is not loaded. If you trust it (DESCRIBE MODEL "
            f"{artifact.model} shows it), {how}" + (f"; or {artifact.remedy}" if artifact.remedy else "") + ".",
            code="untrusted_code")
    with _LOCK:
        _CHECKED.add((artifact.kind, artifact.digest))


def require_checked(artifact: CodeArtifact) -> None:
    """The loaders' own check: :func:`require` passed ``artifact`` in this process.

    Raises:
        NotSupportedError: ``untrusted_code``.
    """
    with _LOCK:
        ok = (artifact.kind, artifact.digest) in _CHECKED
    if not ok:
        raise NotSupportedError(f"{artifact.subject} was not checked for trust before loading; it is not loaded.",
                                code="untrusted_code")


def signing_key() -> Key:
    """The user's key, created on first use (see :mod:`modelsql.signing`); load it before writing anything.

    Raises:
        OperationalError: ``bad_key_file``.
    """
    key = load_key(create=True)
    assert key is not None  # create=True makes the key when there is none
    return key


def sign(session: ArtifactContext, artifact: CodeArtifact, key: Optional[Key] = None) -> bool:
    """Record ``key``'s (default: the user's) signature of ``artifact`` in the catalog, inside the caller's
    transaction; whether a row was added.

    Raises:
        OperationalError: ``read_only``, ``bad_key_file``.
    """
    key = key or signing_key()
    return CodeSignatures(session.catalog).add(artifact.kind, artifact.digest, key.key_id,
                                               signature_of(key, artifact.kind, artifact.digest), artifact.subject)


def require_python_allowed(session: PythonPolicy, statement: str) -> None:
    """Refuse ``statement`` on a connection opened with ``allow_python=False``.

    Raises:
        NotSupportedError: ``python_disabled``.
    """
    if not session.allow_python:
        raise NotSupportedError(
            f"{statement}: this connection does not run Python named in SQL (it was opened with allow_python=False "
            "or modelsql --no-python, as a server or shell taking SQL from others should be).", code="python_disabled")
