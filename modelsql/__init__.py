"""modelsql: SQL over models kept in a DuckDB catalog (PEP 249 module)."""

__version__ = "0.1.0"
