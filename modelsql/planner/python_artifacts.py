"""How a co-executed Python program is stored, and how its session is loaded.

A ``CREATE MODEL m FROM PYTHON 'pkg.mod:obj'`` that is not kept as a whole graph is a model version of
kind ``"python"``: its graph blob is a :class:`StoredProgram` (JSON: the reference, the digest of its
source file, how it runs) and its tensors are the module's ``state_dict``, one content-addressed blob each
(so equal weights are stored once, as for ONNX initializers). The source file's text is a blob too, for
the record. Loading imports the reference again, refuses it if its source changed since (a different
program under the same name would answer wrongly without saying so), builds the module, loads the stored
weights and wraps it in a :class:`~modelsql.operators.backends.coexec.PythonProgramModel`.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field

from typing import Optional

import numpy as np

from ..catalog.entries import ModelVersion, StoredTensor
from ..errors import ProgrammingError
from ..operators.backends.coexec import PythonProgramModel
from ..tuning.training import factory_digest, resolve_reference

__all__ = ["StoredProgram", "FORMAT", "program_module", "program_digest", "state_tensors", "python_session",
           "read_program"]

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
        format: :data:`FORMAT`.
    """

    reference: str
    source_digest: str
    source_blob: str
    mode: str
    row_calls: bool
    outputs: tuple
    params: dict = field(default_factory=dict)
    format: str = FORMAT

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()


def read_program(data: bytes) -> StoredProgram:
    """The :class:`StoredProgram` in a graph blob."""
    fields = json.loads(data.decode())
    fields["outputs"] = tuple(fields["outputs"])
    return StoredProgram(**fields)


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


_ELEM = {"float32": "FLOAT", "float64": "DOUBLE", "float16": "FLOAT16", "int64": "INT64", "int32": "INT32",
         "int16": "INT16", "int8": "INT8", "uint8": "UINT8", "bool": "BOOL"}


def state_tensors(module) -> list[tuple[StoredTensor, bytes]]:
    """The module's ``state_dict`` as (stored tensor, raw little-endian bytes) pairs, in order."""
    import hashlib

    out = []
    for name, value in module.state_dict().items():
        array = np.ascontiguousarray(value.detach().cpu().numpy())
        array = array.astype(array.dtype.newbyteorder("<"), copy=False)
        data = array.tobytes()
        elem = _ELEM.get(str(array.dtype).lstrip("<>="), str(array.dtype).upper())
        out.append((StoredTensor(name, hashlib.sha256(data).hexdigest(), elem, tuple(array.shape), len(data)), data))
    return out


def python_session(store, mv: ModelVersion, *, intra: int = 1) -> PythonProgramModel:
    """The loaded program of ``mv`` (kind ``"python"``).

    Raises:
        ProgrammingError: ``source_changed`` (the source file differs from the one imported),
            ``factory_not_found`` (the reference no longer imports).
    """
    import torch

    stored = read_program(store.get(mv.graph_digest))
    if program_digest(stored.reference, stored.params) != stored.source_digest:
        raise ProgrammingError(
            f"The source of {stored.reference} changed since {mv.label} was created: the stored weights may not "
            f"fit the program, and its answers could differ. Restore that source, or CREATE OR REPLACE MODEL "
            f"{mv.name} to import the new one.", code="source_changed")
    module = program_module(stored.reference, stored.params)
    dtypes = {v: k for k, v in _ELEM.items()}
    state = {t.name: torch.from_numpy(np.frombuffer(store.get(t.digest), dtype=np.dtype(dtypes.get(t.elem_type,
             t.elem_type.lower())).newbyteorder("<")).reshape(t.dims).copy()) for t in mv.tensors}
    module.load_state_dict(state)
    module.eval()
    return PythonProgramModel(module, mv.inputs, stored.outputs, mode=stored.mode, row_calls=stored.row_calls,
                              label=mv.label, threads=intra)
