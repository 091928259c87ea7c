"""Small deterministic data sets generated in pure Python, for tests and benchmarks.

* :func:`reviews`: product-review-like sentences with star-rating labels, the text workload of
  PRETZEL's case study (OSDI 2018: many sentiment pipelines sharing one featurizer).
"""

from __future__ import annotations

from modelsql.datasets.reviews import reviews

__all__ = ["reviews"]
