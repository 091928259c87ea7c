"""Model-quality metrics from the aggregates a query computes (EVALUATE): the definitions of scikit-learn's
``sklearn.metrics`` (the reference values), applied to a confusion matrix, score histograms' areas and sums,
so the rows stay in the database. A pure library: no engine, no catalog."""

from modelsql.metrics.classification import AVERAGES, as_positive, classification_metrics, default_positive
from modelsql.metrics.regression import regression_metrics

__all__ = ["AVERAGES", "as_positive", "classification_metrics", "default_positive", "regression_metrics"]
