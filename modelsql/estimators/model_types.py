"""Model types: the names ``CREATE MODEL ... WITH (model_type = ...)`` takes, each a scikit-learn estimator.

The names are BigQuery ML's (``logistic_reg``, ``linear_reg``, ``boosted_tree_classifier``, ``kmeans`` ...) where
it has one, else scikit-learn's in snake case (``boosted_tree_*`` is scikit-learn's ``GradientBoosting*``: its
``HistGradientBoosting*`` does not convert with skl2onnx 1.20); any estimator class name of scikit-learn's registry
(``sklearn.utils.discovery.all_estimators``: ``'ExtraTreesClassifier'``, ``'Ridge'``) names its class too. An
estimator is built with scikit-learn's defaults, except ``random_state`` (the statement's ``seed``) where it has
one, and the hyper-parameters the statement gives, checked against the class's ``get_params()``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import json
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from modelsql.errors import NotSupportedError, ProgrammingError, did_you_mean

__all__ = ["MODEL_TYPES", "BIGQUERY_OPTIONS", "ModelType", "resolve_model_type", "CLASSIFIER_TOLERANCE", "conversion_tolerance"]

#: Estimator modules whose models are insensitive to the scale of a numeric column (split thresholds, counts):
#: their numeric inputs are passed through; every other estimator's are standardised.
_SCALE_FREE = ("sklearn.tree", "sklearn.ensemble", "sklearn.naive_bayes", "sklearn.dummy")

SPARSE_SAME = frozenset({"LogisticRegression", "RandomForestClassifier", "RandomForestRegressor",
                         "DecisionTreeClassifier", "DecisionTreeRegressor", "MLPClassifier", "MLPRegressor", "KMeans"})
"""Estimators fitted on sparse rows as on dense ones (checked against the dense pipeline to 1e-5). Others take
dense rows: scikit-learn fits some differently on a sparse matrix (GradientBoostingClassifier's trees, Ridge's and
LinearRegression's solvers, SVC's probabilities), and a k-nearest-neighbours model keeps its sparse training rows,
which skl2onnx cannot convert."""



BIGQUERY_OPTIONS = {
    "data_split_method": "validation = 'auto' | 'random' | 'seq' | 'none'",
    "data_split_eval_fraction": "validation_size = fraction (with validation = 'random' or 'seq')",
    "max_iterations": "max_iter (iterative estimators) or n_estimators (tree ensembles)",
    "l1_reg": "alpha with penalty = 'l1' (C, its inverse, for logistic_reg)",
    "l2_reg": "alpha (C = 1 / l2_reg for logistic_reg)",
    "learn_rate": "learning_rate", "max_tree_depth": "max_depth", "num_parallel_tree": "n_estimators",
    "min_split_loss": "min_impurity_decrease", "num_clusters": "n_clusters", "hidden_units": "hidden_layer_sizes",
    "optimizer": "solver", "early_stop": "n_iter_no_change (boosted trees, mlp_*)",
    "auto_class_weights": "class_weight = 'balanced'", "class_weights": "class_weight",
    "kmeans_init_method": "init", "num_trials": "TUNE MODEL ... WITH (trials = n)",
    "hparam_tuning_objectives": "TUNE MODEL ... WITH (metric = ...)",
}
"""BigQuery ML's ``CREATE MODEL`` options a user from it types, by name, and what modelsql takes instead (named in
the ``unknown_hyperparameter`` message)."""

def _regularisation_hint(option: str, known: Mapping[str, str]) -> Optional[str]:
    """What to write for BigQuery ML's ``l1_reg`` / ``l2_reg`` given the estimator's parameters (lower-cased name ->
    name): ``C``, its inverse, where the estimator has no ``alpha`` (LogisticRegression, SVC); None for another
    option or an estimator with ``alpha`` (the general hint says it)."""
    if option not in ("l1_reg", "l2_reg") or "alpha" in known:
        return None
    if "c" in known:
        penalty = "penalty = 'l1' and " if option == "l1_reg" else ""
        return f"{penalty}C, the inverse of the regularisation strength (C = 1 / {option})"
    return ("nothing: this estimator takes no regularisation strength (model_type = 'ridge_reg' is a linear "
            "regression with alpha, BigQuery ML's l2_reg)")


@dataclass(frozen=True)
class ModelType:
    """One model type.

    Attributes:
        name: the name written in ``model_type`` (a registry name, or the class name as written).
        estimator: ``"module:Class"`` of the scikit-learn estimator.
        task: ``"classification"``, ``"regression"`` or ``"clustering"`` (clustering takes no target).
        scaled: numeric columns are standardised (``StandardScaler``) before the estimator.
    """

    name: str
    estimator: str
    task: str
    scaled: bool

    @property
    def tree_based(self) -> bool:
        """A tree or an ensemble of trees: it splits on thresholds between the training values."""
        return self.estimator.startswith(("sklearn.tree", "sklearn.ensemble"))

    @property
    def accepts_sparse(self) -> bool:
        """A wide one-hot encoding can stay a sparse matrix: the estimator is one of :data:`SPARSE_SAME`, whose fit on
        sparse rows is its fit on the dense ones."""
        return self.estimator.rpartition(":")[2] in SPARSE_SAME

    def estimator_class(self) -> type:
        module, _, cls = self.estimator.partition(":")
        return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]

    def parameters(self) -> dict[str, Any]:
        """The estimator's hyper-parameters and their defaults (``get_params(deep=False)``)."""
        return dict(self.estimator_class()().get_params(deep=False))

    def hyperparameters(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` keyed by the estimator's own names: they match case-insensitively (SQL lower-cases ``C``); a
        parenthesised list is a tuple (``hidden_layer_sizes = (64, 32)``).

        Raises:
            ProgrammingError: ``unknown_hyperparameter`` naming a name the class does not take, with a "did you
                mean" and the names it takes.
        """
        known = {k.lower(): k for k in self.parameters()}
        out = {}
        for name, value in given.items():
            if name.lower() not in known:
                ours = _regularisation_hint(name.lower(), known) or BIGQUERY_OPTIONS.get(name.lower())
                hint = (f" {name} is BigQuery ML's option; here write {ours}." if ours else
                        did_you_mean(name, list(known.values())))
                err = ProgrammingError(
                    f"model_type {self.name!r} ({self.estimator.split(':')[1]}) has no hyper-parameter {name!r}."
                    f"{hint} It takes: {', '.join(sorted(known.values()))}.", code="unknown_hyperparameter")
                err.option = name  # (a statement's error points at the option so named)
                raise err
            out[known[name.lower()]] = value
        return out

    def build(self, hyperparameters: Mapping[str, Any], seed: int) -> Any:
        """An unfitted estimator: scikit-learn's defaults, ``random_state = seed`` where the class has one and the
        statement does not set it, then ``hyperparameters`` (:meth:`hyperparameters` checks and names them).

        Raises:
            ProgrammingError: ``unknown_hyperparameter`` (see :meth:`hyperparameters`).
        """
        params = self.hyperparameters(hyperparameters)
        if "random_state" in self.parameters() and "random_state" not in params:
            params["random_state"] = seed
        return self.estimator_class()(**params)


_UNCONVERTIBLE = {
    "HistGradientBoostingClassifier": "skl2onnx 1.20 cannot convert it (its tree attributes fail ONNX's checks); "
                                      "use boosted_tree_classifier (GradientBoostingClassifier)",
    "HistGradientBoostingRegressor": "skl2onnx 1.20 cannot convert it (its tree attributes fail ONNX's checks); "
                                     "use boosted_tree_regressor (GradientBoostingRegressor)",
}
"""Estimators refused before fitting, with the reason: what they train could not be stored."""


def _types() -> dict[str, ModelType]:
    rows = [
        ("logistic_reg", "sklearn.linear_model:LogisticRegression", "classification"),
        ("linear_reg", "sklearn.linear_model:LinearRegression", "regression"),
        ("ridge_reg", "sklearn.linear_model:Ridge", "regression"),
        ("decision_tree_classifier", "sklearn.tree:DecisionTreeClassifier", "classification"),
        ("decision_tree_regressor", "sklearn.tree:DecisionTreeRegressor", "regression"),
        ("random_forest_classifier", "sklearn.ensemble:RandomForestClassifier", "classification"),
        ("random_forest_regressor", "sklearn.ensemble:RandomForestRegressor", "regression"),
        ("boosted_tree_classifier", "sklearn.ensemble:GradientBoostingClassifier", "classification"),
        ("boosted_tree_regressor", "sklearn.ensemble:GradientBoostingRegressor", "regression"),
        ("knn_classifier", "sklearn.neighbors:KNeighborsClassifier", "classification"),
        ("knn_regressor", "sklearn.neighbors:KNeighborsRegressor", "regression"),
        ("mlp_classifier", "sklearn.neural_network:MLPClassifier", "classification"),
        ("mlp_regressor", "sklearn.neural_network:MLPRegressor", "regression"),
        ("naive_bayes", "sklearn.naive_bayes:GaussianNB", "classification"),
        ("kmeans", "sklearn.cluster:KMeans", "clustering"),
    ]
    return {name: ModelType(name, est, task, not est.startswith(_SCALE_FREE)) for name, est, task in rows}


MODEL_TYPES: dict[str, ModelType] = _types()
"""The named model types (BigQuery ML's names where it has them); the README's table lists them."""


_REGISTRY_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _registry() -> tuple[tuple[str, type], ...]:
    """scikit-learn's estimator registry (``all_estimators``: it imports every module of scikit-learn, seconds the
    first time and not safe from several threads at once), read once."""
    from sklearn.utils.discovery import all_estimators

    with _REGISTRY_LOCK:
        return tuple(all_estimators())


def _registry_type(name: str) -> ModelType | None:
    """The model type of a scikit-learn estimator class name (any case), or None."""
    from sklearn.base import ClassifierMixin, ClusterMixin, RegressorMixin

    for cls_name, cls in _registry():
        if cls_name.lower() != name.lower():
            continue
        task = ("classification" if issubclass(cls, ClassifierMixin) else "regression"
                if issubclass(cls, RegressorMixin) else "clustering" if issubclass(cls, ClusterMixin) else None)
        if task is None:
            raise NotSupportedError(f"model_type {cls_name!r} is not a classifier, regressor or clusterer (it is a "
                                    "transformer, an outlier detector or a density model): nothing to predict.",
                                    code="unknown_model_type")
        if cls_name in _UNCONVERTIBLE:
            raise NotSupportedError(f"model_type {cls_name!r}: {_UNCONVERTIBLE[cls_name]}", code="conversion_failed")
        try:
            cls()
        except TypeError:
            raise NotSupportedError(f"model_type {cls_name!r} is built from other estimators (its estimator or "
                                    "estimators argument), which SQL cannot give: use a model type of its own.",
                                    code="unknown_model_type") from None
        module = cls.__module__
        return ModelType(cls_name, f"{module}:{cls_name}", task, not module.startswith(_SCALE_FREE))
    return None


def resolve_model_type(name: Any) -> ModelType:
    """The model type ``name`` names: a key of :data:`MODEL_TYPES` (any case) or a scikit-learn estimator class name.

    Raises:
        ProgrammingError: ``unknown_model_type`` with a "did you mean" and the named types.
        NotSupportedError: ``unknown_model_type`` for a scikit-learn class that does not predict (a transformer);
            ``conversion_failed`` for one whose fitted models skl2onnx cannot convert (refused before fitting).
    """
    text = str(name)
    found = MODEL_TYPES.get(text.lower()) or _registry_type(text)
    if found is None:
        from sklearn.base import ClassifierMixin, ClusterMixin, RegressorMixin

        predictors = (ClassifierMixin, RegressorMixin, ClusterMixin)
        names = [*MODEL_TYPES, *(n for n, cls in _registry() if issubclass(cls, predictors))]
        err = ProgrammingError(
            f"model_type {text!r} does not exist.{did_you_mean(text, names)} Model types: {', '.join(MODEL_TYPES)}, "
            "or a scikit-learn estimator class name ('ExtraTreesClassifier').", code="unknown_model_type")
        err.option = "model_type"
        raise err
    return found


def hyperparameters_text(hyperparameters: Mapping[str, Any]) -> str:
    """How the catalog keeps a trained version's hyper-parameters (``DESCRIBE MODEL``'s ``hyperparameters``): a
    JSON object, keys sorted, a parenthesised list (a tuple) as an array, so plain SQL reads it
    (``options->>'hyperparameters'``, ``json_extract``)."""
    return json.dumps(dict(sorted(hyperparameters.items())), default=str)


def hyperparameters_from_text(text: str) -> dict[str, Any]:
    """:func:`hyperparameters_text` read back, an array as the tuple SQL wrote; a catalog written before kept a Python
    literal (``{'C': 0.5}``), read as one.

    Raises:
        ValueError: neither (a catalog edited by hand).
    """
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError:
        return dict(ast.literal_eval(text))
    return {k: tuple(v) if isinstance(v, list) else v for k, v in dict(loaded).items()}


CLASSIFIER_TOLERANCE = 1e-3
"""How far a trained classifier's ONNX probabilities may lie from its estimator's, as far as an imported one's
(float32 rounding gives about 1e-6, a naive Bayes of counts in the thousands 2e-4; skl2onnx's formula for a binary
linear discriminant analysis, 0.15)."""


def conversion_tolerance(task: str, y: Any) -> Optional[float]:
    """The most the ONNX conversion of a model trained in SQL may differ from its estimator on the conversion
    check's rows (``max_abs_diff``; :func:`modelsql.converters.conversion_check.check_conversion`): a
    classifier's probabilities :data:`CLASSIFIER_TOLERANCE`; a regressor's predictions 1e-4 of the largest
    absolute target plus 1e-3 of the targets' standard deviation (float32 keeps 7 digits, a forest sums its
    trees in float32, and a target's mean is far from zero); None for a clusterer (no target: its distances are
    only recorded).

    Args:
        task: the model type's task; ``y``: the training targets (float64 for a regressor), or None.
    """
    if task == "classification":
        return CLASSIFIER_TOLERANCE
    if task != "regression" or y is None or not len(y):
        return None
    values = np.asarray(y, dtype=np.float64)
    return 1e-4 * float(np.abs(values).max()) + 1e-3 * float(values.std()) + 1e-6
