"""Pipeline statements (CREATE / DROP / SHOW / DESCRIBE / EXPORT PIPELINE) and
``Connection.import_pipeline``."""
