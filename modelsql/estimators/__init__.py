"""Standard models trained from SQL (``CREATE MODEL m WITH (model_type = ...) AS SELECT ...``): the model
types and the scikit-learn estimator each names (:mod:`.model_types`), the automatic preprocessing that makes
a table's columns an estimator's input (:mod:`.preprocessing`, BigQuery ML's), the manual preprocessing of a
``TRANSFORM`` clause (:mod:`.transforms`), and the validation split
(:mod:`.split`). A pure library over scikit-learn: no engine, no catalog."""

from modelsql.estimators.model_types import (MODEL_TYPES, ModelType, conversion_tolerance, hyperparameters_from_text,
                                             hyperparameters_text, resolve_model_type)
from modelsql.estimators.preprocessing import ColumnKinds, build_pipeline, column_kind
from modelsql.estimators.split import SPLITS, validation_rows
from modelsql.estimators.transforms import FUNCTIONS as TRANSFORM_FUNCTIONS, IMPUTE_STRATEGIES, MAX_BUCKETS, \
    NULL_CATEGORY, Transform, imputed_columns, transform_columns, transforms_from_json, transforms_json, transforms_text

__all__ = ["MODEL_TYPES", "ModelType", "resolve_model_type", "conversion_tolerance", "hyperparameters_text",
           "hyperparameters_from_text", "ColumnKinds", "build_pipeline", "column_kind",
           "SPLITS", "validation_rows", "TRANSFORM_FUNCTIONS", "MAX_BUCKETS",
           "NULL_CATEGORY", "IMPUTE_STRATEGIES", "Transform", "transform_columns", "imputed_columns", "transforms_json", "transforms_from_json", "transforms_text"]
