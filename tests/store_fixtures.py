"""Shared helpers of the store and catalog concurrency tests (tests/models/test_concurrent_writers.py,
tests/models/test_store_races.py, and the child processes they start): the fitted pipelines' input, three
fitted scikit-learn pipelines, and the check that every blob a catalog row names is there and sound."""

from __future__ import annotations

import numpy as np

import modelsql
from modelsql.storage import BlobStore


def fitted_input() -> np.ndarray:
    return np.linspace(-1, 1, 24, dtype=np.float32).reshape(12, 2)


def fitted_pipelines() -> list:
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x = fitted_input()
    return [make_pipeline(StandardScaler(), LinearRegression()).fit(x, x @ np.array([k, 1.0], dtype=np.float32))
            for k in (1.0, 2.0, 3.0)]


def check_catalog(db: str) -> None:
    """Every blob a catalog row names is in the store and matches its digest; pipelines' steps exist."""
    con = modelsql.connect(db)
    store = BlobStore.for_database(db)
    digests = [d for (d,) in con.execute(
        "SELECT graph_digest FROM modelsql.model_versions UNION SELECT digest FROM modelsql.model_tensors "
        "UNION SELECT digest FROM modelsql.blobs").fetchall()]
    for d in digests:
        store.verify(d)  # raises BlobMissingError / BlobCorruptError
    orphans = con.execute(
        "SELECT s.name, s.version, s.model, s.model_version FROM modelsql.pipeline_steps s ANTI JOIN "
        "modelsql.model_versions v ON v.name = s.model AND v.version = s.model_version").fetchall()
    assert orphans == []
    con.close()
