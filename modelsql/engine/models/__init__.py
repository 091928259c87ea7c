"""Model statements: IMPORT / CREATE / DROP / SHOW / DESCRIBE / EXPORT MODEL, CREATE MODEL ... FROM
PYTHON (programs and trainables), TRUST MODEL, and EXPORT / IMPORT DATABASE with the models."""
