"""One stage of a TUNE study: train epochs [a, b) of one model from its parent's checkpoint.

A study is run as a stage tree (Hippo: Shin et al., "Hippo: Taming Hyper-parameter
Optimization of Deep Learning with Stage Trees", VLDB 2022): trials whose per-epoch
hyper-parameters agree on a prefix share the stages that train it, and a branch continues
from the checkpoint where they part. That is only sound when a trial reached through shared
stages is *bit for bit* the trial trained from scratch in one go, so a stage restores every
piece of state that the next epoch reads (measured when this was written; leaving out any one
of them breaks exactness at the first resumed epoch, which ``tests/tune/test_tuning_training.py`` checks):

* the model and optimizer state (momentum buffers, Adam moments);
* torch's global RNG (dropout), the data-order ``torch.Generator``, numpy's and Python's
  global RNGs (factories or augmentation may use them);
* the intra-op thread count, which changes the floats and is checked on restore.

**On CUDA** (``StageSpec.device = "cuda:N"``) the same guarantee holds on one GPU model, driver and torch
build: the model is built on the CPU (the same initial weights as on the CPU) and moved to the device, the
data tensors are copied there once per stage, the data order is still drawn by the CPU ``torch.Generator``
(so CPU and CUDA runs visit the same minibatches), and the checkpoint adds the device's RNG state (dropout
draws there) and the device kind. Bit-exactness on the GPU needs deterministic kernels, which
:func:`deterministic_cuda` sets: ``torch.use_deterministic_algorithms(True)``, cuDNN deterministic with its
autotuner off (``cudnn.benchmark = False``), and ``CUBLAS_WORKSPACE_CONFIG=:4096:8``, which cuBLAS reads when
its handle is made, so it must be in the environment before the process first uses CUDA (worker processes
get it from :func:`~modelsql.tuning.executor.worker_env`; an in-process stage sets it if absent).

Operators with no deterministic CUDA kernel (torch raises for them under ``use_deterministic_algorithms``;
torch's documentation of that function keeps the list): the backward of ``AdaptiveAvgPool2d/3d``,
``AdaptiveMaxPool2d``, ``AvgPool3d``, ``FractionalMaxPool2d/3d``, ``ReflectionPad1d/2d/3d``, ``grid_sample``,
``CTCLoss``, ``EmbeddingBag`` with ``mode='max'`` and ``interpolate`` in linear, bilinear, bicubic or trilinear
mode; ``MaxUnpool1d/2d/3d``, ``NLLLoss`` over images (``nll_loss2d``), ``put_``, ``histc``, ``bincount`` with
weights, ``median`` with indices, ``scatter_reduce`` with ``reduce='prod'``, and (in the torch releases that
list it) a floating-point ``cumsum``. A stage
whose model uses one fails with ``NotSupportedError`` code ``nondeterministic_operator`` naming the operator
(never a silently nondeterministic tree). (``AdaptiveAvgPool2d(1)``, global average pooling, is computed by
torch as a mean and is deterministic; other output sizes are not.) Checkpoints hold CPU tensors only (loaded with ``map_location="cpu"``), so a study trained on
``cuda:0`` resumes on ``cuda:1``, and ``CREATE MODEL ... FROM STUDY`` loads it on a machine without a GPU.
The stage-tree key holds the device kind (``cpu`` or ``cuda``): CUDA kernels round differently from the
CPU's, so a CUDA study never continues from CPU stages (or the reverse).

Scheduled hyper-parameters are a pure function of (configuration sequence, epoch): each epoch
entry of a ``StageSpec`` sets lr, momentum and weight decay in every param group at the start
of that epoch, overwriting whatever the restored optimizer state carried. No torch LR
scheduler is used: its state would carry the parent trial's schedule into the branch.

torch is imported lazily, so the specs work without it. Factories are imported by
:mod:`modelsql.tuning.factories`.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import math
import os
import random
import sys
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, NamedTuple, Optional, Sequence, Union

import numpy as np

from modelsql.errors import DataError, NotSupportedError, OperationalError, ProgrammingError
from modelsql.recursive.trees import Trees
from modelsql.tuning.factories import resolve_factory

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "TrainData", "StageSpec", "StageResult", "TrainingDiverged", "HYPERPARAMETERS", "check_epoch", "check_factory",
    "train_stage", "load_trained", "deterministic_cuda", "deterministic_on", "nondeterministic_error", "device_kind",
    "CUBLAS_WORKSPACE",
]

CUBLAS_WORKSPACE = ":4096:8"
"""``CUBLAS_WORKSPACE_CONFIG`` for deterministic cuBLAS (NVIDIA's documented setting; ``:16:8`` also works)."""

#: Training hyper-parameters an epoch entry may set, with their defaults.
HYPERPARAMETERS: Mapping[str, Any] = {
    "lr": 0.01, "momentum": 0.9, "weight_decay": 0.0, "batch_size": 32, "optimizer": "sgd",
}
_OPTIMIZERS = ("sgd", "adam", "adamw")
_EVAL_ROWS = 4096


@dataclass(frozen=True)
class TrainData:
    """The training and validation sets of a study.

    Attributes:
        x: float32 (N, F) training features, or a :class:`~modelsql.recursive.trees.Trees` of N trees (the
            network then takes a minibatch of trees; ``in_features`` is the values per node).
        y: (N,) targets: int64 class indices in [0, n_outputs) for classification,
            float32 values for regression.
        x_val: float32 (M, F) validation features (or M trees), M >= 1.
        y_val: (M,) validation targets, typed like ``y``.
        task: ``"classification"`` or ``"regression"``.
        n_outputs: number of classes for classification, 1 for regression.
    """

    x: np.ndarray
    y: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    task: str
    n_outputs: int


@dataclass(frozen=True)
class StageSpec:
    """What one stage trains.

    Attributes:
        factory: ``"package.module:function"``, called as
            ``factory(in_features=F, n_outputs=K, **factory_params)``.
        factory_params: sorted ``(name, value)`` constant factory kwargs (JSON scalars).
        epochs: one entry per epoch this stage trains, each a sorted tuple of
            ``(name, value)`` training hyper-parameters (names in ``HYPERPARAMETERS``;
            missing names take the defaults).
        first_epoch: 0-based index of the epoch ``epochs[0]`` trains; the parent's
            checkpoint must end there (0 without a parent).
        seed: the study-level seed, 0 <= seed < 2**32 (the same for every stage of a study,
            or trials share no prefix).
        threads: torch intra-op threads, set at the start of the stage and recorded in the
            checkpoint.
        device: ``"cpu"`` or ``"cuda:N"`` (a device of :func:`modelsql.operators.backends.devices.available`),
            where the model and the data live while the stage trains.
    """

    factory: str
    factory_params: tuple[tuple[str, Any], ...]
    epochs: tuple[tuple[tuple[str, Any], ...], ...]
    first_epoch: int
    seed: int
    threads: int
    device: str = "cpu"


@dataclass(frozen=True)
class StageResult:
    """What a stage produced.

    Attributes:
        checkpoint: ``torch.save`` bytes of the state after the stage's last epoch: a dict
            with ``model``, ``optimizer`` (state dicts), ``torch_rng``, ``generator``
            (uint8 tensors), ``numpy_rng``, ``python_rng`` (plain values), ``epoch``
            (= first_epoch + len(epochs)), ``threads`` and ``optimizer_name``.
        metrics: one dict per trained epoch: ``train_loss`` (mean of the batch losses),
            ``val_loss`` (mean over the validation rows) and, for classification,
            ``val_accuracy``.
        seconds: wall time of the stage, not counting imports.
    """

    checkpoint: bytes
    metrics: tuple[dict[str, float], ...]
    seconds: float


class TrainingDiverged(DataError):
    """A training or validation loss became NaN or infinite; the message names the epoch
    (0-based, counted over the whole trial) and, for a training loss, the batch."""

    code = "training_diverged"

    def __init__(self, epoch: int, batch: Optional[int], value: float) -> None:
        where = f"batch {batch}" if batch is not None else "validation"
        super().__init__(f"training diverged at epoch {epoch} ({where}): the loss is {value}")
        self.epoch = epoch
        self.batch = batch


def _build_model(ref: str, params: Union[Mapping[str, Any], Sequence[tuple[str, Any]]],
                 in_features: int, n_outputs: int) -> "torch.nn.Module":
    import torch

    fn = resolve_factory(ref)
    try:
        model = fn(in_features=in_features, n_outputs=n_outputs, **dict(params))
    except (TypeError, ValueError) as exc:
        raise ProgrammingError(f"factory {ref!r} refused its parameters: {exc}",
                               code="invalid_factory_params") from exc
    if not isinstance(model, torch.nn.Module):
        raise ProgrammingError(f"factory {ref!r} returned {type(model).__name__}, not a torch.nn.Module",
                               code="invalid_factory")
    return model


# ------------------------------------------------------------------ hyper-parameters


def _epoch_hparams(entry: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """The full hyper-parameters of one epoch entry (defaults filled in, values checked)."""
    hp = dict(HYPERPARAMETERS)
    for name, value in entry:
        if name not in HYPERPARAMETERS:
            raise ProgrammingError(
                f"unknown training hyper-parameter {name!r} (known: {', '.join(HYPERPARAMETERS)})",
                code="unknown_hyperparameter")
        hp[name] = value
    for name in ("lr", "momentum", "weight_decay"):
        v = hp[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise _invalid(name, v, "a finite number >= 0")
    if hp["lr"] == 0:
        raise _invalid("lr", hp["lr"], "a number > 0")
    if hp["momentum"] > 1:
        raise _invalid("momentum", hp["momentum"], "a number in [0, 1]")
    b = hp["batch_size"]
    if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1:
        raise _invalid("batch_size", b, "a positive integer")
    if hp["optimizer"] not in _OPTIMIZERS:
        raise _invalid("optimizer", hp["optimizer"], " or ".join(repr(o) for o in _OPTIMIZERS))
    return hp


def check_epoch(entry: Sequence[tuple[str, Any]]) -> None:
    """Check one epoch's training hyper-parameters (as :func:`train_stage` would, before training).

    Raises:
        ProgrammingError: ``unknown_hyperparameter``, ``invalid_hyperparameter``.
    """
    _epoch_hparams(entry)


def check_factory(ref: str, params: Union[Mapping[str, Any], Sequence[tuple[str, Any]]], in_features: int,
                  n_outputs: int, trees: bool = False) -> None:
    """Build the factory's model with ``params`` and run it on a zero batch of 2 rows (float32 (2, F), or with
    ``trees`` two one-node trees): its output must be (2, n_outputs). The caller's RNG states, torch settings,
    working directory and ``sys.path`` are kept (:func:`_caller_state_kept`).

    Raises:
        ProgrammingError: ``factory_not_found``, ``invalid_factory_params`` (it refused the arguments),
            ``invalid_factory`` (not a module, or it failed or gave another output shape).
    """
    import torch

    with _caller_state_kept():
        model = _build_model(ref, params, int(in_features), int(n_outputs))
        try:
            probe = Trees([np.zeros((1, int(in_features)), np.float32)] * 2, [np.array([-1])] * 2) if trees else \
                torch.zeros(2, int(in_features))
            with torch.no_grad():
                out = model.eval()(probe)
        except Exception as exc:  # noqa: BLE001 - the user's module; its error, named
            what = "batch of two one-node trees" if trees else f"(2, {in_features}) float32 batch"
            raise ProgrammingError(f"factory {ref!r} built a model that fails on a {what}: "
                                   f"{type(exc).__name__}: {exc}", code="invalid_factory") from None
    shape = tuple(getattr(out, "shape", ()))
    if shape != (2, n_outputs):
        raise ProgrammingError(f"factory {ref!r} built a model whose output for a (2, {in_features}) batch has shape "
                               f"{shape}; it must be (2, {n_outputs}) ({n_outputs} "
                               f"{'classes' if n_outputs > 1 else 'value'} per row)", code="invalid_factory")


def _invalid(name: str, value: Any, want: str) -> ProgrammingError:
    err = ProgrammingError(f"hyper-parameter {name} must be {want}, got {value!r}", code="invalid_hyperparameter")
    err.hyperparameter = name
    return err


def _stage_hparams(spec: StageSpec) -> list[dict[str, Any]]:
    if not spec.epochs:
        raise ProgrammingError("a stage trains at least one epoch", code="invalid_stage")
    if isinstance(spec.threads, bool) or not isinstance(spec.threads, int) or spec.threads < 1:
        raise ProgrammingError(f"threads must be a positive integer, got {spec.threads!r}", code="invalid_stage")
    if not isinstance(spec.seed, int) or not 0 <= spec.seed < 2**32:
        raise ProgrammingError(f"the seed must be an integer in [0, 2**32), got {spec.seed!r}", code="invalid_stage")
    hps = [_epoch_hparams(e) for e in spec.epochs]
    names = {hp["optimizer"] for hp in hps}
    if len(names) > 1:
        raise _not_schedulable(sorted(names))
    return hps


def _not_schedulable(names: Sequence[str]) -> ProgrammingError:
    return ProgrammingError(
        f"the optimizer cannot change during a trial (got {' and '.join(map(repr, names))})",
        code="hyperparameter_not_schedulable")


def _make_optimizer(model: "torch.nn.Module", hp: Mapping[str, Any]) -> "torch.optim.Optimizer":
    import torch

    params = model.parameters()
    if hp["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=hp["lr"], momentum=hp["momentum"], weight_decay=hp["weight_decay"])
    cls = torch.optim.Adam if hp["optimizer"] == "adam" else torch.optim.AdamW
    return cls(params, lr=hp["lr"], weight_decay=hp["weight_decay"])


def _apply_hparams(optimizer: "torch.optim.Optimizer", hp: Mapping[str, Any]) -> None:
    """Set this epoch's lr / weight decay (and momentum for SGD) in every param group."""
    for group in optimizer.param_groups:
        group["lr"] = float(hp["lr"])
        group["weight_decay"] = float(hp["weight_decay"])
        if "momentum" in group:
            group["momentum"] = float(hp["momentum"])


# ------------------------------------------------------------------ RNG state


@contextlib.contextmanager
def _caller_state_kept() -> Iterator[None]:
    """Run a factory's model from torch's defaults whatever the caller set, and give the caller back its global RNG
    states, thread count, torch settings and process state (:func:`_process_state_kept`) after (a model may change
    any of them): within, gradients on (also under the caller's ``no_grad`` or ``inference_mode``), autocast off,
    float32 the default dtype, the CPU the default device, ``"highest"`` float32 matmul precision, anomaly
    detection and deterministic algorithms off (a fresh worker interpreter's settings; on CUDA
    :func:`deterministic_on` turns the latter on). A setting is only written when it differs (turning
    deterministic algorithms on or off imports torch's compiler, seconds)."""
    import torch

    saved = (random.getstate(), np.random.get_state(), torch.get_rng_state(), torch.get_num_threads())
    settings = _torch_settings()
    try:
        with _process_state_kept():
            _set_torch_settings(settings._replace(dtype=torch.float32, anomaly=False, deterministic=False,
                                                  device=torch.device("cpu"), matmul_precision="highest"))
            with torch.inference_mode(False), torch.enable_grad(), torch.autocast("cpu", enabled=False):
                yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.set_rng_state(saved[2])
        torch.set_num_threads(saved[3])
        _set_torch_settings(settings)


@contextlib.contextmanager
def _process_state_kept() -> Iterator[None]:
    """Give the caller back its working directory, ``sys.path``, environment variables and warning filters."""
    try:
        cwd: Optional[str] = os.getcwd()
    except OSError:  # the working directory is gone: nothing to go back to
        cwd = None
    path, environ = list(sys.path), dict(os.environ)
    try:
        with warnings.catch_warnings():
            yield
    finally:
        if cwd is not None:
            with contextlib.suppress(OSError):
                os.chdir(cwd)
        sys.path[:] = path
        if dict(os.environ) != environ:
            os.environ.clear()
            os.environ.update(environ)


class _TorchSettings(NamedTuple):
    """torch's process-wide settings a model may read or change."""

    dtype: Any
    anomaly: bool
    anomaly_check_nan: bool
    deterministic: bool
    deterministic_warn_only: bool
    device: Any
    matmul_precision: str


def _torch_settings() -> _TorchSettings:
    import torch

    return _TorchSettings(torch.get_default_dtype(), torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled(),
                          torch.are_deterministic_algorithms_enabled(),
                          torch.is_deterministic_algorithms_warn_only_enabled(), torch.get_default_device(),
                          torch.get_float32_matmul_precision())


def _set_torch_settings(wanted: _TorchSettings) -> None:
    """Set what :func:`_torch_settings` reads, writing only what differs."""
    import torch

    now = _torch_settings()
    if now.dtype != wanted.dtype:
        torch.set_default_dtype(wanted.dtype)
    if (now.anomaly, now.anomaly_check_nan) != (wanted.anomaly, wanted.anomaly_check_nan):
        torch.set_anomaly_enabled(wanted.anomaly, wanted.anomaly_check_nan)
    if (now.deterministic, now.deterministic_warn_only) != (wanted.deterministic, wanted.deterministic_warn_only):
        torch.use_deterministic_algorithms(wanted.deterministic, warn_only=wanted.deterministic_warn_only)
    if now.device != wanted.device:
        torch.set_default_device(wanted.device)
    if now.matmul_precision != wanted.matmul_precision:
        torch.set_float32_matmul_precision(wanted.matmul_precision)


def device_kind(device: str) -> str:
    """``"cpu"`` or ``"cuda"``: what a device ``"cpu"`` / ``"cuda:N"`` is (what the stage-tree key holds)."""
    return str(device).split(":", 1)[0]


def deterministic_cuda() -> None:
    """Make this process's CUDA kernels deterministic: ``CUBLAS_WORKSPACE_CONFIG`` (if unset; it only takes
    effect when set before the process's first cuBLAS call), ``torch.use_deterministic_algorithms(True)``,
    cuDNN deterministic and its autotuner off. An operator without a deterministic kernel then raises."""
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def _check_device(device: Any) -> str:
    """``device`` when torch can train there.

    Raises:
        ProgrammingError: ``invalid_stage`` for anything but ``"cpu"`` or ``"cuda:N"``.
        NotSupportedError: ``device_not_available`` (no such CUDA device in this process).
    """
    text = str(device)
    if text == "cpu":
        return text
    kind, _, ordinal = text.partition(":")
    if kind != "cuda" or not ordinal.isdigit():
        raise ProgrammingError(f"a stage's device is 'cpu' or 'cuda:N', got {device!r}", code="invalid_stage")
    import torch

    if not torch.cuda.is_available() or int(ordinal) >= torch.cuda.device_count():
        raise NotSupportedError(f"the training process has no device {text} (torch sees "
                                f"{torch.cuda.device_count()} CUDA device(s))", code="device_not_available")
    return text


@contextlib.contextmanager
def deterministic_on(device: str) -> Iterator[None]:
    """Within: on ``"cuda:N"``, this process's deterministic kernels (:func:`deterministic_cuda`); after: the
    caller's flags and the device's RNG state as they were. On ``"cpu"`` it does nothing."""
    if device == "cpu":
        yield
        return
    import torch

    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark)
    deterministic_cuda()
    rng = torch.cuda.get_rng_state(device)
    try:
        yield
    finally:
        torch.cuda.set_rng_state(rng, device)
        torch.use_deterministic_algorithms(saved[0])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[1], saved[2]


def nondeterministic_error(exc: BaseException) -> Optional[NotSupportedError]:
    """``NotSupportedError`` code ``nondeterministic_operator`` naming the operator, when ``exc`` is torch's
    refusal (under ``use_deterministic_algorithms``) of an operator without a deterministic CUDA kernel; None
    for any other error."""
    text = str(exc)
    if not isinstance(exc, RuntimeError) or "does not have a deterministic implementation" not in text:
        return None
    operator = text.split(" does not have", 1)[0].strip().split()[-1]
    return NotSupportedError(
        f"operator {operator} has no deterministic CUDA implementation, so this model cannot train bit-exactly "
        "on the GPU (stage trees need that); train it with device = 'cpu', or replace that layer by one with a "
        "deterministic kernel", code="nondeterministic_operator")


def _numpy_state() -> list[Any]:
    import torch

    state = np.random.get_state()
    assert isinstance(state, tuple)  # legacy=True (the default): MT19937's state as a tuple
    kind, keys, pos, has_gauss, cached = state
    return [str(kind), torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)]


def _set_numpy_state(state: Sequence[Any]) -> None:
    kind, keys, pos, has_gauss, cached = state
    np.random.set_state((kind, keys.numpy().astype(np.uint32), int(pos), int(has_gauss), float(cached)))


def _python_state() -> list[Any]:
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]


def _set_python_state(state: Sequence[Any]) -> None:
    version, internal, gauss = state
    random.setstate((version, tuple(internal), gauss))


# ------------------------------------------------------------------ the stage


def train_stage(spec: StageSpec, data: TrainData, parent: Optional[bytes]) -> StageResult:
    """Train ``spec.epochs`` from ``parent``'s checkpoint (or from scratch), bit-exactly.

    The result equals, bit for bit, training the trial's whole epoch sequence in one stage
    from scratch, on the same torch build, CPU type and thread count (on CUDA: the same GPU model, driver
    and libraries, with the deterministic kernels of :func:`deterministic_cuda`) (Hippo's stage trees
    rely on it: see the module docstring), whatever torch settings the caller has (:func:`_caller_state_kept`:
    gradients, default dtype, anomaly detection); the caller's global RNG states, thread count and those
    settings are restored afterwards.

    Args:
        spec: what to train (factory, per-epoch hyper-parameters, first epoch, seed, threads).
        data: float32 (N, F) / (M, F) features with their targets (see ``TrainData``).
        parent: the checkpoint bytes of the parent stage, ending at ``spec.first_epoch``;
            ``None`` to start from scratch at epoch 0.
    Raises:
        ProgrammingError: code ``unknown_hyperparameter`` (a name outside ``HYPERPARAMETERS``),
            ``invalid_hyperparameter``, ``hyperparameter_not_schedulable`` (the optimizer
            differs between epochs or from the parent's), ``checkpoint_mismatch`` (the parent
            ends at another epoch), ``factory_not_found``, ``invalid_factory_params``,
            ``invalid_factory``, ``invalid_stage``.
        OperationalError(code="threads_mismatch"): the parent was trained with another
            thread count (the floats would differ); ``device_mismatch``: on another kind of device.
        NotSupportedError: ``device_not_available`` (``spec.device`` is a CUDA device this process lacks),
            ``nondeterministic_operator`` (on CUDA, the model uses an operator without a deterministic
            kernel: see the module docstring), ``device_not_supported`` (a table of trees on CUDA).
        DataError: ``invalid_training_data`` (shapes, dtypes, labels), or
            ``TrainingDiverged`` (a NaN/inf loss; names the epoch and batch).
    """
    importlib.import_module("torch._dynamo")  # torch.optim imports it on first use: keep it out of ``seconds``

    hps = _stage_hparams(spec)
    device = _check_device(spec.device)
    with _caller_state_kept(), deterministic_on(device):
        tensors = _on_device(_tensors(data), device)
        start = time.perf_counter()
        try:
            metrics, checkpoint = _train(spec, data, parent, hps, tensors)
        except RuntimeError as exc:
            refused = nondeterministic_error(exc)
            if refused is None:
                raise
            raise refused from None
        seconds = time.perf_counter() - start
    return StageResult(checkpoint=checkpoint, metrics=metrics, seconds=seconds)


def _train(spec: StageSpec, data: TrainData, parent: Optional[bytes], hps: list, tensors: tuple):
    """(metrics per epoch, checkpoint bytes) of the stage: set up, restore, train, checkpoint."""
    model, optimizer, gen = _setup(spec, data, hps[0])
    if parent is not None:
        _restore(parent, spec, hps[0]["optimizer"], model, optimizer, gen)
    elif spec.first_epoch != 0:
        raise ProgrammingError(f"a stage without a parent starts at epoch 0, not {spec.first_epoch}",
                               code="checkpoint_mismatch")
    metrics = tuple(
        _train_epoch(spec.first_epoch + i, hp, model, optimizer, gen, tensors, data.task)
        for i, hp in enumerate(hps))
    return metrics, _checkpoint(spec, hps[0]["optimizer"], model, optimizer, gen)


def _on_device(tensors: tuple, device: str) -> tuple:
    """The study's tensors on ``device`` (themselves on the CPU).

    Raises:
        NotSupportedError: ``device_not_supported`` for a table of trees on CUDA (a tree network reads its
            node arrays on the CPU).
    """
    if device == "cpu":
        return tensors
    if isinstance(tensors[0], Trees):
        raise NotSupportedError("a study over a table of trees trains on the CPU only (device = 'cpu')",
                                code="device_not_supported")
    return tuple(t.to(device) for t in tensors)


def _setup(spec: StageSpec, data: TrainData, hp: Mapping[str, Any]):
    """Threads, seeds, model, optimizer and data-order generator, in the measured order."""
    import torch

    torch.set_num_threads(spec.threads)
    random.seed(spec.seed)
    np.random.seed(spec.seed)
    torch.manual_seed(spec.seed)
    model = _build_model(spec.factory, spec.factory_params, data.x.shape[1], data.n_outputs)
    if spec.device != "cpu":
        model = model.to(spec.device)  # built on the CPU: the initial weights are the CPU's
    optimizer = _make_optimizer(model, hp)
    gen = torch.Generator()  # on the CPU on every device: the same data order everywhere
    gen.manual_seed(spec.seed)
    return model, optimizer, gen


def _restore(parent: bytes, spec: StageSpec, optimizer_name: str, model, optimizer, gen) -> None:
    import torch

    state = torch.load(io.BytesIO(parent), weights_only=True, map_location="cpu")
    if state["epoch"] != spec.first_epoch:
        raise ProgrammingError(f"the parent checkpoint ends at epoch {state['epoch']}, "
                               f"but the stage starts at epoch {spec.first_epoch}", code="checkpoint_mismatch")
    if state["threads"] != spec.threads:
        raise OperationalError(f"the parent checkpoint was trained with {state['threads']} threads, "
                               f"this stage with {spec.threads}: results would differ", code="threads_mismatch")
    if state["optimizer_name"] != optimizer_name:
        raise _not_schedulable([state["optimizer_name"], optimizer_name])
    if state.get("device", "cpu") != device_kind(spec.device):
        raise OperationalError(f"the parent checkpoint was trained on {state.get('device', 'cpu')}, this stage "
                               f"trains on {spec.device}: results would differ", code="device_mismatch")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    gen.set_state(state["generator"])
    _set_numpy_state(state["numpy_rng"])
    _set_python_state(state["python_rng"])
    if spec.device != "cpu":
        torch.cuda.set_rng_state(state["cuda_rng"], spec.device)


def _checkpoint(spec: StageSpec, optimizer_name: str, model, optimizer, gen) -> bytes:
    """The state after the stage, every tensor on the CPU; a CUDA stage adds ``device`` ("cuda") and
    ``cuda_rng`` (the device's generator state)."""
    import torch

    cpu = _on_cpu if spec.device != "cpu" else (lambda value: value)  # a CPU stage saves exactly as before
    state = {
        "model": cpu(model.state_dict()),
        "optimizer": cpu(optimizer.state_dict()),
        "torch_rng": torch.get_rng_state(),
        "generator": gen.get_state(),
        "numpy_rng": _numpy_state(),
        "python_rng": _python_state(),
        "epoch": spec.first_epoch + len(spec.epochs),
        "threads": spec.threads,
        "optimizer_name": optimizer_name,
    }
    if spec.device != "cpu":
        state.update(device=device_kind(spec.device), cuda_rng=torch.cuda.get_rng_state(spec.device))
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def _on_cpu(value: Any) -> Any:
    """``value`` (a state dict, nested) with its tensors on the CPU (CPU tensors are kept as they are)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value if value.device.type == "cpu" else value.detach().cpu()
    if isinstance(value, dict):
        return type(value)((k, _on_cpu(v)) for k, v in value.items()) if not hasattr(value, "_metadata") else \
            _with_metadata(value)
    if isinstance(value, list):
        return [_on_cpu(v) for v in value]
    return value


def _with_metadata(state: Any) -> Any:
    """A module ``state_dict`` (an OrderedDict with ``_metadata``) with CPU tensors, its metadata kept."""
    out = type(state)((k, _on_cpu(v)) for k, v in state.items())
    out._metadata = state._metadata
    return out


def _tensors(data: TrainData) -> tuple["torch.Tensor", ...]:
    """(x, y, x_val, y_val) as torch tensors, built once; targets shaped for the loss."""
    import torch

    if data.task not in ("classification", "regression"):
        raise _bad_data(f'task must be "classification" or "regression", got {data.task!r}')
    if isinstance(data.x, Trees) or isinstance(data.x_val, Trees):
        return _tree_tensors(data)
    x, x_val = (np.asarray(a) for a in (data.x, data.x_val))
    if x.ndim != 2 or x_val.ndim != 2 or x.shape[1] != x_val.shape[1] or len(x) == 0 or len(x_val) == 0:
        raise _bad_data(f"features must be non-empty (N, F) and (M, F) arrays, got {x.shape} and {x_val.shape}")
    if len(data.y) != len(x) or len(data.y_val) != len(x_val):
        raise _bad_data(f"{len(x)}/{len(x_val)} feature rows but {len(data.y)}/{len(data.y_val)} targets")
    ty = _targets(data)
    tx = [torch.as_tensor(np.ascontiguousarray(a, dtype=np.float32)) for a in (x, x_val)]
    return tx[0], ty[0], tx[1], ty[1]


def _targets(data: TrainData) -> tuple["torch.Tensor", "torch.Tensor"]:
    import torch

    ys = [np.asarray(data.y), np.asarray(data.y_val)]
    if data.task == "classification":
        if any(y.size and (y.min() < 0 or y.max() >= data.n_outputs) for y in ys):
            raise _bad_data(f"class indices must lie in [0, {data.n_outputs})")
        train, val = (torch.as_tensor(y.astype(np.int64)) for y in ys)
    else:
        train, val = (torch.as_tensor(y.astype(np.float32).reshape(-1, 1)) for y in ys)
    return train, val


def _tree_tensors(data: TrainData) -> tuple:
    """(trees, y, validation trees, y_val) for a study over a table of trees (the network takes Trees)."""
    if not (isinstance(data.x, Trees) and isinstance(data.x_val, Trees)) or not len(data.x) or not len(data.x_val):
        raise _bad_data("training and validation features must both be non-empty tables of trees")
    if len(data.y) != len(data.x) or len(data.y_val) != len(data.x_val):
        raise _bad_data(f"{len(data.x)}/{len(data.x_val)} trees but {len(data.y)}/{len(data.y_val)} targets")
    y, y_val = _targets(data)
    return data.x, y, data.x_val, y_val


def _bad_data(why: str) -> DataError:
    return DataError(f"invalid training data: {why}", code="invalid_training_data")


def _loss(out: "torch.Tensor", y: "torch.Tensor", task: str, reduction: str = "mean") -> "torch.Tensor":
    import torch.nn.functional as F

    if task == "classification":
        return F.cross_entropy(out, y, reduction=reduction)
    return F.mse_loss(out, y, reduction=reduction)


def _train_epoch(epoch: int, hp: Mapping[str, Any], model, optimizer, gen, tensors, task: str) -> dict[str, float]:
    import torch

    x, y, x_val, y_val = tensors
    _apply_hparams(optimizer, hp)
    model.train()
    perm = torch.randperm(len(x), generator=gen)  # drawn on the CPU on every device
    if isinstance(x, torch.Tensor) and x.device.type != "cpu":  # a table of trees trains on the CPU
        return _train_epoch_on_device(epoch, hp, model, optimizer, perm.to(x.device), tensors, task)
    size = int(hp["batch_size"])
    losses = []
    for batch, i in enumerate(range(0, len(x), size)):
        idx = perm[i:i + size]
        optimizer.zero_grad()
        loss = _loss(model(x[idx]), y[idx], task)
        value = loss.item()
        if not math.isfinite(value):
            raise TrainingDiverged(epoch, batch, value)
        loss.backward()
        optimizer.step()
        losses.append(value)
    return {"train_loss": sum(losses) / len(losses), **_evaluate(epoch, model, x_val, y_val, task)}


def _train_epoch_on_device(epoch: int, hp: Mapping[str, Any], model, optimizer, perm, tensors,
                           task: str) -> dict[str, float]:
    """:func:`_train_epoch` on a GPU: the batch losses stay there until the epoch ends (reading each one would
    wait for the GPU at every step), so a NaN loss is found then, naming its batch as on the CPU; the epoch's
    numbers are the same as reading each loss at once."""
    import torch

    x, y, x_val, y_val = tensors
    size = int(hp["batch_size"])
    losses = []
    for i in range(0, len(x), size):
        idx = perm[i:i + size]
        optimizer.zero_grad()
        loss = _loss(model(x[idx]), y[idx], task)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    values = torch.stack(losses).tolist()
    bad = next((b for b, v in enumerate(values) if not math.isfinite(v)), None)
    if bad is not None:
        raise TrainingDiverged(epoch, bad, values[bad])
    return {"train_loss": sum(values) / len(values), **_evaluate(epoch, model, x_val, y_val, task)}


def _evaluate(epoch: int, model, x_val, y_val, task: str) -> dict[str, float]:
    import torch

    model.eval()
    total, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(x_val), _EVAL_ROWS):
            out = model(x_val[i:i + _EVAL_ROWS])
            total += _loss(out, y_val[i:i + _EVAL_ROWS], task, "sum").item()
            if task == "classification":
                correct += int((out.argmax(dim=1) == y_val[i:i + _EVAL_ROWS]).sum())
    val_loss = total / len(x_val)
    if not math.isfinite(val_loss):
        raise TrainingDiverged(epoch, None, val_loss)
    if task == "classification":
        return {"val_loss": val_loss, "val_accuracy": correct / len(x_val)}
    return {"val_loss": val_loss}


# ------------------------------------------------------------------ loading


def load_trained(spec_factory: str, factory_params: Union[Mapping[str, Any], Sequence[tuple[str, Any]]],
                 checkpoint: bytes, data_shape: tuple[int, int]) -> "torch.nn.Module":
    """The model ``spec_factory(in_features, n_outputs, **factory_params)`` with the weights of
    ``checkpoint`` (a ``StageResult.checkpoint``), in eval mode, e.g. to export the best
    trial to ONNX. ``data_shape`` is ``(in_features, n_outputs)``. The caller's global RNG
    state is left as it was (building the model draws initial weights from it).

    Raises:
        ProgrammingError: ``factory_not_found``, ``invalid_factory_params``, ``invalid_factory``.
    """
    import torch

    in_features, n_outputs = data_shape
    with torch.random.fork_rng(devices=[]):
        model = _build_model(spec_factory, factory_params, int(in_features), int(n_outputs))
    state = torch.load(io.BytesIO(checkpoint), weights_only=True, map_location="cpu")
    model.load_state_dict(state["model"])
    return model.eval()


def for_inference(model: "torch.nn.Module", task: str, labels: Optional[Sequence[Any]] = None) -> "torch.nn.Module":
    """``model`` wrapped for PREDICT: classification gives ``label`` (int64 (N,): the class label when
    ``labels`` are integers, else the class index) and ``probabilities`` (float32 (N, K), softmax);
    regression gives ``prediction`` (float32 (N,)). Exported to ONNX by :mod:`modelsql.converters.torch`."""
    import torch

    class _Classifier(torch.nn.Module):
        def __init__(self, inner, values):
            super().__init__()
            self.inner = inner
            self.register_buffer("values", torch.tensor(values, dtype=torch.int64))

        def forward(self, x):
            logits = self.inner(x)
            return self.values[torch.argmax(logits, dim=1)], torch.softmax(logits, dim=1)

    class _Regressor(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)[:, 0]

    if task == "regression":
        return _Regressor(model).eval()
    numeric = labels is not None and all(isinstance(v, int) and not isinstance(v, bool) for v in labels)
    k = len(labels) if labels is not None else None
    values: list[Any] = list(labels) if labels is not None and numeric else list(range(k if k is not None else 0))
    return _Classifier(model, values).eval()
