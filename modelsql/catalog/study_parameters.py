"""A statement's ``?`` values as a study keeps them in its ``options`` (JSON), and read back as the same Python
values, so the study's rows can be read again (``CREATE MODEL ... FROM STUDY``): values JSON has no type for
(bytes, dates and times, intervals, decimals, UUIDs, structs) are kept tagged (``{"$date": "2026-12-05"}``).
A value kept as text by a study made before they were tagged reads back as that text."""

from __future__ import annotations

import datetime as _dt
import decimal
import uuid
from typing import Any, Callable, Sequence

__all__ = ["kept_parameters", "restored_parameters"]

_TAGS: dict[str, tuple[Callable[[Any], bool], Callable[[Any], Any], Callable[[Any], Any]]] = {
    "$bytes": (lambda v: isinstance(v, (bytes, bytearray, memoryview)), lambda v: bytes(v).hex(), bytes.fromhex),
    "$datetime": (lambda v: isinstance(v, _dt.datetime), lambda v: v.isoformat(), _dt.datetime.fromisoformat),
    "$date": (lambda v: isinstance(v, _dt.date), lambda v: v.isoformat(), _dt.date.fromisoformat),
    "$time": (lambda v: isinstance(v, _dt.time), lambda v: v.isoformat(), _dt.time.fromisoformat),
    "$timedelta": (lambda v: isinstance(v, _dt.timedelta), lambda v: [v.days, v.seconds, v.microseconds],
                   lambda v: _dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2])),
    "$decimal": (lambda v: isinstance(v, decimal.Decimal), str, decimal.Decimal),
    "$uuid": (lambda v: isinstance(v, uuid.UUID), str, uuid.UUID),
}
"""tag -> (is this type, to JSON, from JSON); ``$datetime`` before ``$date`` (a datetime is a date)."""


def kept_parameters(values: Sequence[Any]) -> list:
    """``values`` as JSON values (see the module)."""
    return [_kept(v) for v in values]


def restored_parameters(kept: Sequence[Any]) -> list:
    """The values :func:`kept_parameters` kept."""
    return [_restored(v) for v in kept or ()]


def _kept(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_kept(v) for v in value]
    if isinstance(value, dict):
        return {"$struct": {str(k): _kept(v) for k, v in value.items()}}
    for tag, (matches, encode, _) in _TAGS.items():
        if matches(value):
            return {tag: encode(value)}
    return str(value)


def _restored(value: Any) -> Any:
    if isinstance(value, list):
        return [_restored(v) for v in value]
    if isinstance(value, dict) and len(value) == 1:
        (tag, inner), = value.items()
        if tag == "$struct" and isinstance(inner, dict):
            return {k: _restored(v) for k, v in inner.items()}
        if tag in _TAGS:
            return _TAGS[tag][2](inner)
    return value
