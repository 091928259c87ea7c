"""Checks a TUNE statement gets before anything trains, so that a mistake is the statement's error
(naming the hyper-parameter, option or column) rather than every trial failing one by one.

* every value the space can give a training hyper-parameter, at every epoch (``lr > 0``, ``momentum`` in
  [0, 1], ``batch_size`` a positive integer, ``optimizer`` one of sgd / adam / adamw ...);
* the factory, built once for each combination of its arguments the space's candidates give (at most
  :data:`MAX_PROBES`), and run on a zero batch: it must accept its arguments and map (2, F) to (2, K);
* the options against each other and the data (``max_t`` against ``max_epochs``, ``val_accuracy`` of a
  regression, ``threads`` past this machine's cores; ``features`` is checked by
  :func:`~modelsql.engine.training_features.feature_option`).
"""

from __future__ import annotations

import os
from typing import Any

from modelsql.errors import Error, NotSupportedError, ProgrammingError
from modelsql.operators.backends import devices
from modelsql.tuning.space import Space
from modelsql.tuning.training import check_epoch, check_factory
from modelsql.engine.options.schema import option_error
from modelsql.engine.tune.spec import TRAINING_NAMES

__all__ = ["check_space_values", "probe_factory", "check_threads", "training_device", "MAX_PROBES"]

MAX_PROBES = 16
"""Most factory argument combinations built to check a study (each builds one model)."""


def check_space_values(space: Space, max_epochs: int) -> None:
    """Every training value the space reaches is one training accepts.

    Raises:
        ProgrammingError: ``invalid_hyperparameter`` naming the hyper-parameter, its value and the epoch.
    """
    for config in space.candidates():
        for epoch, hp in enumerate(space.sequence(config, max_epochs)):
            try:
                check_epoch(tuple((k, v) for k, v in hp if k in TRAINING_NAMES))
            except ProgrammingError as err:
                raise err.retold(f"SEARCH: {err} (at epoch {epoch})") from None


def probe_factory(space: Space, factory: str, defaults: dict, in_features: int, n_outputs: int,
                  trees: bool = False) -> None:
    """Build the factory for the candidates' factory arguments and check its output shape (see the module).

    Raises:
        ProgrammingError: ``factory_not_found``, ``invalid_factory_params``, ``invalid_factory``, saying which
            arguments were given.
    """
    seen: set = set()
    for config in space.candidates():
        first = space.sequence(config, 1)[0]
        params = dict(defaults, **{k: v for k, v in first if k not in TRAINING_NAMES})
        key = tuple(sorted(params.items()))
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > MAX_PROBES:
            return
        try:
            check_factory(factory, key, in_features, n_outputs, trees)
        except ProgrammingError as err:
            given = ", ".join(f"{k} = {v!r}" for k, v in key) or "no arguments"
            raise ProgrammingError(f"TUNE: {err} (factory arguments: {given}; in_features = {in_features}, "
                                   f"n_outputs = {n_outputs})", code=err.code) from None


def check_threads(threads: int, workers: int, executor: str) -> None:
    """Local workers may not ask for more threads each than this machine has cores.

    Raises:
        ProgrammingError: ``invalid_option``.
    """
    cores = os.cpu_count() or 1
    if executor != "ray" and threads > cores:
        raise option_error("threads", f"TUNE option threads = {threads} is more than this machine's {cores} cores "
                                      f"(each of the {workers} worker(s) trains with that many threads)")


def training_device(value: Any, statement: str, *, executor: str = "local", trees: bool = False) -> str:
    """The device TUNE or FINETUNE trains on, ``"cpu"`` or ``"cuda:N"``, from its ``device`` option (checked
    before anything trains). ``'auto'`` (the default) is ``cuda:0`` when :func:`devices.cuda_available`, else
    ``cpu`` (``cpu`` too for a table of trees or ``executor = 'ray'``, which train on the CPU only).

    Args:
        value: the option's value (``"auto"`` when not given; None, SQL NULL, is refused).
        statement: ``"TUNE"`` or ``"FINETUNE PIPELINE p"``, for the messages.

    Raises:
        ProgrammingError: ``invalid_option`` (not 'auto', 'cpu', 'cuda' or 'cuda:N').
        NotSupportedError: ``device_not_available`` (that device is not on this machine, or hidden by
            ``MODELSQL_DEVICES``), ``device_not_supported`` (CUDA asked for a table of trees or Ray).
        Each error's ``option`` attribute is ``"device"``.
    """
    where = f"{statement} option device"
    try:
        device = devices.require(devices.parse(value, where), where)
    except Error as err:
        err.option = "device"
        raise
    if device == "auto":
        return "cuda:0" if devices.cuda_available() and not trees and executor != "ray" else devices.CPU
    if device != devices.CPU and (trees or executor == "ray"):
        what = "a table of trees" if trees else f"executor = '{executor}'"
        refused = NotSupportedError(f"{where}: {what} trains on the CPU only; device = '{device}' is not supported "
                                    "there (use device = 'cpu')", code="device_not_supported")
        refused.option = "device"
        raise refused
    return device
