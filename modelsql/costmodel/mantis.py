"""A learned latency model of ONNX inference runs: an additive physical model whose terms are chosen by
sparse (Lasso) selection, optionally corrected by a sparse polynomial in log space (Mantis: Chun, Huang,
Lee, Maniatis and Naik, "Mantis: Predicting System Performance through Program Analysis and Modeling",
2010; per-operator-class work terms as in nn-Meter, Zhang et al., MobiSys 2021, and LitePred, NSDI 2024).

Inputs are the rows of :func:`modelsql.costmodel.features.row` (:data:`~modelsql.costmodel.features.FEATURES`);
the target is the median latency of one run, in milliseconds. With ``t`` the thread count and ``g`` the run's
target (backend and device; every coefficient below is per target)::

    physical(x) = c_call + c_call_sync (1 - 1/t) + c_io io_tensors            per-call overhead, pool wake-up
                + sum_k (c_k + c'_k (1 - 1/t)) kernels_k                      per-kernel dispatch and join
                + sum_q (c_q + c'_q / t) q                                    Amdahl: serial + parallel work
        k: all kernels and each class (conv, dense, element-wise, normalization, reduction, data, other)
        q: product FLOPs (all, and conv / gemm / matmul), bytes moved (all, conv / gemm / matmul, the
           memory-bound classes), tree-ensemble visits and leaf outputs, ai.onnx.ml linear FLOPs;
           serial only: bytes of one-row products (GEMV) and input bytes

    latency_ms(x) = max(physical(x), FLOOR_MS) * exp(clip(correction(x), -log 3, log 3))

Every coefficient ``c`` is a physical constant (ms per call, per kernel, per FLOP, per byte), non-negative,
so predictions are positive and grow with every work feature. The fit minimizes relative error
(``pred / y - 1``: a 10 us run weighs as much as a 1 s one) in three steps:

1. selection: the non-negative Lasso over all candidate terms (:data:`PHYSICAL_TERMS`), its L1 weight
   chosen by 5-fold cross-validation (Mantis's sparse regression). Totals stand beside their per-class
   parts, so with few training rows one shared rate is chosen, with more rows a rate per class;
2. values: non-negative least squares (Lawson-Hanson) on the selected terms (a relaxed Lasso: no shrinkage);
3. robustness: rows are reweighted by ``1 / max(|relative error|, ROBUST_DELTA)`` and steps 1-2 repeated
   (iteratively reweighted least squares, approximating an L1 loss, so noisy runs do not pull the fit).

The optional correction (``CostModel(correction=True)``) is Mantis's non-linear term: a degree-2 polynomial
``b + sum a_i v_i + sum a_ij v_i v_j`` of the logged program features ``v`` (:data:`LOG_VARIABLES`, plus
``log(physical)`` and the target one-hots), Lasso-selected (one-standard-error rule) on the physical model's
out-of-fold log residuals and clipped to a factor of :data:`CLIP_FACTOR`. It is off by default: on the
project's zoo (``benchmarks/cost_model.py``) it lowered the share of held-out runs within 10% and, much more,
of models never seen (the polynomial fits the training models' quirks, not physics).

A target with no training rows cannot be predicted (:meth:`CostModel.predict` raises; the exported ONNX
graph gives NaN).
"""

from __future__ import annotations

import json
import math
from typing import Mapping, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from modelsql.errors import DataError, ProgrammingError
from modelsql.costmodel.features import FEATURES, KERNEL_CLASSES, MEMORY_CLASSES, PRODUCT_CLASSES, TARGETS, matrix, target_column

__all__ = ["CostModel", "CLIP_FACTOR", "QUANTITIES", "PHYSICAL_TERMS", "LOG_VARIABLES", "nnls", "nnqp", "lasso"]

CLIP_FACTOR = 3.0
"""The correction multiplies the physical estimate by at most this factor, or divides it by at most it."""
FLOOR_MS = 1e-6
"""The smallest physical estimate, ms (keeps the log defined for a row whose work terms are all zero)."""

_ALL_KERNELS = tuple(f"{c}_kernels" for c in KERNEL_CLASSES)
_ALL_BYTES = tuple(f"{c}_bytes" for c in (*PRODUCT_CLASSES, *MEMORY_CLASSES))
QUANTITIES: dict[str, tuple[str, ...]] = {
    "io_tensors": ("io_tensors",),
    "kernels": _ALL_KERNELS,
    **{k: (k,) for k in _ALL_KERNELS},
    "product_flops": tuple(f"{c}_flops" for c in PRODUCT_CLASSES),
    **{f"{c}_flops": (f"{c}_flops",) for c in PRODUCT_CLASSES},
    "bytes": _ALL_BYTES,
    **{f"{c}_bytes": (f"{c}_bytes",) for c in PRODUCT_CLASSES},
    "memory_bytes": tuple(f"{c}_bytes" for c in MEMORY_CLASSES),
    "gemv_bytes": ("gemv_bytes",),
    "input_bytes": ("input_bytes",),
    "tree_visits": ("tree_visits",),
    "tree_outputs": ("tree_outputs",),
    "ml_flops": ("ml_flops",),
}
"""Quantities of the physical model: name -> the features summed into it. Totals (``kernels``,
``product_flops``, ``bytes``) stand beside their parts, so that with few training rows the sparse selection
can explain them with one shared rate, and with more rows with a rate per operator class."""

PHYSICAL_TERMS: tuple[tuple[str, str], ...] = (
    ("call", "serial"), ("call", "sync"), ("io_tensors", "serial"),
    *((k, s) for k in ("kernels", *_ALL_KERNELS) for s in ("serial", "sync")),
    *((q, s) for q in ("product_flops", *(f"{c}_flops" for c in PRODUCT_CLASSES), "bytes",
                       *(f"{c}_bytes" for c in PRODUCT_CLASSES), "memory_bytes", "tree_visits", "tree_outputs",
                       "ml_flops") for s in ("serial", "parallel")),
    ("gemv_bytes", "serial"), ("input_bytes", "serial"),
)
"""Candidate terms of the physical model of each target: (quantity, scaling); ``call`` is the constant 1.
Scalings: ``serial`` (x 1), ``parallel`` (x 1/threads), ``sync`` (x (1 - 1/threads): thread-pool wake-up
and join, 0 on one thread)."""

LOG_VARIABLES: dict[str, tuple[str, ...]] = {
    "batch_size": ("batch_size",),
    "threads": ("threads",),
    "merge_factor": ("merge_factor",),
    "kernels": _ALL_KERNELS,
    "product_flops": QUANTITIES["product_flops"],
    "bytes": _ALL_BYTES,
    "param_bytes": ("param_bytes",),
    "ml_work": ("tree_visits", "tree_outputs", "ml_flops"),
}
"""Variables of the correction polynomial, each ``log(1 + sum of these features)``."""

ROBUST_ITERATIONS = 4
"""Reweighting rounds of the physical fit (iteratively reweighted least squares)."""
ROBUST_DELTA = 0.05
"""Relative errors below this weigh as this (the reweighting approximates an L1 loss on relative error)."""
_PENALTIES = (0.0, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)  # x the largest useful L1 weight
_SCALINGS = {"serial": (1.0, 0.0), "parallel": (0.0, 1.0), "sync": (1.0, -1.0)}  # a + b / threads
_FORMAT = "modelsql.costmodel.mantis/1"


def _physical_spec(targets: Sequence[str]) -> list[tuple[str, str, str]]:
    """(target, quantity, scaling) of every candidate physical term."""
    return [(t, q, s) for t in targets for q, s in PHYSICAL_TERMS]


def _term_name(target: str, quantity: str, scaling: str) -> str:
    return f"{target}:{quantity}" + {"serial": "", "parallel": "/threads", "sync": "*(1-1/threads)"}[scaling]


def _physical_matrices(spec: Sequence[tuple[str, str, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(S [F, J], G [F, J], a [J], b [J])``: term j of row x is ``(x S)_j (x G)_j (a_j + b_j / threads)``."""
    col = {n: i for i, n in enumerate(FEATURES)}
    s, g = np.zeros((len(FEATURES), len(spec))), np.zeros((len(FEATURES), len(spec)))
    for j, (target, quantity, _) in enumerate(spec):
        g[col[target_column(target)], j] = 1.0
        for name in ((target_column(target),) if quantity == "call" else QUANTITIES[quantity]):
            s[col[name], j] = 1.0
    a = np.array([_SCALINGS[sc][0] for *_, sc in spec])
    b = np.array([_SCALINGS[sc][1] for *_, sc in spec])
    return s, g, a, b


def _physical_terms(x: np.ndarray, spec: Sequence[tuple[str, str, str]]) -> np.ndarray:
    s, g, a, b = _physical_matrices(spec)
    threads = x[:, FEATURES.index("threads")][:, None]
    return (x @ s) * (x @ g) * (a + b / threads)


def nnqp(h: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``argmin_c 1/2 c' h c - f' c`` subject to ``c >= 0``, for a symmetric positive definite ``h``
    (float64 ``[n, n]``, ``f``: ``[n]``): the active-set method of Lawson and Hanson ("Solving Least Squares
    Problems", 1974, ch. 23) on the normal equations, so that a linear (L1 on a non-negative ``c``) or
    quadratic penalty can be folded into ``f`` and ``h``. Returns float64 ``[n]``, non-negative."""
    n = len(f)
    c, passive = np.zeros(n), np.zeros(n, dtype=bool)
    tol = 1e-12 * max(1.0, float(np.abs(f).max(initial=0.0)))
    gradient = f.copy()
    for _ in range(3 * n + 10):
        if passive.all() or not (gradient[~passive] > tol).any():
            break
        passive[np.argmax(np.where(passive, -np.inf, gradient))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.solve(h[np.ix_(passive, passive)], f[passive])
            if (z[passive] > 0).all():
                break
            bad = passive & (z <= 0)
            c = c + np.min(c[bad] / (c[bad] - z[bad])) * (z - c)
            passive &= c > 1e-15
        c = z
        gradient = f - h @ c
    return np.maximum(c, 0.0)


def nnls(a: np.ndarray, b: np.ndarray, l1: float = 0.0) -> np.ndarray:
    """``argmin_c 1/(2m) ||a c - b||^2 + l1 * sum(c)`` subject to ``c >= 0`` (non-negative least squares,
    or with ``l1 > 0`` the non-negative Lasso). ``a``: float64 ``[m, n]``, ``b``: ``[m]``; returns ``[n]``.
    Columns are scaled to unit root-mean-square inside (so ``l1`` weighs every term alike; features span ten
    orders of magnitude) and a 1e-9 ridge keeps the normal equations regular; an all-zero column gets 0."""
    scale = np.sqrt((a**2).mean(axis=0))
    live = scale > 0
    u = a[:, live] / scale[live]
    h = u.T @ u / len(b) + 1e-9 * np.eye(u.shape[1])
    out = np.zeros(a.shape[1])
    out[live] = nnqp(h, u.T @ b / len(b) - l1) / scale[live]
    return out


def lasso(x: np.ndarray, y: np.ndarray, alpha: float, start: Optional[np.ndarray] = None,
          iters: int = 3000) -> tuple[np.ndarray, float]:
    """``argmin 1/(2m) ||y - x w - c||^2 + alpha ||w||_1`` (Tibshirani 1996) by FISTA (Beck and Teboulle,
    2009: proximal gradient with soft-thresholding and momentum). ``x``: float64 ``[m, n]`` (standardized
    columns), ``y``: ``[m]``, ``start``: a warm start; returns ``(w [n], c)`` with exact zeros where a term is
    not selected."""
    xm, ym = x.mean(axis=0), y.mean()
    xc, yc = x - xm, y - ym
    lipschitz = np.linalg.norm(xc, 2) ** 2 / len(y)
    w = np.zeros(x.shape[1]) if start is None else start.copy()
    if lipschitz == 0:
        return np.zeros(x.shape[1]), float(ym)
    z, t = w.copy(), 1.0
    for _ in range(iters):
        step = z - xc.T @ (xc @ z - yc) / (len(y) * lipschitz)
        new = np.sign(step) * np.maximum(np.abs(step) - alpha / lipschitz, 0.0)
        t_next = (1 + math.sqrt(1 + 4 * t * t)) / 2
        z = new + (t - 1) / t_next * (new - w)
        done = np.max(np.abs(new - w), initial=0.0) < 1e-9
        w, t = new, t_next
        if done:
            break
    return w, float(ym - xm @ w)


def _folds(m: int, k: int, seed: int) -> list[np.ndarray]:
    return np.array_split(np.random.default_rng(seed).permutation(m), min(k, m))


def _largest_penalty(terms: np.ndarray, w: np.ndarray) -> float:
    """The L1 weight above which the non-negative Lasso of ``terms`` (already divided by y) selects nothing."""
    scale = np.sqrt((terms**2).mean(axis=0))
    u = terms[:, scale > 0] / scale[scale > 0]
    return float((u.T @ w / len(w)).max(initial=0.0))


def _fit_physical(x: np.ndarray, y: np.ndarray, w: np.ndarray, spec, penalty: float) -> np.ndarray:
    """Non-negative coefficients for relative error ``pred / y - 1``: the non-negative Lasso at L1 weight
    ``penalty`` selects the terms, non-negative least squares on those sets their values (a relaxed Lasso),
    and rows are reweighted by ``1 / max(|relative error|, ROBUST_DELTA)`` between rounds (a robust loss)."""
    terms = _physical_terms(x, spec) / y[:, None]
    robust = np.ones(len(y))
    coef = np.zeros(len(spec))
    for _ in range(ROBUST_ITERATIONS):
        root = np.sqrt(w * robust)
        a, b = terms * root[:, None], root
        chosen = nnls(a, b, penalty) > 0 if penalty > 0 else np.ones(len(spec), dtype=bool)
        coef = np.zeros(len(spec))
        coef[chosen] = nnls(a[:, chosen], b)
        robust = 1.0 / np.maximum(np.abs(terms @ coef - 1.0), ROBUST_DELTA)
    return coef


def _physical_predict(x: np.ndarray, spec, coef: np.ndarray) -> np.ndarray:
    return np.maximum(_physical_terms(x, spec) @ coef, FLOOR_MS)


def _cv_physical(x, y, w, spec, penalty, folds) -> tuple[float, np.ndarray]:
    """(weighted mean of min(|log(pred / y)|, 0.5) out of fold, the out-of-fold predictions) at ``penalty``."""
    oof = np.empty(len(y))
    for test in folds:
        train = np.setdiff1d(np.arange(len(y)), test)
        oof[test] = _physical_predict(x[test], spec, _fit_physical(x[train], y[train], w[train], spec, penalty))
    return float(np.average(np.minimum(np.abs(np.log(oof / y)), 0.5), weights=w)), oof


def _choose_penalty(x, y, w, spec, seed: int) -> tuple[float, Optional[np.ndarray]]:
    """The L1 weight of the physical fit with the smallest cross-validated error (5 folds; the heaviest on the
    grid below 5 rows), and the out-of-fold predictions at it (None below 5 rows)."""
    top = _largest_penalty(_physical_terms(x, spec) / y[:, None], w)
    if len(y) < 5:
        return _PENALTIES[-1] * top, None
    folds = _folds(len(y), 5, seed)
    (_, oof), penalty = min(((_cv_physical(x, y, w, spec, f * top, folds), f * top) for f in _PENALTIES),
                            key=lambda scored: scored[0][0])
    return penalty, oof


def _log_variables(x: np.ndarray, physical: np.ndarray, targets: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """``(V [N, K], names)``: the correction's variables (module docstring)."""
    col = {n: i for i, n in enumerate(FEATURES)}
    cols = [np.log1p(x[:, [col[f] for f in fs]].sum(axis=1)) for fs in LOG_VARIABLES.values()]
    names = [f"log({n})" for n in LOG_VARIABLES]
    cols.append(np.log(physical))
    names.append("log(physical_ms)")
    if len(targets) > 1:
        cols += [x[:, col[target_column(t)]] for t in targets]
        names += [target_column(t) for t in targets]
    return np.column_stack(cols), names


def _polynomial(v: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Degree-2 terms of ``v``: ``(P [N, T], [(i, j)])``, ``j = -1`` for the linear term ``v_i``."""
    pairs = [(i, -1) for i in range(v.shape[1])] + [(i, j) for i in range(v.shape[1]) for j in range(i, v.shape[1])]
    return np.column_stack([v[:, i] * (v[:, j] if j >= 0 else 1.0) for i, j in pairs]), pairs


def _fit_correction(p: np.ndarray, r: np.ndarray, seed: int) -> tuple[np.ndarray, float]:
    """Lasso coefficients (on raw polynomial terms) and intercept for residuals ``r``; alpha by 5-fold
    cross-validation with the one-standard-error rule (the sparsest model within one SE of the best)."""
    mu, sd = p.mean(axis=0), p.std(axis=0)
    sd[sd < 1e-12] = np.inf
    z = (p - mu) / sd
    top = float(np.abs(z.T @ (r - r.mean())).max(initial=0.0)) / len(r)
    if len(r) < 8 or top == 0:
        return np.zeros(p.shape[1]), 0.0
    alphas = top * np.logspace(0, -3, 13)
    errors = np.zeros((len(alphas), 5))
    for k, test in enumerate(_folds(len(r), 5, seed)):
        train, start = np.setdiff1d(np.arange(len(r)), test), None
        for a, alpha in enumerate(alphas):
            start, c = lasso(z[train], r[train], alpha, start)
            errors[a, k] = np.mean((r[test] - z[test] @ start - c) ** 2)
    mean, se = errors.mean(axis=1), errors.std(axis=1) / math.sqrt(errors.shape[1])
    best = int(np.argmin(mean))
    alpha = alphas[int(np.flatnonzero(mean <= mean[best] + se[best])[0])]
    w, c = lasso(z, r, alpha)
    raw = np.where(np.isfinite(sd), w / sd, 0.0)
    return raw, float(c - raw @ np.where(np.isfinite(sd), mu, 0.0))


class CostModel:
    """Predicts the median latency (ms) of an inference run from its features (module docstring).

    Args:
        correction: also fit the sparse polynomial correction (module docstring; off by default).
        seed: the cross-validation folds' seed (fitting is deterministic given it).
    """

    def __init__(self, *, correction: bool = False, seed: int = 0) -> None:
        self.correction, self.seed = correction, seed
        self.targets: tuple[str, ...] = ()
        self.penalty = 0.0
        self._physical: list[tuple[str, str, str, float]] = []  # (target, quantity, scaling, coefficient) > 0
        self._linear: dict[str, float] = {}
        self._quadratic: list[tuple[str, str, float]] = []
        self._intercept = 0.0

    # ------------------------------------------------------------------ fitting

    def fit(self, rows: Sequence[Mapping[str, float]], latency_ms: Sequence[float],
            weights: Optional[Sequence[float]] = None) -> "CostModel":
        """Fit on ``rows`` (:func:`~modelsql.costmodel.features.row` dicts) and their measured median latencies
        (ms, > 0); ``weights`` (>= 0, one per row) scale each row's share of the loss. Returns ``self``.
        Deterministic given ``seed``; about a second for 500 rows.

        Raises:
            ProgrammingError: ``empty_training_set`` for no rows; ``invalid_option`` for lengths that differ.
            DataError: ``invalid_latency`` for a latency that is NaN, infinite or not positive;
                ``invalid_weight`` for a bad weight; ``invalid_feature`` (:func:`~modelsql.costmodel.features.matrix`).
        """
        x, y, w = self._training_arrays(rows, latency_ms, weights)
        self.targets = tuple(t for t in TARGETS if x[:, FEATURES.index(target_column(t))].any())
        spec = _physical_spec(self.targets)
        self.penalty, oof = _choose_penalty(x, y, w, spec, self.seed)
        coef = _fit_physical(x, y, w, spec, self.penalty)
        self._physical = [(*s, float(c)) for s, c in zip(spec, coef) if c > 0]
        self._linear, self._quadratic, self._intercept = {}, [], 0.0
        if self.correction and oof is not None:
            self._fit_log_correction(x, y, oof)
        return self

    @staticmethod
    def _training_arrays(rows, latency_ms, weights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if len(rows) == 0:
            raise ProgrammingError("cannot fit a cost model on an empty training set: profile some runs first",
                                   code="empty_training_set")
        if len(latency_ms) != len(rows):
            raise ProgrammingError(f"{len(rows)} feature rows but {len(latency_ms)} latencies", code="invalid_option")
        y = np.asarray(latency_ms, dtype=np.float64)
        if not (np.isfinite(y) & (y > 0)).all():
            bad = y[~(np.isfinite(y) & (y > 0))][0]
            raise DataError(f"latencies must be finite and positive milliseconds, got {bad!r}", code="invalid_latency")
        w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
        if w.shape != y.shape or not (np.isfinite(w) & (w >= 0)).all() or w.sum() <= 0:
            raise DataError("weights must be one finite non-negative number per row, not all zero",
                            code="invalid_weight")
        return matrix(rows), y, w

    def _fit_log_correction(self, x: np.ndarray, y: np.ndarray, oof: np.ndarray) -> None:
        v, names = _log_variables(x, oof, self.targets)
        p, pairs = _polynomial(v)
        coef, self._intercept = _fit_correction(p, np.log(y / oof), self.seed)
        for (i, j), c in zip(pairs, coef):
            if c != 0 and j < 0:
                self._linear[names[i]] = float(c)
            elif c != 0:
                self._quadratic.append((names[i], names[j], float(c)))

    # ------------------------------------------------------------------ prediction

    def _check_fitted(self) -> None:
        if not self.targets:
            raise ProgrammingError("the cost model is not fitted: call fit() first", code="not_fitted")

    def predict(self, rows: Sequence[Mapping[str, float]]) -> np.ndarray:
        """float64 ``[len(rows)]``: predicted median latency of each run, ms (> 0).

        Raises:
            ProgrammingError: ``not_fitted``; ``target_not_trained`` for a row whose backend and device had no
                training rows; ``invalid_feature`` as :func:`~modelsql.costmodel.features.matrix`.
        """
        self._check_fitted()
        x = matrix(rows)
        trained = x[:, [FEATURES.index(target_column(t)) for t in self.targets]].sum(axis=1) > 0
        if not trained.all():
            raise ProgrammingError(f"the cost model was trained only on {list(self.targets)}; a row asks for "
                                   f"another backend or device", code="target_not_trained")
        spec = [s[:3] for s in self._physical]
        physical = _physical_predict(x, spec, np.array([s[3] for s in self._physical]))
        return physical * np.exp(np.clip(self._correction(x, physical), -math.log(CLIP_FACTOR), math.log(CLIP_FACTOR)))

    def _correction(self, x: np.ndarray, physical: np.ndarray) -> np.ndarray:
        v, names = _log_variables(x, physical, self.targets)
        at = {n: v[:, i] for i, n in enumerate(names)}
        out = np.full(len(x), self._intercept)
        for n, c in self._linear.items():
            out = out + c * at[n]
        for a, b, c in self._quadratic:
            out = out + c * (at[a] * at[b])
        return out

    def terms(self) -> list[tuple[str, float]]:
        """The selected terms and their coefficients: physical ones (``"onnxruntime_cpu:gemm_flops/threads"``,
        ms per unit of the feature) then the correction's (``"log(batch_size)*log(kernels)"``, ``"intercept"``:
        log-space, dimensionless).

        Raises:
            ProgrammingError: ``not_fitted``.
        """
        self._check_fitted()
        out = [(_term_name(t, w, s), c) for t, w, s, c in self._physical]
        if self._linear or self._quadratic:
            out.append(("intercept", self._intercept))
        out += list(self._linear.items()) + [(f"{a}*{b}", c) for a, b, c in self._quadratic]
        return out

    # ------------------------------------------------------------------ persistence

    def to_json(self) -> str:
        """The fitted model as JSON text; :meth:`from_json` restores one that predicts bit-identically.

        Raises:
            ProgrammingError: ``not_fitted``.
        """
        self._check_fitted()
        return json.dumps({"format": _FORMAT, "features": list(FEATURES), "targets": list(self.targets),
                           "penalty": self.penalty, "correction": self.correction, "seed": self.seed,
                           "physical": [list(s) for s in self._physical], "intercept": self._intercept,
                           "linear": self._linear, "quadratic": [list(q) for q in self._quadratic]})

    @classmethod
    def from_json(cls, text: str) -> "CostModel":
        """The model :meth:`to_json` wrote.

        Raises:
            DataError: ``invalid_cost_model`` for text that is not such a model, or one written for other features.
        """
        try:
            d = json.loads(text)
            if d.get("format") != _FORMAT or d["features"] != list(FEATURES):
                raise DataError("the cost model JSON was written for another format or feature list "
                                f"({d.get('format')!r}); refit it", code="invalid_cost_model")
            model = cls(correction=bool(d["correction"]), seed=int(d["seed"]))
            model.targets, model.penalty = tuple(d["targets"]), float(d["penalty"])
            model._physical = [(str(t), str(w), str(s), float(c)) for t, w, s, c in d["physical"]]
            model._intercept = float(d["intercept"])
            model._linear = {str(k): float(v) for k, v in d["linear"].items()}
            model._quadratic = [(str(a), str(b), float(c)) for a, b, c in d["quadratic"]]
        except DataError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DataError(f"not a cost model's JSON: {exc}", code="invalid_cost_model") from None
        return model

    def to_onnx(self) -> onnx.ModelProto:
        """This model as an ONNX graph (opset 17): input ``features`` float32 ``[N, len(FEATURES)]``
        (:data:`~modelsql.costmodel.features.FEATURES` order), output ``latency_ms`` float32 ``[N]``, equal to
        :meth:`predict` within float32 rounding; NaN for a row of an untrained target. The feature names are
        in the model's metadata (``features``, JSON) beside the model itself (``cost_model``, :meth:`to_json`).

        Raises:
            ProgrammingError: ``not_fitted``.
        """
        self._check_fitted()
        nodes, inits = [helper.make_node("Cast", ["features"], ["x"], to=TensorProto.DOUBLE)], []

        def const(name: str, value) -> str:
            inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float64 if np.asarray(value).dtype.kind
                                                            == "f" else np.int64), name))
            return name

        def op(kind: str, inputs: list[str], out: str, **attrs) -> str:
            nodes.append(helper.make_node(kind, inputs, [out], **attrs))
            return out

        self._onnx_physical(op, const)
        self._onnx_correction(op, const)
        col = {n: i for i, n in enumerate(FEATURES)}
        mask = np.zeros((len(FEATURES), 1))
        mask[[col[target_column(t)] for t in self.targets], 0] = 1.0
        trained = op("Greater", [op("MatMul", ["x", const("trained_mask", mask)], "trained"), const("half", 0.5)],
                     "is_trained")
        y = op("Where", [trained, op("Mul", ["physical", op("Exp", ["correction"], "factor")], "y"),
                         const("nan", np.nan)], "y_checked")
        op("Cast", [op("Reshape", [y, const("flat", np.array([-1], np.int64))], "y_flat")], "latency_ms",
           to=TensorProto.FLOAT)
        graph = helper.make_graph(
            nodes, "mantis_cost_model",
            [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", len(FEATURES)])],
            [helper.make_tensor_value_info("latency_ms", TensorProto.FLOAT, ["N"])], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="modelsql")
        model.ir_version = 8
        helper.set_model_props(model, {"features": json.dumps(list(FEATURES)), "cost_model": self.to_json(),
                                       "unit": "ms"})
        onnx.checker.check_model(model)
        return model

    def _onnx_physical(self, op, const) -> None:
        """Nodes computing ``physical`` ``[N, 1]`` from ``x``."""
        spec = [s[:3] for s in self._physical] or [(self.targets[0], "call", "serial")]
        coef = np.array([s[3] for s in self._physical] or [0.0])[:, None]
        s, g, a, b = _physical_matrices(spec)
        inv = op("Reciprocal", [op("Gather", ["x", const("threads_col", np.array([FEATURES.index("threads")],
                                                                                   np.int64))], "threads", axis=1)],
                 "inv_threads")
        scale = op("Add", [const("serial", a), op("Mul", [inv, const("parallel", b)], "par")], "scale")
        terms = op("Mul", [op("Mul", [op("MatMul", ["x", const("select", s)], "base"),
                                      op("MatMul", ["x", const("gate", g)], "gated")], "gb"), scale], "terms")
        op("Max", [op("MatMul", [terms, const("coef", coef)], "raw_physical"), const("floor", FLOOR_MS)], "physical")

    def _onnx_correction(self, op, const) -> None:
        """Nodes computing the clipped log-space ``correction`` ``[N, 1]`` from ``x`` and ``physical``."""
        col = {n: i for i, n in enumerate(FEATURES)}
        sel = np.zeros((len(FEATURES), len(LOG_VARIABLES)))
        for k, fs in enumerate(LOG_VARIABLES.values()):
            sel[[col[f] for f in fs], k] = 1.0
        parts = [op("Log", [op("Add", [op("MatMul", ["x", const("log_select", sel)], "sums"), const("one", 1.0)],
                                "sums1")], "logs"), op("Log", ["physical"], "log_physical")]
        names = [f"log({n})" for n in LOG_VARIABLES] + ["log(physical_ms)"]
        if len(self.targets) > 1:
            idx = np.array([col[target_column(t)] for t in self.targets], np.int64)
            parts.append(op("Gather", ["x", const("target_cols", idx)], "onehots", axis=1))
            names += [target_column(t) for t in self.targets]
        v = op("Concat", parts, "v", axis=1)
        at = {n: i for i, n in enumerate(names)}
        linear = np.zeros((len(names), 1))
        for n, c in self._linear.items():
            linear[at[n], 0] = c
        total = op("Add", [op("MatMul", [v, const("linear", linear)], "lin"), const("intercept", self._intercept)],
                   "lin_b")
        if self._quadratic:
            left = op("Gather", [v, const("left", np.array([at[a] for a, _, _ in self._quadratic], np.int64))],
                      "vl", axis=1)
            right = op("Gather", [v, const("right", np.array([at[b] for _, b, _ in self._quadratic], np.int64))],
                       "vr", axis=1)
            quad = np.array([[c] for *_, c in self._quadratic])
            total = op("Add", [total, op("MatMul", [op("Mul", [left, right], "prod"), const("quad", quad)], "q")],
                       "lin_q")
        op("Clip", [total, const("lo", -math.log(CLIP_FACTOR)), const("hi", math.log(CLIP_FACTOR))], "correction")
