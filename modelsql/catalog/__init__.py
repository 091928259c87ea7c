"""The modelsql catalog: DuckDB schema ``modelsql``, migrations, typed read/write of entries.

Only this package runs SQL against the catalog tables. See :class:`Catalog` and
:mod:`modelsql.catalog.schema` (tables, views, migrations).
"""

from modelsql.catalog.catalog import BLOB_KINDS, Catalog, convert_duckdb_error
from modelsql.catalog.entries import Dim, ModelVersion, StoredTensor, TensorSpec
from modelsql.catalog.schema import MIGRATIONS, SCHEMA_VERSION

__all__ = [
    "BLOB_KINDS",
    "Catalog",
    "Dim",
    "MIGRATIONS",
    "ModelVersion",
    "SCHEMA_VERSION",
    "StoredTensor",
    "TensorSpec",
    "convert_duckdb_error",
]
