"""A learned latency model of ONNX inference runs: an additive physical model, corrected by a sparse
polynomial in log space (Mantis: Chun, Huang, Lee, Maniatis and Naik, "Mantis: Predicting System
Performance through Program Analysis and Modeling", 2010; per-operator-class work terms as in nn-Meter,
Zhang et al., MobiSys 2021, and LitePred, NSDI 2024).

Inputs are the rows of :func:`modelsql.costmodel.features.row` (:data:`~modelsql.costmodel.features.FEATURES`);
the target is the median latency of a run in milliseconds. With ``t`` the thread count, the model is::

    physical(x) = sum over trained targets g (x[on_g] = 1) of
                  c_call + c_call_sync (1 - 1/t)                        per-call overhead, pool wake-up
                + (c_node + c_node_sync (1 - 1/t)) nodes                per-kernel dispatch and sync
                + sum_w (c_w + c'_w / t) w                              Amdahl: serial + parallel work
    w in: conv/gemm/matmul FLOPs and bytes, element-wise/normalization/reduction/data bytes (memory_bytes),
          input bytes, tree-ensemble visits and leaf outputs, ai.onnx.ml linear FLOPs

    latency_ms(x) = physical(x) * exp(clip(correction(x), -CLIP, CLIP))
    correction(x) = b + sum_i a_i v_i + sum_(i<=j) a_ij v_i v_j       (degree-2 polynomial, Lasso-selected)
    v = log(1 + batch), log(1 + threads), log(1 + merge factor), log(1 + nodes), log(1 + product FLOPs),
        log(1 + bytes moved), log(1 + parameter bytes), log(1 + ML work), log(physical(x)), target one-hots

Every coefficient ``c`` is a physical constant (ms per call, per node, per FLOP, per byte) and is fitted
non-negative (Lawson-Hanson NNLS) on relative error (each row scaled by 1/latency, so a 10 us call weighs
as much as a 1 s one), with a small ridge penalty chosen by cross-validation: few training points
(Mantis: under 10% of the runs) then cannot push a rarely-seen term to a huge value, and predictions
stay positive and monotone in every work feature. The correction is Mantis's sparse non-linear
regression: polynomial terms of the (logged) program features, selected by the Lasso (alpha by
cross-validation, one-standard-error rule), fitted to the physical model's out-of-fold log residuals;
it is clipped to a factor of :data:`CLIP_FACTOR` so it cannot extrapolate wildly to unseen models.

A target (``backend_device``) with no training rows cannot be predicted (:meth:`CostModel.predict`
raises; the exported ONNX graph gives NaN).
"""

from __future__ import annotations

import json
import math
from typing import Mapping, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import DataError, ProgrammingError
from .features import FEATURES, MEMORY_CLASSES, PRODUCT_CLASSES, TARGETS, matrix, target_column

__all__ = ["CostModel", "CLIP_FACTOR", "WORK", "LOG_VARIABLES", "nnls", "lasso"]

CLIP_FACTOR = 3.0
"""The correction multiplies the physical estimate by at most this factor, or divides it by at most it."""
FLOOR_MS = 1e-6
"""The smallest physical estimate, ms (keeps the log defined for a row whose work terms are all zero)."""

WORK: dict[str, tuple[str, ...]] = {
    **{f"{c}_{w}": (f"{c}_{w}",) for c in PRODUCT_CLASSES for w in ("flops", "bytes")},
    "memory_bytes": tuple(f"{c}_bytes" for c in MEMORY_CLASSES),
    "input_bytes": ("input_bytes",),
    "tree_visits": ("tree_visits",),
    "tree_outputs": ("tree_outputs",),
    "ml_flops": ("ml_flops",),
}
"""Work quantities of the physical model: name -> the features summed into it."""

LOG_VARIABLES: dict[str, tuple[str, ...]] = {
    "batch_size": ("batch_size",),
    "threads": ("threads",),
    "merge_factor": ("merge_factor",),
    "nodes": ("nodes",),
    "product_flops": tuple(f"{c}_flops" for c in PRODUCT_CLASSES),
    "bytes": tuple(f"{c}_bytes" for c in (*PRODUCT_CLASSES, *MEMORY_CLASSES)),
    "param_bytes": ("param_bytes",),
    "ml_work": ("tree_visits", "tree_outputs", "ml_flops"),
}
"""Variables of the correction polynomial, each ``log(1 + sum of these features)``."""

_SCALINGS = {"serial": (1.0, 0.0), "parallel": (0.0, 1.0), "sync": (1.0, -1.0)}  # a + b / threads
_RIDGES = (0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2)
_FORMAT = "modelsql.costmodel.mantis/1"


def _physical_spec(targets: Sequence[str]) -> list[tuple[str, str, str]]:
    """(target, work, scaling) of every candidate physical term; work ``call`` is the constant 1."""
    per_target = [("call", "serial"), ("call", "sync"), ("nodes", "serial"), ("nodes", "sync")]
    per_target += [(w, s) for w in WORK for s in ("serial", "parallel")]
    return [(t, w, s) for t in targets for w, s in per_target]


def _term_name(target: str, work: str, scaling: str) -> str:
    return f"{target}:{work}" + {"serial": "", "parallel": "/threads", "sync": "*(1-1/threads)"}[scaling]


def _physical_matrices(spec: Sequence[tuple[str, str, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(S [F, J], G [F, J], a [J], b [J])``: term j of row x is ``(x S)_j (x G)_j (a_j + b_j / threads)``."""
    col = {n: i for i, n in enumerate(FEATURES)}
    s, g = np.zeros((len(FEATURES), len(spec))), np.zeros((len(FEATURES), len(spec)))
    for j, (target, work, _) in enumerate(spec):
        g[col[target_column(target)], j] = 1.0
        for name in ((target_column(target),) if work == "call" else ("nodes",) if work == "nodes" else WORK[work]):
            s[col[name], j] = 1.0
    a = np.array([_SCALINGS[sc][0] for *_, sc in spec])
    b = np.array([_SCALINGS[sc][1] for *_, sc in spec])
    return s, g, a, b


def _physical_terms(x: np.ndarray, spec: Sequence[tuple[str, str, str]]) -> np.ndarray:
    s, g, a, b = _physical_matrices(spec)
    threads = x[:, FEATURES.index("threads")][:, None]
    return (x @ s) * (x @ g) * (a + b / threads)


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``argmin_x ||a x - b||_2`` subject to ``x >= 0`` (Lawson and Hanson, "Solving Least Squares Problems",
    1974, ch. 23). ``a``: float64 ``[m, n]``, ``b``: ``[m]``; returns float64 ``[n]``. Columns are scaled to
    unit norm inside (features span ten orders of magnitude); an all-zero column gets 0."""
    norms = np.linalg.norm(a, axis=0)
    live = norms > 0
    scaled = a[:, live] / norms[live]
    n = scaled.shape[1]
    x, passive = np.zeros(n), np.zeros(n, dtype=bool)
    tol = 1e-12 * max(scaled.shape)
    w = scaled.T @ b
    for _ in range(3 * n + 10):
        if passive.all() or not (w[~passive] > tol).any():
            break
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(scaled[:, passive], b, rcond=None)[0]
            if (z[passive] > tol).all():
                break
            bad = passive & (z <= tol)
            x = x + np.min(x[bad] / (x[bad] - z[bad])) * (z - x)
            passive &= x > tol
        x = z
        w = scaled.T @ (b - scaled @ x)
    out = np.zeros(a.shape[1])
    out[live] = np.maximum(x, 0.0) / norms[live]
    return out


def lasso(x: np.ndarray, y: np.ndarray, alpha: float, iters: int = 1000) -> tuple[np.ndarray, float]:
    """``argmin 1/(2m) ||y - x w - c||^2 + alpha ||w||_1`` by cyclic coordinate descent (Friedman, Hastie and
    Tibshirani, "Pathwise coordinate optimization", 2007). ``x``: float64 ``[m, n]`` (standardized columns),
    ``y``: ``[m]``; returns ``(w [n], c)`` with exact zeros where a term is not selected."""
    xm, ym = x.mean(axis=0), y.mean()
    xc, r = x - xm, y - ym
    sq = (xc**2).mean(axis=0)
    w = np.zeros(x.shape[1])
    for _ in range(iters):
        moved = 0.0
        for j in np.flatnonzero(sq > 0):
            rho = xc[:, j] @ r / len(y) + sq[j] * w[j]
            new = math.copysign(max(abs(rho) - alpha, 0.0), rho) / sq[j]
            if new != w[j]:
                r = r - xc[:, j] * (new - w[j])
                moved, w[j] = max(moved, abs(new - w[j])), new
        if moved < 1e-8:
            break
    return w, float(ym - xm @ w)


def _folds(m: int, k: int, seed: int) -> list[np.ndarray]:
    return np.array_split(np.random.default_rng(seed).permutation(m), min(k, m))


def _fit_physical(x: np.ndarray, y: np.ndarray, w: np.ndarray, spec, ridge: float) -> np.ndarray:
    """Non-negative coefficients minimizing ``sum w (pred / y - 1)^2 + ridge * m * ||scaled c||^2``."""
    a = _physical_terms(x, spec) / y[:, None] * np.sqrt(w)[:, None]
    b = np.sqrt(w)
    if ridge > 0:
        scale = np.sqrt((a**2).mean(axis=0))
        a = np.vstack([a, np.diag(np.sqrt(ridge * len(y)) * scale)])
        b = np.concatenate([b, np.zeros(len(spec))])
    return nnls(a, b)


def _physical_predict(x: np.ndarray, spec, coef: np.ndarray) -> np.ndarray:
    return np.maximum(_physical_terms(x, spec) @ coef, FLOOR_MS)


def _log_error(x, y, w, spec, ridge, folds) -> tuple[float, np.ndarray]:
    """(weighted mean squared out-of-fold log error, out-of-fold physical predictions) at ``ridge``."""
    oof = np.empty(len(y))
    for test in folds:
        train = np.setdiff1d(np.arange(len(y)), test)
        oof[test] = _physical_predict(x[test], spec, _fit_physical(x[train], y[train], w[train], spec, ridge))
    return float(np.average(np.log(oof / y) ** 2, weights=w)), oof


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
    alphas = top * np.logspace(0, -3, 16)
    folds = _folds(len(r), 5, seed)
    errors = np.array([[np.mean((r[f] - z[f] @ wc[0] - wc[1]) ** 2)
                        for f in folds for wc in [lasso(z[np.setdiff1d(np.arange(len(r)), f)],
                                                        r[np.setdiff1d(np.arange(len(r)), f)], alpha)]]
                       for alpha in alphas])
    mean, se = errors.mean(axis=1), errors.std(axis=1) / math.sqrt(len(folds))
    best = int(np.argmin(mean))
    alpha = alphas[int(np.flatnonzero(mean <= mean[best] + se[best])[0])]
    w, c = lasso(z, r, alpha)
    raw = np.where(np.isfinite(sd), w / sd, 0.0)
    return raw, float(c - raw @ np.where(np.isfinite(sd), mu, 0.0))


class CostModel:
    """Predicts the median latency (ms) of an inference run from its features (module docstring).

    Args:
        correction: fit the sparse polynomial correction (else the physical model alone).
        seed: the cross-validation folds' seed (fitting is deterministic given it).
    """

    def __init__(self, *, correction: bool = True, seed: int = 0) -> None:
        self.correction, self.seed = correction, seed
        self.targets: tuple[str, ...] = ()
        self.ridge = 0.0
        self._physical: list[tuple[str, str, str, float]] = []  # (target, work, scaling, coefficient), non-zero
        self._linear: dict[str, float] = {}
        self._quadratic: list[tuple[str, str, float]] = []
        self._intercept = 0.0

    # ------------------------------------------------------------------ fitting

    def fit(self, rows: Sequence[Mapping[str, float]], latency_ms: Sequence[float],
            weights: Optional[Sequence[float]] = None) -> "CostModel":
        """Fit on ``rows`` (:func:`~modelsql.costmodel.features.row` dicts) and their measured median latencies
        (ms, > 0); ``weights`` (>= 0, one per row) scale each row's squared relative error. Returns ``self``.

        Raises:
            ProgrammingError: ``empty_training_set`` for no rows; ``invalid_option`` for lengths that differ.
            DataError: ``invalid_latency`` for a latency that is NaN, infinite or not positive;
                ``invalid_weight`` for a bad weight; ``invalid_feature`` (:func:`~modelsql.costmodel.features.matrix`).
        """
        x, y, w = self._training_arrays(rows, latency_ms, weights)
        self.targets = tuple(t for t in TARGETS if x[:, FEATURES.index(target_column(t))].any())
        spec = _physical_spec(self.targets)
        folds = _folds(len(y), 5, self.seed)
        scored = [(_log_error(x, y, w, spec, r, folds), r) for r in _RIDGES] if len(y) >= 5 else []
        (_, oof), self.ridge = min(scored, key=lambda s: s[0][0]) if scored else ((0.0, None), _RIDGES[-1])
        coef = _fit_physical(x, y, w, spec, self.ridge)
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
        ms per unit of the feature) then the correction's (``"log(batch_size)*log(nodes)"``, ``"intercept"``:
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
                           "ridge": self.ridge, "correction": self.correction, "seed": self.seed,
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
            model.targets, model.ridge = tuple(d["targets"]), float(d["ridge"])
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
