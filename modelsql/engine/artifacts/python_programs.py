"""How a co-executed Python program is stored, and how its session is loaded.

A ``CREATE MODEL m FROM PYTHON 'pkg.mod:obj'`` that is not kept as a whole graph is a model version of
kind ``"python"``: its graph blob is a :class:`StoredProgram` (JSON: the reference, the digest of its
source file, how it runs) and its tensors are the module's ``state_dict``, one content-addressed blob each
(so equal weights are stored once, as for ONNX initializers). The source file's text is a blob too, for
the record. Loading imports the reference again, refuses it if its source changed since (a different
program under the same name would answer wrongly without saying so), builds the module, loads the stored
weights and wraps it in a :class:`~modelsql.operators.backends.coexec.PythonProgramModel`.

A stored program is code: nothing of it is imported before :func:`check_source` has passed its
:func:`program_code` through :func:`~modelsql.engine.artifacts.trust.require` (signed by the user's key at creation,
trusted by ``TRUST MODEL``, or a connection that trusts code); :func:`python_session` loads only what that
check passed.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import asdict, dataclass, field

from typing import TYPE_CHECKING, Optional

import numpy as np

from modelsql.catalog.entries import ModelVersion, StoredTensor
from modelsql.errors import DataError, ProgrammingError
from modelsql.converters.python_program import ELEM_TYPES, NUMPY_TYPES
from modelsql.operators.backends import devices
from modelsql.operators.backends.coexec import PythonProgramModel
from modelsql.tuning.factories import factory_digest, resolve_reference
from modelsql.engine.artifacts import trust

if TYPE_CHECKING:
    from modelsql.engine.artifacts.context import ArtifactContext

__all__ = ["StoredProgram", "FORMAT", "program_module", "program_digest", "helper_sources", "changed_source", "check_source",
           "state_tensors", "python_session", "read_program", "program_device", "program_code"]

FORMAT = "modelsql-python/1"
"""The ``format`` field of a stored program."""


@dataclass(frozen=True)
class StoredProgram:
    """The graph blob of a ``kind = "python"`` model version.

    Attributes:
        reference: ``"pkg.mod:obj"``.
        source_digest: SHA-256 of the source file defining it when it was imported.
        source_blob: digest of that source text in the store.
        mode: ``"coexecute"`` or ``"eager"``.
        row_calls: called one row at a time (a batch-dependent program).
        outputs: output names, in order.
        params: keyword arguments the reference is called with (JSON values; empty: no arguments).
        coexecute_from: in ``"coexecute"`` mode, the fewest rows per call that are co-executed (eager below).
        sources: SHA-256 of each other source file of the user's code the reference's module uses
            (:func:`helper_sources`), by path.
        format: :data:`FORMAT`.
    """

    reference: str
    source_digest: str
    source_blob: str
    mode: str
    row_calls: bool
    outputs: tuple
    params: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)
    coexecute_from: int = 1
    format: str = FORMAT

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()


def helper_sources(reference: str) -> dict:
    """``{path: SHA-256}`` of the source files the reference's module reaches through its globals (modules it
    imports, and the modules of the classes and functions it imports), transitively, within the directory of
    its top-level package (the user's own code: a helper module edited after import changes the program as
    much as the module itself). Empty for modelsql's own references."""
    import hashlib
    import importlib
    import os
    import types

    module_name = reference.split(":")[0]
    if module_name.split(".")[0] == "modelsql":
        return {}
    top = importlib.import_module(module_name.split(".")[0])
    root = os.path.dirname(os.path.abspath(getattr(top, "__file__", "") or ""))
    package = hasattr(top, "__path__")  # a package: its folder; a lone module: the plain modules beside it
    seen: dict = {}
    stack = [importlib.import_module(module_name)]
    while stack:
        mod = stack.pop()
        path = os.path.abspath(getattr(mod, "__file__", "") or "")
        inside = path.startswith(root + os.sep) if package else (os.path.dirname(path) == root
                                                                 and not hasattr(mod, "__path__"))
        if not path.endswith(".py") or not inside or path in seen:
            continue
        with open(path, "rb") as f:
            seen[path] = hashlib.sha256(f.read()).hexdigest()
        for value in vars(mod).values():
            owner = value if isinstance(value, types.ModuleType) else sys.modules.get(getattr(value, "__module__", ""))
            if isinstance(owner, types.ModuleType):
                stack.append(owner)
    seen.pop(os.path.abspath(sys.modules[module_name].__file__ or ""), None)  # the reference's own file: source_digest
    return seen


def changed_source(stored: StoredProgram):
    """The first file of ``stored.sources`` that is missing or differs now, or None."""
    import hashlib

    for path, digest in sorted(stored.sources.items()):
        try:
            with open(path, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != digest:
                    return path
        except OSError:
            return path
    return None


def read_program(data: bytes, label: str = "a Python program") -> StoredProgram:
    """The :class:`StoredProgram` in a graph blob (reading it runs nothing).

    Raises:
        DataError: ``bad_program`` (not a stored program), naming ``label``.
    """
    try:
        fields = json.loads(data.decode())
        fields["outputs"] = tuple(fields["outputs"])
        stored = StoredProgram(**fields)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise DataError(f"The stored program of {label} is not one modelsql wrote ({type(exc).__name__}: {exc}).",
                        code="bad_program") from None
    if not isinstance(stored.reference, str) or not isinstance(stored.params, dict):
        raise DataError(f"The stored program of {label} is not one modelsql wrote.", code="bad_program")
    return stored


def program_code(stored: StoredProgram, digest: str, model: str, version: Optional[int]) -> trust.CodeArtifact:
    """The code artifact of a stored program whose graph blob is ``digest`` (the reference, its arguments, its
    sources), of model ``model`` version ``version`` (None while it is being created)."""
    args = json.dumps(stored.params, sort_keys=True) if stored.params else ""
    what = f"the Python program {stored.reference}" + (f" called with {args[:200]}" if args else "")
    return trust.CodeArtifact("python", digest, model, version, what)


def program_module(reference: str, params: Optional[dict] = None):
    """The ``torch.nn.Module`` a reference names: a Module instance, a Module subclass (built with ``params``,
    by default no arguments) or a function returning a Module (called the same way).

    Raises:
        ProgrammingError: ``factory_not_found``; ``not_a_module`` (anything else, or a constructor that needs
            arguments).
    """
    import torch

    obj = resolve_reference(reference)
    if isinstance(obj, torch.nn.Module):
        return copy.deepcopy(obj)  # the user's object is never loaded into or compiled
    if not callable(obj):
        raise ProgrammingError(f"{reference!r} is a {type(obj).__name__}, not a torch.nn.Module or a function "
                               "returning one.", code="not_a_module")
    try:
        module = obj(**(params or {}))
    except TypeError as exc:
        raise ProgrammingError(f"{reference!r} cannot be built without arguments ({exc}); a factory of "
                               "hyper-parameters is a trainable (CREATE MODEL ... FROM PYTHON without example) "
                               "that TUNE trains.", code="not_a_module") from exc
    if not isinstance(module, torch.nn.Module):
        raise ProgrammingError(f"{reference!r} returned {type(module).__name__}, not a torch.nn.Module.",
                               code="not_a_module")
    return module


def program_digest(reference: str, params: Optional[dict] = None) -> str:
    """SHA-256 over the source file of ``reference`` and, when ``params`` name a ``factory``, of that factory's
    file too (a trained network is wrong under a changed factory as much as under a changed wrapper)."""
    import hashlib

    digest = factory_digest(reference)
    if params and isinstance(params.get("factory"), str):
        digest = hashlib.sha256(f"{digest}|{factory_digest(params['factory'])}".encode()).hexdigest()
    return digest


def state_tensors(module) -> list[tuple[StoredTensor, bytes]]:
    """The module's ``state_dict`` as (stored tensor, raw little-endian bytes) pairs, in order."""
    import hashlib

    out = []
    for name, value in module.state_dict().items():
        array = np.ascontiguousarray(value.detach().cpu().numpy())
        array = array.astype(array.dtype.newbyteorder("<"), copy=False)
        data = array.tobytes()
        elem = ELEM_TYPES.get(str(array.dtype).lstrip("<>="), str(array.dtype).upper())
        out.append((StoredTensor(name, hashlib.sha256(data).hexdigest(), elem, tuple(array.shape), len(data)), data))
    return out


def check_source(session: ArtifactContext, mv: ModelVersion) -> StoredProgram:
    """The stored program of ``mv``, after checking that ``session`` trusts it (before anything is imported)
    and that its sources are unchanged.

    Raises:
        NotSupportedError: ``untrusted_code`` (see :func:`~modelsql.engine.artifacts.trust.require`).
        ProgrammingError: ``source_changed`` naming the file; ``factory_not_found``.
        DataError: ``bad_program``.
    """
    stored = read_program(session.store.get(mv.graph_digest), mv.label)
    trust.require(session, program_code(stored, mv.graph_digest, mv.name, mv.version))
    return _unchanged(stored, mv)


def _unchanged(stored: StoredProgram, mv: ModelVersion) -> StoredProgram:
    """``stored`` when its sources are the ones imported (this imports the reference's module: trusted only)."""
    helper = changed_source(stored)
    if program_digest(stored.reference, stored.params) != stored.source_digest or helper is not None:
        what = f"{helper} (a module {stored.reference} uses)" if helper else f"the source of {stored.reference}"
        raise ProgrammingError(
            f"{what} changed since {mv.label} was created: the stored weights may not fit the program, and its "
            f"answers could differ. Restore that source, or CREATE OR REPLACE MODEL {mv.name} to import the new one.",
            code="source_changed")
    return stored


def program_device(mv: ModelVersion, asked: str = "auto") -> str:
    """Where PREDICT runs the program of ``mv``: the device PREDICT asked for (its ``device`` option); with
    ``"auto"``, the program's own (``CREATE MODEL ... FROM PYTHON ... WITH (device = ...)``) where that device is
    present, else ``"cpu"``.

    Raises:
        NotSupportedError: ``device_not_available`` (a GPU asked for that is not on this machine, or is hidden
            by ``MODELSQL_DEVICES``).
    """
    if asked not in (None, "auto"):
        return devices.require(asked, f"PREDICT(MODEL {mv.name})")
    own = dict(mv.options).get("device", devices.CPU)
    return own if own in devices.available() else devices.CPU


def python_session(store, mv: ModelVersion, *, intra: int = 1, device: str = "auto") -> PythonProgramModel:
    """The loaded program of ``mv`` (kind ``"python"``), on its :func:`program_device` (module and weights there;
    each chunk's tensors are moved there and the outputs come back as NumPy arrays).

    Raises:
        ProgrammingError: ``source_changed`` (the source file differs from the one imported),
            ``factory_not_found`` (the reference no longer imports).
        NotSupportedError: ``device_not_available`` (see :func:`program_device`); ``untrusted_code`` when
            :func:`check_source` did not pass it first in this process.
    """
    import torch

    device = program_device(mv, device)
    stored = read_program(store.get(mv.graph_digest), mv.label)
    trust.require_checked(program_code(stored, mv.graph_digest, mv.name, mv.version))  # check_source passed it
    _unchanged(stored, mv)
    module = program_module(stored.reference, stored.params)
    state = {t.name: torch.from_numpy(np.frombuffer(store.get(t.digest), dtype=np.dtype(NUMPY_TYPES.get(t.elem_type,
             t.elem_type.lower())).newbyteorder("<")).reshape(t.dims).copy()) for t in mv.tensors}
    module.load_state_dict(state)
    module.eval()
    return PythonProgramModel(module, mv.inputs, stored.outputs, mode=stored.mode, row_calls=stored.row_calls,
                              coexecute_from=stored.coexecute_from,
                              label=mv.label, threads=intra, device=device)
